"""Reading the same ``--json`` document round after round without parsing it all again.

A round reads every job (``squeue --json``: on 22.05 the JSON ignores ``--jobs``, and
``scontrol`` has no ``--json``), and between two rounds few records change: decoding
and parsing all of them again was most of a round (json.loads alone ~285 ms at 12,000
jobs). Slurm pretty-prints its documents (22.05's json-c and the serializer of 24.11
and 26.05 all put every record of the top-level list on lines of its own, indented one
level deeper than the list's key), so the list can be cut into one text per record
with ``str.split``; a record whose text has the length and hash of the one of the last
read is the same record, and its parsed value from then is reused (no text is kept).
Only new or changed texts are decoded and parsed, by the same per-record parser as a
full read.

Cutting is checked, never trusted: the separator ``\\n<indent>},\\n`` cannot occur
inside a JSON string (raw newlines are escaped) and at that indent only between
records; a cut in the wrong place leaves a piece whose braces do not balance, so it
fails to decode and the whole document is read the ordinary way (json.loads and every
record parsed). A document that is not laid out this way (compact JSON, no records,
another key order) is read the ordinary way too. Either way the result is what
``parse_squeue_json`` / ``parse_sinfo_json`` give for the same text.
"""
from __future__ import annotations

import json
import re
from typing import Callable, Generic, Optional, TypeVar

from slurm_plugin.grammar import SlurmParseError
from slurm_plugin.records import error_job_id  # a bad record withholds only its own job

__all__ = ["RecordCache", "record_spans", "split_records"]

T = TypeVar("T")
_FIRST_KEY = re.compile(r"\{\n( +)\"")
_RECORD_OPEN = re.compile(r"( +)\{\n")


def split_records(text: str, key: str) -> Optional[tuple[str, list[str]]]:
    """(the document without its ``key`` records, one text per record) of a
    pretty-printed document, or None when it is not laid out as expected. A record's
    text lacks its closing brace (the separator took it): add ``}`` to decode it."""
    cut = record_spans(text, key)
    if cut is None:
        return None
    rest, spans = cut
    return rest, [text[a:b] for a, b in spans]


def record_spans(text: str, key: str) -> Optional[tuple[str, list[tuple[int, int]]]]:
    """As split_records, with each record's (start, stop) offsets in ``text``."""
    layout = _layout(text, key)
    if layout is None:
        return None
    rest, body_at, separator, end = layout
    spans, start, find, step = [], body_at, text.find, len(separator)
    while True:
        cut = find(separator, start, end)
        if cut < 0:
            break
        spans.append((start, cut))
        start = cut + step
    spans.append((start, end))
    return rest, spans


def _layout(text: str, key: str) -> Optional[tuple[str, int, str, int]]:
    """(the document without its records, where the first record starts, the
    separator between records, where the last one ends) or None (not laid out so)."""
    first = _FIRST_KEY.match(text)
    if first is None:
        return None
    outer = first.group(1)  # the indent of the top-level keys
    opening = f'\n{outer}"{key}": [\n'
    at = text.find(opening)
    if at < 0:
        return None
    body_at = at + len(opening)
    record = _RECORD_OPEN.match(text, body_at)
    if record is None or len(record.group(1)) <= len(outer):
        return None  # an empty list, or not one record per indented block
    inner = record.group(1)
    # The list's end: the last line that closes a record and is followed by a line
    # closing a top-level list, found from the end (the keys after the list are short:
    # none in 22.05, meta and warnings in 24.11). Should a later top-level list of
    # objects end the same way, the piece cut there is no record and fails to decode.
    end = text.rfind(f"\n{inner}}}\n{outer}]")
    if end < body_at:
        return None
    rest = text[:body_at] + text[end + len(inner) + 2:]  # ...'"jobs": [\n' + '\n  ]...'
    return rest, body_at, f"\n{inner}}},\n", end


class RecordCache(Generic[T]):
    """The parsed records of the last read, with their texts' lengths and hashes.
    ``parse_one(record)`` turns one decoded record into a value (raising SlurmParseError
    for a bad one); ``load(text)`` decodes and checks the document without its records
    (raising what its caller wants raised for a document that is no answer at all)."""

    def __init__(self, key: str, parse_one: Callable[[dict], T], id_field: str,
                 id_of: Optional[Callable[[T], str]] = None, id_marker: Optional[str] = None):
        self.key = key
        # the parsed value's own id: kept as the record's id text where the two are equal
        # (a job's "12345": one string a record, not two)
        self.id_of = id_of
        self.parse_one = parse_one
        # A record is looked up by the text after its first '"<id_field>": ' (the job id,
        # the node name) and kept when its whole text has the same length and hash as at
        # the last read. No text is kept: a record's text was most of the memory the
        # controller held (a kept text was 3.3 KB a job in 22.05's shape, 7-10 KB in
        # 26.05's). hash() of a str is 64-bit SipHash, salted per process and stable
        # within it, where the cache lives: a changed record of the same length is taken
        # for the old one once in 2**64.
        # (``id_marker``: the text the id follows, where the field's first occurrence is
        # not the id: a 23.11+ sinfo entry's node list, '"nodes": [', after a "nodes" object)
        self._id_marker = id_marker or f'"{id_field}": '
        # The last read's kept records in document order, (id text, text length, text
        # hash, parsed value) each, and each id text's place in it: the walk predicts the
        # next record from them, and finds a moved one by its id.
        self._order: list[tuple[str, int, int, T]] = []
        self._place: dict[str, int] = {}
        # (The same document again is walked as any other: its records all follow the
        # predicted ones. A kept text to compare it with cost a copy of the whole
        # answer; its hash, a pass over every read that mostly differs.)
        # the values the last read decoded and parsed (new or changed records; the rest
        # are the very values of the read before)
        self.fresh: list[T] = []

    def read(self, text: str, load: Callable[[str], dict], errors: list) -> Optional[list[T]]:
        """The records of ``text`` in document order, each parsed once per distinct
        text; bad records are appended to ``errors`` (SlurmParseError with
        record_index and id set) and left out. None: not a document this can cut
        (the caller then reads it whole; nothing here was kept)."""
        layout = _layout(text, self.key)
        if layout is None:
            return None
        rest, at, separator, end = layout
        try:
            if json.loads(rest).get(self.key) != []:
                return None
        except (ValueError, AttributeError):
            return None  # the list's end was not where the cut put it
        load(rest)  # the caller's checks of the document (an errors entry: an outage)
        order, place = self._order, self._place
        out, kept_order, fresh = [], [], []
        marker, skip, find, same, step = self._id_marker, len(self._id_marker), text.find, text.startswith, \
            len(separator)
        id_of = self.id_of
        following = 0  # where in the last read's order the record after the previous one was
        index = -1
        while True:
            index += 1
            # Most records are the one that followed the previous record last time, with
            # the same text: its end is known, so the text is not scanned for the
            # separator, only hashed. The same hash followed by the separator cuts where
            # str.split would.
            if following < len(order):
                entry = order[following]
                stop = at + entry[1]
                if (stop == end or stop + step <= end and same(separator, stop)) and hash(text[at:stop]) == entry[2]:
                    following += 1
                    kept_order.append(entry)
                    out.append(entry[3])
                    if stop == end:
                        break
                    at = stop + step
                    continue
            cut = find(separator, at, end)
            stop = end if cut < 0 else cut
            mark = find(marker, at, stop)
            if mark >= 0:
                comma = find(",", mark, stop)
                ident = text[mark + skip:comma if comma >= 0 else stop]
            else:
                ident = text[at:stop]
            piece = text[at:stop]
            digest = hash(piece)
            was = place.get(ident)
            entry = order[was] if was is not None else None
            if entry is not None and entry[1] == stop - at and entry[2] == digest:
                value = entry[3]
            else:
                entry, value = None, None
            following = (following - 1 if was is None else was) + 1
            if value is None:
                try:
                    record = json.loads(piece + "}")
                except ValueError:
                    return None  # a cut in the wrong place: braces do not balance
                if not isinstance(record, dict):
                    return None
                try:
                    value = self.parse_one(record)
                    fresh.append(value)
                except SlurmParseError as exc:
                    exc.record_index = index
                    if record.get("job_id") is not None:
                        exc.job_id = error_job_id(record)
                    elif record.get("name") is not None:
                        exc.node = str(record["name"])[:40]
                    errors.append(exc)
                    value = None  # not kept: a bad record is parsed (and reported) every read
            if value is not None:
                if entry is None and id_of is not None and id_of(value) == ident:
                    ident = id_of(value)
                kept_order.append(entry if entry is not None else (ident, stop - at, digest, value))
                out.append(value)
            if cut < 0:
                break
            at = cut + step
        self._order, self._place = kept_order, {entry[0]: i for i, entry in enumerate(kept_order)}
        self.fresh = fresh
        return out

    def forget(self) -> None:
        self._order, self._place, self.fresh = [], {}, []

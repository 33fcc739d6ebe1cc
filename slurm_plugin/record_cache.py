"""Reading the same ``--json`` document round after round without parsing it all again.

A round reads every job (``squeue --json``: on 22.05 the JSON ignores ``--jobs``, and
``scontrol`` has no ``--json``), and between two rounds few records change: decoding
and parsing all of them again was most of a round (json.loads alone ~285 ms at 12,000
jobs). Slurm pretty-prints its documents (22.05's json-c and the serializer of 24.11
and 26.05 all put every record of the top-level list on lines of its own, indented one
level deeper than the list's key), so the list can be cut into one text per record
with ``str.split``; a record whose text has the digest of the last read's (the fields
slurmctld's scheduler stamps on every pending record left out: SQUEUE_MOVING_FIELDS)
is the same record, and its parsed value from then is reused. Only new or changed
texts are decoded and parsed, by the same per-record parser as a full read.

Cutting is checked, never trusted: the separator ``\\n<indent>},\\n`` cannot occur
inside a JSON string (raw newlines are escaped) and at that indent only between
records; a cut in the wrong place leaves a piece whose braces do not balance, so it
fails to decode and the whole document is read the ordinary way (json.loads and every
record parsed). A document that is not laid out this way (compact JSON, no records,
another key order) is read the ordinary way too. Either way the result is what
``parse_squeue_json`` / ``parse_sinfo_json`` give for the same text (but a reused
record's SlurmJob.priority, a moving field: tests/test_record_cache_rounds.py).
"""
from __future__ import annotations

import json
import re
from typing import Callable, Generic, Optional, TypeVar

from slurm_plugin.grammar import SlurmParseError
from slurm_plugin.parse import error_job_id  # a bad record withholds only its own job

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


# Fields of a job record that move while the job does not: slurmctld stamps every pending
# record at each scheduler pass (``last_sched_evaluation``, the ``flags`` SCHEDULING_ATTEMPTED
# and BACKFILL_ATTEMPTED) and the age factor raises its ``priority`` (and
# ``priority_by_partition``) between two reads (tests/fixtures/slurm/*/rounds, recorded by
# tests/fixtures/slurm/record_rounds.sh). The controller plans on none of them: a record
# whose text differs from the last read's only there is the same record to it, so a
# pending job is not parsed again at every read. (SlurmJob.priority of such a record is
# the one its last parse read: nothing reads it.)
SQUEUE_MOVING_FIELDS = ("flags", "last_sched_evaluation", "priority", "priority_by_partition")


class RecordCache(Generic[T]):
    """The parsed records of the last read, each with a digest of its text. ``parse_one(record)``
    turns one decoded record into a value (raising SlurmParseError for a bad one);
    ``load(text)`` decodes and checks the document without its records (raising what
    its caller wants raised for a document that is no answer at all); ``moving``: the
    record's top-level keys left out of its digest (SQUEUE_MOVING_FIELDS), which
    ``parse_one`` must not read for anything its caller uses.

    No record text is kept (at 110,000 jobs they were 8.6 KB a job): a record is the
    same as last read's when the digest of its text, the moving fields left out, is. The digest is Python's str hash, SipHash-1-3 under a key drawn at
    each start of the process (PEP 456): 64 bits (two different texts of one job agree
    by chance once in 1.8e19 comparisons), and a user who shapes a job's name or
    comment cannot aim at a digest without that key. It costs a third of hashlib's
    blake2b over the same text (0.06 s against 0.22 s a read of 20,000 26.05 records)."""

    def __init__(self, key: str, parse_one: Callable[[dict], T], id_field: str, moving: tuple[str, ...] = ()):
        self.key = key
        self.parse_one = parse_one
        self.moving = tuple(moving)
        # A record is looked up by the text after its first '"<id_field>": ' (the job id,
        # the node name) and kept only when its digest is the same; its length says where
        # it ends when it comes again where it was.
        self._id_marker = f'"{id_field}": '
        # The last read's kept records in document order (id text, length, digest, value),
        # and each id text's place in it: the walk predicts the next record from them,
        # and looks a record that moved up by its place.
        self._order: list[tuple[str, int, int, T]] = []
        self._place: dict[str, int] = {}
        # the values the last read decoded and parsed (new or changed records; the rest
        # are the very values of the read before)
        self.fresh: list[T] = []

    def _digester(self, text: str, inner: str, first: int, first_stop: int) -> Callable[[int, int], int]:
        """digest(start, stop): the digest of the record text[start:stop], its moving
        fields left out (each from its key's line to the next key at the same indent).
        The fields are looked for in the order the first record (text[first:first_stop])
        has them, each after the one before: one scan of a record, not one per field. A
        record that has them in another order keeps the others in its digest: it is
        parsed again when they move, never taken for another."""
        if not self.moving:
            return lambda start, stop: hash(text[start:stop])
        indent = "\n" + inner + "  "
        find = text.find
        found = [(find(head, first, first_stop), head) for head in (f'{indent}"{key}": ' for key in self.moving)]
        heads = [head for at, head in sorted(found) if at >= 0]
        next_key = indent + '"'

        def digest(start: int, stop: int) -> int:
            parts, at = [], start
            for head in heads:
                cut_from = find(head, at, stop)
                if cut_from >= 0:
                    cut_to = find(next_key, cut_from + len(head), stop)
                    parts.append(text[at:cut_from])
                    at = stop if cut_to < 0 else cut_to
            if not parts:
                return hash(text[start:stop])
            parts.append(text[at:stop])
            return hash(tuple(parts))
        return digest

    def read(self, text: str, load: Callable[[str], dict], errors: list) -> Optional[list[T]]:
        """The records of ``text`` in document order, each parsed once per distinct
        text (the moving fields aside); bad records are appended to ``errors``
        (SlurmParseError with record_index and id set) and left out. None: not a
        document this can cut (the caller then reads it whole; nothing here was kept)."""
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
        first_stop = text.find(separator, at, end)
        digest = self._digester(text, separator[1:-3], at, end if first_stop < 0 else first_stop)
        order, place = self._order, self._place
        out, kept_order, fresh = [], [], []
        marker, skip, find, same, step = self._id_marker, len(self._id_marker), text.find, text.startswith, \
            len(separator)
        following = 0  # where in the last read's order the record after the previous one was
        index = -1
        while True:
            index += 1
            # Most records are the one that followed the previous record last time, as
            # long as then: a separator where it would end bounds it without a scan of
            # its text (the separator occurs only between records), and its digest says
            # whether it is the same.
            known = None
            if following < len(order):
                ident, length, was, value = order[following]
                stop = at + length
                if stop == end or stop + step <= end and same(separator, stop):
                    now = digest(at, stop)
                    if now == was:
                        following += 1
                        kept_order.append((ident, length, was, value))
                        out.append(value)
                        if stop == end:
                            break
                        at = stop + step
                        continue
                    known = (stop, now)
            if known is not None:
                stop, now = known
                cut = stop if stop < end else -1
            else:
                cut = find(separator, at, end)
                stop = end if cut < 0 else cut
                now = None
            mark = find(marker, at, stop)
            if mark >= 0:
                comma = find(",", mark, stop)
                ident = text[mark + skip:comma if comma >= 0 else stop]
            else:
                ident = text[at:stop]
            length = stop - at
            was_at = place.get(ident)
            value = None
            if was_at is not None:  # (a moving field may have changed the length: the digest says)
                if now is None:
                    now = digest(at, stop)
                if order[was_at][2] == now:
                    value = order[was_at][3]
            following = (following - 1 if was_at is None else was_at) + 1
            if value is None:
                try:
                    record = json.loads(text[at:stop] + "}")
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
                if value is not None and now is None:
                    now = digest(at, stop)
            if value is not None:
                kept_order.append((ident, length, now, value))
                out.append(value)
            if cut < 0:
                break
            at = cut + step
        self._order, self._place = kept_order, {ident: i for i, (ident, _, _, _) in enumerate(kept_order)}
        self.fresh = fresh
        return out

    def forget(self) -> None:
        self.fresh = []
        self._order, self._place = [], {}

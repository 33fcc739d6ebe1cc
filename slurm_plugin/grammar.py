"""The string grammars of Slurm's output: hostlists, GRES strings, durations,
timestamps, and the ``Key=Value`` line of ``scontrol show job -o``.

Each is a function from one string to a value, with a one-line SlurmParseError
naming the field and the value when the string is not that grammar. The record
parsers (slurm_plugin.parse_jobs, parse_nodes, parse_history) and the sacct reader (slurm_plugin.accounting) use
them; nothing here knows a JSON shape.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from typing import Any

from controller.core.inputs import MAX_SECONDS, shorten


class SlurmParseError(ValueError):
    """Malformed Slurm output. The message is one line naming field and value."""

    def __init__(self, message: str, *, record_index: int | None = None,
                 job_id: str | None = None, node: str | None = None):
        super().__init__(message)
        self.record_index = record_index
        self.job_id = job_id
        self.node = node




def quoted(value: Any) -> str:
    """A value for an error message: quoted, one line, shortened."""
    return f"'{shorten(value)}'"


# --------------------------------------------------------------------------
# hostlists and GRES strings

_HOSTLIST_EMPTY = {"", "(null)", "none assigned", "n/a", "none"}


# A hostlist from Slurm names real nodes; the largest clusters have tens of thousands.
# More than this is a malformed or hostile value (gpu[1-99999999] would be GBs of names):
# refused before anything is expanded.
MAX_HOSTLIST_NAMES = 100_000
MAX_HOSTS = MAX_HOSTLIST_NAMES


def expand_hostlist(hostlist: str | None, max_names: int = MAX_HOSTLIST_NAMES) -> list[str]:
    """Expand a Slurm hostlist such as ``gpu[1-3,5],login01`` into names.

    Zero padding follows the range bound (``n[01-03]`` -> n01 n02 n03); several
    bracket groups in one name give their product. Empty/``(null)``/``None
    assigned`` give ``[]``. Raises SlurmParseError on an unbalanced bracket, a
    bad range, or more than ``max_names`` names (counted before expanding).

    Hand-written rather than python-hostlist: that module is GPL-2.0-or-later and
    this project is Apache-2.0; ClusterShell (LGPL) expands a range eagerly and
    has no bound (it was killed for memory on gpu[1-99999999]). python-hostlist is
    1.2-1.45x faster per call, a few microseconds (bench/bench_hostlist.py).
    """
    if hostlist is None:
        return []
    text = hostlist.strip()
    if text.lower() in _HOSTLIST_EMPTY:
        return []
    items = [_parse_host_item(item, hostlist) for item in split_top_level(text, "hostlist") if item]
    total = sum(_count_names(item) for item in items)
    if total > max_names:
        raise SlurmParseError(f"hostlist: {total:,} names in {_clip(hostlist)!r} is more than the limit of "
                              f"{max_names:,}")
    names: list[str] = []
    for item in items:
        names.extend(_expand_parsed(item))
    return names


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def split_top_level(text: str, what: str) -> list[str]:
    """Split on commas outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
            if depth < 0:
                raise SlurmParseError(f"{what}: unbalanced '{ch}' in {quoted(text)}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise SlurmParseError(f"{what}: unbalanced brackets in {quoted(text)}")
    parts.append(text[start:])
    return [p.strip() for p in parts]


# One host item parsed: a list of (literal text, ranges) groups, where ranges is a
# list of (low, high, zero-pad width) and the last group's ranges are empty.
_HostItem = list[tuple[str, list[tuple[int, int, int]]]]


def _parse_host_item(item: str, whole: str) -> _HostItem:
    groups: _HostItem = []
    rest = item
    while True:
        open_at = rest.find("[")
        if open_at < 0:
            if "]" in rest:
                raise SlurmParseError(f"hostlist: unbalanced ']' in {_clip(whole)!r}")
            groups.append((rest, []))
            return groups
        close_at = rest.find("]", open_at)
        if close_at < 0:
            raise SlurmParseError(f"hostlist: unbalanced '[' in {_clip(whole)!r}")
        ranges = []
        for part in rest[open_at + 1:close_at].split(","):
            part = part.strip()
            m = re.fullmatch(r"([0-9]{1,100})(?:-([0-9]{1,100}))?", part)  # ASCII digits only
            if not m:
                raise SlurmParseError(f"hostlist: bad range {part!r} in {_clip(whole)!r}")
            lo_text, hi_text = m.group(1), m.group(2) or m.group(1)
            lo, hi = int(lo_text), int(hi_text)
            if hi < lo:
                raise SlurmParseError(f"hostlist: descending range {part!r} in {_clip(whole)!r}")
            width = len(lo_text) if lo_text.startswith("0") or len(lo_text) == len(hi_text) else 0
            ranges.append((lo, hi, width))
        groups.append((rest[:open_at], ranges))
        rest = rest[close_at + 1:]


def _count_names(item: _HostItem) -> int:
    count = 1
    for _, ranges in item:
        if ranges:
            count *= sum(hi - lo + 1 for lo, hi, _ in ranges)
    return count


def _expand_parsed(item: _HostItem) -> list[str]:
    names = [""]
    for literal, ranges in item:
        if not ranges:
            names = [name + literal for name in names]
            continue
        numbers = [f"{n:0{width}d}" for lo, hi, width in ranges for n in range(lo, hi + 1)]
        names = [name + literal + number for name in names for number in numbers]
    return names


def gres_counts(spec: str | None, *, field_name: str = "gres") -> dict[str, int]:
    """Count GRES by name (see _gres_counts). Memoized: a queue repeats a handful of
    GRES strings across its thousands of jobs, and this was half of parsing
    `squeue --json` at 12,000 jobs (bench/bench_round.py --profile)."""
    return dict(_gres_counts_memo(spec, field_name))


@functools.lru_cache(maxsize=4096)
def _gres_counts_memo(spec: str | None, field_name: str) -> tuple[tuple[str, int], ...]:
    return tuple(_gres_counts(spec, field_name).items())


def gres_items(spec: str | None, field_name: str = "gres") -> list[tuple[str, str, int, str]]:
    """The GRES entries of ``spec``, each (name, type or '', count, what its
    parentheses said: ``IDX:0-1``, or per-GPU shard use ``2/4,0/4``).

    Accepts ``gres:gpu:2`` (22.05 tres_per_*), ``gres/gpu:2`` (23.02+),
    ``gpu:a100:2(IDX:0-1)`` (gres/gres_used), ``mps:(null):0(IDX:N/A)``,
    ``gres/gpu=3`` (TRES strings) and ``gres/gpu`` (count 1). Non-GRES TRES
    (cpu=, mem=...) are ignored. When a TRES string lists both ``gres/gpu`` and
    ``gres/gpu:a100`` the untyped total wins, so nothing is counted twice.
    """
    if not spec or spec.strip() in ("(null)", "N/A"):
        return []
    items: list[tuple[str, str, int, str]] = []
    for raw in split_top_level(spec.strip(), field_name):
        # what the parentheses say: the last group that is not 24.11's "(null)" type
        # (gpu:(null):2(IDX:2-3) says IDX:2-3)
        inside = [group for group in re.findall(r"\(([^)]*)\)", raw) if group != "null"]
        item = re.sub(r"\([^)]*\)", "", raw).strip()  # drop (IDX:0-1), (S:0-1)
        if not item:
            continue
        if "=" in item:  # TRES form: gres/gpu=2, gres/gpu:a100=2, cpu=1
            key, _, value = item.partition("=")
            if not key.startswith("gres/"):
                continue
            parts = key[len("gres/"):].split(":")
            count_text = value
        else:
            if item.startswith("gres:") or item.startswith("gres/"):
                item = item[5:]
            elif "/" in item or ":" not in item and item in ("cpu", "mem", "node", "billing"):
                continue
            parts = item.split(":")
            # name, name:count, name:type, name:type:count ("gpu:a100" means one a100).
            if len(parts) > 2 or len(parts) == 2 and re.fullmatch(r"[0-9]+[kKmMgG]?", parts[1]):
                count_text = parts.pop()
            else:
                count_text = "1"
        name = parts[0]
        gtype = parts[1] if len(parts) > 1 and parts[1] not in ("", "(null)", "no_consume") else None
        items.append((name, gtype or "", _gres_number(count_text, field_name, spec), inside[-1] if inside else ""))
    return items


def _gres_counts(spec: str | None, field_name: str) -> dict[str, int]:
    """Count GRES by name in any of Slurm's spellings; typed entries are summed
    (see gres_items for the spellings)."""
    untyped: dict[str, int] = {}
    typed: dict[str, int] = {}
    for name, gtype, count, _ in gres_items(spec, field_name):
        target = typed if gtype else untyped
        target[name] = target.get(name, 0) + count
    return untyped_first(untyped, typed)


def untyped_first(untyped: dict[str, int], typed: dict[str, int]) -> dict[str, int]:
    """Per gres name: the untyped total when Slurm lists one (it already counts the
    typed entries), else the sum of the typed entries."""
    out = dict(untyped)
    for name, count in typed.items():
        out.setdefault(name, count)
    return out


def _gres_number(text: str, field_name: str, spec: str) -> int:
    m = re.fullmatch(r"([0-9]{1,12})([kKmMgG]?)", text.strip())
    if not m:
        raise SlurmParseError(f"{field_name}: bad count {quoted(text)} in {quoted(spec)}")
    scale = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[m.group(2).lower()]
    count = int(m.group(1)) * scale
    if count > 10**12:
        raise SlurmParseError(f"{field_name}: count {quoted(text)} in {quoted(spec)} is not a plausible GRES count")
    return count


# --------------------------------------------------------------------------
# scontrol's text: Key=Value lines, timestamps, durations, integers

# Keys whose values are free text and may contain spaces or 'word=' fragments.
_FREE_TEXT_KEYS = frozenset({
    "JobName", "Comment", "AdminComment", "SystemComment", "Command", "WorkDir",
    "StdErr", "StdIn", "StdOut", "Reason", "Dependency", "Features", "Licenses",
    "Network", "Container", "ContainerID", "Extra", "Prefer", "MailUser",
})
# Every key seen in 22.05-24.11 one-line output; a candidate key outside this
# set that follows a free-text key is taken as part of that value.
_KNOWN_KEYS = frozenset({
    "JobId", "ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "HetJobId", "HetJobOffset",
    "HetJobIdSet", "JobName", "UserId", "GroupId", "MCS_label", "Priority", "Nice", "Account",
    "QOS", "JobState", "Reason", "Dependency", "Requeue", "Restarts", "BatchFlag", "Reboot",
    "ExitCode", "DerivedExitCode", "RunTime", "TimeLimit", "TimeMin", "SubmitTime",
    "EligibleTime", "AccrueTime", "StartTime", "EndTime", "Deadline", "SuspendTime",
    "SecsPreSuspend", "LastSchedEval", "Scheduler", "Partition", "AllocNode:Sid",
    "ReqNodeList", "ExcNodeList", "NodeList", "BatchHost", "SchedNodeList", "NumNodes",
    "NumCPUs", "NumTasks", "CPUs/Task", "ReqB:S:C:T", "TRES", "ReqTRES", "AllocTRES",
    "Socks/Node", "NtasksPerN:B:S:C", "CoreSpec", "MinCPUsNode", "MinMemoryNode",
    "MinMemoryCPU", "MinTmpDiskNode", "Features", "DelayBoot", "OverSubscribe",
    "Contiguous", "Licenses", "LicensesAlloc", "Network", "Command", "WorkDir", "Comment",
    "AdminComment", "SystemComment", "StdErr", "StdIn", "StdOut", "Power", "TresPerNode",
    "TresPerJob", "TresPerTask", "TresPerSocket", "TresBind", "TresFreq", "CpusPerTres",
    "MemPerTres", "MailUser", "MailType", "Reservation", "Prefer", "Extra", "Container",
    "ContainerID", "SiteFactor", "PreemptEligibleTime", "PreemptTime", "ResvPorts",
    "Partition", "Qos", "Wckey", "NtasksPerTRES", "OOMKillStep", "CpuFreq", "KillOInInvalidDependent",
    "Resizing", "BurstBuffer", "BurstBufferState", "ThreadSpec", "ClusterFeatures",
    "StepMgrEnabled", "Segment",
})
_KEY_RE = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_:/]*)=")


def split_scontrol_line(line: str) -> dict[str, str]:
    matches = list(_KEY_RE.finditer(line))
    pairs: list[list[str]] = []
    for i, m in enumerate(matches):
        value_end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        key, value = m.group(1), line[m.end():value_end]
        if pairs and key not in _KNOWN_KEYS and pairs[-1][0] in _FREE_TEXT_KEYS:
            pairs[-1][1] += line[m.start():value_end]
            continue
        pairs.append([key, value])
    return {k: v.strip() for k, v in pairs}


NULLISH = {"", "(null)", "None", "Unknown", "N/A", "none"}


def scontrol_time(value: str | None, field_name: str) -> float | None:
    if value is None or value in NULLISH:
        return None
    if not value.isascii() or len(value) != 19:  # strptime would take Unicode digits
        raise SlurmParseError(f"{field_name}: bad timestamp {quoted(value)}")
    try:
        seconds = time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        raise SlurmParseError(f"{field_name}: bad timestamp {quoted(value)}") from None
    if seconds <= 0:
        raise SlurmParseError(f"{field_name}: timestamp {quoted(value)} is before 1970")
    return seconds


def parse_duration_s(value: str | None, field_name: str = "duration") -> float | None:
    """Slurm ``[days-]HH:MM:SS`` / ``MM:SS`` / ``MM`` to seconds; UNLIMITED -> None."""
    if value is None or value in NULLISH or value.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = re.fullmatch(r"(?:([0-9]{1,6})-)?([0-9]{1,9})(?::([0-9]{1,9}))?(?::([0-9]{1,9}))?", value.strip())
    if not m:
        raise SlurmParseError(f"{field_name}: bad duration {quoted(value)}")
    days, a, b, c = (int(g) if g else None for g in m.groups())
    if c is not None:
        h, mi, s = a, b, c
    elif b is not None:
        h, mi, s = (a, b, 0) if days is not None else (0, a, b)
    else:
        h, mi, s = (a, 0, 0) if days is not None else (0, a, 0)
    total = float((days or 0) * 86400 + h * 3600 + mi * 60 + s)
    if total > MAX_SECONDS:
        raise SlurmParseError(f"{field_name}: duration {quoted(value)} is longer than {MAX_SECONDS:g} s")
    return total


def scontrol_int(value: str | None, field_name: str, default: int = 0) -> int:
    if value is None or value in NULLISH:
        return default
    if not re.fullmatch(r"-?[0-9]{1,19}", value):
        raise SlurmParseError(f"{field_name}: expected an integer, got {quoted(value)}")
    return int(value)


# --------------------------------------------------------------------------
# --constraint (sbatch's node feature expression)

@dataclasses.dataclass(frozen=True, slots=True)
class Constraint:
    """A job's ``--constraint`` as the plan's model sees it. ``features``: the node
    features a node must all have, when the value is a plain AND of them (one feature
    included); ``form``: '' then, else what the model cannot express: which node
    satisfies an OR, a matching OR (``[a|b]``: every node the same choice), a node
    count (``a*2``) or a group (parentheses) depends on Slurm's choice over several
    nodes, so such a job is never a reason to preempt."""

    text: str
    features: tuple[str, ...] = ()
    form: str = ""

    @property
    def expressible(self) -> bool:
        return not self.form


# Feature names as slurm.conf admits them (letters, digits and a few marks); any other
# character is not this grammar (the job is then left to Slurm, never guessed at).
_FEATURE_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z0-9_.:=+\-/]+)|(?P<op>[&|()\[\]*]))")
_FORMS = {"|": "an OR (|)", "[": "a matching OR ([...])", "*": "a node count (*N)", "(": "parentheses"}


@functools.lru_cache(maxsize=4096)  # a Constraint is frozen: jobs asking the same expression share one
def parse_constraint(text: str | None, field_name: str = "features") -> Constraint:
    """``a&b`` -> Constraint(features=('a', 'b')); ``a|b``, ``[a|b]``, ``a*2``, ``(a&b)``
    -> Constraint(form=...) naming the first such form; '' or None: no constraint.
    SlurmParseError (one line, the field and the value) when the value is not
    Slurm's grammar: an unknown character, an operator without an operand, an
    unbalanced bracket, a count that is not a whole number >= 1."""
    text = (text or "").strip()
    if not text:
        return Constraint("")
    tokens: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        match = _FEATURE_TOKEN.match(text, at)
        if match is None:
            raise SlurmParseError(f"{field_name}: unexpected character {quoted(text[at])} at {at + 1}"
                                  f" in {quoted(text)}")
        tokens.append(("name", match["name"]) if match["name"] else ("op", match["op"]))
        at = match.end()
        while at < len(text) and text[at].isspace():
            at += 1
    forms: list[str] = []
    position = _constraint_expr(tokens, 0, text, field_name, forms, closing="")
    if position != len(tokens):
        raise SlurmParseError(f"{field_name}: unexpected {quoted(tokens[position][1])} in {quoted(text)}")
    if forms:
        return Constraint(text, form=forms[0])
    names = tuple(dict.fromkeys(value for kind, value in tokens if kind == "name"))
    return Constraint(text, features=names)


def _constraint_expr(tokens, at: int, text: str, field_name: str, forms: list, closing: str) -> int:
    """expr := term (('&' | '|') term)*; returns the index after it."""
    at = _constraint_term(tokens, at, text, field_name, forms)
    while at < len(tokens) and tokens[at] in (("op", "&"), ("op", "|")):
        if tokens[at][1] == "|":
            forms.append(_FORMS["|"])
        at = _constraint_term(tokens, at + 1, text, field_name, forms)
    if closing and (at >= len(tokens) or tokens[at] != ("op", closing)):
        raise SlurmParseError(f"{field_name}: unbalanced {quoted({')': '(', ']': '['}[closing])} in {quoted(text)}")
    return at


def _constraint_term(tokens, at: int, text: str, field_name: str, forms: list) -> int:
    """term := (NAME | '(' expr ')' | '[' expr ']') ('*' COUNT)?"""
    if at >= len(tokens):
        raise SlurmParseError(f"{field_name}: an operator without a feature after it in {quoted(text)}")
    kind, value = tokens[at]
    if kind == "name":
        at += 1
    elif value in "([":
        forms.append(_FORMS[value])
        at = _constraint_expr(tokens, at + 1, text, field_name, forms, closing=")" if value == "(" else "]") + 1
    else:
        raise SlurmParseError(f"{field_name}: unexpected {quoted(value)} where a feature belongs in {quoted(text)}")
    if at < len(tokens) and tokens[at] == ("op", "*"):
        kind, count = tokens[at + 1] if at + 1 < len(tokens) else ("op", "")
        if kind != "name" or not count.isdigit() or int(count) < 1:
            raise SlurmParseError(f"{field_name}: a node count after '*' must be a whole number >= 1"
                                  f" in {quoted(text)}")
        forms.append(_FORMS["*"])
        at += 2
    return at

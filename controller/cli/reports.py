"""What admins and users see: job rows from the store or a simulator run, sacct-style
field selection and formatting (sacct-style), the admin rule, and the over-time series
behind ``tiresias report``. The squeue-style queue table: controller.cli.queue_table.

Two sources give the same row shape (``JobRow``):

* the controller's store: times are epoch seconds, printed like sacct
  (``YYYY-MM-DDTHH:MM:SS``, local time; ``Unknown`` when absent);
* a ``tiresias simulate --out DIR`` directory: times are seconds from the trace
  start, printed as Slurm prints elapsed time (``[D-]HH:MM:SS``), because a
  simulated trace has no wall-clock date. ``--json`` gives the raw seconds.

Durations (JCT, QueueWait) are always printed as elapsed time ``[D-]HH:MM:SS``.
"""
from __future__ import annotations

import csv
import grp
import json
import math
import os
import pwd
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from controller.core.inputs import MAX_COLUMN_WIDTH, shorten
from controller.core.model import InputError

UNKNOWN = "Unknown"
ADMIN_GROUPS = ("slurm", "tiresias-admin")


# -- rows ---------------------------------------------------------------------------


@dataclass
class JobRow:
    """One job as ``acct`` and ``report`` see it. Times in seconds (epoch for the
    store, from trace start for a simulation); service in GPU-seconds."""

    job_id: str
    user: str
    partition: str
    num_gpus: int
    submit_s: Optional[float]
    start_s: Optional[float]  # first start
    end_s: Optional[float]
    executed_s: Optional[float]  # wall time holding GPUs, over all runs
    attained_gpu_s: Optional[float]
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, GONE, ...
    level: Optional[int] = None  # 1-based MLFQ queue
    preemptions: Optional[int] = None
    moves: Optional[int] = None
    skew: Optional[float] = None
    placement: Optional[str] = None
    last_seen_s: Optional[float] = None  # store: last observation of an active job
    job_name: str = ""
    node_list: str = ""  # Slurm hostlist of its (last) allocation; '' unknown or none

    @property
    def jct_s(self) -> Optional[float]:
        if self.end_s is None or self.submit_s is None:
            return None
        return max(self.end_s - self.submit_s, 0.0)

    @property
    def queue_wait_s(self) -> Optional[float]:
        """Total time pending, over all waits (as the simulator's ``queueing_s``):
        (end, or last observation) - submit - executed."""
        until = self.end_s if self.end_s is not None else self.last_seen_s
        if until is None or self.submit_s is None:
            return None
        return max(until - self.submit_s - (self.executed_s or 0.0), 0.0)

    @property
    def finished(self) -> bool:
        return self.state not in ("PENDING", "RUNNING")


def rows_from_store(records: Iterable[Any], placement_rule: str = "consolidate", pack_limit: float = 0.5
                    ) -> list[JobRow]:
    """JobRows from store ``JobRecord``s. ``Placement`` is the rule the controller
    applies to the job: ``consolidate`` when its skew is above ``pack_limit`` under
    the consolidate rule, else the configured rule (``spread`` or ``count``)."""
    rows = []
    for r in records:
        state = (r.end_state or "DONE") if r.state == "DONE" else r.state
        if placement_rule == "consolidate":
            placement = "consolidate" if r.skew > pack_limit else "spread"
        else:
            placement = placement_rule
        rows.append(JobRow(
            job_id=str(r.job_id), user=r.user, partition=r.partition, num_gpus=int(r.num_gpus),
            submit_s=r.submit_time_s, start_s=r.first_start_s, end_s=r.finished_s, executed_s=r.executed_s,
            attained_gpu_s=r.attained_gpu_s, state=state, level=int(r.level) + 1, preemptions=r.preemptions,
            moves=r.moves, skew=r.skew, placement=placement, last_seen_s=r.last_observed_s))
    return sorted(rows, key=lambda row: job_sort_key(row.job_id))


def rows_from_sacct(jobs: Iterable[Any]) -> list[JobRow]:
    """JobRows of Slurm accounting (``slurm_plugin.accounting.AccountedJob``, runs merged):
    what a user who is not an admin sees of their own jobs. Attained service is
    elapsed x GPUs; the controller's own fields (level, moves, skew) are unknown."""
    rows = [JobRow(job_id=j.job_id, user=j.user, partition=j.partition, num_gpus=int(j.gpus),
                   submit_s=j.submit_s, start_s=j.first_start_s, end_s=j.last_end_s, executed_s=j.elapsed_s,
                   attained_gpu_s=j.elapsed_s * j.gpus, state=j.state.split()[0] if j.state else UNKNOWN,
                   preemptions=j.requeues, job_name=getattr(j, "job_name", ""),
                   node_list=getattr(j, "node_list", "")) for j in jobs if j.gpus > 0 or j.mps > 0]
    return sorted(rows, key=lambda row: job_sort_key(row.job_id))


def simulation_csvs(directory: str) -> dict[str, Path]:
    """policy -> jobs_<policy>.csv of a ``simulate --out`` directory."""
    path = Path(directory)
    if not path.is_dir():
        raise InputError(f"--from {directory}: not a directory (expected a 'tiresias simulate --out' directory)")
    found = {p.name[len("jobs_"):-len(".csv")]: p for p in sorted(path.glob("jobs_*.csv"))}
    if not found:
        raise InputError(f"--from {directory}: no jobs_<policy>.csv files (expected 'tiresias simulate --out' output)")
    return found


def pick_policies(csvs: dict[str, Path], policy: Optional[str], directory: str, single: bool) -> list[str]:
    """The policies to read: the one named, the only one there, or (``single``
    False) all of them."""
    if policy:
        if policy not in csvs:
            raise InputError(f"--policy value {policy!r}: no jobs_{policy}.csv in {directory} "
                             f"(found: {', '.join(csvs)})")
        return [policy]
    if single and len(csvs) > 1:
        raise InputError(f"--from {directory} holds several runs ({', '.join(csvs)}): choose one with --policy")
    return list(csvs)


def rows_from_simulation(path: Path) -> list[JobRow]:
    """JobRows of one ``jobs_<policy>.csv`` (times: seconds from trace start)."""
    rows = []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        needed = {"job_id", "num_gpus", "submit_s", "start_s", "end_s", "queueing_s", "preemptions", "attained_gpu_s"}
        missing = needed - set(reader.fieldnames or ())
        if missing:
            raise InputError(f"{path}: not a simulator job CSV (missing columns: {', '.join(sorted(missing))})")
        for line, rec in enumerate(reader, start=2):
            try:
                submit, end = float(rec["submit_s"]), float(rec["end_s"])
                queueing = float(rec["queueing_s"])
                rows.append(JobRow(
                    job_id=rec["job_id"], user=rec.get("user") or "", partition=rec.get("partition") or "",
                    num_gpus=int(rec["num_gpus"]), submit_s=submit, start_s=float(rec["start_s"]), end_s=end,
                    executed_s=max(end - submit - queueing, 0.0), attained_gpu_s=float(rec["attained_gpu_s"]),
                    state="COMPLETED", preemptions=int(rec["preemptions"])))
            except (TypeError, ValueError) as err:
                raise InputError(f"{path}:{line}: bad value ({err})") from None
    return rows


def job_sort_key(job_id: str) -> tuple:
    head, _, tail = job_id.partition("_")
    return (0, int(head), tail) if head.isascii() and head.isdigit() and len(head) <= 30 else (1, 0, job_id)


# -- who may see what ----------------------------------------------------------------


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def is_admin(uid: int, admin_groups: Sequence[str] = ADMIN_GROUPS) -> bool:
    """Root, or a member (primary or supplementary) of one of ``admin_groups``."""
    if uid == 0:
        return True
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return False
    for name in admin_groups:
        try:
            group = grp.getgrnam(name)
        except KeyError:
            continue
        if entry.pw_gid == group.gr_gid or entry.pw_name in group.gr_mem:
            return True
    return False


# -- time ------------------------------------------------------------------------------


def format_elapsed(seconds: Optional[float]) -> str:
    """Slurm's elapsed form: ``HH:MM:SS``, ``D-HH:MM:SS`` from one day on."""
    if seconds is None or not math.isfinite(seconds):
        return UNKNOWN
    total = int(round(max(seconds, 0.0)))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def format_timestamp(epoch_s: Optional[float]) -> str:
    """sacct's form ``YYYY-MM-DDTHH:MM:SS`` in local time; ``Unknown`` when absent."""
    if epoch_s is None or not math.isfinite(epoch_s):
        return UNKNOWN
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch_s))


_ELAPSED_RE = re.compile(r"(?:([0-9]{1,6})-)?([0-9]{1,9}):([0-9]{2})(?::([0-9]{2}))?", re.ASCII)


def parse_time(text: str, option: str, simulated: bool) -> float:
    """A -S/-E value. Store: ISO date/time (local) or epoch seconds. Simulation:
    seconds from trace start or ``[D-]HH:MM[:SS]``."""
    value = text.strip()
    try:
        return float(value)
    except ValueError:
        pass
    if simulated:
        match = _ELAPSED_RE.fullmatch(value)
        if match:
            days, hours, minutes, secs = (int(g or 0) for g in match.groups())
            return days * 86400 + hours * 3600 + minutes * 60 + secs
        raise InputError(f"{option} value {text!r}: expected seconds from trace start or [D-]HH:MM[:SS]")
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise InputError(f"{option} value {text!r}: expected an ISO date (2024-05-01, 2024-05-01T13:00) "
                         "or epoch seconds") from None


# -- fields ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: str
    width: int  # default column width, as sacct's
    text: Callable[[JobRow, bool], str]  # (row, simulated) -> printed text
    value: Callable[[JobRow], Any]  # JSON value
    doc: str


def _opt(value: Any, fmt: str = "{}") -> str:
    # Empty, as sacct prints a field that does not apply (a simulation keeps no
    # level, moves, skew or placement per job).
    return "" if value is None else fmt.format(value)


def _when(seconds: Optional[float], simulated: bool) -> str:
    return format_elapsed(seconds) if simulated else format_timestamp(seconds)


FIELDS: tuple[Field, ...] = (
    Field("JobID", 12, lambda r, s: r.job_id, lambda r: r.job_id, "Slurm job id (simulation: trace job id)"),
    Field("User", 9, lambda r, s: r.user, lambda r: r.user, "submitting user"),
    Field("Partition", 10, lambda r, s: r.partition, lambda r: r.partition, "partition"),
    Field("GPUs", 5, lambda r, s: str(r.num_gpus), lambda r: r.num_gpus, "GPUs of the gang"),
    Field("Submit", 19, lambda r, s: _when(r.submit_s, s), lambda r: r.submit_s, "submit time"),
    Field("Start", 19, lambda r, s: _when(r.start_s, s), lambda r: r.start_s, "first start time"),
    Field("End", 19, lambda r, s: _when(r.end_s, s), lambda r: r.end_s, "end time"),
    Field("JCT", 11, lambda r, s: format_elapsed(r.jct_s), lambda r: r.jct_s,
          "job completion time: end - submit"),
    Field("Elapsed", 10, lambda r, s: format_elapsed(r.executed_s), lambda r: r.executed_s,
          "time it held its GPUs, over all runs (sacct's Elapsed)"),
    Field("JobName", 10, lambda r, s: r.job_name, lambda r: r.job_name, "job name"),
    Field("NodeList", 15, lambda r, s: r.node_list, lambda r: r.node_list,
          "nodes of its last run (empty for a simulation: the replay places by count)"),
    Field("QueueWait", 11, lambda r, s: format_elapsed(r.queue_wait_s), lambda r: r.queue_wait_s,
          "time pending over all waits (incl. after preemptions)"),
    Field("AttainedGPUSeconds", 18, lambda r, s: _opt(r.attained_gpu_s, "{:.0f}"), lambda r: r.attained_gpu_s,
          "attained service, GPU-seconds"),
    Field("Level", 5, lambda r, s: _opt(r.level), lambda r: r.level, "MLFQ queue, 1 = highest priority"),
    Field("Preemptions", 11, lambda r, s: _opt(r.preemptions), lambda r: r.preemptions,
          "requeues done by the controller"),
    Field("Moves", 5, lambda r, s: _opt(r.moves), lambda r: r.moves, "partition moves"),
    Field("Skew", 5, lambda r, s: _opt(r.skew, "{:.2f}"), lambda r: r.skew, "model skew 0..1"),
    Field("Placement", 11, lambda r, s: _opt(r.placement), lambda r: r.placement,
          "placement rule applied: consolidate, spread or count"),
    Field("State", 10, lambda r, s: r.state, lambda r: r.state, "PENDING, RUNNING, COMPLETED, CANCELLED, ..."),
)
FIELDS_BY_KEY = {f.name.lower(): f for f in FIELDS}
DEFAULT_FORMAT = "JobID,User,Partition,GPUs,Submit,Start,End,JCT,Level,State"


@dataclass(frozen=True)
class Column:
    field: Field
    width: int
    left: bool = False


def parse_format(text: str) -> list[Column]:
    """``Field[%[-]N],...`` like sacct: ``%N`` sets the width (right-aligned),
    ``%-N`` left-aligns. Field names are case-insensitive."""
    columns = []
    if len(text) > 4096:
        raise InputError(f"--format value '{shorten(text)}' is longer than 4096 characters")
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise InputError(f"--format value '{shorten(text)}': empty field name")
        name, sep, width_text = part.partition("%")
        field = FIELDS_BY_KEY.get(name.strip().lower())
        if field is None:
            raise InputError(f"--format: unknown field '{shorten(name.strip())}' (known: {', '.join(f.name for f in FIELDS)})")
        width, left = field.width, False
        if sep:
            match = re.fullmatch(r"(-?)([0-9]{1,4})", width_text.strip(), re.ASCII)
            if not match or not 1 <= int(match.group(2)) <= MAX_COLUMN_WIDTH:
                raise InputError(f"--format: field {field.name!r} has a bad width '{shorten(width_text)}' "
                                 f"(expected %N or %-N, N in 1..{MAX_COLUMN_WIDTH})")
            left, width = bool(match.group(1)), int(match.group(2))
        columns.append(Column(field, width, left))
    return columns


def _fit(text: str, width: int, left: bool) -> str:
    # sacct marks a truncated value with '+' in the last column.
    if len(text) > width:
        text = text[: width - 1] + "+"
    return text.ljust(width) if left else text.rjust(width)


def format_fixed(columns: Sequence[Column], rows: Iterable[JobRow], simulated: bool, header: bool = True) -> str:
    """sacct's fixed-width output: header, a dashed rule, one line per job."""
    lines = []
    if header:
        lines.append(" ".join(_fit(c.field.name, c.width, c.left) for c in columns))
        lines.append(" ".join("-" * c.width for c in columns))
    for row in rows:
        lines.append(" ".join(_fit(c.field.text(row, simulated), c.width, c.left) for c in columns))
    return "\n".join(lines)


def format_parsable(columns: Sequence[Column], rows: Iterable[JobRow], simulated: bool, header: bool = True,
                    delimiter: str = "|", trailing: bool = False) -> str:
    """sacct -P: fields joined by ``delimiter``, no trailing delimiter, no widths;
    ``trailing``: sacct -p, the delimiter after every field, the last one too."""
    end = delimiter if trailing else ""
    lines = []
    if header:
        lines.append(delimiter.join(c.field.name for c in columns) + end)
    for row in rows:
        lines.append(delimiter.join(c.field.text(row, simulated) for c in columns) + end)
    return "\n".join(lines)


def format_json(columns: Sequence[Column], rows: Iterable[JobRow], source: dict) -> str:
    """One JSON object: the source and a list of jobs with the selected fields
    (raw numbers: seconds, GPU-seconds; null when unknown)."""
    jobs = [{c.field.name: c.field.value(row) for c in columns} for row in rows]
    return json.dumps({**source, "jobs": jobs}, sort_keys=False, default=str)


def emit(text: str) -> None:
    """Print ``text`` (if any); a closed pipe (``| head``) ends output quietly."""
    if not text:
        return
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python would complain again when flushing stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def format_plain_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = (),
                       header: bool = True) -> str:
    """Left-aligned columns (``right`` names the indexes to right-align); the last
    column is never padded, so long reasons do not leave trailing blanks. ``header``
    False leaves the header line out (columns are then as wide as their values)."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h) if header else 0] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells):
        out = []
        for i, (cell, width) in enumerate(zip(cells, widths)):
            if i == len(cells) - 1:
                out.append(cell.rjust(width) if i in right else cell)
            else:
                out.append(cell.rjust(width) if i in right else cell.ljust(width))
        return "  ".join(out).rstrip()

    return "\n".join(([line(headers)] if header else []) + [line(r) for r in rows])


# -- over-time series (report) ------------------------------------------------------------


def occupancy_series(rows: Sequence[JobRow], horizon_s: float) -> tuple[list[float], list[float], list[float]]:
    """Queue length (jobs pending) and busy GPUs over time, as step functions:
    (times, pending, busy_gpus), each value holding from its time to the next.

    The inputs keep no per-run history, only submit, first start, end and total
    executed time. A job pends from submit to first start; from first start to end
    its executed time is spread evenly: it counts as ``f`` of a running job (``f x
    GPUs`` busy) and ``1 - f`` of a pending one, ``f = executed / (end - start)``.
    Exact for jobs never preempted; for preempted jobs the area under both curves
    (GPU-seconds, job-seconds waited) is still exact, only its timing is smoothed.
    Jobs without an end count up to ``last_seen_s`` or ``horizon_s``.
    """
    deltas: dict[float, list[float]] = {}

    def add(at: float, pending: float, busy: float) -> None:
        slot = deltas.setdefault(at, [0.0, 0.0])
        slot[0] += pending
        slot[1] += busy

    for row in rows:
        if row.submit_s is None:
            continue
        until = row.end_s if row.end_s is not None else (row.last_seen_s or horizon_s)
        until = max(until, row.submit_s)
        start = row.start_s
        if start is None or start >= until:
            add(row.submit_s, 1, 0)
            add(until, -1, 0)
            continue
        start = max(start, row.submit_s)
        span = until - start
        share = min(max((row.executed_s or 0.0) / span, 0.0), 1.0) if span > 0 else 1.0
        add(row.submit_s, 1, 0)
        add(start, -share, row.num_gpus * share)
        add(until, -(1 - share), -row.num_gpus * share)
    times, pending, busy = [], [], []
    level_pending = level_busy = 0.0
    for at in sorted(deltas):
        level_pending += deltas[at][0]
        level_busy += deltas[at][1]
        times.append(at)
        pending.append(max(level_pending, 0.0) if abs(level_pending) > 1e-9 else 0.0)
        busy.append(max(level_busy, 0.0) if abs(level_busy) > 1e-9 else 0.0)
    return times, pending, busy


def simulated_capacity_gpus(directory: str, policy: str, rows: Sequence[JobRow]) -> Optional[int]:
    """The simulated cluster's GPUs, recovered from summary.json: busy GPU-seconds /
    (utilization x makespan). None when summary.json lacks the figures."""
    path = Path(directory) / "summary.json"
    try:
        summaries = json.loads(path.read_text()).get("summaries", [])
    except (OSError, ValueError, AttributeError, RecursionError):  # RecursionError: JSON nested 1000+ deep
        return None
    for s in summaries:
        if isinstance(s, dict) and s.get("policy") == policy and s.get("gpu_utilization") and s.get("makespan_s"):
            busy_gpu_s = sum((r.executed_s or 0.0) * r.num_gpus for r in rows)
            return max(int(round(busy_gpu_s / (float(s["gpu_utilization"]) * float(s["makespan_s"])))), 1)
    return None


def db_path_exists(url_name: str, is_sqlite: bool) -> bool:
    return not is_sqlite or url_name == ":memory:" or os.path.exists(url_name)

"""What admins and users see: job rows from the store or a simulator run, sacct-style
field selection and formatting, the admin rule, and the over-time series behind
``tiresias report``.

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


# -- the queue table (tiresias queue) ------------------------------------------------------

# squeue's compact state codes (squeue(1), JOB STATE CODES), printed unless --long.
SQUEUE_STATE_CODES = {
    "PENDING": "PD", "RUNNING": "R", "COMPLETING": "CG", "COMPLETED": "CD", "CONFIGURING": "CF",
    "SUSPENDED": "S", "CANCELLED": "CA", "FAILED": "F", "TIMEOUT": "TO", "PREEMPTED": "PR",
    "NODE_FAIL": "NF", "REQUEUED": "RQ", "RESIZING": "RS", "STOPPED": "ST", "OUT_OF_MEMORY": "OOM",
}


def short_state(state: str) -> str:
    """squeue's code for a Slurm state (``PENDING`` -> ``PD``); an unlisted state as it is."""
    return SQUEUE_STATE_CODES.get(state, state)


def queue_priority_text(level: Optional[int], position: Optional[int]) -> str:
    """PRIORITY(QUEUE:POS): the job's Tiresias queue (1 = served first) and its
    position in the controller's order; ``-`` for a job the round does not plan."""
    if position is None:
        return "-"
    return f"{'-' if level is None else level}:{position}"


@dataclass(frozen=True)
class QueueColumn:
    name: str  # what -o/--format calls it
    header: str
    squeue_spec: str  # squeue's %-letter for the same column, '' when squeue has none
    text: Callable[[dict], str]  # a row of controller.cli.queue.queue_rows -> printed text
    doc: str
    right: bool = False


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


QUEUE_COLUMNS: tuple[QueueColumn, ...] = (
    QueueColumn("jobid", "JOBID", "i", lambda r: r["job_id"], "Slurm job id"),
    QueueColumn("user", "USER", "u", lambda r: r["user"], "submitting user"),
    QueueColumn("partition", "PARTITION", "P", lambda r: r["partition"], "partition"),
    QueueColumn("gpus", "GPUS", "b", lambda r: str(r["gpus"]), "GPUs of the gang (squeue's %b prints the GRES)",
                right=True),
    QueueColumn("st", "ST", "t", lambda r: short_state(r["state"]), "state, squeue's code (PD, R, CG, ...)"),
    QueueColumn("state", "STATE", "T", lambda r: r["state"], "state, Slurm's full name (PENDING, RUNNING, ...)"),
    QueueColumn("priority", "PRIORITY(QUEUE:POS)", "Q", lambda r: queue_priority_text(r["level"], r["position"]),
                "Tiresias queue (1 = served first) : position in the controller's order (1 = first)"),
    QueueColumn("level", "LEVEL", "", lambda r: _dash(r["level"]), "Tiresias queue alone"),
    QueueColumn("position", "POSITION", "", lambda r: _dash(r["position"]), "position in the controller's order alone"),
    QueueColumn("key", "KEY", "", lambda r: format_priority_key(r["key"]),
                "the policy's sort key (MLFQ: the queue index; dgittins: the Gittins index)"),
    QueueColumn("action", "ACTION", "", lambda r: r["action"], "this round: start, preempt, run, wait, or -"),
    QueueColumn("reason", "REASON", "r", lambda r: r["reason"], "why (the plan's reason, or Slurm's)"),
    QueueColumn("name", "NAME", "j", lambda r: r["name"], "job name"),
    QueueColumn("time", "TIME", "M", lambda r: format_elapsed(r["time_s"]), "time run so far", right=True),
    QueueColumn("nodes", "NODES", "D", lambda r: str(r["node_count"]), "nodes held, or asked for", right=True),
    QueueColumn("nodelist", "NODELIST(REASON)", "R",
                lambda r: r["nodelist"] if r["state"] == "RUNNING" else f"({r['slurm_reason'] or 'None'})",
                "nodes of a running job, Slurm's reason of a pending one (squeue's %R)"),
)
QUEUE_COLUMNS_BY_NAME = {c.name: c for c in QUEUE_COLUMNS}
QUEUE_COLUMNS_BY_SPEC = {c.squeue_spec: c for c in QUEUE_COLUMNS if c.squeue_spec}
QUEUE_DEFAULT_FORMAT = "jobid,user,partition,gpus,st,priority,action,reason"
QUEUE_LONG_FORMAT = "jobid,user,partition,gpus,state,priority,action,reason"  # --long: full state names
# squeue's own default -o: accepted as it is, so a habit or a script carries over
SQUEUE_DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
# One squeue specifier: '%', an optional '.' and width (accepted, not used: columns are
# sized to their values), the letter.
_SQUEUE_SPEC_RE = re.compile(r"%\.?[0-9]{0,3}([A-Za-z])", re.ASCII)


def format_priority_key(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.4g}"


def parse_queue_format(text: str) -> list[QueueColumn]:
    """``-o/--format`` of ``tiresias queue``: column names separated by commas
    (``jobid,st,priority``, case-insensitive), or squeue's specifiers separated by
    blanks or commas (``%i %u %T``; see QUEUE_COLUMNS_BY_SPEC for those supported)."""
    if len(text) > 4096:
        raise InputError(f"-o/--format value '{shorten(text)}' is longer than 4096 characters")
    tokens = [t for t in re.split(r"[\s,]+", text.strip()) if t]
    if not tokens:
        raise InputError(f"-o/--format value '{shorten(text)}' names no column")
    squeue_style = "%" in text
    columns = []
    for token in tokens:
        if squeue_style:
            match = _SQUEUE_SPEC_RE.fullmatch(token)
            column = QUEUE_COLUMNS_BY_SPEC.get(match.group(1)) if match else None
            if column is None:
                raise InputError(f"-o/--format: unsupported specifier '{shorten(token)}' (supported: "
                                 f"{' '.join('%' + c.squeue_spec for c in QUEUE_COLUMNS_BY_SPEC.values())})")
        else:
            column = QUEUE_COLUMNS_BY_NAME.get(token.lower())
            if column is None:
                raise InputError(f"-o/--format: unknown column '{shorten(token)}' "
                                 f"(known: {', '.join(QUEUE_COLUMNS_BY_NAME)})")
        columns.append(column)
    return columns


def format_queue(columns: Sequence[QueueColumn], rows: Iterable[dict], header: bool = True,
                 parsable: bool = False) -> str:
    """The queue table: aligned columns, or (``parsable``) sacct -p's form, every
    field followed by ``|``."""
    cells = [[c.text(r) for c in columns] for r in rows]
    if parsable:
        lines = ([[c.header for c in columns]] if header else []) + cells
        return "\n".join("".join(f"{cell}|" for cell in line) for line in lines)
    right = [i for i, c in enumerate(columns) if c.right]
    return format_plain_table([c.header for c in columns], cells, right=right, header=header)


@dataclass(frozen=True)
class FreeGpus:
    """GPUs free on the available nodes. ``now``: as Slurm reports them; ``after_round``:
    what this round's plan leaves for the jobs that still wait (its starts take their
    GPUs, its preemptions give theirs), the count in a waiting job's reason."""

    now: int
    after_round: int
    total: int
    nodes: int
    largest_on_one_node: int

    def text(self) -> str:
        # Both counts when they differ: a user comparing the wait reason's count with
        # sinfo's sees where each comes from.
        counts = f"{self.now} free now"
        if self.after_round != self.now:
            counts += f", {self.after_round} after this round's starts and preemptions"
        return (f"{counts} (of {self.total} on {self.nodes} available node(s); "
                f"largest free on one node: {self.largest_on_one_node})")


def free_gpus(observation: Any, plan: Any) -> FreeGpus:
    """The one free-GPU count of ``queue`` and ``explain``: ``observation`` is the
    backend's (controller.service.acting.backend.Observation), ``plan`` the round planned on it.

    A running job the plan leaves out while none of its nodes is down is being
    preempted (in its grace period): the controller counts its GPUs as the
    beneficiary's, free for the plan, and so does this count."""
    available = [n for n in observation.nodes if n.available]
    available_names = {n.name for n in available}
    now = sum(n.gpus_free for n in available)
    by_id = {job.job_id: job for job in observation.jobs}
    planned = set(plan.order)

    def gpus_on_available(job: Any) -> int:
        return sum(gpus for node, gpus in job.gpus_by_node if node in available_names)

    leaving = sum(gpus_on_available(job) for job in observation.jobs
                  if job.state == "RUNNING" and job.gpus > 0 and job.job_id not in planned
                  and all(node in available_names for node, _ in job.gpus_by_node))
    given = sum(gpus_on_available(by_id[a.job_id]) for a in plan.actions if a.kind == "preempt" and a.job_id in by_id)
    taken = sum(by_id[a.job_id].gpus for a in plan.actions if a.kind == "start" and a.job_id in by_id)
    return FreeGpus(now=now, after_round=max(now + leaving + given - taken, 0),
                    total=sum(n.gpus_total for n in available), nodes=len(available),
                    largest_on_one_node=max((n.gpus_free for n in available), default=0))


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

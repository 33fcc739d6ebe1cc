"""The queue table of ``tiresias queue``, squeue-style: its columns (squeue's state codes
and %-letters accepted in -o), the PRIORITY(QUEUE:POS) text, and the free-GPU count
``queue`` and ``explain`` share. The sacct-style job rows: controller.cli.reports."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from controller.cli.reports import format_elapsed, format_plain_table
from controller.core.inputs import shorten
from controller.core.model import InputError
from slurm_plugin.reasons import NOT_LOOKED_AT

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
                lambda r: r["nodelist"] if r["state"] == "RUNNING" else f"({r['slurm_reason'] or NOT_LOOKED_AT})",
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

"""The Nice family: a pending GPU job the plan puts in the last MLFQ queue gets Slurm's
Nice=N (``nice_last_queue``: N > 0; 0 = off), back to 0 when it starts or leaves that
queue (a promotion). Pure.

Why: the bands put the last queue's jobs one band below the next queue's, but the
site's other priority factors (age, fair-share) still add to a job's priority, and a
long-waiting job of the last queue may climb over the shorter jobs' band. Nice=N takes
N off its priority (slurmctld: priority - nice), so a band's worth of Nice keeps it
under them. The controller sets it as an operator (slurmctld's own user may set a
negative or large nice; here only 0 and N).

A job's own nice is its user's (``--nice``): only jobs whose observed nice is 0 are
niced, and only the jobs this controller niced (the book's ``recorded["set_nice"]``,
the store's rows RecordingBackend wrote) are set back to 0. ``tiresias restore`` sets
the recorded ones back to 0 (controller.core.levers.table: the row's ``undo``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from controller.core.actions import LeverActionBase
from controller.core.ids import decision_id

NAME = "set_nice"  # the lever's name (its table row, the target's method, the store's rows)
SETTINGS = {"nice_last_queue": 0}
DOC = ("``scontrol update JobId=X Nice=N``: lower a job's priority by N (0: back to none);\n"
       "the controller sets only 0 and nice_last_queue.")


@dataclass(frozen=True)
class SetNice(LeverActionBase):
    """Set a job's Nice (Slurm lowers its priority by it): N while it waits in the last
    queue, 0 when it starts or is promoted out of it."""

    nice: int
    kind: ClassVar[str] = "nice"


def plan(plan, view, book, cfg, round_id: int) -> list[SetNice]:
    """This round's SetNice: N for each pending GPU job in the last queue that does not
    start this round and whose own nice is 0; 0 for each job this controller niced that
    starts, runs or left the last queue (or when the setting went to 0)."""
    n = int(cfg.settings.get("nice_last_queue", 0) or 0)
    ours = book.recorded.get(NAME, {})
    if (n <= 0 or not cfg.by_level or cfg.queue_count < 2) and not ours:
        return []
    last = cfg.queue_count - 1
    starting = {action.job_id for action in plan.of_kind("start")}
    out: list[SetNice] = []

    def add(job_id: str, nice: int, reason: str) -> None:
        out.append(SetNice(decision_id(round_id, "nice", len(out) + 1), job_id, nice, reason=reason))

    for job_id in sorted(ours):
        job = view.gpu.get(job_id)
        if job is None:  # not seen this round: gone (the book forgets it) or not planned
            continue
        level = plan.levels.get(job_id)
        if n <= 0:
            add(job_id, 0, "nice_last_queue is 0 now: Nice back to 0")
        elif job.state != "PENDING" or job_id in starting:
            add(job_id, 0, "starts: Nice back to 0")
        elif level is not None and level != last:
            add(job_id, 0, f"promoted to queue {level + 1}/{cfg.queue_count}: Nice back to 0")
    if n <= 0 or not cfg.by_level or cfg.queue_count < 2:
        return out
    for job_id in plan.order:
        if job_id in ours or job_id in starting or plan.levels.get(job_id) != last:
            continue
        job = view.gpu.get(job_id)
        # a job inside an array's record has no id of its own to name; a job's own nice is its user's
        if job is None or job.state != "PENDING" or not job.lever_id or getattr(job, "nice", 0):
            continue
        add(job_id, n, f"in the last queue ({cfg.queue_count}/{cfg.queue_count}): Nice={n} keeps the site's "
                       "other priority factors (age, fair-share) from lifting it above the shorter jobs' bands")
    return out


def settle(book, actions: list[SetNice], done) -> None:
    """Book the jobs niced: a Nice=N always (carried out, refused after Slurm may have set
    it, or only said: a read-only executor keeps its own book); a Nice=0 drops the job
    unless Slurm refused it (tried again next round)."""
    ours = book.recorded.setdefault(NAME, {})
    for action in actions:
        outcome = done.of(action)
        if action.nice:
            ours[action.job_id] = str(action.nice)
        elif outcome is None or not outcome.failed:
            ours.pop(action.job_id, None)


def record(job_id: str, nice: int) -> tuple:
    """The store's row (RecordingBackend): written before a Nice=N, forgotten after a Nice=0."""
    return ((NAME, {job_id: str(nice)}), None) if nice else (None, (NAME, [job_id]))


def undo(target, job_id: str) -> None:
    """restore: Nice back to 0."""
    target.set_nice(job_id, 0)

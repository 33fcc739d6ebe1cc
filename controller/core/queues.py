"""MLFQ queue positions: each queue is a FIFO list, running jobs ahead of waiting ones.

The rule (shared/spec/scheduling.md, "Discretization (MLFQ)"): a job entering a
queue (arrival, demotion, starvation promotion) goes to its tail; after every round
the waiting jobs of a queue move behind its running ones, keeping their order, so a
job preempted by a higher queue waits at the head of its queue's waiting jobs and
nobody preempts a running job of its own queue.

A job's place is state that the executor keeps and passes back in the next
snapshot (the simulator on its JobState, the controller in its store):
``queue_level`` (the queue the place refers to) and ``queue_entry`` (an ordinal,
smaller = nearer the head). The engine returns the places that change in
``Plan.positions``. Within one queue a round walks three groups:

- group 0, SETTLED RUNNING: running at the end of the previous round, by entry;
- group 1, SETTLED WAITING: waiting at the end of the previous round, by entry;
- group 2, ENTERED: jobs whose level differs from ``queue_level`` (or that have no
  place yet), by the time they entered (submit time for an arrival, the exact
  crossing time for a running job demoted since, the round's time otherwise).

The walk over these groups is controller.core.queue_book; the new places are
assigned in controller.core.mlfq_round.
"""
from __future__ import annotations

from typing import Sequence

from controller.core.model import JobState

SETTLED_RUNNING, SETTLED_WAITING, ENTERED = 0, 1, 2


def groups_and_entries(jobs: Sequence[JobState], levels: Sequence[int], thresholds_gpu_s: Sequence[float],
                       now_s: float, queue_service) -> tuple[list[int], list[float]]:
    """Per job: its group in its queue and the value that orders it inside the group.

    ``levels`` are the jobs' levels in this round (after promotions);
    ``queue_service(job)`` its queue service in GPU-seconds (after promotions).
    """
    groups: list[int] = []
    entries: list[float] = []
    for job, level in zip(jobs, levels):
        entry = job.queue_entry
        if entry is not None and job.queue_level == level:
            groups.append(SETTLED_RUNNING if job.running else SETTLED_WAITING)
            entries.append(entry)
            continue
        groups.append(ENTERED)
        if entry is None:
            entries.append(job.spec.submit_time_s)
        elif job.running and job.queue_level is not None and level > job.queue_level:
            # demoted while running: it crossed hi_{level} this long ago
            crossed_gpu_s = queue_service(job) - thresholds_gpu_s[level - 1]
            entries.append(now_s - max(crossed_gpu_s, 0.0) / job.num_gpus)
        else:
            entries.append(now_s)
    return groups, entries

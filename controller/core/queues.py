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

These are pure functions of the snapshot; the engine calls them.
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


def next_positions(ordered: Sequence[JobState], levels: Sequence[int], groups: Sequence[int],
                   running_after: set, first_free_entry: float) -> dict[str, tuple[int, float]]:
    """The places after the round, for the jobs whose place changes.

    ``ordered`` is the round's walk order (levels and groups aligned with it);
    ``running_after`` the ids of jobs that hold GPUs once the plan is applied;
    ``first_free_entry`` an ordinal above every entry in use (the tail).
    Running jobs that were not settled running join the tail of their queue's
    running jobs, in walk order; settled running jobs that lose their GPUs go to the
    head of its waiting jobs, in walk order; entered jobs left waiting join its tail.
    """
    changes: dict[str, tuple[int, float]] = {}
    tail = first_free_entry
    # head of each queue's waiting jobs: below the smallest settled waiting entry
    head: dict[int, float] = {}
    preempted_per_level: dict[int, int] = {}
    for job, level, group in zip(ordered, levels, groups):
        if group == SETTLED_WAITING:
            if job.queue_entry < head.get(level, first_free_entry):
                head[level] = job.queue_entry
        elif group == SETTLED_RUNNING and job.job_id not in running_after:
            preempted_per_level[level] = preempted_per_level.get(level, 0) + 1
    head_next = {level: head.get(level, first_free_entry) - count for level, count in preempted_per_level.items()}
    for job, level, group in zip(ordered, levels, groups):
        running = job.job_id in running_after
        if group == SETTLED_RUNNING:
            if not running:
                changes[job.job_id] = (level, head_next[level])
                head_next[level] += 1
        elif running or group == ENTERED:
            changes[job.job_id] = (level, tail)
            tail += 1
    return changes


def first_free_entry(jobs: Sequence[JobState]) -> float:
    """An ordinal above every place in use: where the tails start this round."""
    top = 0.0
    for job in jobs:
        entry = job.queue_entry
        if entry is not None and entry >= top:
            top = entry + 1.0
    return top

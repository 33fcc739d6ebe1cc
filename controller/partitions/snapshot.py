"""Static allocation problems from a (generated or traced) multi-partition instance.

``snapshot_from_instance`` replays the instance up to a moment (FIFO in the submitted
partitions, online MCT + FIFO, or no replay: a backlog) and returns that moment as an
``AllocationProblem``; ``workers_for_gpus`` splits a trace job without a worker count.

Units: seconds for times and durations, GPUs for capacity.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from controller.core.model import InputError
from controller.partitions.model import AllocationProblem, JobTable, PartitionInstance, RunningJob
from controller.partitions.timeline import Timeline

__all__ = ["snapshot_from_instance", "workers_for_gpus"]


def workers_for_gpus(gpus: int, max_gpus_per_node: int) -> int:
    """Fewest workers r with r | g and g/r <= the largest node: how a trace job
    without a worker count is split (8 GPUs -> 1 worker, 16 -> 2, 12 on 8-GPU nodes -> 2)."""
    for r in range(1, gpus + 1):
        if gpus % r == 0 and gpus // r <= max_gpus_per_node:
            return r
    return gpus


def snapshot_from_instance(instance: PartitionInstance, *, at_fraction: Optional[float] = None,
                           now_s: Optional[float] = None, max_pending: Optional[int] = None,
                           replay: str = "submitted", backlog_load: Optional[float] = None) -> AllocationProblem:
    """The static snapshot used to compare allocators on a (generated or traced) instance.

    The jobs first run FIFO (arrival order, earliest start >= arrival, reservations
    kept, Best Fit) in the partitions they were submitted to; this replay is causal,
    so a job's start depends only on earlier arrivals. ``now_s`` is then, by default,
    the arrival at which the most jobs wait (the busiest moment; with
    ``max_pending``, the busiest moment with at most that many waiting), or the
    arrival ``at_fraction`` of the way through the arrivals. At now: jobs that
    finished are gone, jobs that started are running (kept in place: the
    non-preemptive set), jobs that arrived but did not start are pending with
    q = now - submit and d = their duration. Later arrivals are ignored.

    ``replay="mct"``: the replay sends each arrival to the feasible partition where
    it would finish earliest (ties: the one submitted to, then the lowest index),
    as an online MCT + FIFO system would; jobs then wait only when no partition has
    room, so the snapshot has real contention between partitions (with the default
    replay, jobs queue in their own partition while others may be idle, and any
    re-allocation clears the queue). Running jobs stay where the replay put them.

    ``replay="none"``: no replay, a backlog: every job that arrived by now is pending
    (none running); now is the ``max_pending``-th arrival (default: the last) or the
    arrival ``at_fraction`` of the way through. ``backlog_load`` (replay "none" only,
    instead of ``max_pending``): the first arrivals whose GPUs add up to this multiple
    of the instance's GPUs, so that every partition size sees the same contention.
    """
    if replay not in ("submitted", "mct", "none"):
        raise InputError(f"replay value '{replay}' is not one of submitted, mct, none")
    if backlog_load is not None:
        if replay != "none":
            raise InputError(f"backlog load '{backlog_load}' needs replay 'none', not '{replay}'")
        if not backlog_load > 0:
            raise InputError(f"backlog load value '{backlog_load}' must be > 0")
        gpus = np.cumsum([j.num_gpus for j in sorted(instance.jobs, key=lambda j: j.submit_time_s)])
        cap = sum(p.nodes * p.gpus_per_node for p in instance.partitions)
        max_pending = int(min(gpus.searchsorted(backlog_load * cap) + 1, gpus.size))
    if replay == "none":
        return _backlog_snapshot(instance, at_fraction, now_s, max_pending)
    parts = list(instance.partitions)
    index = {p.name: i for i, p in enumerate(parts)}
    jobs = sorted(instance.jobs, key=lambda j: j.submit_time_s)
    if not jobs:
        raise InputError("the instance has no jobs")
    t0 = jobs[0].submit_time_s
    timelines = [Timeline(t0, p.nodes, p.gpus_per_node) for p in parts]
    n = len(jobs)
    submit = np.array([j.submit_time_s for j in jobs])
    start = np.full(n, np.inf)
    finish = np.full(n, np.inf)
    placed: list = [()] * n
    part_idx = np.empty(n, dtype=np.int64)
    run_part = np.empty(n, dtype=np.int64)
    workers = np.empty(n, dtype=np.int64)
    for i, spec in enumerate(jobs):
        if spec.duration_s is None:
            raise InputError(f"job {spec.job_id}: no duration; multi-partition mode needs an estimate")
        p = index.get(spec.partition)
        if p is None:
            raise InputError(f"job {spec.job_id}: partition '{spec.partition}' is not among the partitions "
                             f"({', '.join(index)})")
        r = int(instance.workers[spec.job_id])
        g = int(spec.num_gpus)
        if r <= 0 or g <= 0 or g % r:
            raise InputError(f"job {spec.job_id}: {g} GPUs cannot be split evenly over {r} workers")
        part_idx[i], workers[i] = p, r
        run_part[i] = p
        k, d = g // r, float(spec.duration_s)
        if replay == "mct":
            best = None
            for q in range(len(parts)):
                if (parts[q].gpus_per_node // k) * parts[q].nodes < r:
                    continue
                timelines[q].drop_before(spec.submit_time_s)
                row, wmin = timelines[q].earliest(d, k, r, not_before=spec.submit_time_s)
                key = (float(timelines[q].times[row]) + d, q != p, q)
                if best is None or key < best[0]:
                    best = (key, q, row, wmin)
            if best is None:
                continue  # fits nowhere: pending from its arrival on
            _, q, row, wmin = best
            run_part[i] = q
            start[i], finish[i], alloc = timelines[q].place(row, wmin, d, k, r)
        else:
            if (parts[p].gpus_per_node // k) * parts[p].nodes < r:
                continue  # never starts where it was submitted: pending from its arrival on
            tl = timelines[p]
            tl.drop_before(spec.submit_time_s)
            row, wmin = tl.earliest(d, k, r, not_before=spec.submit_time_s)
            start[i], finish[i], alloc = tl.place(row, wmin, d, k, r)
        nz = np.flatnonzero(alloc)
        placed[i] = tuple((int(x), int(alloc[x])) for x in nz)
    if now_s is None:
        if at_fraction is not None:
            if not 0 <= at_fraction <= 1:
                raise InputError(f"snapshot fraction '{at_fraction}' must be within 0..1")
            now_s = float(submit[int(round(at_fraction * (n - 1)))])
        else:
            # waiting just after each arrival: arrived so far minus started by then
            started_by = np.searchsorted(np.sort(start), submit, side="right")
            waiting = np.arange(1, n + 1) - np.minimum(started_by, np.arange(1, n + 1))
            if max_pending is not None:
                waiting = np.where(waiting <= max_pending, waiting, -1)
            now_s = float(submit[int(np.argmax(waiting))])
    rows, running = [], []
    for i, spec in enumerate(jobs):
        if submit[i] > now_s:
            break
        if start[i] <= now_s:
            if finish[i] > now_s:
                running.append(RunningJob(spec.job_id, int(run_part[i]), float(finish[i]), int(spec.num_gpus),
                                          placed[i], float(finish[i] - now_s)))
            continue
        rows.append((spec.job_id, float(spec.duration_s), int(spec.num_gpus), int(workers[i]),
                     float(spec.user_priority), now_s - submit[i], int(part_idx[i])))
    return AllocationProblem(float(now_s), parts, JobTable.build(rows), running)


def _backlog_snapshot(instance: PartitionInstance, at_fraction: Optional[float], now_s: Optional[float],
                      max_pending: Optional[int]) -> AllocationProblem:
    parts = list(instance.partitions)
    index = {p.name: i for i, p in enumerate(parts)}
    jobs = sorted(instance.jobs, key=lambda j: j.submit_time_s)
    if not jobs:
        raise InputError("the instance has no jobs")
    submit = np.array([j.submit_time_s for j in jobs])
    if now_s is None:
        if at_fraction is not None:
            if not 0 <= at_fraction <= 1:
                raise InputError(f"snapshot fraction '{at_fraction}' must be within 0..1")
            now_s = float(submit[int(round(at_fraction * (len(jobs) - 1)))])
        else:
            now_s = float(submit[min(max_pending or len(jobs), len(jobs)) - 1])
    rows = []
    for spec in jobs:
        if spec.submit_time_s > now_s or (max_pending is not None and len(rows) >= max_pending):
            break
        if spec.duration_s is None:
            raise InputError(f"job {spec.job_id}: no duration; multi-partition mode needs an estimate")
        if spec.partition not in index:
            raise InputError(f"job {spec.job_id}: partition '{spec.partition}' is not among the partitions "
                             f"({', '.join(index)})")
        rows.append((spec.job_id, float(spec.duration_s), int(spec.num_gpus), int(instance.workers[spec.job_id]),
                     float(spec.user_priority), now_s - spec.submit_time_s, index[spec.partition]))
    return AllocationProblem(float(now_s), parts, JobTable.build(rows))

"""Layer 2 (spec/multi-partition.md): the exact plan of one partition, and the
objective of a whole assignment built from those plans.

``plan_partition``: jobs in ascending priority value; running jobs keep their nodes;
each job starts at the first t' in {now} U {planned finishes so far} where, for its
whole run [t', t' + d), enough whole-node capacity exists for all its workers (g/r
GPUs per worker, a worker never spans nodes); workers are placed Best Fit. Checking
the whole run, not only the instant t', keeps the plan valid when a later job is
slotted in before an earlier one.

``finish_allocation`` / ``evaluate_assignment``: layer 2 on every partition of an
assignment, then ``Objective`` over the allocated jobs.

Units: seconds for times and durations, GPUs for capacity.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from controller.core.model import InputError
from controller.partitions.model import (Allocation, AllocationProblem, Objective, priority_rank,
                                         utilization)

__all__ = ["PartitionPlan", "plan_partition", "finish_allocation", "evaluate_assignment"]


@dataclass
class PartitionPlan:
    """Layer-2 output for one partition: per job (in the given order) start, finish, placement."""

    positions: np.ndarray  # indices into the problem's JobTable
    start_s: np.ndarray
    finish_s: np.ndarray
    placement: list[tuple[tuple[int, int], ...]]  # (node index, GPUs) per job


def plan_partition(problem: AllocationProblem, p: int, ordered_jobs: Sequence[int],
                   with_placement: bool = True) -> PartitionPlan:
    """Layer 2 for partition p: ``ordered_jobs`` (JobTable indices) by ascending priority."""
    tl = problem.initial_timeline(p)
    jobs = problem.jobs
    order = np.asarray(ordered_jobs, dtype=np.int64)
    d = jobs.duration_s[order]
    k = jobs.gpus_per_worker[order]
    r = jobs.workers[order]
    start = np.empty(order.size)
    finish = np.empty(order.size)
    placement = []
    for n in range(order.size):
        row, wmin = tl.earliest(d[n], int(k[n]), int(r[n]))
        if row < 0:
            raise InputError(f"job {jobs.job_ids[order[n]]} does not fit partition "
                             f"{problem.partitions[p].name}")
        start[n], finish[n], alloc = tl.place(row, wmin, d[n], int(k[n]), int(r[n]))
        if with_placement:
            nz = np.flatnonzero(alloc)
            placement.append(tuple((int(i), int(alloc[i])) for i in nz))
    return PartitionPlan(order, start, finish, placement)


def finish_allocation(problem: AllocationProblem, method: str, part_of: np.ndarray, sched: np.ndarray,
                       order_rank: np.ndarray, objective: Objective, infeasible: list[str],
                       plans: Optional[dict] = None, **extra) -> Allocation:
    """Re-run layer 2 for the final assignment and compute the objective.

    ``plans`` (p -> PartitionPlan of exactly the jobs assigned to p, in priority
    order), where given, are used instead of re-running layer 2 for those partitions."""
    jobs = problem.jobs
    assignment, start, finish, placement = {}, {}, {}, {}
    uq = []
    max_finish = max([problem.now_s] + [r.finish_s for r in problem.running])
    for p in range(len(problem.partitions)):
        members = sched[part_of[sched] == p]
        members = members[np.argsort(order_rank[members], kind="stable")]
        if members.size == 0:
            continue
        plan = plans.get(p) if plans is not None else None
        if plan is None:
            plan = plan_partition(problem, p, members)
        for n, j in enumerate(plan.positions):
            jid = jobs.job_ids[j]
            assignment[jid] = problem.partitions[p].name
            start[jid], finish[jid] = float(plan.start_s[n]), float(plan.finish_s[n])
            placement[jid] = plan.placement[n]
        uq.append(jobs.user_priority[plan.positions] * (jobs.queued_s[plan.positions] + plan.start_s - problem.now_s))
        max_finish = max(max_finish, float(plan.finish_s.max()))
    uq_all = np.concatenate(uq) if uq else np.zeros(0)
    c_avg = float(uq_all.mean()) if uq_all.size else 0.0
    c_max = float(uq_all.max()) if uq_all.size else 0.0
    work = float((jobs.gpus[sched] * jobs.duration_s[sched]).sum()) + problem.running_work_gpu_s()
    c_util = utilization(work, problem.capacity_gpus, max_finish - problem.now_s)
    return Allocation(method, assignment, start, finish, placement, c_avg, c_max, c_util,
                      objective.combine(c_avg, c_max, c_util), infeasible, **extra)


def evaluate_assignment(problem: AllocationProblem, priority: np.ndarray, partition_of: np.ndarray,
                        objective: Objective = Objective(), method: str = "given") -> Allocation:
    """Layer 2 + objective for a given assignment (array over all jobs, -1 = unplanned)."""
    rank = priority_rank(priority)
    part_of = np.asarray(partition_of, dtype=np.int64)
    sched = np.flatnonzero(part_of >= 0)
    bad = sched[~problem.feasible[sched, part_of[sched]]]
    if bad.size:
        raise InputError(f"job {problem.jobs.job_ids[bad[0]]} is assigned to a partition it does not fit")
    infeasible = [problem.jobs.job_ids[j] for j in np.flatnonzero(part_of < 0)]
    return finish_allocation(problem, method, part_of, sched, rank, objective, infeasible)

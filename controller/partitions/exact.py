"""The exact fitness of EVO individuals: layer 2 on every partition, cached and incremental.

An individual is a vector over the schedulable jobs (in priority order) holding a
partition index. ``ExactEvaluator.fitness`` returns the scalarized objective of its
layer-2 plans, exactly as ``layer2.finish_allocation`` would compute it, but

- caches each partition's run per (partition, jobs assigned there), and
- on a miss resumes from a parent's run after the longest common prefix of the two
  job lists (``timeline.timeline_after``), so a child that differs from its parent
  late in a partition re-plans only the tail.

Units: seconds for times, GPUs for capacity.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from controller.partitions.layer2 import PartitionPlan
from controller.partitions.model import AllocationProblem, Objective, utilization
from controller.partitions.timeline import timeline_after

__all__ = ["ExactEvaluator", "PartitionRun"]


@dataclass(frozen=True)
class PartitionRun:
    """A cached layer-2 run of one partition: objective parts plus what is needed to
    resume after any prefix (per job start, finish and sparse placement)."""

    sum_uq: float
    max_uq: float
    finish: float
    starts: np.ndarray
    finishes: np.ndarray
    nodes: np.ndarray  # placement entries, job after job
    gpus: np.ndarray
    offsets: np.ndarray  # entries of job n: offsets[n]:offsets[n + 1]


class ExactEvaluator:
    """Exact fitness of assignment vectors over jobs in priority order.

    Layer-2 results are cached per (partition, tuple of assigned jobs). On a miss,
    the run resumes from a hint individual's (a parent's) cached run of the same
    partition after the longest common prefix of the two job lists: a partition's
    plan for its first m jobs depends only on those m jobs, so the prefix is
    reused as is (``timeline_after``) and only the rest is placed.
    """

    def __init__(self, problem: AllocationProblem, sched_in_order: np.ndarray, objective: Objective,
                 cache_limit: int):
        self.problem = problem
        self.objective = objective
        jobs = problem.jobs
        s = sched_in_order
        self.sched = s
        self.d = jobs.duration_s[s]
        self.k = jobs.gpus_per_worker[s]
        self.r = jobs.workers[s]
        self.u = jobs.user_priority[s]
        self.q0 = jobs.queued_s[s] - problem.now_s  # uq = u * (q0 + start)
        self.P = len(problem.partitions)
        self.n = s.size
        self.work = float((jobs.gpus[s] * jobs.duration_s[s]).sum()) + problem.running_work_gpu_s()
        self.base_finish = [float(problem.initial_timelines[p].times[-1]) for p in range(self.P)]
        self.cache: dict = {}
        self.cache_limit = cache_limit
        self.misses = 0
        self.placed = 0  # jobs actually placed by layer 2 (not resumed)

    def groups(self, ind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(ind, kind="stable")  # grouped by partition, priority order inside
        bounds = np.concatenate(([0], np.cumsum(np.bincount(ind, minlength=self.P))))
        return order, bounds

    def run(self, p: int, members: np.ndarray, hint: Optional[np.ndarray] = None) -> PartitionRun:
        key = (p, members.tobytes())
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        self.misses += 1
        m = 0
        base = None
        if hint is not None and hint.size and members.size:
            size = min(hint.size, members.size)
            diff = np.flatnonzero(hint[:size] != members[:size])
            m = int(diff[0]) if diff.size else size
            if m:
                base = self.cache.get((p, hint.tobytes()))
        if base is not None:
            o = int(base.offsets[m])
            tl = timeline_after(self.problem.initial_timelines[p], base.starts[:m], base.finishes[:m], base.nodes[:o],
                                base.gpus[:o], np.diff(base.offsets[:m + 1]))
            starts = np.empty(members.size)
            finishes = np.empty(members.size)
            starts[:m], finishes[:m] = base.starts[:m], base.finishes[:m]
            node_parts, gpu_parts, counts = [base.nodes[:o]], [base.gpus[:o]], [np.diff(base.offsets[:m + 1])]
        else:
            m = 0
            tl = self.problem.initial_timeline(p)
            starts = np.empty(members.size)
            finishes = np.empty(members.size)
            node_parts, gpu_parts, counts = [], [], []
        d, k, r = self.d, self.k, self.r
        rest = []
        for n, j in enumerate(members[m:].tolist(), start=m):
            row, wmin = tl.earliest(d[j], int(k[j]), int(r[j]))
            starts[n], finishes[n], alloc = tl.place(row, wmin, d[j], int(k[j]), int(r[j]))
            nz = np.flatnonzero(alloc)
            node_parts.append(nz)
            gpu_parts.append(alloc[nz])
            rest.append(nz.size)
        self.placed += members.size - m
        counts.append(np.array(rest, dtype=np.int64))
        cnt = np.concatenate(counts)
        offsets = np.zeros(members.size + 1, dtype=np.int64)
        np.cumsum(cnt, out=offsets[1:])
        uq = self.u[members] * (self.q0[members] + starts)
        result = PartitionRun(float(uq.sum()), float(uq.max()), max(float(tl.times[-1]), self.base_finish[p]),
                               starts, finishes,
                               np.concatenate(node_parts) if node_parts else np.zeros(0, dtype=np.int64),
                               np.concatenate(gpu_parts) if gpu_parts else np.zeros(0, dtype=np.int64), offsets)
        if len(self.cache) >= self.cache_limit:
            self.cache.clear()
        self.cache[key] = result
        return result

    def plans(self, ind: np.ndarray) -> dict:
        """p -> PartitionPlan of ``ind`` from the cached runs (those still cached)."""
        order, bounds = self.groups(ind)
        out = {}
        for p in range(self.P):
            members = order[bounds[p]:bounds[p + 1]]
            run = self.cache.get((p, members.tobytes())) if members.size else None
            if run is None:
                continue
            nodes, gpus, off = run.nodes.tolist(), run.gpus.tolist(), run.offsets.tolist()
            placement = [tuple(zip(nodes[off[i]:off[i + 1]], gpus[off[i]:off[i + 1]])) for i in range(members.size)]
            out[p] = PartitionPlan(self.sched[members], run.starts, run.finishes, placement)
        return out

    def seed(self, p: int, members: np.ndarray, starts: np.ndarray, finishes: np.ndarray,
             nodes: Sequence[np.ndarray], gpus: Sequence[np.ndarray]) -> None:
        """Store a layer-2 run of partition p computed elsewhere (MCT's plan): members
        are positions in priority order, with their starts, finishes and placements."""
        counts = np.array([x.size for x in nodes], dtype=np.int64)
        offsets = np.zeros(members.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        uq = self.u[members] * (self.q0[members] + starts)
        fin = max(float(finishes.max()), self.base_finish[p]) if members.size else self.base_finish[p]
        self.cache[(p, members.tobytes())] = PartitionRun(
            float(uq.sum()), float(uq.max()), fin, starts, finishes,
            np.concatenate(nodes).astype(np.int64), np.concatenate(gpus).astype(np.int64), offsets)

    def fitness(self, ind: np.ndarray, hint: Optional[np.ndarray] = None) -> float:
        order, bounds = self.groups(ind)
        h_order = h_bounds = None
        if hint is not None:
            h_order, h_bounds = self.groups(hint)
        total_uq, max_uq, max_finish = 0.0, 0.0, self.problem.now_s
        for p in range(self.P):
            a, b = bounds[p], bounds[p + 1]
            if a == b:
                max_finish = max(max_finish, self.base_finish[p])
                continue
            h = h_order[h_bounds[p]:h_bounds[p + 1]] if h_order is not None else None
            res = self.run(p, order[a:b], h)
            total_uq += res.sum_uq
            max_uq = max(max_uq, res.max_uq)
            max_finish = max(max_finish, res.finish)
        c_avg = total_uq / self.n if self.n else 0.0
        c_util = utilization(self.work, self.problem.capacity_gpus, max_finish - self.problem.now_s)
        return self.objective.combine(c_avg, max_uq, c_util)

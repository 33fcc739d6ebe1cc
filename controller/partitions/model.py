"""The data of one multi-partition allocation round (spec/multi-partition.md).

Inputs: ``Partition`` (name, nodes, GPUs per node), ``JobTable`` (the pending jobs as
arrays), ``RunningJob`` (fixed where it runs), ``AllocationProblem`` (all of them at
``now_s``, with the feasibility matrix and each partition's initial timeline).
Output: ``Allocation``. The score: ``Objective``. The order: ``priority_order``
(smaller value first) and ``priority_rank``.

Units: seconds for times and durations, GPUs for capacity.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from controller.core.model import InputError
from controller.partitions.timeline import Timeline
from controller.replay.synthetic import Partition

__all__ = ["Partition", "JobTable", "RunningJob", "AllocationProblem", "Objective", "Allocation",
           "feasible_partitions", "feasibility_matrix", "priority_order", "priority_rank", "split_feasible",
           "utilization"]


@dataclass(frozen=True)
class JobTable:
    """Pending jobs as arrays (one entry per job, same order everywhere).

    ``duration_s`` is the remaining (estimated) duration d_j(t); ``queued_s`` the
    queued time already spent q_j(t); ``submitted`` the index of the partition the
    job was submitted to (-1: none of the given partitions).
    """

    job_ids: tuple[str, ...]
    duration_s: np.ndarray
    gpus: np.ndarray
    workers: np.ndarray
    user_priority: np.ndarray
    queued_s: np.ndarray
    submitted: np.ndarray

    def __post_init__(self):
        n = len(self.job_ids)
        for name in ("duration_s", "gpus", "workers", "user_priority", "queued_s", "submitted"):
            if len(getattr(self, name)) != n:
                raise InputError(f"job table column '{name}' has {len(getattr(self, name))} rows, expected {n}")
        bad = np.flatnonzero((self.workers <= 0) | (self.gpus <= 0) | (self.gpus % np.maximum(self.workers, 1) != 0))
        if bad.size:
            j = int(bad[0])
            raise InputError(f"job {self.job_ids[j]}: {int(self.gpus[j])} GPUs cannot be split evenly over "
                             f"{int(self.workers[j])} workers")
        if np.any(~np.isfinite(self.duration_s)) or np.any(self.duration_s < 0):
            j = int(np.flatnonzero(~np.isfinite(self.duration_s) | (self.duration_s < 0))[0])
            raise InputError(f"job {self.job_ids[j]}: remaining duration {self.duration_s[j]} is not a finite "
                             f"number >= 0")

    def __len__(self) -> int:
        return len(self.job_ids)

    @property
    def gpus_per_worker(self) -> np.ndarray:
        return self.gpus // self.workers

    @classmethod
    def build(cls, rows: Sequence[tuple]) -> "JobTable":
        """From (job_id, duration_s, gpus, workers, user_priority, queued_s, submitted) rows."""
        cols = list(zip(*rows)) if rows else [()] * 7
        return cls(tuple(str(x) for x in cols[0]), np.asarray(cols[1], dtype=float),
                   np.asarray(cols[2], dtype=np.int64), np.asarray(cols[3], dtype=np.int64),
                   np.asarray(cols[4], dtype=float), np.asarray(cols[5], dtype=float),
                   np.asarray(cols[6], dtype=np.int64))


@dataclass(frozen=True)
class RunningJob:
    """A job running in the partition it was submitted to: never moved by this layer.

    ``node_gpus`` is its placement as (node index within the partition, GPUs).
    """

    job_id: str
    partition: int
    finish_s: float
    gpus: int
    node_gpus: tuple[tuple[int, int], ...]
    remaining_s: float = 0.0


def feasible_partitions(gpus: int, workers: int, partitions: Sequence[Partition]) -> list[int]:
    """Indices p with ``floor(G_p * r / g) * N_p >= r`` (spec formula)."""
    return [p for p, part in enumerate(partitions)
            if (part.gpus_per_node * workers // gpus) * part.nodes >= workers]


def feasibility_matrix(jobs: JobTable, partitions: Sequence[Partition]) -> np.ndarray:
    """Boolean (jobs x partitions) matrix of the spec's feasibility formula."""
    G = np.array([p.gpus_per_node for p in partitions], dtype=np.int64)
    N = np.array([p.nodes for p in partitions], dtype=np.int64)
    r = jobs.workers[:, None]
    return (G[None, :] * r // jobs.gpus[:, None]) * N[None, :] >= r


@dataclass
class AllocationProblem:
    """One allocation round: partitions, running jobs (fixed), pending jobs, time now.

    Derived on construction: ``feasible`` (jobs x partitions, ``feasibility_matrix``)
    and ``initial_timelines`` (per partition, only its running jobs placed; shared,
    read only: plan on ``initial_timeline(p)``, a copy).
    """

    now_s: float
    partitions: list[Partition]
    jobs: JobTable
    running: list[RunningJob] = field(default_factory=list)

    def __post_init__(self):
        if not self.partitions:
            raise InputError("no partitions given")
        self.feasible = feasibility_matrix(self.jobs, self.partitions)
        self.initial_timelines = [self._initial_timeline(p) for p in range(len(self.partitions))]

    @property
    def capacity_gpus(self) -> int:
        return int(sum(p.nodes * p.gpus_per_node for p in self.partitions))

    def running_work_gpu_s(self) -> float:
        return float(sum(r.gpus * r.remaining_s for r in self.running))

    def _initial_timeline(self, p: int) -> Timeline:
        part = self.partitions[p]
        tl = Timeline(self.now_s, part.nodes, part.gpus_per_node)
        for job in sorted((r for r in self.running if r.partition == p), key=lambda r: (r.finish_s, r.job_id)):
            alloc = np.zeros(part.nodes, dtype=np.int64)
            for node, gpus in job.node_gpus:
                alloc[node] += gpus
            tl.occupy(self.now_s, max(job.finish_s, self.now_s), alloc, job.job_id)
        return tl

    def initial_timeline(self, p: int) -> Timeline:
        """A fresh copy of partition p with only its running jobs placed."""
        return self.initial_timelines[p].copy()


@dataclass(frozen=True)
class Objective:
    """``w1 * C_avg + w2 * C_max + w3 * (1 - C_util)`` (spec defaults 1, 1, 1).

    Over the allocated (pending, feasible) jobs J: q_j = queued time so far + planned
    start - now; C_avg = mean_j u_j q_j; C_max = max_j u_j q_j (seconds);
    C_util = (sum_j g_j d_j(t) + running jobs' remaining GPU-seconds) /
    (total GPUs x (max planned finish - now)), running jobs' finishes included.
    With nothing to run C_util is 1.
    """

    w1: float = 1.0
    w2: float = 1.0
    w3: float = 1.0

    def combine(self, c_avg: float, c_max: float, c_util: float) -> float:
        return self.w1 * c_avg + self.w2 * c_max + self.w3 * (1.0 - c_util)


def utilization(work_gpu_s: float, capacity_gpus: int, horizon_s: float) -> float:
    """C_util: GPU-seconds of work over GPUs x horizon seconds (1 for an empty horizon)."""
    return work_gpu_s / (capacity_gpus * horizon_s) if horizon_s > 0 else 1.0


@dataclass
class Allocation:
    """A layer-1 result: partition and plan per allocated job, the objective, and the
    jobs that fit no partition (left where they were submitted, not planned)."""

    method: str
    assignment: dict[str, str]  # job id -> partition name
    start_s: dict[str, float]
    finish_s: dict[str, float]
    placement: dict[str, tuple[tuple[int, int], ...]]
    c_avg: float
    c_max: float
    c_util: float
    value: float
    infeasible: list[str]
    history: list[float] = field(default_factory=list)  # EVO: best fitness per generation
    evaluations: int = 0  # EVO: layer-2 partition runs actually computed (cache misses)
    surrogate_calls: tuple[int, int] = (0, 0)  # EVO surrogate: (individuals evaluated, individuals asked for)
    phase_s: dict = field(default_factory=dict)  # EVO: wall seconds per phase (mct, search, recheck, ...)


def priority_order(values: np.ndarray) -> np.ndarray:
    """Job indices by ascending priority value (smaller = earlier), ties by index;
    NaN counts as +inf (served last)."""
    v = np.asarray(values, dtype=float)
    v = np.where(np.isnan(v), np.inf, v)
    return np.lexsort((np.arange(v.size), v))


def split_feasible(problem: AllocationProblem) -> tuple[np.ndarray, list[str]]:
    """(indices of the jobs feasible in some partition, ids of the jobs feasible in none)."""
    ok = problem.feasible.any(axis=1)
    infeasible = [problem.jobs.job_ids[j] for j in np.flatnonzero(~ok)]
    return np.flatnonzero(ok), infeasible


def priority_rank(values: np.ndarray) -> np.ndarray:
    """Per job, its position in ``priority_order(values)`` (0 = served first)."""
    order = priority_order(values)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return rank

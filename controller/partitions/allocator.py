"""Multi-partition allocation (spec/multi-partition.md): layer 2, the objective, MCT, EVO.

- Layer 2 (``plan_partition``): one partition, jobs in ascending priority value;
  running jobs keep their nodes; each job starts at the first t' in {now} U {planned
  finishes so far} where, for its whole run [t', t' + d), enough whole-node capacity
  exists for all its workers (g/r GPUs per worker, a worker never spans nodes);
  workers are placed Best Fit. Checking the whole run, not only the instant t',
  keeps the plan valid when a later job is slotted in before an earlier one.
- ``Objective``: w1 * C_avg + w2 * C_max + w3 * (1 - C_util) over the jobs being
  allocated (see ``Objective`` for the exact sums).
- Layer 1: ``allocate_mct`` (each job, by priority, to the feasible partition where
  it finishes earliest) and ``allocate_evo`` (the evolutionary search).

Units: seconds for times and durations, GPUs for capacity. The jobs are the
"pending" set of an ``AllocationProblem``: a snapshot at ``now_s``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from controller.core.model import InputError
from controller.replay.synthetic import Partition, PartitionInstance

__all__ = [
    "Partition", "JobTable", "RunningJob", "AllocationProblem", "Timeline", "PartitionPlan",
    "Objective", "Allocation", "EvoConfig", "feasible_partitions", "feasibility_matrix",
    "plan_partition", "priority_order", "allocate_mct", "allocate_evo", "evaluate_assignment",
    "random_individual", "crossover", "mutate_move", "mutate_swap", "mutate_moves", "mutate_swaps",
    "snapshot_from_instance", "workers_for_gpus", "EVALUATORS", "SurrogateEvaluator", "timeline_after",
]

_BIG = np.iinfo(np.int32).max // 4  # free GPUs of the sentinel row past the last breakpoint


# --------------------------------------------------------------------------- inputs
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
    """One allocation round: partitions, running jobs (fixed), pending jobs, time now."""

    now_s: float
    partitions: list[Partition]
    jobs: JobTable
    running: list[RunningJob] = field(default_factory=list)

    def __post_init__(self):
        if not self.partitions:
            raise InputError("no partitions given")
        self.feasible = feasibility_matrix(self.jobs, self.partitions)
        self._initial = [self._initial_timeline(p) for p in range(len(self.partitions))]

    @property
    def capacity_gpus(self) -> int:
        return int(sum(p.nodes * p.gpus_per_node for p in self.partitions))

    def running_work_gpu_s(self) -> float:
        return float(sum(r.gpus * r.remaining_s for r in self.running))

    def _initial_timeline(self, p: int) -> "Timeline":
        part = self.partitions[p]
        tl = Timeline(self.now_s, part.nodes, part.gpus_per_node)
        for job in sorted((r for r in self.running if r.partition == p), key=lambda r: (r.finish_s, r.job_id)):
            alloc = np.zeros(part.nodes, dtype=np.int64)
            for node, gpus in job.node_gpus:
                alloc[node] += gpus
            tl.occupy(self.now_s, max(job.finish_s, self.now_s), alloc, job.job_id)
        return tl

    def initial_timeline(self, p: int) -> "Timeline":
        """A fresh copy of partition p with only its running jobs placed."""
        return self._initial[p].copy()


# --------------------------------------------------------------------------- layer 2
class Timeline:
    """Free GPUs per node as a step function of time.

    ``times[k]`` (k < K) are breakpoints (times[0] = now); row k of ``free`` holds the
    free GPUs per node during [times[k], times[k+1]); the last row lasts forever and
    is all free once every placed job has finished. Row K is a sentinel (huge free
    count) so windows can end at K. Arrays are over-allocated and grown by doubling:
    inserting a breakpoint is a slice shift, not a reallocation.
    """

    __slots__ = ("_times", "_free", "K", "gpus_per_node")

    def __init__(self, now_s: float, nodes: int, gpus_per_node: int, capacity: int = 16):
        self._times = np.full(capacity, np.inf)
        self._times[0] = float(now_s)
        self._free = np.full((capacity + 1, nodes), _BIG, dtype=np.int64)
        self._free[0] = gpus_per_node
        self.K = 1
        self.gpus_per_node = gpus_per_node

    @property
    def times(self) -> np.ndarray:
        return self._times[:self.K]

    @property
    def free(self) -> np.ndarray:
        """Rows 0..K (the last is the sentinel)."""
        return self._free[:self.K + 1]

    def copy(self) -> "Timeline":
        other = Timeline.__new__(Timeline)
        other._times = self._times.copy()
        other._free = self._free.copy()
        other.K = self.K
        other.gpus_per_node = self.gpus_per_node
        return other

    def _breakpoint(self, t: float) -> int:
        """Index of breakpoint t, inserting it (a copy of the row it splits) if new."""
        K = self.K
        j = int(self._times[:K].searchsorted(t))
        if j < K and self._times[j] == t:
            return j
        if j == 0:
            raise InputError(f"time {t} is before the timeline start {self._times[0]}")
        if K + 1 >= self._times.size:
            cap = 2 * self._times.size
            times = np.full(cap, np.inf)
            times[:K] = self._times[:K]
            free = np.full((cap + 1, self._free.shape[1]), _BIG, dtype=np.int64)
            free[:K + 1] = self._free[:K + 1]
            self._times, self._free = times, free
        self._times[j + 1:K + 1] = self._times[j:K].copy()
        self._times[j] = t
        self._free[j + 1:K + 2] = self._free[j:K + 1].copy()
        self._free[j] = self._free[j - 1]
        self.K = K + 1
        return j

    def occupy(self, start_s: float, finish_s: float, alloc: np.ndarray, what: str = "job") -> None:
        i = self._breakpoint(start_s)
        if finish_s <= start_s:
            return
        j = self._breakpoint(finish_s)
        self._free[i:j] -= alloc
        if np.any(self._free[i:j] < 0):
            raise InputError(f"{what}: placement exceeds the free GPUs of its nodes")

    def drop_before(self, t: float) -> None:
        """Forget rows that end at or before t (no later job can start before t)."""
        k = int(self._times[:self.K].searchsorted(t, side="right")) - 1
        if k > 0:
            K = self.K
            self._times[:K - k] = self._times[k:K].copy()
            self._times[K - k:K] = np.inf
            self._free[:K - k + 1] = self._free[k:K + 1].copy()
            self.K = K - k

    def earliest(self, duration_s: float, per_worker: int, workers: int,
                 not_before: Optional[float] = None) -> tuple[int, np.ndarray]:
        """(row index of the earliest start, min free GPUs per node over the run).

        Row index -1 means the job never fits (more than the partition holds).
        """
        first = self._breakpoint(not_before) if not_before is not None and not_before > self._times[0] else 0
        K = self.K
        times, free = self._times[:K], self._free
        rows = free[:K]
        d = max(duration_s, 0.0)
        if K == 1:
            wmin = rows[0]
            return (0 if (wmin // per_worker).sum() >= workers else -1), wmin
        # Necessary condition, cheap: every row of the window holds enough workers.
        row_ok = (rows // per_worker).sum(axis=1) >= workers
        ends = times.searchsorted(times[first:] + d, side="left")
        starts = np.arange(first, K)
        np.maximum(ends, starts + 1, out=ends)
        bad_cum = np.zeros(K + 1, dtype=np.int64)
        np.cumsum(~row_ok, out=bad_cum[1:])
        good = (bad_cum[ends] == bad_cum[starts])
        possible = np.flatnonzero(good)
        if possible.size == 0:
            return -1, rows[-1]
        # Usually the first possible start works: test it alone before batching.
        chunk = 1
        pos = 0
        while pos < possible.size:
            cand = possible[pos:pos + chunk]
            if cand.size == 1:
                i = int(cand[0])
                s, e = i + first, int(ends[i])
                wmin = free[s] if e == s + 1 else free[s:e].min(axis=0)
                if (wmin // per_worker).sum() >= workers:
                    return s, wmin
            else:
                idx = np.empty(2 * cand.size, dtype=np.int64)
                idx[0::2] = cand + first
                idx[1::2] = ends[cand]
                window_min = np.minimum.reduceat(free[:K + 1], idx, axis=0)[0::2]
                fits = (window_min // per_worker).sum(axis=1) >= workers
                if fits.any():
                    h = int(np.argmax(fits))
                    return int(cand[h]) + first, window_min[h]
            pos += chunk
            chunk *= 4
        return -1, rows[-1]

    def place(self, row: int, window_min: np.ndarray, duration_s: float, per_worker: int,
              workers: int) -> tuple[float, float, np.ndarray]:
        """Best Fit the workers on the window's free GPUs and book them.

        Returns (start_s, finish_s, GPUs per node). Best Fit per worker (the node with
        the least remaining capacity that still fits) fills the fullest fitting node
        first and keeps filling it while a worker fits, so it is one sort.
        """
        if row < 0:
            raise InputError("the job does not fit this partition")
        start = float(self._times[row])
        fit = window_min // per_worker
        alloc = np.zeros_like(window_min)
        if workers == 1:
            cand = np.flatnonzero(fit)
            alloc[cand[np.argmin(window_min[cand])]] = per_worker
        else:
            order = np.argsort(np.where(fit > 0, window_min, _BIG), kind="stable")
            fo = fit[order]
            taken = np.minimum(fo, np.maximum(workers - (np.cumsum(fo) - fo), 0))
            alloc[order] = taken * per_worker
        finish = start + max(duration_s, 0.0)
        if finish > start:
            j = self._breakpoint(finish)
            self._free[row:j] -= alloc
        return start, finish, alloc


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


# --------------------------------------------------------------------------- objective
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


def _util(work_gpu_s: float, capacity_gpus: int, horizon_s: float) -> float:
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


def _finish_allocation(problem: AllocationProblem, method: str, part_of: np.ndarray, sched: np.ndarray,
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
    c_util = _util(work, problem.capacity_gpus, max_finish - problem.now_s)
    return Allocation(method, assignment, start, finish, placement, c_avg, c_max, c_util,
                      objective.combine(c_avg, c_max, c_util), infeasible, **extra)


def _split_feasible(problem: AllocationProblem) -> tuple[np.ndarray, list[str]]:
    ok = problem.feasible.any(axis=1)
    infeasible = [problem.jobs.job_ids[j] for j in np.flatnonzero(~ok)]
    return np.flatnonzero(ok), infeasible


def _rank(values: np.ndarray) -> np.ndarray:
    order = priority_order(values)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return rank


# --------------------------------------------------------------------------- MCT
def _mct_assignment(problem: AllocationProblem, rank: np.ndarray, sched: np.ndarray,
                    record: Optional[dict] = None) -> np.ndarray:
    """MCT partition per job (-1 for jobs not in ``sched``); see ``allocate_mct``.

    ``record`` (a dict), if given, receives per partition the layer-2 plan MCT built
    there: p -> list of (job, start, finish, nodes, GPUs per node) in placement
    (= priority) order, which is exactly ``plan_partition`` of those jobs; and under
    ``"alt"`` job -> (runner-up partition, a lower bound on its finish there - the
    chosen finish) for jobs with more than one feasible partition: the runner-up is
    the second best partition tried, else the next by lower bound.

    Exact, with pruning: per distinct GPUs-per-worker k, a (partitions x rows) table
    of how many workers of k GPUs each timeline row holds is kept for all partitions
    at once. The first row that holds r workers is a lower bound on a job's start in
    that partition (layer 2 also needs the whole run to fit), so one vector operation
    gives a lower bound on the finish in every feasible partition. Partitions are then
    tried by ascending bound (ties as the MCT tie-break) and the search stops at the
    first whose bound cannot beat the best finish found: the result is the one of
    trying every feasible partition (``_mct_assignment_plain``).
    """
    jobs = problem.jobs
    P = len(problem.partitions)
    timelines = [problem.initial_timeline(p) for p in range(P)]
    part_of = np.full(len(jobs), -1, dtype=np.int64)
    if sched.size == 0:
        return part_of
    k_all = jobs.gpus_per_worker
    ks = [int(k) for k in np.unique(k_all[sched])]
    kpos = {k: i for i, k in enumerate(ks)}
    cap = max(16, max(tl.K for tl in timelines) * 2)
    T = np.full((P, cap), np.inf)
    W = np.full((len(ks), P, cap), -1, dtype=np.int64)
    col1 = np.arange(1, cap + 1)[None, :]

    def refresh(p: int) -> None:
        nonlocal T, W, cap, col1
        tl = timelines[p]
        K = tl.K
        if K > cap:
            new_cap = 2 * K
            T2 = np.full((P, new_cap), np.inf)
            T2[:, :cap] = T
            W2 = np.full((len(ks), P, new_cap), -1, dtype=np.int64)
            W2[:, :, :cap] = W
            T, W, cap = T2, W2, new_cap
        T[p, :K] = tl._times[:K]
        T[p, K:] = np.inf
        col1 = np.arange(1, cap + 1)[None, :]
        rows = tl._free[:K]
        for i, k in enumerate(ks):
            W[i, p, :K] = (rows // k).sum(axis=1)
        W[:, p, K:] = -1

    for p in range(P):
        refresh(p)
    now = float(problem.now_s)
    tmax = [max(float(tl._times[tl.K - 1]) for tl in timelines)]
    submitted = jobs.submitted
    feasible_of = {j: np.flatnonzero(problem.feasible[j]) for j in sched.tolist()}
    row_index = np.arange(P)[:, None]
    for j in sched[np.argsort(rank[sched], kind="stable")].tolist():
        d, k, r = float(jobs.duration_s[j]), int(k_all[j]), int(jobs.workers[j])
        F = feasible_of[j]
        ok = W[kpos[k], F] >= r
        nF = F.size
        rows_f = row_index[:nF]
        # also every row of the run [t, t + d) must hold r workers: windows via one
        # searchsorted over all rows (each offset by its own span), shortened by a
        # margin so rounding can only weaken the bound
        Tr = T[F] - now
        span = tmax[0] - now + d + 2.0
        np.minimum(Tr, span - 1.0, out=Tr)
        Tr += rows_f * span
        flat = Tr.ravel()
        d_short = max(d - 1e-3 - 1e-9 * span * nF, 0.0)
        ends = flat.searchsorted(flat + d_short, side="left").reshape(nF, cap)
        ends -= rows_f * cap
        np.maximum(ends, col1, out=ends)
        np.minimum(ends, cap, out=ends)
        bc = np.zeros((nF, cap + 1), dtype=np.int64)
        np.cumsum(~ok, axis=1, out=bc[:, 1:])
        ends += rows_f * (cap + 1)  # flat indices into bc
        good = ok & (bc.ravel()[ends] == bc[:, :cap])
        first = good.argmax(axis=1)
        lb = T[F, first] + d
        lb[~good[rows_f[:, 0], first]] = -np.inf  # no row holds it: no bound
        sub = submitted[j]
        order = np.lexsort((F, F != sub, lb))
        best = second = None
        pruned = None
        for h in order.tolist():
            p = int(F[h])
            if best is not None and (float(lb[h]), p != sub, p) > best[0]:
                pruned = (float(lb[h]), p)
                break
            row, wmin = timelines[p].earliest(d, k, r)
            if row < 0:
                continue
            fin = float(timelines[p]._times[row]) + d
            key = (fin, p != sub, p)
            if best is None or key < best[0]:
                best, second = (key, p, row, wmin), best
            elif second is None or key < second[0]:
                second = (key, p, row, wmin)
        if record is not None and F.size > 1:
            alt = (second[0][0], second[1]) if second is not None else pruned
            if second is not None and pruned is not None and pruned[0] < alt[0]:
                alt = pruned
            if alt is not None:
                record.setdefault("alt", {})[j] = (alt[1], alt[0] - best[0][0])
        _, p, row, wmin = best
        start, finish, alloc = timelines[p].place(row, wmin, d, k, r)
        if record is not None:
            nz = np.flatnonzero(alloc)
            record.setdefault(p, []).append((j, start, finish, nz, alloc[nz]))
        refresh(p)
        tmax[0] = max(tmax[0], finish)
        part_of[j] = p
    return part_of


def _mct_assignment_plain(problem: AllocationProblem, rank: np.ndarray, sched: np.ndarray) -> np.ndarray:
    """Reference MCT (every feasible partition tried per job); ``_mct_assignment`` equals it."""
    jobs = problem.jobs
    timelines = [problem.initial_timeline(p) for p in range(len(problem.partitions))]
    part_of = np.full(len(jobs), -1, dtype=np.int64)
    k_all = jobs.gpus_per_worker
    for j in sched[np.argsort(rank[sched], kind="stable")]:
        d, k, r = float(jobs.duration_s[j]), int(k_all[j]), int(jobs.workers[j])
        best = None
        for p in np.flatnonzero(problem.feasible[j]):
            row, wmin = timelines[p].earliest(d, k, r)
            if row < 0:
                continue
            fin = float(timelines[p].times[row]) + d
            key = (fin, p != jobs.submitted[j], p)
            if best is None or key < best[0]:
                best = (key, p, row, wmin)
        _, p, row, wmin = best
        timelines[p].place(row, wmin, d, k, r)
        part_of[j] = p
    return part_of


def allocate_mct(problem: AllocationProblem, priority: np.ndarray,
                 objective: Objective = Objective()) -> Allocation:
    """Minimum completion time: by ascending priority, each job goes to the feasible
    partition where layer 2 would finish it earliest (ties: the submitted partition,
    then the lowest index)."""
    rank = _rank(priority)
    sched, infeasible = _split_feasible(problem)
    part_of = _mct_assignment(problem, rank, sched)
    return _finish_allocation(problem, "mct", part_of, sched, rank, objective, infeasible)


# --------------------------------------------------------------------------- EVO operators
def random_individual(feasible: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each job (row) gets a uniformly random feasible partition (column)."""
    counts = feasible.sum(axis=1)
    pick = np.floor(rng.random(feasible.shape[0]) * counts).astype(np.int64)
    # the pick-th True of each row
    csum = np.cumsum(feasible, axis=1)
    return np.argmax(csum > pick[:, None], axis=1).astype(np.int64)


def crossover(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Single-point crossover: a[:c] + b[c:] and b[:c] + a[c:], c in 1..len-1."""
    if a.size < 2:
        return a.copy(), b.copy()
    c = int(rng.integers(1, a.size))
    return np.concatenate((a[:c], b[c:])), np.concatenate((b[:c], a[c:]))


def mutate_moves(pop: np.ndarray, rows: np.ndarray, feasible: np.ndarray, rng: np.random.Generator,
                 movable: Optional[np.ndarray] = None) -> np.ndarray:
    """The move operator on each of ``pop[rows]``, in place: one random job with another
    feasible partition goes to a uniformly random other feasible partition.

    ``movable`` (optional) is ``np.flatnonzero(feasible.sum(axis=1) >= 2)`` precomputed.
    Returns the rows changed (all of them, or none when no job can move)."""
    if movable is None:
        movable = np.flatnonzero(feasible.sum(axis=1) >= 2)
    rows = np.asarray(rows, dtype=np.int64)
    if movable.size == 0 or rows.size == 0:
        return rows[:0]
    j = movable[rng.integers(movable.size, size=rows.size)]
    options = feasible[j]  # a copy (fancy indexing)
    options[np.arange(rows.size), pop[rows, j]] = False
    pick = np.floor(rng.random(rows.size) * options.sum(axis=1)).astype(np.int64)
    pop[rows, j] = np.argmax(np.cumsum(options, axis=1) > pick[:, None], axis=1)  # the pick-th option
    return rows


def mutate_swaps(pop: np.ndarray, rows: np.ndarray, feasible: np.ndarray, rng: np.random.Generator,
                 attempts: int = 32) -> np.ndarray:
    """The swap operator on each of ``pop[rows]``, in place: the partitions of two jobs,
    each feasible in the other's partition, are exchanged. ``attempts`` random pairs
    are tried per row at once; returns the rows where one qualified (and was swapped)."""
    rows = np.asarray(rows, dtype=np.int64)
    n = pop.shape[1]
    if n < 2 or rows.size == 0:
        return rows[:0]
    i = rng.integers(n, size=(rows.size, attempts))
    j = rng.integers(n, size=(rows.size, attempts))
    a, b = pop[rows[:, None], i], pop[rows[:, None], j]
    ok = (a != b) & feasible[i, b] & feasible[j, a]
    k = np.flatnonzero(ok.any(axis=1))
    h = ok[k].argmax(axis=1)  # the first qualifying pair of each row
    pop[rows[k], i[k, h]] = b[k, h]
    pop[rows[k], j[k, h]] = a[k, h]
    return rows[k]


def mutate_move(ind: np.ndarray, feasible: np.ndarray, rng: np.random.Generator,
                movable: Optional[np.ndarray] = None) -> bool:
    """``mutate_moves`` on one individual (in place); False when no job can move."""
    return mutate_moves(ind[None, :], np.zeros(1, dtype=np.int64), feasible, rng, movable).size == 1


def mutate_swap(ind: np.ndarray, feasible: np.ndarray, rng: np.random.Generator, attempts: int = 32) -> bool:
    """``mutate_swaps`` on one individual (in place); False when no pair qualifies."""
    return mutate_swaps(ind[None, :], np.zeros(1, dtype=np.int64), feasible, rng, attempts).size == 1


# --------------------------------------------------------------------------- EVO
EVALUATORS = ("exact", "surrogate")


@dataclass(frozen=True)
class EvoConfig:
    """Published settings: population 100, 200 generations, mutation rate 0.1.

    ``seed_mct``: one individual of the initial population is the MCT assignment
    (same priority order); with elitist selection EVO then never ends worse than
    MCT on its own objective. ``local_moves``: after the search, an exact first-
    improvement local search from the best individual tries this many single-job
    moves (half aimed at the job that sets C_max, half at the jobs whose MCT
    runner-up partition came closest), each evaluated with layer 2 on the two
    changed partitions only (see ``_local_search``). ``evaluator``: ``"exact"`` (the reference: layer 2 on
    every changed partition, incremental from the parent's plan) or ``"surrogate"``
    (a vectorized fluid approximation of layer 2 for the search; the best
    ``exact_top`` distinct individuals of the last population and the MCT seed
    are then re-evaluated exactly and the exact best is returned).
    """

    population: int = 100
    generations: int = 200
    mutation_rate: float = 0.1
    seed: int = 0
    cache_limit: int = 100_000  # per-partition layer-2 results kept (exact evaluator)
    seed_mct: bool = True
    evaluator: str = "exact"
    exact_top: int = 1
    local_moves: int = 16

    def __post_init__(self):
        if self.population < 2:
            raise InputError(f"population value '{self.population}' must be at least 2")
        if self.generations < 0:
            raise InputError(f"generations value '{self.generations}' must be >= 0")
        if not 0 <= self.mutation_rate <= 1:
            raise InputError(f"mutation rate value '{self.mutation_rate}' must be within 0..1")
        if self.evaluator not in EVALUATORS:
            raise InputError(f"evaluator value '{self.evaluator}' is not one of {', '.join(EVALUATORS)}")
        if self.exact_top < 1:
            raise InputError(f"exact_top value '{self.exact_top}' must be at least 1")
        if self.local_moves < 0:
            raise InputError(f"local_moves value '{self.local_moves}' must be >= 0")


@dataclass(frozen=True)
class _PartitionRun:
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


def timeline_after(initial: Timeline, starts: np.ndarray, finishes: np.ndarray, nodes: np.ndarray,
                   gpus: np.ndarray, counts: np.ndarray) -> Timeline:
    """The timeline that layer 2 holds after placing jobs with these starts, finishes
    and placements (entries ``nodes``/``gpus``, ``counts`` per job) on ``initial``.

    Layer 2 only adds breakpoints at planned finishes (a start is always an existing
    breakpoint), so the breakpoints are the initial ones plus the finishes, and the
    free GPUs are the initial ones minus the placements active in each row: the
    same arrays as placing the jobs one by one, built in a few vector operations.
    """
    t0 = initial.times
    real = finishes > starts
    T = np.union1d(t0, finishes[real])
    K = T.size
    N = initial._free.shape[1]
    cap = max(16, 1 << int(K + 2).bit_length())
    tl = Timeline.__new__(Timeline)
    tl._times = np.full(cap, np.inf)
    tl._times[:K] = T
    tl._free = np.full((cap + 1, N), _BIG, dtype=np.int64)
    tl._free[:K] = initial._free[t0.searchsorted(T, side="right") - 1]
    if nodes.size:
        job = np.repeat(np.arange(starts.size), counts)
        si = T.searchsorted(starts)[job]
        fi = T.searchsorted(finishes)[job]
        fi = np.where(real[job], fi, si)
        used = np.bincount(si * N + nodes, weights=gpus, minlength=(K + 1) * N)
        used -= np.bincount(fi * N + nodes, weights=gpus, minlength=(K + 1) * N)
        tl._free[:K] -= np.cumsum(used.reshape(K + 1, N), axis=0)[:K].round().astype(np.int64)
    tl.K = K
    tl.gpus_per_node = initial.gpus_per_node
    return tl


class _Evaluator:
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
        self.base_finish = [float(problem._initial[p].times[-1]) for p in range(self.P)]
        self.cache: dict = {}
        self.cache_limit = cache_limit
        self.misses = 0
        self.placed = 0  # jobs actually placed by layer 2 (not resumed)

    def groups(self, ind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(ind, kind="stable")  # grouped by partition, priority order inside
        bounds = np.concatenate(([0], np.cumsum(np.bincount(ind, minlength=self.P))))
        return order, bounds

    def run(self, p: int, members: np.ndarray, hint: Optional[np.ndarray] = None) -> _PartitionRun:
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
            tl = timeline_after(self.problem._initial[p], base.starts[:m], base.finishes[:m], base.nodes[:o],
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
        result = _PartitionRun(float(uq.sum()), float(uq.max()), max(float(tl._times[tl.K - 1]), self.base_finish[p]),
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
        self.cache[(p, members.tobytes())] = _PartitionRun(
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
        c_util = _util(self.work, self.problem.capacity_gpus, max_finish - self.problem.now_s)
        return self.objective.combine(c_avg, max_uq, c_util)


class SurrogateEvaluator:
    """Vectorized approximate fitness of a whole population (clearly not layer 2).

    Per partition p (C_p GPUs) and job j in priority order, let A_j be the GPU-seconds
    and O_j the GPUs of the jobs ahead of j in p (running jobs included, with their
    remaining time). If the jobs ahead were packed in layers of C_p GPUs, each layer
    lasting their mean duration A_j / O_j, j would start at
    ``(A_j / C_p) * max(0, (O_j + g_j - C_p) / O_j)`` after now: 0 while everything
    ahead fits side by side with j, tending to A_j / C_p (fluid) under heavy load.
    Node fragmentation and backfilling are ignored. Planned finish = start + d;
    the objective is then computed as for layer 2. All individuals at once: a stable
    sort by partition and segmented cumulative sums, no Python loop over jobs. The
    sums run over whole GPU-seconds in int64: a float cumulative sum is a serial chain
    of additions, about five times slower than the integer one.
    """

    def __init__(self, problem: AllocationProblem, sched_in_order: np.ndarray, objective: Objective):
        jobs = problem.jobs
        s = sched_in_order
        self.objective = objective
        self.P = len(problem.partitions)
        self.n = s.size
        self.d = jobs.duration_s[s].astype(float)
        self.g = jobs.gpus[s].astype(float)
        self.w = self.g * self.d
        self.u = jobs.user_priority[s].astype(float)
        self.q0 = jobs.queued_s[s].astype(float)  # starts here are relative to now
        self.cap = np.array([p.nodes * p.gpus_per_node for p in problem.partitions], dtype=float)
        run_w = np.zeros(self.P)
        run_g = np.zeros(self.P)
        for r in problem.running:
            run_w[r.partition] += r.gpus * max(r.finish_s - problem.now_s, 0.0)
            run_g[r.partition] += r.gpus if r.finish_s > problem.now_s else 0
        self.run_w, self.run_g = np.rint(run_w), run_g
        self.wi = np.rint(self.w).astype(np.int64)  # whole GPU-seconds: exact integer prefix sums
        self.gi = jobs.gpus[s].astype(np.int64)
        self.base_horizon = max([0.0] + [float(problem._initial[p].times[-1]) - problem.now_s
                                         for p in range(self.P)])
        self.work = float(self.w.sum()) + problem.running_work_gpu_s()
        self.capacity = problem.capacity_gpus
        self.uq0 = self.u * self.q0
        self.key_dtype = np.uint16
        self._m = -1

    def _buffers(self, m: int, n: int) -> None:
        # preallocated work arrays (for up to m individuals; fewer use their prefix):
        # fresh large temporaries cost page faults on every call
        P = self.P
        self._m = m
        self._rowkey = (np.arange(m) * P)[:, None]
        self._rowstart = (np.arange(m) * n)[:, None]
        self._col = np.tile(np.arange(n), m)
        self._cap_key = np.tile(self.cap, m)
        self._run_w_key = np.tile(self.run_w, m)
        self._run_g_key = np.tile(self.run_g, m)
        self._wf = np.tile(self.wi.astype(float), m)
        self._gf = np.tile(self.g, m)
        self._i = [np.empty(m * n, dtype=np.int64) for _ in range(4)]
        self._key = np.empty(m * n, dtype=np.int64)
        self._sk = np.empty(m * n, dtype=np.int64)
        self._cidx = np.empty(m * n, dtype=np.int64)
        self._f = [np.empty(m * n) for _ in range(5)]

    def fitness(self, pop: np.ndarray) -> np.ndarray:
        # np.take(..., out=, mode="raise") buffers its output: mode="clip" (indices are valid) does not
        pop = np.atleast_2d(pop)
        m, n = pop.shape
        P = self.P
        if n == 0:
            return np.full(m, self.objective.combine(0.0, 0.0, _util(self.work, self.capacity, self.base_horizon)))
        if self._m < m:
            self._buffers(m, n)
        mn, mP = m * n, m * P
        key = self._key[:mn]
        np.add(pop, self._rowkey[:m], out=key.reshape(m, n))  # (individual, partition)
        sk, col = self._sk[:mn], self._cidx[:mn]
        if P <= 255:  # a stable radix sort per row: segments by partition, priority order inside
            within = np.argsort(pop.astype(np.uint8), axis=1, kind="stable")
            col[:] = within.ravel()  # the job of each sorted entry
            order = (within + self._rowstart[:m]).ravel()
        else:
            order = np.argsort(key, kind="stable")
            np.take(self._col[:mn], order, out=col, mode="clip")
        np.take(key, order, out=sk, mode="clip")
        w, g, A, O, t = (f[:mn] for f in self._f)
        wi, gi, si, ti = (b[:mn] for b in self._i)
        np.take(self.wi, col, out=wi, mode="clip")
        np.take(self.gi, col, out=gi, mode="clip")
        # per (individual, partition): totals (exact integers in float64) -> segment bases
        tot_w = np.bincount(key, weights=self._wf[:mn], minlength=mP)
        tot_g = np.bincount(key, weights=self._gf[:mn], minlength=mP)
        # ahead of j in its partition = running total - j - earlier segments + running jobs
        base_w = np.cumsum(tot_w)
        base_w -= tot_w + self._run_w_key[:mP]
        base_g = np.cumsum(tot_g)
        base_g -= tot_g + self._run_g_key[:mP]
        np.cumsum(wi, out=si)
        si -= wi
        si -= np.take(base_w.astype(np.int64), sk, out=ti, mode="clip")
        np.copyto(A, si)  # A_j
        np.cumsum(gi, out=si)
        si -= np.take(base_g.astype(np.int64), sk, out=ti, mode="clip")
        np.copyto(O, si)  # O_j + g_j
        np.copyto(g, gi)
        C = np.take(self._cap_key[:mP], sk, out=w, mode="clip")
        np.subtract(O, C, out=t)
        np.maximum(t, 0.0, out=t)  # over = max(0, O_j + g_j - C)
        O -= g
        np.maximum(O, 1e-12, out=O)
        A *= t
        O *= C
        A /= O  # start - now
        uq = np.take(self.u, col, out=t, mode="clip")
        uq *= A
        uq += np.take(self.uq0, col, out=g, mode="clip")
        A += np.take(self.d, col, out=g, mode="clip")  # finish - now
        c_avg = uq.reshape(m, n).sum(axis=1) / n
        c_max = uq.reshape(m, n).max(axis=1)
        horizon = np.maximum(A.reshape(m, n).max(axis=1), self.base_horizon)
        c_util = np.where(horizon > 0, self.work / (self.capacity * np.where(horizon > 0, horizon, 1.0)), 1.0)
        o = self.objective
        return o.w1 * c_avg + o.w2 * c_max + o.w3 * (1.0 - c_util)


class _FitnessMemo:
    """Surrogate fitness of a batch, each distinct individual evaluated once per run.

    Elitist selection fills the population with copies of its best, and crossover of
    two copies gives a copy again: late generations are mostly individuals already
    seen (``bench_partitions.py timing`` prints the share). Values are the same as
    evaluating every row; the memo is cleared when it holds ``limit_bytes`` of keys.
    """

    def __init__(self, evaluate: Callable[[np.ndarray], np.ndarray], limit_bytes: int = 64 << 20):
        self.evaluate = evaluate
        self.memo: dict[bytes, float] = {}
        self.limit_bytes = limit_bytes
        self.size = 0
        self.evaluated = 0  # distinct individuals actually evaluated
        self.asked = 0  # individuals asked for (with repeats)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        keys = [r.tobytes() for r in rows]
        self.asked += len(keys)
        out = np.empty(len(keys))
        todo: dict[bytes, list[int]] = {}
        for i, k in enumerate(keys):
            v = self.memo.get(k)
            if v is None:
                todo.setdefault(k, []).append(i)
            else:
                out[i] = v
        if todo:
            first = [where[0] for where in todo.values()]
            values = self.evaluate(rows[first])
            self.evaluated += len(first)
            if self.size + len(first) * rows.shape[1] > self.limit_bytes:
                self.memo.clear()
                self.size = 0
            self.size += len(first) * rows.shape[1]
            for (k, where), v in zip(todo.items(), values.tolist()):
                self.memo[k] = v
                out[where] = v
        return out


def _offspring(pop: np.ndarray, feas: np.ndarray, rate: float, rng: np.random.Generator,
               movable: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """Children of one generation and, per child, the parent it shares its prefix with.

    Random pairs (a permutation; with an odd population the last pairs with the
    first of the permutation), single-point crossover a[:c] + b[c:] and
    b[:c] + a[c:], then per child with probability ``rate`` a move or a swap (half
    each; a swap that finds no pair falls back to a move).
    """
    n, L = pop.shape
    perm = rng.permutation(n)
    first = perm[0::2]
    second = np.concatenate((perm[1::2], perm[:1]))[:first.size]
    A, B = pop[first], pop[second]
    if L >= 2:
        cut = rng.integers(1, L, size=first.size)
        mask = np.arange(L)[None, :] < cut[:, None]
        c1, c2 = np.where(mask, A, B), np.where(mask, B, A)
    else:
        c1, c2 = A.copy(), B.copy()
    kids = np.empty((2 * first.size, L), dtype=pop.dtype)
    kids[0::2], kids[1::2] = c1, c2
    parent = np.empty(2 * first.size, dtype=np.int64)
    parent[0::2], parent[1::2] = first, second
    kids, parent = kids[:n], parent[:n]
    mutated = np.flatnonzero(rng.random(n) < rate)
    swapped = mutate_swaps(kids, mutated[rng.random(mutated.size) >= 0.5], feas, rng)
    mutate_moves(kids, np.setdiff1d(mutated, swapped), feas, rng, movable)
    return kids, parent


def _critical_moves(ev: "_Evaluator", cur: np.ndarray, feas: np.ndarray, alt_of: dict) -> list[tuple[int, int]]:
    """Moves aimed at C_max, the largest u * q: the job that sets it, to every other
    feasible partition (its MCT runner-up first, then nearest by index), then the jobs
    planned to start before it in its partition, latest start first, each to its MCT
    runner-up (``alt_of``: position -> partition). Positions are in priority order;
    needs ``cur``'s runs cached."""
    order, bounds = ev.groups(cur)
    worst = None
    for p in range(ev.P):
        members = order[bounds[p]:bounds[p + 1]]
        run = ev.cache.get((p, members.tobytes())) if members.size else None
        if run is None:
            continue
        uq = ev.u[members] * (ev.q0[members] + run.starts)
        h = int(np.argmax(uq))
        if worst is None or uq[h] > worst[0]:
            worst = (float(uq[h]), p, members, run.starts, h)
    if worst is None:
        return []
    _, p, members, starts, h = worst
    i = int(members[h])
    others = [q for q in np.flatnonzero(feas[i]).tolist() if q != p]
    runner_up = alt_of.get(i)  # MCT's second choice for it first
    moves = [(i, q) for q in sorted(others, key=lambda q: (q != runner_up, abs(q - p), q))]
    ahead = [k for k in np.argsort(-starts[:h], kind="stable").tolist()]
    moves += [(int(members[k]), alt_of[int(members[k])]) for k in ahead if int(members[k]) in alt_of]
    return moves


def _local_search(ev: "_Evaluator", best: np.ndarray, best_val: float, feas: np.ndarray, sched: np.ndarray,
                  alt_moves: dict, mct_seed: Optional[np.ndarray], moves: int) -> tuple[np.ndarray, float]:
    """Exact first-improvement local search: single-job moves, at most ``moves`` tries.

    Half the tries go to C_max (``_critical_moves``: the job that sets the largest
    u * q, and the jobs ahead of it; recomputed after each improvement), the rest
    to jobs by ascending MCT regret (a lower bound on how much later the job would
    finish in its runner-up partition than in the chosen one, see
    ``_mct_assignment``), each moved to its runner-up (or, if it already sits there,
    back to its MCT partition). Each try is ``ev.fitness`` with the current best as
    hint: only the two changed partitions are re-planned, from their first changed
    job on. A move is kept when the exact objective decreases.
    """
    if not moves or not sched.size:
        return best, best_val
    pos = np.empty(int(sched.max()) + 1, dtype=np.int64)
    pos[sched] = np.arange(sched.size)
    alt_of = {int(pos[j]): q for j, (q, _) in alt_moves.items()}
    cur, cur_val = best.copy(), best_val
    tries = 0

    def attempt(i: int, q: int) -> bool:
        nonlocal cur, cur_val, tries
        if cur[i] == q or not feas[i, q]:
            return False
        tries += 1
        trial = cur.copy()
        trial[i] = q
        v = ev.fitness(trial, cur)
        if v < cur_val:
            cur, cur_val = trial, v
            return True
        return False

    critical_budget = moves // 2
    tried: set = set()
    while tries < critical_budget:
        improved = False
        for i, q in _critical_moves(ev, cur, feas, alt_of):
            if tries >= critical_budget:
                break
            if (i, q, cur.tobytes()) in tried:
                continue
            tried.add((i, q, cur.tobytes()))
            if attempt(i, q):
                improved = True
                break
        if not improved:
            break
    cands = sorted(alt_moves.items(), key=lambda kv: (kv[1][1], kv[0]))
    for j, (q, _) in cands:
        if tries >= moves:
            break
        i = int(pos[j])
        if cur[i] == q:
            if mct_seed is None or mct_seed[i] == q:
                continue
            q = int(mct_seed[i])
        attempt(i, q)
    return cur, cur_val


def allocate_evo(problem: AllocationProblem, priority: np.ndarray, config: EvoConfig = EvoConfig(),
                 objective: Objective = Objective(), initial: Sequence[np.ndarray] = ()) -> Allocation:
    """The evolutionary job-to-partition assignment (spec "Layer 1").

    Individuals are vectors over the schedulable jobs (in priority order) holding a
    partition index. Initialization: random feasible partitions, except that, with
    ``config.seed_mct`` (default), the first individual is the MCT assignment
    (feasibility-aware initialisation, which the spec allows; seeding one individual
    with the greedy solution is common practice). Because selection keeps the best
    ``population`` of parents + offspring, the result is then never worse than
    MCT with the same priority on the objective. ``initial`` may replace the next
    individuals (arrays over all jobs of the problem, partition indices). Each
    generation: single-point crossover of random pairs, then with probability
    ``mutation_rate`` a move or a swap (half each; a swap that finds no pair falls
    back to a move); fitness = layer 2 on every partition + the objective.
    Jobs feasible nowhere are returned in ``infeasible`` and left where they were
    submitted.

    ``config.evaluator == "surrogate"``: the search ranks individuals with
    ``SurrogateEvaluator`` (fast, approximate); at the end the best ``exact_top``
    distinct individuals and the MCT seed are evaluated with the exact layer 2 and
    the exact best is returned. ``history`` then holds surrogate values; ``value``
    is always the exact objective. MCT's own per-partition plans seed the exact
    evaluator's cache, and the re-check resumes from the MCT seed, so only the
    partitions where a candidate differs are re-planned (from the first differing
    job on). Finally ``config.local_moves`` exact single-job moves are tried from
    the best (``_local_search``); with the exact evaluator the result is appended
    to ``history``. The returned Allocation is built from the cached runs.
    """
    clock = time.perf_counter
    phase_s: dict[str, float] = {}
    t0 = clock()
    rng = np.random.Generator(np.random.PCG64(config.seed))
    rank = _rank(priority)
    sched, infeasible = _split_feasible(problem)
    sched = sched[np.argsort(rank[sched], kind="stable")]
    feas = problem.feasible[sched]
    ev = _Evaluator(problem, sched, objective, config.cache_limit)
    n = config.population
    pop = np.empty((n, sched.size), dtype=np.uint8 if len(problem.partitions) <= 255 else np.int64)
    for i in range(n):
        pop[i] = random_individual(feas, rng)
    seeds = []
    alt_moves: dict = {}
    if config.seed_mct and sched.size:
        record: dict = {}
        seeds.append(_mct_assignment(problem, rank, sched, record))
        pos = np.empty(len(problem.jobs), dtype=np.int64)
        pos[sched] = np.arange(sched.size)
        alt_moves = record.pop("alt", {})
        for p, placed in record.items():  # MCT's plans are layer-2 runs: the exact evaluator reuses them
            ev.seed(p, pos[[x[0] for x in placed]], np.array([x[1] for x in placed]),
                    np.array([x[2] for x in placed]), [x[3] for x in placed], [x[4] for x in placed])
    phase_s["mct"] = clock() - t0
    seeds.extend(list(initial))
    for i, given in enumerate(seeds[:n]):
        given = np.asarray(given, dtype=np.int64)[sched]
        if given.size and not feas[np.arange(sched.size), given].all():
            raise InputError("an initial individual puts a job in an infeasible partition")
        pop[i] = given
    mct_seed = pop[0].copy() if config.seed_mct and sched.size else None
    surrogate = config.evaluator == "surrogate" and sched.size > 0
    if surrogate:
        sur = _FitnessMemo(SurrogateEvaluator(problem, sched, objective).fitness)
        fit = sur(pop)
    else:
        fit = np.array([ev.fitness(ind) for ind in pop])
    history = [float(fit.min())]
    movable = np.flatnonzero(feas.sum(axis=1) >= 2)
    if sched.size:
        for _ in range(config.generations):
            kids, parent = _offspring(pop, feas, config.mutation_rate, rng, movable)
            if surrogate:
                kid_fit = sur(kids)
            else:
                kid_fit = np.array([ev.fitness(c, pop[h]) for c, h in zip(kids, parent)])
            all_pop = np.concatenate((pop, kids))
            all_fit = np.concatenate((fit, kid_fit))
            keep = np.argsort(all_fit, kind="stable")[:n]
            pop, fit = all_pop[keep], all_fit[keep]
            history.append(float(fit[0]))
    phase_s["search"] = clock() - t0 - sum(phase_s.values())
    if not sched.size:
        best = np.zeros(0, dtype=np.int64)
    elif surrogate:
        _, first = np.unique(pop, axis=0, return_index=True)
        cands = [pop[i] for i in sorted(first)[:config.exact_top]]
        if mct_seed is not None:
            cands.append(mct_seed)
        # only the partitions where a candidate differs from the MCT seed are re-planned,
        # from their first differing job on (the seed's runs are in the cache)
        exact = [ev.fitness(c, mct_seed) for c in cands]
        h = int(np.argmin(exact))
        best, best_val = cands[h], exact[h]
    else:
        h = int(np.argmin(fit))
        best, best_val = pop[h], float(fit[h])
    phase_s["recheck"] = clock() - t0 - sum(phase_s.values())
    if sched.size and config.local_moves:
        best, best_val = _local_search(ev, best, best_val, feas, sched, alt_moves, mct_seed, config.local_moves)
        if not surrogate:
            history.append(best_val)
    phase_s["local_search"] = clock() - t0 - sum(phase_s.values())
    part_of = np.full(len(problem.jobs), -1, dtype=np.int64)
    part_of[sched] = best
    plans = ev.plans(best) if sched.size else None  # the best's layer-2 runs are cached: no re-run
    result = _finish_allocation(problem, "evo", part_of, sched, rank, objective, infeasible, plans=plans,
                                history=history, evaluations=ev.misses)
    phase_s["finish"] = clock() - t0 - sum(phase_s.values())
    result.phase_s = phase_s
    if surrogate:
        result.surrogate_calls = (sur.evaluated, sur.asked)
    return result


def evaluate_assignment(problem: AllocationProblem, priority: np.ndarray, partition_of: np.ndarray,
                        objective: Objective = Objective(), method: str = "given") -> Allocation:
    """Layer 2 + objective for a given assignment (array over all jobs, -1 = unplanned)."""
    rank = _rank(priority)
    part_of = np.asarray(partition_of, dtype=np.int64)
    sched = np.flatnonzero(part_of >= 0)
    bad = sched[~problem.feasible[sched, part_of[sched]]]
    if bad.size:
        raise InputError(f"job {problem.jobs.job_ids[bad[0]]} is assigned to a partition it does not fit")
    infeasible = [problem.jobs.job_ids[j] for j in np.flatnonzero(part_of < 0)]
    return _finish_allocation(problem, method, part_of, sched, rank, objective, infeasible)


# --------------------------------------------------------------------------- snapshots
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

"""MCT, minimum completion time (spec/multi-partition.md, layer 1 baseline).

By ascending priority, each job goes to the feasible partition where layer 2 would
finish it earliest (ties: the submitted partition, then the lowest index).
``mct_assignment`` is the exact, pruned version EVO seeds from (it can also record
its plans and each job's runner-up partition); ``mct_assignment_plain`` is the
reference that tries every feasible partition.

Units: seconds for times and durations, GPUs for capacity.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from controller.partitions.layer2 import finish_allocation
from controller.partitions.model import (Allocation, AllocationProblem, Objective, priority_rank,
                                         split_feasible)

__all__ = ["allocate_mct", "mct_assignment", "mct_assignment_plain"]


def mct_assignment(problem: AllocationProblem, rank: np.ndarray, sched: np.ndarray,
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
    trying every feasible partition (``mct_assignment_plain``).
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
        T[p, :K] = tl.times
        T[p, K:] = np.inf
        col1 = np.arange(1, cap + 1)[None, :]
        rows = tl.free[:K]
        for i, k in enumerate(ks):
            W[i, p, :K] = (rows // k).sum(axis=1)
        W[:, p, K:] = -1

    for p in range(P):
        refresh(p)
    now = float(problem.now_s)
    tmax = [max(float(tl.times[-1]) for tl in timelines)]
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
            fin = float(timelines[p].times[row]) + d
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


def mct_assignment_plain(problem: AllocationProblem, rank: np.ndarray, sched: np.ndarray) -> np.ndarray:
    """Reference MCT (every feasible partition tried per job); ``mct_assignment`` equals it."""
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
    rank = priority_rank(priority)
    sched, infeasible = split_feasible(problem)
    part_of = mct_assignment(problem, rank, sched)
    return finish_allocation(problem, "mct", part_of, sched, rank, objective, infeasible)

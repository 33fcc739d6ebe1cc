"""Free GPUs per node of one partition as a step function of time (layer 2's state).

``Timeline`` answers "when can this job start, and on which nodes" (``earliest``,
then ``place``: whole-run capacity, Best Fit per worker) and books the answer;
``timeline_after`` rebuilds, in a few vector operations, the timeline layer 2 holds
after a given list of placements (the exact evaluator resumes from it).

Units: seconds for times, GPUs for capacity.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from controller.core.model import InputError

__all__ = ["Timeline", "timeline_after"]

_BIG = np.iinfo(np.int32).max // 4  # free GPUs of the sentinel row past the last breakpoint


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

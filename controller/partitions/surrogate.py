"""A fast, approximate fitness for a whole EVO population (clearly not layer 2).

``SurrogateEvaluator`` scores every individual of a population in a few vector
operations (a fluid model of each partition's queue, see its docstring);
``FitnessMemo`` evaluates each distinct individual only once per search. EVO
ranks individuals with it when ``EvoConfig.evaluator == "surrogate"`` and re-checks
the best exactly at the end (``controller.partitions.evo``).

Units: seconds for times, GPUs for capacity.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from controller.partitions.model import AllocationProblem, Objective, utilization

__all__ = ["SurrogateEvaluator", "FitnessMemo"]


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
        self.base_horizon = max([0.0] + [float(problem.initial_timelines[p].times[-1]) - problem.now_s
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
            return np.full(m, self.objective.combine(0.0, 0.0, utilization(self.work, self.capacity, self.base_horizon)))
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


class FitnessMemo:
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

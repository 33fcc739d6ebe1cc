"""Discretized 2D-Gittins (Tiresias-G).

In Q_1..Q_{K-1} the waiting jobs of a queue are ordered by Gittins index with the
quantum ending at the queue's upper threshold hi_i; its running jobs keep their
place (and GPUs) until they cross hi_i. Q_K (Delta = inf) is a FIFO list as in
dlas. No history: as dlas.
"""
import numpy as np

from controller.core.policies.base import Policy, mlfq_key, mlfq_order


class DiscretizedGittins(Policy):
    name = "dgittins"
    discretized = True
    uses_service_distribution = True

    def _negated_indices(self, jobs, ctx) -> np.ndarray:
        """-G(a, hi_level) per job (0 in the last queue or without history), vectorized."""
        negated = np.zeros(len(jobs))
        if ctx.service is None or len(ctx.service) == 0 or not jobs:
            return negated
        thresholds = ctx.thresholds_gpu_s
        levels = ctx.precompute_levels(jobs)
        scored = np.flatnonzero(levels < len(thresholds))
        if scored.size:
            served = np.array([ctx.queue_service(jobs[i]) for i in scored.tolist()])
            ends = np.asarray(thresholds, dtype=float)[levels[scored]]
            negated[scored] = -ctx.service.indices(served, ends)
        return negated

    def prepare(self, jobs, ctx):
        """All indices of the round in one vectorized call (for ``sort_key`` users)."""
        for job, value in zip(jobs, self._negated_indices(jobs, ctx).tolist()):
            ctx.cache[job.job_id] = -value

    def ordered(self, jobs, ctx):
        return mlfq_order(jobs, ctx, within_waiting=self._negated_indices(jobs, ctx))

    def _index(self, job, ctx) -> float:
        level = ctx.level(job)
        if level >= len(ctx.thresholds_gpu_s) or ctx.service is None or len(ctx.service) == 0:
            return 0.0
        index = ctx.cache.get(job.job_id)
        if index is None:
            index = ctx.service.index(ctx.queue_service(job), ctx.thresholds_gpu_s[level])
        return index

    def sort_key(self, job, ctx):
        return mlfq_key(job, ctx, -self._index(job, ctx))

    def display_value(self, job, ctx):
        return self._index(job, ctx)

    def display_from_key(self, key, job, ctx):
        return self._index(job, ctx)  # also for running jobs, whose key omits it

"""Discretized 2D-Gittins (Tiresias-G).

Q_1..Q_{K-1}: by Gittins index with the quantum ending at the queue's upper
threshold hi_i; Q_K (Delta = inf): FIFO by first start. No history: as dlas.
"""
import numpy as np

from controller.core.policies.base import Policy, mlfq_order, started_fifo_key


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
        return mlfq_order(jobs, ctx, within_level=self._negated_indices(jobs, ctx))

    def sort_key(self, job, ctx):
        level = ctx.level(job)
        if level >= len(ctx.thresholds_gpu_s) or ctx.service is None or len(ctx.service) == 0:
            return (level, 0.0) + started_fifo_key(job)
        index = ctx.cache.get(job.job_id)
        if index is None or level >= len(ctx.thresholds_gpu_s):
            index = ctx.service.index(ctx.queue_service(job), ctx.thresholds_gpu_s[level])
        return (level, -index) + started_fifo_key(job)

    def display_value(self, job, ctx):
        return -self.sort_key(job, ctx)[1]

    def display_from_key(self, key, job, ctx):
        return -key[1]

"""Discretized 2D-Gittins (Tiresias-G).

Q_1..Q_{K-1}: by Gittins index with the quantum ending at the queue's upper
threshold hi_i; Q_K (Delta = inf): FIFO by first start. No history: as dlas.
"""
import numpy as np

from controller.policies.base import Policy, started_fifo_key


class DiscretizedGittins(Policy):
    name = "dgittins"
    discretized = True
    uses_service_distribution = True

    def prepare(self, jobs, ctx):
        """All indices of the round in one vectorized call."""
        if ctx.service is None or len(ctx.service) == 0:
            return
        thresholds = ctx.thresholds_gpu_s
        scored = [(job, ctx.level(job)) for job in jobs]
        scored = [(job, level) for job, level in scored if level < len(thresholds)]
        if not scored:
            return
        served = np.array([ctx.queue_service(job) for job, _ in scored])
        ends = np.array([thresholds[level] for _, level in scored])
        for (job, _), index in zip(scored, ctx.service.indices(served, ends)):
            ctx.cache[job.job_id] = float(index)

    def sort_key(self, job, ctx):
        level = ctx.level(job)
        if level >= len(ctx.thresholds_gpu_s) or ctx.service is None or len(ctx.service) == 0:
            return (level, 0.0) + started_fifo_key(job)
        index = ctx.cache.get(job.job_id)
        if index is None:
            index = ctx.service.index(ctx.queue_service(job), ctx.thresholds_gpu_s[level])
        return (level, -index) + started_fifo_key(job)

    def display_value(self, job, ctx):
        return -self.sort_key(job, ctx)[1]

    def display_from_key(self, key, job, ctx):
        return -key[1]

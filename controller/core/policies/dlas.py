"""Discretized 2D-LAS (Tiresias-L): MLFQ on attained GPU-seconds.

Q_1 first; each queue a FIFO list with its running jobs ahead of its waiting ones
(controller.core.queues), so only a higher queue preempts.
"""
from controller.core.policies.base import Policy, mlfq_key, mlfq_order


class DiscretizedLas(Policy):
    name = "dlas"
    discretized = True

    def sort_key(self, job, ctx):
        return mlfq_key(job, ctx)

    def ordered(self, jobs, ctx):
        return mlfq_order(jobs, ctx, self)

    def display_value(self, job, ctx):
        return float(ctx.level(job))

    def display_from_key(self, key, job, ctx):
        return float(key[0])

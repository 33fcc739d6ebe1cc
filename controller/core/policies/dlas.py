"""Discretized 2D-LAS (Tiresias-L): MLFQ on attained GPU-seconds.

Q_1 first; inside a queue FIFO by first start time, never-started jobs after.
"""
from controller.core.policies.base import Policy, mlfq_order, started_fifo_key


class DiscretizedLas(Policy):
    name = "dlas"
    discretized = True

    def sort_key(self, job, ctx):
        return (ctx.level(job),) + started_fifo_key(job)

    def ordered(self, jobs, ctx):
        return mlfq_order(jobs, ctx)

    def display_value(self, job, ctx):
        return float(ctx.level(job))

    def display_from_key(self, key, job, ctx):
        return float(key[0])

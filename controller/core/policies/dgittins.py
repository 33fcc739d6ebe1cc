"""Discretized 2D-Gittins (Tiresias-G).

In Q_1..Q_{K-1} the waiting jobs of a queue are ordered by Gittins index with the
quantum ending at the queue's upper threshold hi_i; its running jobs keep their
place (and GPUs) until they cross hi_i. Q_K (Delta = inf) is a FIFO list as in
dlas. A job's index is taken at the service it entered with (see
``service_at_entry``). No history: as dlas.
"""
import numpy as np

from controller.core.policies.base import Policy, mlfq_key, mlfq_order, service_at_entry
from controller.core.queues import ENTERED, SETTLED_WAITING


class DiscretizedGittins(Policy):
    name = "dgittins"
    discretized = True
    uses_service_distribution = True

    def waiting_order(self, jobs, levels, groups, ctx):
        """-G(a, hi_level) per job (0 in the last queue or without history), vectorized."""
        negated = np.zeros(len(jobs))
        if ctx.service is None or len(ctx.service) == 0 or not jobs:
            return negated
        thresholds = ctx.thresholds_gpu_s
        last = len(thresholds)
        scored = [i for i, level in enumerate(levels) if level < last]
        if scored:
            queue_service = ctx.queue_service
            # service_at_entry, inlined: a job demoted while running is judged at the
            # threshold it crossed, any other job at its service now
            served = np.array([thresholds[levels[i] - 1]
                               if groups[i] == ENTERED and jobs[i].running and jobs[i].queue_level is not None
                               and levels[i] > jobs[i].queue_level else queue_service(jobs[i]) for i in scored])
            ends = np.asarray(thresholds, dtype=float)[[levels[i] for i in scored]]
            negated[scored] = -ctx.service.indices(served, ends)
        return negated

    def waiting_value(self, service, thresholds, level: int, service_gpu_s: float) -> float:
        """One job's ``waiting_order`` value, given the service it is judged at."""
        if service is None or len(service) == 0 or level >= len(thresholds):
            return 0.0
        return -service.index(service_gpu_s, thresholds[level])

    def ordered(self, jobs, ctx):
        return mlfq_order(jobs, ctx, self)

    def _index(self, job, ctx) -> float:
        level = ctx.level(job)
        if level >= len(ctx.thresholds_gpu_s) or ctx.service is None or len(ctx.service) == 0:
            return 0.0
        entered = job.queue_entry is None or job.queue_level != level
        return ctx.service.index(service_at_entry(job, level, ENTERED if entered else SETTLED_WAITING, ctx),
                                 ctx.thresholds_gpu_s[level])

    def sort_key(self, job, ctx):
        return mlfq_key(job, ctx, -self._index(job, ctx))

    def display_value(self, job, ctx):
        return self._index(job, ctx)

    def display_from_key(self, key, job, ctx):
        if len(key) > 1:
            return -key[1] + 0.0  # a waiting job's key holds -index (+ 0.0: no -0.0)
        return self._index(job, ctx)  # running jobs' keys omit it

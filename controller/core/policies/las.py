"""Continuous 2D-LAS: least attained GPU-seconds first, ties by arrival index."""
from controller.core.policies.base import Policy


class Las(Policy):
    name = "las"
    drifts_while_running = True

    def sort_key(self, job, ctx):
        return (ctx.queue_service(job), job.index)

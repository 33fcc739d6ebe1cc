"""Shortest remaining service first: remaining time x GPUs (perfect knowledge)."""
from controller.core.policies.base import Policy


class Srsf(Policy):
    name = "srsf"
    needs_duration = True

    def sort_key(self, job, ctx):
        return (job.remaining_s() * job.num_gpus, job.index)

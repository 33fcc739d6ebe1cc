"""Shortest remaining time first (perfect knowledge of the true duration)."""
from controller.core.policies.base import Policy


class Srtf(Policy):
    name = "srtf"
    needs_duration = True

    def sort_key(self, job, ctx):
        return (job.remaining_s(), job.index)

"""Time-sharing, Gandiva-like: every job gets equal turns of wall-clock run time."""
from controller.core.policies.base import Policy


class TimeShare(Policy):
    name = "timeshare"
    drifts_while_running = True

    def sort_key(self, job, ctx):
        return (job.executed_s, job.index)

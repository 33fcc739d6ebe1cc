"""FIFO with head-of-line blocking: the YARN capacity-scheduler behaviour."""
from controller.core.policies.base import Policy


class Fifo(Policy):
    preemptive = False
    static_order = True
    name = "fifo"
    head_of_line_blocking = True

    def sort_key(self, job, ctx):
        return (job.spec.submit_time_s, job.index)

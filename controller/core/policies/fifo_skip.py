"""Best-effort FIFO: arrival order, but later jobs start while an earlier one lacks GPUs."""
from controller.core.policies.base import Policy


class FifoSkip(Policy):
    preemptive = False
    static_order = True
    name = "fifo-skip"

    def sort_key(self, job, ctx):
        return (job.spec.submit_time_s, job.index)

"""Continuous 2D-Gittins: highest index sup_Delta G(a, a+Delta) first; LAS without history."""
from controller.core.policies.base import Policy


class Gittins(Policy):
    name = "gittins"
    drifts_while_running = True
    uses_service_distribution = True

    def sort_key(self, job, ctx):
        served = ctx.queue_service(job)
        if ctx.service is None or len(ctx.service) == 0:
            return (0.0, served, job.index)
        return (-ctx.service.index_sup(served), served, job.index)

    def display_value(self, job, ctx):
        return -self.sort_key(job, ctx)[0]

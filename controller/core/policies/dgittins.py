"""Discretized 2D-Gittins (Tiresias-G), the safe rule (shared/spec/scheduling.md).

In Q_1..Q_{K-1} the waiting jobs of a queue are ordered by the Gittins index
G(a, a + hi_i): the quantum is Delta = hi_i whatever the job's service (a quantum
ending at the threshold, as before, gives a job near hi_i an index from a sliver of
the distribution: 0 when no sample lies inside it, spikes from repeated values).
Running jobs keep their place (and GPUs). Q_K (Delta = inf) is a FIFO list as in
dlas. A job's index is taken at the service it entered with (see
``service_at_entry``). No history, or a learned one of fewer than
``MIN_LEARNED_SAMPLES`` ended jobs (the index of the first few hundred samples is
noise that costs preemptions): as dlas.
"""
import numpy as np

from controller.core.policies.base import (LEVEL_TOLERANCE_GPU_S, Policy, judged_at, mlfq_key, mlfq_order, rung,
                                           service_at_entry)
from controller.core.queues import ENTERED, SETTLED_RUNNING, SETTLED_WAITING

MIN_LEARNED_SAMPLES = 300


def known(service) -> bool:
    """Whether a distribution orders anything: given (an oracle, a test), or learned
    from at least MIN_LEARNED_SAMPLES ended jobs."""
    if service is None or len(service) == 0:
        return False
    return not getattr(service, "learned", False) or len(service) >= MIN_LEARNED_SAMPLES


def quantum_ends(thresholds, levels, served):
    """End of each job's quantum: its service plus hi of its queue (Delta = hi_i)."""
    return np.asarray(served, dtype=float) + np.asarray(thresholds, dtype=float)[np.asarray(levels, dtype=np.int64)]


class DiscretizedGittins(Policy):
    name = "dgittins"
    discretized = True
    uses_service_distribution = True
    rejudges_at_rung = True
    bands_by_index = True
    conditions_service = True

    def regroup(self, jobs, levels, groups, ctx):
        """A settled running job whose service crossed its queue's rung since the
        previous round is walked with the waiting jobs this round (ENTERED, at its
        place): it keeps its GPUs if its index still earns them, else it is preempted.
        Once per queue: the next round finds it past the rung already."""
        previous, thresholds = ctx.previous_round_s, ctx.thresholds_gpu_s
        if previous is None or not known(ctx.service):
            return
        last, now = len(thresholds), ctx.now_s
        for i, job in enumerate(jobs):
            if groups[i] != SETTLED_RUNNING or levels[i] >= last:
                continue
            mark = rung(thresholds, levels[i]) - LEVEL_TOLERANCE_GPU_S
            served = ctx.queue_service(job)
            since = previous if job.run_start_s is None else max(previous, job.run_start_s)
            if served >= mark > served - job.num_gpus * (now - since):
                groups[i] = ENTERED

    def waiting_order(self, jobs, levels, groups, ctx):
        """-G(a, hi_level) per job (0 in the last queue or without history), vectorized."""
        negated = np.zeros(len(jobs))
        if not jobs or not known(ctx.service):
            return negated
        thresholds = ctx.thresholds_gpu_s
        last = len(thresholds)
        scored = [i for i, level in enumerate(levels) if level < last]
        if scored:
            queue_service = ctx.queue_service
            # service_at_entry: a job demoted while running is judged at the threshold
            # it crossed, one re-judged at its rung at the rung, any other job at its
            # service now
            served = np.array([judged_at(thresholds, levels[i], groups[i] == ENTERED and jobs[i].running,
                                         jobs[i].queue_level, queue_service(jobs[i])) for i in scored])
            ends = quantum_ends(thresholds, [levels[i] for i in scored], served)
            negated[scored] = -np.asarray(ctx.service.indices_for([jobs[i].spec for i in scored], served, ends))
        return negated

    def waiting_value(self, service, thresholds, level: int, service_gpu_s: float, spec=None) -> float:
        """One job's ``waiting_order`` value, given the service it is judged at."""
        if level >= len(thresholds) or not known(service):
            return 0.0
        return -service.index_for(spec, service_gpu_s, service_gpu_s + thresholds[level])

    def ordered(self, jobs, ctx):
        return mlfq_order(jobs, ctx, self)

    def _index(self, job, ctx) -> float:
        level = ctx.level(job)
        if level >= len(ctx.thresholds_gpu_s) or not known(ctx.service):
            return 0.0
        entered = job.queue_entry is None or job.queue_level != level
        served = service_at_entry(job, level, ENTERED if entered else SETTLED_WAITING, ctx)
        return ctx.service.index_for(job.spec, served, served + ctx.thresholds_gpu_s[level])

    def sort_key(self, job, ctx):
        return mlfq_key(job, ctx, -self._index(job, ctx))

    def display_value(self, job, ctx):
        return self._index(job, ctx)

    def display_from_key(self, key, job, ctx):
        if len(key) > 1:
            return -key[1] + 0.0  # a waiting job's key holds -index (+ 0.0: no -0.0)
        return self._index(job, ctx)  # running jobs' keys omit it

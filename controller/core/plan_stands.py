"""How long a plan stands: until when the same jobs, only their clocks moving, plan the same.

Between two rounds in which Slurm shows nothing new, a running job's service and a
waiting job's wait grow, and nothing else. Under an MLFQ policy (dlas, dgittins)
that changes a plan only at a few instants: a running job's service crosses its
queue's threshold (it enters the next queue and is judged there), a waiting
job's wait reaches its starvation promotion, a running job outgrows
preempt_min_runtime_s. Until the first of them, planning again yields the plan
already made, so the controller (controller.service.round.daemon) does not plan again
(most of a round's cost when nothing changed). A plan that acts does not stand: the
next round sees its effect. A plan whose only moves are new queue places
(``Plan.positions``: jobs that entered a queue, started or crossed a threshold since the
last plan) stands: the round stores them (Accounts.place) before the next one, which
finds every job settled where this plan put it and plans the same (at 55,000 jobs
some running job had crossed since the last plan in every round, so no plan stood).
A continuous policy's order drifts every second: its plans never stand.

A running job no victim rule may preempt (no checkpoint contract, or preempt_max_per_job
spent) keeps its GPUs whatever its queue (controller.core.protection.pinned): its
crossing changes its own queue (its AdminComment line, the store, explain) and no
action and no pending job's band. ``Plan.acts_until_s`` leaves such crossings out, so
that the service may let the shown queue lag (controller.service.round.daemon).
"""
from __future__ import annotations

import bisect
import math
from typing import Iterable, Optional

from controller.core.model import JobState
from controller.core.plan import Plan
from controller.core.policies.base import LEVEL_TOLERANCE_GPU_S, STARVATION_TOLERANCE_S, Policy
from controller.core.protection import run_time_over_s


def stands_until(plan: Plan, jobs: Iterable[JobState], policy: Policy, thresholds_gpu_s: tuple[float, ...],
                 promote_knob: float, min_runtime_s: float, max_per_job: Optional[int] = None) -> tuple[float, float]:
    """(the earliest time (epoch s) at which planning ``jobs`` again could give another
    plan than ``plan``, the earliest at which it could give other actions or bands: the
    first without the threshold crossings of runs no victim rule may preempt); ``plan.now_s``
    for both when it must be planned again at once.

    The end of a run's protection (``min_runtime_s``) counts only for a job the walk may
    preempt once it is over: one without a checkpoint contract, or already preempted
    ``max_per_job`` times, keeps its GPUs before and after (controller.core.protection),
    so its plan is the same (at 55,000 jobs the runs Slurm starts each round made the
    plan stand 0 s on a site whose running jobs were all protected by their count)."""
    now = plan.now_s
    if not policy.discretized or plan.actions:
        return now, now
    until = acts_until = math.inf  # acts_until: every event but the pinned runs' crossings
    promotes = math.isfinite(promote_knob)
    for job in jobs:
        if job.running:
            victim_later = job.spec.preemptable and (max_per_job is None or job.preemptions < max_per_job)
            crossing = next_threshold_gpu_s(thresholds_gpu_s, job.queue_service_gpu_s)
            if crossing is not None:
                at = now + (crossing - job.queue_service_gpu_s) / job.num_gpus
                until = min(until, at)
                if victim_later:
                    acts_until = min(acts_until, at)
            if (victim_later and min_runtime_s > 0 and job.run_start_s is not None
                    and now - job.run_start_s < min_runtime_s):
                acts_until = min(acts_until, run_time_over_s(job.run_start_s, min_runtime_s))
        elif promotes and plan.levels.get(job.spec.job_id, 0) > 0:
            # promoted once waited + tolerance >= knob x executed (RoundWriter.promotion_context)
            acts_until = min(acts_until, now + promote_knob * job.executed_since_promotion_s - STARVATION_TOLERANCE_S
                             - job.waited_since_promotion_s)
        if acts_until <= now:
            return now, now
    return min(until, acts_until), acts_until


def next_threshold_gpu_s(thresholds_gpu_s, served_gpu_s: float) -> Optional[float]:
    """The queue service at which a running job that has served ``served_gpu_s``
    enters the next queue (its level counts the thresholds at or below its service
    plus LEVEL_TOLERANCE_GPU_S), or None in the last queue."""
    threshold = threshold_above(thresholds_gpu_s, served_gpu_s)
    return None if threshold is None else threshold - LEVEL_TOLERANCE_GPU_S


def threshold_above(thresholds_gpu_s, served_gpu_s: float) -> Optional[float]:
    """The threshold of the queue after the one ``served_gpu_s`` puts a job in (None:
    the last queue). The simulator times a demotion at it (controller.replay.simulator)."""
    level = bisect.bisect_right(thresholds_gpu_s, served_gpu_s + LEVEL_TOLERANCE_GPU_S)
    return thresholds_gpu_s[level] if level < len(thresholds_gpu_s) else None

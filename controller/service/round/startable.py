"""Which pending jobs the cluster manager would start now: only those may be a reason to
preempt. The backend judges its manager's reason into ObservedJob.waits_for (Slurm's rules:
slurm_plugin.reasons); only "resources" (and a requeue's start delay, which the controller
lifts itself) is a wait a preemption may end. Every other wait costs at most a delayed
start, never another user's work.

A job waiting on Slurm still gets its place and priority band in the plan
(``add_waiting``): once Slurm lifts the reason its SiteFactor is already right.
"""
from __future__ import annotations

from typing import Iterable

from controller.core.model import JobState
from controller.core.plan import Plan
from controller.core.policies import Policy, PolicyContext
from controller.core.round_writer import list_after
from controller.service.acting.backend import UNJUDGED

def add_waiting(plan: Plan, waiting: Iterable[JobState], reasons: dict[str, str], policy: Policy,
                ctx: PolicyContext) -> None:
    """Put the jobs that wait on Slurm into ``plan`` after the planned ones (in the
    order given): each with its level (so its SiteFactor band is set) and a wait
    reason naming Slurm's; no action, so no job ever yields for them."""
    waiting = list(waiting)
    list_after(plan, waiting, policy, ctx)
    for job in waiting:
        plan.wait_reasons[job.job_id] = wait_text(reasons[job.job_id])


def wait_text(reason: str) -> str:
    """Why a job waiting on Slurm is not a reason to preempt, in words for its owner."""
    if reason == UNJUDGED:  # not looked at since its submission or last update (slurm_plugin.reasons)
        return ("Slurm reason None: Slurm's scheduler has not looked at it since it was submitted or last "
                "updated; no job is preempted for it until Slurm says it waits only for GPUs")
    return f"Slurm reason {reason}: Slurm does not start it now, so no job is preempted for it"

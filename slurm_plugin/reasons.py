"""What a pending job waits for, read from Slurm's reason: the neutral fact the controller reads
(ObservedJob.waits_for); only a job that waits for resources may be a reason to preempt.

Slurm gives every pending job one reason code (Slurm's list and meanings:
https://slurm.schedmd.com/job_reason_codes.html). Only two of them say the
scheduler would start the job as soon as its resources are free: ``Priority``
(higher-priority jobs go first) and ``Resources`` (the resources it asked for are in
use). ``None`` says the scheduler has not looked at the job yet: a fresh submission
shows it until the next scheduling pass gives it its real reason, which may be any
of those below (seen on 22.05: dependent, begin-later and reservation-bound jobs
submitted to a full cluster were ``None`` for one round, and a controller taking
``None`` for startable preempted three jobs for them; tests/test_slurm_startable.py).
So ``None`` waits too; the job's band still lifts it, and the pass that follows
(``sched_interval``, or at once on submission) names what it waits on. Slurm
also shows ``None`` from any ``scontrol update`` of a pending job (this controller's
SiteFactor band or AdminComment line included; tried on 22.05 and 24.11) until that
job's next scheduling pass, a few seconds: such a job waits one round more. Every other
reason says
something no preemption can lift: a hold (``JobHeldUser``, ``JobHeldAdmin``), a
``Dependency``, a future ``BeginTime``, a QOS or association limit (``QOSMax*``,
``QOSGrp*``, ``AssocGrp*``, ``AssocMax*``, ``Max*PerAccount``), a ``Reservation``,
``Licenses``, an array throttle (``JobArrayTaskLimit``), a partition or its nodes
being down or unfit (``PartitionDown``, ``ReqNodeNotAvail``, ...). Preempting
someone for such a job frees GPUs it cannot take (the issue this module answers:
one QOS-limited job cost another user's job 18 preemptions in 3 hours).

The rule is a whitelist on purpose: a reason this list does not know (a new
release's) makes the job wait, which costs at most a delayed start, never another
user's work.

A job waiting on Slurm still gets its place and priority band in the plan
(controller.service.round.startable.add_waiting): once Slurm lifts the reason its
SiteFactor is already right.
"""
from __future__ import annotations

from dataclasses import replace

from controller.service.acting.backend import ObservedJob

# Slurm's reasons from which its scheduler starts the job once resources free up
# (https://slurm.schedmd.com/job_reason_codes.html); '' when a backend reports no
# reasons at all (the simulator, scripted tests). Not "None": see above.
STARTABLE_REASONS = frozenset({"", "Priority", "Resources"})
# A hold: `scontrol hold` by an operator (this controller's GPU-sharing hold too) shows
# JobHeldAdmin, a user's own (`scontrol hold`, `sbatch -H`) JobHeldUser.
HELD_ADMIN, HELD_USER = "JobHeldAdmin", "JobHeldUser"
HELD_REASONS = (HELD_ADMIN, HELD_USER)
# Slurm's reason of a job its scheduler has not looked at yet (above); squeue's %R also
# shows "(None)" for a pending job without a reason (controller.cli.queue_table keeps that)
NOT_LOOKED_AT = "None"
# The longest BeginTime a requeue puts on a job, counted from the requeue. A requeue
# sets the job's submit time to the requeue's time and, once the epilog of the run is
# done, its BeginTime to cred_expire + 1 s later (121 s by default; the recorded
# fixtures: 11 s with cred_expire=10; 25.11's requeue_delay is another source). A
# BeginTime later than this after the requeue was set on purpose (an admin's or the
# user's `scontrol update StartTime=`) and is kept. Wrong the other way, a requeue's
# delay taken for a deliberate one costs the job that delay, nobody a preemption.
REQUEUE_DELAY_MAX_S = 300.0


def requeue_delay(job: ObservedJob) -> bool:
    """True when a pending ``job`` waits only on the BeginTime Slurm put on it when it
    was requeued, which this controller lifts itself (``StartTime=now``) when the plan
    starts the job (controller.service.round.levers). A BeginTime of a job that never ran
    (``--begin``), or one beyond ``REQUEUE_DELAY_MAX_S`` after its requeue, is the
    user's or an admin's: False. A backend that does not report the BeginTime
    (``eligible_time_s`` None) leaves only the restart count to go by."""
    if job.reason != "BeginTime" or job.restart_count <= 0:
        return False
    begin, requeued = job.eligible_time_s, job.submit_time_s
    return begin is None or requeued is None or begin - requeued <= REQUEUE_DELAY_MAX_S


def waits_for(job: ObservedJob) -> str:
    """ObservedJob.waits_for of a job with Slurm's reason ``job.reason``.

    A requeue's ``BeginTime`` (``requeue_delay``), which the controller lifts, is its own
    wait ("begin_time_after_requeue"), startable; a ``--begin`` in the future, or a
    BeginTime someone set after the requeue, is not ("begin_time"): no job is preempted for
    a job that cannot start before it. ``None`` (not looked at yet) is "unjudged"."""
    reason = job.reason or ""
    if reason in STARTABLE_REASONS:
        return "resources"
    if requeue_delay(job):
        return "begin_time_after_requeue"
    if reason == "BeginTime":
        return "begin_time"
    return {NOT_LOOKED_AT: "unjudged", HELD_ADMIN: "admin_hold", HELD_USER: "user_hold"}.get(reason, "other")


def judged(job: ObservedJob) -> ObservedJob:
    """``job`` with its ``waits_for`` read from its Slurm reason."""
    wait = waits_for(job)
    return job if wait == job.waits_for else replace(job, waits_for=wait)

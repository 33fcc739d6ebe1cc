"""The round's GPU sharing: controller.core.levers.colocation applied to MPS jobs
(``--gres=mps:N``, 100 shares per GPU).

Pending MPS jobs whose planned tier differs from their request get it through
``set_mps_share`` (pending only: an MPS quota is fixed for a client's life). A job no
GPU admits now is held (``HoldJob``: Slurm would otherwise start it on a GPU
the policy refused, e.g. a second user's job with mps_allow_multi_user false) and
released (``ReleaseHold``) once a GPU admits it; restore releases what is left. Only
the holds this controller set are ever released: they are recorded in the store
(controller.service.acting.restore.RecordingBackend), so a restarted controller knows them. A
job someone else holds (``sbatch -H``, a user's or an admin's ``scontrol hold``) gets
its tier like any pending job but is never held nor released: an operator's hold on it
would turn the user's hold into the controller's, and its release would then drop it. Running jobs are never changed: a
different wanted tier is logged as quota_change's advice, never requeued for. Each
decision is logged once per (job, outcome), so shadow mode does not repeat a
would-share every round.

Approximation: the observation has no GPU index for MPS jobs, so each node's GPUs not
held by whole-GPU jobs or shards (``Node.gpus_free`` and ``Node.gpus_mps``, those in use
only through MPS) are a pool and the running MPS jobs on the node are packed into them
first fit (one user per GPU unless mps_allow_multi_user).
Slurm still chooses the GPU; the pool only decides which jobs wait.
``ObservedJob.mps`` is a job's total over its nodes: a pending job asking for more
than one GPU's worth is left alone.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable, Optional

from controller.core.actions import HoldJob, ReleaseHold, SetMpsShare
from controller.service.round.accounting import numeric_id
from controller.service.round.startable import slurm_wait
from controller.service.acting.backend import Observation, ObservedJob
from controller.core.levers.colocation import ShareRequest, SharedGpu, Tenant, choose_tier, job_class, plan_colocation, \
    quota_change
from controller.service.ops.config import Config
from controller.service.acting.executor import LeverExecutor
from controller.service.ops.report import RoundReport, entry
from controller.core.ids import decision_id as mint

log = logging.getLogger("tiresias.controller")


class GpuSharing:
    """``logged``: job id -> signature of its last logged share decision (logged once)."""

    def __init__(self, config: Config, executor: LeverExecutor, log_once: Callable[[str], None] = log.warning,
                 held: Iterable[str] = ()):
        self.config = config
        self.executor = executor
        self.log_once = log_once
        self.logged: dict[str, tuple] = {}
        self.held: set[str] = set(held)  # jobs this controller holds (hold lever applied or would)
        self.waiting: set[str] = set()  # the round's pending jobs no GPU admits
        self.placed: set[str] = set()  # the round's pending jobs a GPU admits

    def apply(self, observation: Observation, report: RoundReport) -> None:
        if not self.config.gpu_sharing:
            return
        try:
            decisions = self.plan(observation)
        except Exception as err:  # an optional layer: never lose the round over it
            self.log_once(f"GPU sharing skipped: {type(err).__name__}: {err}")
            return
        for number, (job_id, signature, reason, tier) in enumerate(decisions, 1):
            decision_id = mint(report.round_id, "share", number)
            if tier is not None:
                action = SetMpsShare(decision_id, job_id, tier, reason=reason)
                outcome = self.executor.apply(action)
                report.applied.append(entry(action, applied=outcome.applied, detail=outcome.detail))
            else:  # a decision without a lever (waits, advice): logged, nothing set
                report.applied.append({"decision_id": decision_id, "job_id": job_id, "kind": SetMpsShare.kind,
                                       "reason": reason, "applied": False, "detail": signature[0]})
            self.logged[job_id] = signature
        self._holds(report)

    def _holds(self, report: RoundReport) -> None:
        """Hold the jobs no GPU admits; release those a GPU admits again."""
        actions = [HoldJob(mint(report.round_id, "hold", n), job_id, reason="no GPU admits it under the sharing "
                           "policy now: held so that Slurm does not start it there")
                   for n, job_id in enumerate(sorted(self.waiting - self.held, key=numeric_id), 1)]
        actions += [ReleaseHold(mint(report.round_id, "release_hold", n), job_id, reason="a GPU admits it now")
                    for n, job_id in enumerate(sorted(self.held & self.placed, key=numeric_id), 1)]
        for action in actions:
            outcome = self.executor.apply(action)
            report.applied.append(entry(action, applied=outcome.applied, detail=outcome.detail))
            if not outcome.failed:
                (self.held.add if isinstance(action, HoldJob) else self.held.discard)(action.job_id)
        self.held &= self.waiting | self.placed  # a job that left the queue holds nothing

    def _our_hold(self, job: ObservedJob) -> bool:
        """Whether ``job``'s hold is this controller's: one it set (``held``), unless the
        job now shows its user's hold (our hold released by someone, the user's since):
        then it is forgotten, and never released."""
        if job.job_id not in self.held:
            return False
        if job.waits_for == "user_hold":
            self.held.discard(job.job_id)
            return False
        return True

    def plan(self, observation: Observation) -> list[tuple[str, tuple, str, Optional[int]]]:
        """(job id, signature, reason, tier to set or None) per decision to log now."""
        policy = self.config.colocation_policy()
        pending: list[ObservedJob] = []
        running: list[tuple[ObservedJob, int]] = []  # (job, share per node)
        held_by_others: set[str] = set()
        for job in observation.jobs:
            if job.mps <= 0 or job.gpus > 0:
                continue
            if job.state == "PENDING":
                if job.array_record:
                    # a share or hold naming the task would split it off its array's record
                    self.log_once(f"array {job.array_record}: the MPS share and hold of the pending tasks in "
                                  "its record are left to Slurm until they run")
                    continue
                if job.waits_for in ("admin_hold", "user_hold") and not self._our_hold(job):
                    held_by_others.add(job.job_id)  # its tier is set; never held nor released by us
                if job.mps > 100:
                    self.log_once(f"job {job.job_id}: asks for {job.mps} MPS shares, more than one GPU's "
                                  "worth (several nodes?): its share is left alone")
                    continue
                pending.append(job)
            elif job.state in ("RUNNING", "CONFIGURING", "COMPLETING") and job.nodes:
                running.append((job, job.mps // len(job.nodes)))
        # Startable jobs first: a held job must not take the room of one that can start.
        pending.sort(key=lambda j: (bool(slurm_wait(j)), j.submit_time_s or 0.0, numeric_id(j.job_id)))
        for job in pending:
            problem = job_class(job.comment)[1]
            if problem:
                self.log_once(f"job {job.job_id}: {problem}")
        requests = [ShareRequest(j.job_id, j.user, j.comment or "", j.mps) for j in pending]
        gpus = shared_gpus(observation.nodes, running, policy)
        decisions = []
        self.waiting, self.placed = set(), set()
        for job, action in zip(pending, plan_colocation(requests, gpus, policy)):
            if job.job_id not in held_by_others:
                (self.waiting if action.kind == "wait" else self.placed).add(job.job_id)
            if action.kind == "place" and action.tier != job.mps:
                signature = ("set", action.tier, job.mps)
                if self.logged.get(job.job_id) != signature:
                    decisions.append((job.job_id, signature, f"MPS share {job.mps}% -> {action.tier}%: "
                                      f"{action.reason}", action.tier))
            elif action.kind == "wait":
                signature = ("waits: no GPU admits it now; held, share left unchanged", action.tier, job.mps)
                if self.logged.get(job.job_id, ("",))[0] != signature[0]:
                    decisions.append((job.job_id, signature, action.reason, None))
            else:
                self.logged.pop(job.job_id, None)  # placed at the tier it asked for
        for job, share in running:
            wanted, _, tier_reason = choose_tier(ShareRequest(job.job_id, job.user, job.comment or "", share), policy)
            if wanted == share:
                continue
            advice = quota_change(job.job_id, share, wanted, job.requeueable, policy)
            signature = (f"advice only ({advice.kind}): running jobs are not requeued for a quota change",
                         job.restart_count, share, wanted)
            if self.logged.get(job.job_id) != signature:
                decisions.append((job.job_id, signature, f"{tier_reason}; {advice.reason}", None))
        current = {j.job_id for j in pending} | {j.job_id for j, _ in running}
        for job_id in [j for j in self.logged if j not in current]:
            del self.logged[job_id]
        return decisions


def shared_gpus(nodes, running: list[tuple[ObservedJob, int]], policy) -> list[SharedGpu]:
    """Each available node's GPUs not held by whole-GPU jobs or shards (free, or in use
    only through MPS), with the running MPS jobs packed into them first fit (the
    observation has no GPU index for MPS jobs)."""
    tenants: dict[str, list[Tenant]] = {}
    for job, share in sorted(running, key=lambda item: (item[0].user, numeric_id(item[0].job_id))):
        klass = job_class(job.comment)[0]
        for node in job.nodes:
            tenants.setdefault(node, []).append(Tenant(job.job_id, job.user, share, klass))
    gpus = []
    for node in sorted(nodes, key=lambda n: n.name):
        shareable = node.gpus_free + node.gpus_mps
        if not node.available or shareable <= 0:
            continue
        slots: list[list[Tenant]] = [[] for _ in range(shareable)]
        for tenant in tenants.get(node.name, []):
            fits = [slot for slot in slots if sum(t.tier for t in slot) + tenant.tier <= 100
                    and len(slot) < policy.max_tenants
                    and (policy.allow_multi_user or all(t.user == tenant.user for t in slot))]
            target = fits[0] if fits else min(slots, key=lambda slot: sum(t.tier for t in slot))
            target.append(tenant)
        gpus.extend(SharedGpu(node.name, index, tuple(slot)) for index, slot in enumerate(slots))
    return gpus

"""GPU sharing's levers and book: the MPS tiers of pending MPS jobs (``SetMpsShare``),
the holds of those no GPU admits now (``HoldJob``, ``ReleaseHold`` once one does), and
the advice for running ones (logged, never a lever), from controller.core.levers.colocation.

Pure: controller.service.round.sharing hands in the observed jobs and nodes with what it
read of Slurm's pending reasons (``SharingView``: which jobs show a hold, the user's
hold, which wait on something no GPU lifts), pulls the levers built here and settles
their results into the book; the notes (a bad comment, an array's tasks, a share over a
GPU's worth) come back for it to log once.

Approximation: the observation has no GPU index for MPS jobs, so each node's GPUs not
held by whole-GPU jobs or shards (``gpus_free`` and ``gpus_mps``, those in use only
through MPS) are a pool and the running MPS jobs on the node are packed into them first
fit (one user per GPU unless the policy allows several). Slurm still chooses the GPU;
the pool only decides which jobs wait. A job's ``mps`` is its total over its nodes: a
pending job asking for more than one GPU's worth is left alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Union

from controller.core.actions import HoldJob, ReleaseHold, SetMpsShare
from controller.core.ids import decision_id
from controller.core.levers.colocation import ShareRequest, SharedGpu, Tenant, choose_tier, job_class, \
    plan_colocation, quota_change

HOLD_REASON = "no GPU admits it under the sharing policy now: held so that Slurm does not start it there"


class SharingBook:
    """``logged``: job id -> signature of its last logged share decision (logged once);
    ``held``: the jobs this controller holds (hold lever applied or would be); the
    round's pending jobs no GPU admits (``waiting``) and those one admits (``placed``)."""

    def __init__(self, held: Iterable[str] = ()):
        self.logged: dict[str, tuple] = {}
        self.held: set[str] = set(held)
        self.waiting: set[str] = set()
        self.placed: set[str] = set()

    def settle_hold(self, action: Union[HoldJob, ReleaseHold], failed: bool) -> None:
        """A hold or release carried out (or said): the job is held by us, or no more."""
        if not failed:
            (self.held.add if isinstance(action, HoldJob) else self.held.discard)(action.job_id)

    def end_round(self) -> None:
        """A job that left the queue holds nothing."""
        self.held &= self.waiting | self.placed


@dataclass(frozen=True)
class SharingView:
    """What the service read of the MPS jobs' pending reasons: ``on_hold`` (a hold shows,
    anyone's), ``user_hold`` (the user's hold shows), ``waits`` (a reason no GPU lifts:
    such jobs go last)."""

    on_hold: frozenset = frozenset()
    user_hold: frozenset = frozenset()
    waits: frozenset = frozenset()


def sharing_view(jobs: Iterable, hold_of: Callable[[object], str], wait_of: Callable[[object], str]) -> SharingView:
    """The view of the pending MPS-only jobs among ``jobs`` (neutral data: ``mps``,
    ``gpus``, ``state``), the same input in the service and the lever replay:
    ``hold_of(job)``: "admin_hold" or "user_hold" when a hold shows (else anything);
    ``wait_of(job)``: what it waits on that no GPU lifts ('' when nothing)."""
    pending = [j for j in jobs if j.mps > 0 and j.gpus <= 0 and j.state == "PENDING"]
    holds = {j.job_id: hold_of(j) for j in pending}
    return SharingView(on_hold=frozenset(j for j, hold in holds.items() if hold in ("admin_hold", "user_hold")),
                       user_hold=frozenset(j for j, hold in holds.items() if hold == "user_hold"),
                       waits=frozenset(j.job_id for j in pending if wait_of(j)))


@dataclass(frozen=True)
class ShareDecision:
    """One share decision to log now: its ``signature`` (logged once per signature) and
    the tier to set (None: a decision without a lever, a wait or an advice)."""

    job_id: str
    signature: tuple
    reason: str
    tier: Optional[int] = None


@dataclass
class SharingPlan:
    decisions: list[ShareDecision] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _our_hold(book: SharingBook, job, view: SharingView) -> bool:
    """Whether ``job``'s hold is this controller's: one it set (``held``), unless the job
    now shows its user's hold (our hold released by someone, the user's since): then it
    is forgotten, and never released."""
    if job.job_id not in book.held:
        return False
    if job.job_id in view.user_hold:
        book.held.discard(job.job_id)
        return False
    return True


def plan_sharing(jobs: Iterable, nodes: Iterable, policy, book: SharingBook, view: SharingView,
                 id_key: Callable[[str], tuple]) -> SharingPlan:
    """The share decisions to log now, in order, and the notes to log once; fills the
    book's ``waiting`` and ``placed`` and forgets what it logged of jobs gone.
    ``id_key``: the sort key of a job id (Slurm's numeric order)."""
    out = SharingPlan()
    pending = []
    running = []  # (job, share per node)
    held_by_others: set[str] = set()
    for job in jobs:
        if job.mps <= 0 or job.gpus > 0:
            continue
        if job.state == "PENDING":
            if not job.lever_id:
                # a share or hold naming the task would split it off its array's record
                out.notes.append(f"array {job.band_id}: the MPS share and hold of the pending tasks in "
                                 "its record are left to Slurm until they run")
                continue
            if job.job_id in view.on_hold and not _our_hold(book, job, view):
                held_by_others.add(job.job_id)  # its tier is set; never held nor released by us
            if job.mps > 100:
                out.notes.append(f"job {job.job_id}: asks for {job.mps} MPS shares, more than one GPU's "
                                 "worth (several nodes?): its share is left alone")
                continue
            pending.append(job)
        elif job.state in ("RUNNING", "CONFIGURING", "COMPLETING") and job.nodes:
            running.append((job, job.mps // len(job.nodes)))
    # Startable jobs first: a held job must not take the room of one that can start.
    pending.sort(key=lambda j: (j.job_id in view.waits, j.submit_time_s or 0.0, id_key(j.job_id)))
    for job in pending:
        problem = job_class(job.comment)[1]
        if problem:
            out.notes.append(f"job {job.job_id}: {problem}")
    requests = [ShareRequest(j.job_id, j.user, j.comment or "", j.mps) for j in pending]
    gpus = shared_gpus(nodes, running, policy, id_key)
    decisions = out.decisions
    book.waiting, book.placed = set(), set()
    for job, action in zip(pending, plan_colocation(requests, gpus, policy)):
        if job.job_id not in held_by_others:
            (book.waiting if action.kind == "wait" else book.placed).add(job.job_id)
        if action.kind == "place" and action.tier != job.mps:
            signature = ("set", action.tier, job.mps)
            if book.logged.get(job.job_id) != signature:
                decisions.append(ShareDecision(job.job_id, signature, f"MPS share {job.mps}% -> {action.tier}%: "
                                               f"{action.reason}", action.tier))
        elif action.kind == "wait":
            signature = ("waits: no GPU admits it now; held, share left unchanged", action.tier, job.mps)
            if book.logged.get(job.job_id, ("",))[0] != signature[0]:
                decisions.append(ShareDecision(job.job_id, signature, action.reason))
        else:
            book.logged.pop(job.job_id, None)  # placed at the tier it asked for
    for job, share in running:
        wanted, _, tier_reason = choose_tier(ShareRequest(job.job_id, job.user, job.comment or "", share), policy)
        if wanted == share:
            continue
        advice = quota_change(job.job_id, share, wanted, job.requeueable, policy)
        signature = (f"advice only ({advice.kind}): running jobs are not requeued for a quota change",
                     job.restart_count, share, wanted)
        if book.logged.get(job.job_id) != signature:
            decisions.append(ShareDecision(job.job_id, signature, f"{tier_reason}; {advice.reason}"))
    current = {j.job_id for j in pending} | {j.job_id for j, _ in running}
    for job_id in [j for j in book.logged if j not in current]:
        del book.logged[job_id]
    return out


def share_levers(decisions: Iterable[ShareDecision], round_id: int) -> list[tuple[ShareDecision, object]]:
    """Each decision with its lever (``SetMpsShare``, ids ``r<round>.s<n>``) or, for a
    decision without one (waits, advice), its decision-log entry (logged, nothing set)."""
    out = []
    for number, decision in enumerate(decisions, 1):
        minted = decision_id(round_id, "share", number)
        if decision.tier is not None:
            out.append((decision, SetMpsShare(minted, decision.job_id, decision.tier, reason=decision.reason)))
        else:
            out.append((decision, {"decision_id": minted, "job_id": decision.job_id, "kind": SetMpsShare.kind,
                                   "reason": decision.reason, "applied": False, "detail": decision.signature[0]}))
    return out


def hold_levers(book: SharingBook, round_id: int, id_key: Callable[[str], tuple]
                ) -> list[Union[HoldJob, ReleaseHold]]:
    """Hold the jobs no GPU admits; release those a GPU admits again (ids ``r<round>.k<n>``, ``.kr<n>``)."""
    actions: list[Union[HoldJob, ReleaseHold]] = [
        HoldJob(decision_id(round_id, "hold", n), job_id, reason=HOLD_REASON)
        for n, job_id in enumerate(sorted(book.waiting - book.held, key=id_key), 1)]
    actions += [ReleaseHold(decision_id(round_id, "release_hold", n), job_id, reason="a GPU admits it now")
                for n, job_id in enumerate(sorted(book.held & book.placed, key=id_key), 1)]
    return actions


def shared_gpus(nodes, running: list, policy, id_key: Callable[[str], tuple]) -> list[SharedGpu]:
    """Each available node's GPUs not held by whole-GPU jobs or shards (free, or in use
    only through MPS), with the running MPS jobs ((job, share per node)) packed into them
    first fit (the observation has no GPU index for MPS jobs)."""
    tenants: dict[str, list[Tenant]] = {}
    for job, share in sorted(running, key=lambda item: (item[0].user, id_key(item[0].job_id))):
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

"""The lever producers both executors share: from a round's plan to its lever actions.

The service (controller.service.round.starts, .preemption) and the simulator
(controller.replay.lever_replay) call these same functions with what each knows
about a job, so the simulator predicts the bands, pins, releases, signals and
requeues the controller makes, with the same decision ids. ``LEVERS`` says which
method of an executor's target carries out which action: the Slurm backend
implements those methods, and so does the simulated slurmctld. Pure: no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Container, Iterable, Mapping, Optional

from controller.core.actions import (
    HoldJob, MovePartition, PinNodes, ReleaseBeginTime, ReleaseHold, Requeue, SetAdminComment, SetMpsShare,
    Signal, UnpinNodes,
)
from controller.core.placement import COUNT_NODE
from controller.core.plan import Preempt, Start


@dataclass(frozen=True)
class Lever:
    """How one action type is carried out: ``method(target)`` is the bound method of
    the executor's target, called as ``method(job_id, *args(action))``; ``name`` is
    its name in logs."""

    name: str
    method: Callable[[Any], Callable[..., None]]
    args: Callable[[Any], tuple]


# The typed table: action type -> the target's lever. SetBand is batched (one
# ``set_site_factors`` call per round) and so is not in it.
LEVERS: dict[type, Lever] = {
    PinNodes: Lever("pin_nodes", lambda b: b.pin_nodes, lambda a: (list(a.nodes),)),
    UnpinNodes: Lever("pin_nodes", lambda b: b.pin_nodes, lambda a: ([],)),
    ReleaseBeginTime: Lever("release_begin_time", lambda b: b.release_begin_time, lambda a: ()),
    MovePartition: Lever("move_partition", lambda b: b.move_partition, lambda a: (a.to_partition,)),
    SetMpsShare: Lever("set_mps_share", lambda b: b.set_mps_share, lambda a: (a.percent,)),
    HoldJob: Lever("hold", lambda b: b.hold, lambda a: ()),
    ReleaseHold: Lever("release_hold", lambda b: b.release_hold, lambda a: ()),
    Signal: Lever("signal", lambda b: b.signal, lambda a: (a.signal_name, a.batch_only)),
    Requeue: Lever("requeue", lambda b: b.requeue, lambda a: ()),
    SetAdminComment: Lever("set_admin_comment", lambda b: b.set_admin_comment, lambda a: (a.text,)),
}


def changed_bands(factors: Mapping[str, int], sent: Mapping[str, int],
                  current: Callable[[str], Optional[int]]) -> dict[str, int]:
    """The SiteFactors to send: those that differ from what was sent last and from the
    job's ``current`` value (what the cluster manager reports)."""
    return {j: v for j, v in factors.items() if sent.get(j) != v and current(j) != v}


class RpcBudget:
    """Slurm's RPC rate limit (``SlurmctldParameters=rl_enable``: a bucket per user of
    30 tokens refilled 2 a second by default, one token per RPC, and the controller's
    Operator user is not exempt) as the controller keeps it for its bulk levers, the
    SiteFactor bands and the AdminComment lines: ``per_s`` tokens a second, at most
    ``burst`` at once. ``scontrol update JobId=a,b,c ...`` is one command but one RPC
    per id, so every id costs a token. Time is the round's ``now`` (no clock), so the
    simulator, replaying the controller's rounds, holds back what the controller does.
    ``per_s`` 0: no budget (every update goes at once)."""

    def __init__(self, per_s: float, burst: int):
        if per_s < 0 or burst < 0:
            raise ValueError(f"RPC budget: per_s {per_s!r} and burst {burst!r} must be >= 0")
        self.per_s = per_s
        self.burst = burst
        self.tokens = float(burst)
        self.at_s: Optional[float] = None

    def allowance(self, now: float) -> float:
        """The RPCs that may go now (inf without a budget); the bucket refilled up to ``now``."""
        if not self.per_s:
            return math.inf
        if self.at_s is not None and now > self.at_s:
            self.tokens = min(float(self.burst), self.tokens + (now - self.at_s) * self.per_s)
        if self.at_s is None or now > self.at_s:
            self.at_s = now
        return math.floor(max(self.tokens, 0.0))

    def spend(self, rpcs: int) -> None:
        self.tokens -= rpcs


def band_urgency(job_id: str, value: int, current: Optional[int], starts: Container[str],
                 running: Container[str]) -> int:
    """0: a job the plan starts (Slurm must see it first); 1: a band that must not
    wait: a running job's (``preemption: slurm``: below its band a pending job may
    preempt it) or one that falls (a stale higher value lets Slurm start, or preempt
    for, the job ahead of its turn); 2: a band that rises (late, the job only waits
    below its place a little longer, as before the controller raised it)."""
    if job_id in starts:
        return 0
    if job_id in running or (current is not None and value < current):
        return 1
    return 2


def bands_in_budget(changed: Mapping[str, int], current: Callable[[str], Optional[int]], starts: Container[str],
                    running: Container[str], allowance: float) -> tuple[dict[str, int], int]:
    """(the bands to send this round, how many wait for a later one): at most
    ``allowance`` ids (one RPC each), the most urgent first (band_urgency), in
    ``changed``'s order within one urgency (the plan's order). What waits is sent again
    next round, as changed_bands still finds it changed; both executors call this."""
    if len(changed) <= allowance:
        return dict(changed), 0
    ranked = sorted(changed, key=lambda j: band_urgency(j, changed[j], current(j), starts, running))
    chosen = ranked[:max(int(allowance), 0)]
    return {job_id: changed[job_id] for job_id in chosen}, len(changed) - len(chosen)


def pin_for_start(start: Start, *, skew: float, pack_limit: float, consolidate: bool,
                  required_nodes: Iterable[str], excluded_nodes: Iterable[str], pinned_here: bool,
                  expires_s: float) -> tuple[Optional[PinNodes], str]:
    """A consolidation-sensitive job (skew > PACKLIMIT) the plan starts is pinned to the
    nodes the plan placed it on; returns (the pin or None, why not pinned or '').

    The job's own --nodelist/--exclude win: a pin would overwrite (and its expiry
    later clear) the user's node list, or name a node they excluded. ``pinned_here``:
    the job's node list is a pin this controller set, not the user's."""
    nodes = sorted(node for node, _ in start.placement if node != COUNT_NODE)
    if not (consolidate and skew > pack_limit and nodes):
        return None, ""
    required = sorted(required_nodes)
    own_nodes = bool(required) and not pinned_here
    excluded = sorted(set(nodes) & set(excluded_nodes))
    if own_nodes or excluded:
        return None, "not pinned: the job's own " + ("--nodelist" if own_nodes else
                                                     f"--exclude of {','.join(excluded)}") + " is kept"
    if required == nodes:
        return None, ""
    return PinNodes(f"{start.decision_id}.pin", start.job_id, tuple(nodes), expires_s,
                    reason=f"skew {skew:.2f} > PACKLIMIT {pack_limit:g}: placed where the plan placed it",
                    cause_id=start.decision_id), ""


def release_for_start(start: Start, stopped_s: float, now: float, settle_s: float
                      ) -> tuple[Optional[ReleaseBeginTime], str]:
    """A job held after its requeue (BeginTime) that the plan starts is released once
    ``settle_s`` passed since it stopped (``stopped_s``); before that it is kept: slurmd
    refuses to relaunch a job whose previous run it is still tearing down."""
    if now - stopped_s >= settle_s:
        return ReleaseBeginTime(f"{start.decision_id}.release", start.job_id,
                                reason=f"requeued {now - stopped_s:.0f}s ago: settled",
                                cause_id=start.decision_id), ""
    return None, (f"BeginTime kept {settle_s - (now - stopped_s):.0f}s more: "
                  "the previous run is still being torn down")


def unpin_expired(round_id: int, number: int, job_id: str, expiry_s: float, now: float, cause_id: str) -> UnpinNodes:
    """The ``number``-th pin of the round cleared because the job waits past its expiry;
    it cites the start that pinned the job."""
    return UnpinNodes(f"r{round_id}.u{number}", job_id,
                      reason=f"pin expired {now - expiry_s:.0f}s ago and the job waits", cause_id=cause_id)


def signal_for(preempt: Preempt, signal_name: str, batch_only: bool, how: str) -> Signal:
    """The checkpoint signal a preemption sends before its requeue."""
    return Signal(f"{preempt.decision_id}.signal", preempt.job_id, signal_name, batch_only,
                  reason=f"checkpoint before the requeue: {how}", cause_id=preempt.decision_id)


def requeue_after_grace(decision_id: str, job_id: str, grace_s: float, cause_id: str) -> Requeue:
    """The requeue that ends a preemption's grace period; cites the preemption."""
    return Requeue(decision_id, job_id, reason=f"grace period of {grace_s:g}s over", cause_id=cause_id)


def action_row(action) -> tuple:
    """(decision id, kind, job id, value, cause id): a lever action as executors'
    outputs are compared (tests/test_lever_parity.py); the value is what the lever sets."""
    value = {"band": lambda a: a.site_factor, "pin": lambda a: a.nodes, "move": lambda a: a.to_partition,
             "share": lambda a: a.percent, "signal": lambda a: a.signal_name,
             "admin_comment": lambda a: a.text}.get(action.kind, lambda a: None)(action)
    return action.decision_id, action.kind, action.job_id, value, action.cause_id

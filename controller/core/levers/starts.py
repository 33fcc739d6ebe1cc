"""A start's levers: its pin (consolidation-sensitive jobs), a pin's expiry, a requeued job's
BeginTime release. Pure."""
from __future__ import annotations

from typing import Iterable, Optional

from controller.core.actions import PinNodes, ReleaseBeginTime, UnpinNodes
from controller.core.placement import COUNT_NODE
from controller.core.plan import Start
from controller.core.ids import caused_id, decision_id


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
    return PinNodes(caused_id(start.decision_id, "pin"), start.job_id, tuple(nodes), expires_s,
                    reason=f"skew {skew:.2f} > PACKLIMIT {pack_limit:g}: placed where the plan placed it",
                    cause_id=start.decision_id), ""


def release_for_start(start: Start, stopped_s: float, now: float, settle_s: float
                      ) -> tuple[Optional[ReleaseBeginTime], str]:
    """A job held after its requeue (BeginTime) that the plan starts is released once
    ``settle_s`` passed since it stopped (``stopped_s``); before that it is kept: slurmd
    refuses to relaunch a job whose previous run it is still tearing down."""
    if now - stopped_s >= settle_s:
        return ReleaseBeginTime(caused_id(start.decision_id, "release"), start.job_id,
                                reason=f"requeued {now - stopped_s:.0f}s ago: settled",
                                cause_id=start.decision_id), ""
    return None, (f"BeginTime kept {settle_s - (now - stopped_s):.0f}s more: "
                  "the previous run is still being torn down")


def unpin_expired(round_id: int, number: int, job_id: str, expiry_s: float, now: float, cause_id: str) -> UnpinNodes:
    """The ``number``-th pin of the round cleared because the job waits past its expiry;
    it cites the start that pinned the job."""
    return UnpinNodes(decision_id(round_id, "unpin", number), job_id,
                      reason=f"pin expired {now - expiry_s:.0f}s ago and the job waits", cause_id=cause_id)

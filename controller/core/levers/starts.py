"""A start's levers: its pin (consolidation-sensitive jobs), a pin's expiry, a requeued job's
BeginTime release. Pure."""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

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


# -- the starts family of the lever planner (controller.core.levers.planner) ------------------
# Moved from controller.service.round.levers.Levers: pins for consolidation, the release of a
# requeued job's BeginTime, a pin's expiry; the service and the simulator plan them here.

START_DETAIL = "decision: left to Slurm's scheduler (SiteFactor band)"
# the states in which a pin this controller set is still the job's (else it is forgotten)
PINNED_STATES = ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING")


def plan_starts(plan, view, pins: Mapping[str, float], cfg) -> tuple[list[tuple], dict[str, float]]:
    """The plan's starts and their levers: [(start, [notes and levers in order])], and
    the jobs whose stop time is first set now (unknown when it stopped: this process
    started after the requeue; the settle time counts from now rather than risk the
    relaunch). A note is a string; a lever's own outcome is told where it stands."""
    out, stopped_seen = [], {}
    for action in plan.of_kind("start"):
        job = view.gpu[action.job_id]
        parts: list = []
        skew = view.skew(action.job_id)
        # a gang's parts (a het job's components) each have their own node list; a job
        # inside a shared record (a task inside its array's record) would be split off by a pin
        pin, why_not = pin_for_start(action, skew=skew, pack_limit=cfg.pack_limit,
                                     consolidate=cfg.consolidate and job.pinnable,
                                     required_nodes=job.required_nodes, excluded_nodes=job.excluded_nodes,
                                     pinned_here=action.job_id in pins, expires_s=view.now + cfg.pin_expiry_s)
        if why_not:
            parts.append(why_not)
        elif not job.lever_id and cfg.consolidate and skew > cfg.pack_limit:
            parts.append(f"not pinned: a pending task of array {job.band_id} (a pin would split it "
                         "off the array's record)")
        if pin is not None:
            parts.append(pin)
        # never a BeginTime the user or an admin set; a task in its array's record never
        # ran (and a release naming it would split it off: it has no lever_id)
        if view.begin_time_ours(job) and job.lever_id:
            stopped = view.stopped_at.get(action.job_id)
            if stopped is None:
                stopped = stopped_seen[action.job_id] = view.now
            release, kept = release_for_start(action, stopped, view.now, cfg.requeue_settle_s)
            parts.append(release if release is not None else kept)
        out.append((action, parts))
    return out, stopped_seen


def plan_unpins(round_id: int, view, pins: Mapping[str, float], causes: Mapping[str, str]
                ) -> tuple[list[UnpinNodes], list[str]]:
    """Expired pins: cleared once the job waits past the expiry (a requeued job must
    not keep the nodes it was pinned to), each a decision of its own citing the start
    that pinned the job; and the pins to forget, their job gone (but not one requeued
    this round: Slurm keeps the ReqNodeList on requeue)."""
    unpins, forget = [], []
    for job_id, expiry in pins.items():
        job = view.gpu.get(job_id)
        if job is None or (job.state not in PINNED_STATES and job_id not in view.requeueing):
            forget.append(job_id)
        elif job.state == "PENDING" and view.now >= expiry:
            unpins.append(unpin_expired(round_id, len(unpins) + 1, job_id, expiry, view.now,
                                        causes.get(job_id, "")))
    return unpins, forget

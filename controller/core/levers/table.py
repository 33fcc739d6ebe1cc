"""``LEVERS``: how each lever action type is carried out by an executor's target (the Slurm backend,
the simulated slurmctld), and ``action_row``, the form executors' outputs are compared in. Pure."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from controller.core.actions import (
    HoldJob, MovePartition, PinNodes, ReleaseBeginTime, ReleaseHold, Requeue, SetAdminComment, SetMpsShare,
    Signal, UnpinNodes,
)


@dataclass(frozen=True)
class Lever:
    """How one action type is carried out: ``method(target)`` is the bound method of
    the executor's target, called as ``method(job_id, *args(action))``; ``name`` is
    its name in logs. ``informational``: it tells (the AdminComment line), decides
    nothing, so only an executor that acts sends it (a read-only one skips it)."""

    name: str
    method: Callable[[Any], Callable[..., None]]
    args: Callable[[Any], tuple]
    informational: bool = False


# The typed table: action type -> the target's lever. SetBand is batched (one
# ``set_site_factors`` call per round, BAND_LEVER) and so is not in it.
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
    SetAdminComment: Lever("set_admin_comment", lambda b: b.set_admin_comment, lambda a: (a.text,),
                           informational=True),
}
def _band_args(bands) -> tuple:
    factors = {band.job_id: band.site_factor for band in bands}
    return (factors,)


# The batched row: a round's SetBand actions, one call with {job id: site factor}.
BAND_LEVER = Lever("set_site_factors", lambda b: b.set_site_factors, _band_args)
# Every method of an executor's target (the backend port's lever half), by name.
BY_NAME: dict[str, Lever] = {lever.name: lever for lever in (BAND_LEVER, *LEVERS.values())}
LEVER_NAMES = tuple(BY_NAME)


def action_row(action) -> tuple:
    """(decision id, kind, job id, value, cause id): a lever action as executors'
    outputs are compared (tests/test_lever_parity.py); the value is what the lever sets."""
    value = {"band": lambda a: a.site_factor, "pin": lambda a: a.nodes, "move": lambda a: a.to_partition,
             "share": lambda a: a.percent, "signal": lambda a: a.signal_name,
             "admin_comment": lambda a: a.text}.get(action.kind, lambda a: None)(action)
    return action.decision_id, action.kind, action.job_id, value, action.cause_id

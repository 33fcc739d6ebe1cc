"""``LEVERS``: how each lever action type is carried out by an executor's target (the Slurm backend,
the simulated slurmctld), what the store records of it and how restore undoes it, and (for a
family planned from the table) its planner phase and settings; ``action_row``, the form
executors' outputs are compared in. Pure.

A row is all a new lever needs here: the target's abstract method (LeverTarget), the
read-only and recording targets' methods, what RecordingBackend records and how restore
undoes it, and the planner's phase are generated from it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from controller.core.actions import (
    HoldJob, MovePartition, PinNodes, ReleaseBeginTime, ReleaseHold, Requeue, SetAdminComment, SetBand, SetMpsShare,
    Signal, UnpinNodes,
)
from controller.core.levers import nice
from controller.core.levers.comments import ours_in

# The store's lever rows (what RecordingBackend records, restore undoes), by name.
SITE_FACTOR, PIN, ADMIN_COMMENT, HOLD = "site_factor", "pin", "admin_comment", "hold"


@dataclass(frozen=True)
class Lever:
    """How one action type is carried out: ``method(target)`` is the bound method of
    the executor's target, called as ``method(job_id, *args(action))``; ``name`` is
    its name in logs. ``informational``: it tells (the AdminComment line), decides
    nothing, so only an executor that acts sends it (a read-only one skips it).

    ``doc``: the target method's docstring (LeverTarget's abstract method is generated
    from the row). ``record``: called with the lever's arguments, the store row written
    before it goes out (lever row name, {job id: value}) and the one forgotten after
    (lever row name, [job ids]), each None for none (controller.service.acting.restore's
    RecordingBackend); None: nothing recorded (a one-off choice, not undone).
    ``undo``: (target, job id) -> None, how restore undoes a recorded row of the lever
    (None: restore has its own rule for it: bands, pins, comments, holds); ``label``:
    the lever's name in restore's report. ``plan``: the lever's planner phase, called
    by LeverPlanner.step as plan(plan, view, book, config, round_id) -> [actions] after
    the starts (None: planned elsewhere); ``settle``: settle(book, actions, done) books
    what the executor did of them; ``settings``: the config keys the phase reads, with
    their defaults (LeverConfig.settings carries them)."""

    name: str
    method: Callable[[Any], Callable[..., None]]
    args: Callable[[Any], tuple]
    informational: bool = False
    doc: str = ""
    record: Optional[Callable[..., tuple]] = None
    undo: Optional[Callable[[Any, str], None]] = None
    label: str = ""
    plan: Optional[Callable[..., list]] = None
    settle: Optional[Callable[..., None]] = None
    settings: Mapping[str, Any] = field(default_factory=dict)


# The typed table: action type -> the target's lever. SetBand is batched (one
# ``set_site_factors`` call per round, BAND_LEVER) and so is not in it.
LEVERS: dict[type, Lever] = {
    PinNodes: Lever("pin_nodes", lambda b: b.pin_nodes, lambda a: (list(a.nodes),),
                    doc="ReqNodeList= for a pending job; an empty list clears it.",
                    # an empty pin: the controller cleared its own pin, nothing left to undo
                    record=lambda job_id, nodes: ((PIN, {job_id: ",".join(nodes)}), None) if nodes
                    else (None, (PIN, [job_id])), label="ReqNodeList"),
    UnpinNodes: Lever("pin_nodes", lambda b: b.pin_nodes, lambda a: ([],)),
    ReleaseBeginTime: Lever("release_begin_time", lambda b: b.release_begin_time, lambda a: (),
                            doc="StartTime=now after a requeue, so the job may start at once."),
    MovePartition: Lever("move_partition", lambda b: b.move_partition, lambda a: (a.to_partition,)),
    SetMpsShare: Lever("set_mps_share", lambda b: b.set_mps_share, lambda a: (a.percent,),
                       doc="A pending MPS job's share per node (--gres=mps:N; 100 shares = one GPU's SMs)."),
    HoldJob: Lever("hold", lambda b: b.hold, lambda a: (),
                   doc="Keep a pending job from starting until ``release_hold`` (Slurm: scontrol hold).",
                   record=lambda job_id: ((HOLD, {job_id: "ours"}), None), label="hold"),
    ReleaseHold: Lever("release_hold", lambda b: b.release_hold, lambda a: (),
                       doc="Undo ``hold`` (Slurm: scontrol release).",
                       record=lambda job_id: (None, (HOLD, [job_id]))),
    Signal: Lever("signal", lambda b: b.signal, lambda a: (a.signal_name, a.batch_only),
                  doc="Deliver the checkpoint signal: to the batch shell only, or to the job's\n"
                      "steps (not the batch shell), as Slurm delivers a job's --signal."),
    Requeue: Lever("requeue", lambda b: b.requeue, lambda a: ()),
    SetAdminComment: Lever("set_admin_comment", lambda b: b.set_admin_comment, lambda a: (a.text,),
                           informational=True,
                           doc="Replace the job's AdminComment with ``text`` (controller.core.levers.comments\n"
                               "builds it keeping the site's part).",
                           # restore removes whatever our part then says
                           record=lambda job_id, text: ((ADMIN_COMMENT, {job_id: "ours"}) if ours_in(text) else None,
                                                        None), label="AdminComment"),
    nice.SetNice: Lever(nice.NAME, lambda b: b.set_nice, lambda a: (a.nice,), doc=nice.DOC, record=nice.record,
                        undo=nice.undo, label="Nice", plan=nice.plan, settle=nice.settle, settings=nice.SETTINGS),
}


def _band_args(bands) -> tuple:
    factors = {band.job_id: band.site_factor for band in bands}
    return (factors,)


# The batched row: a round's SetBand actions, one call with {job id: site factor}.
BAND_LEVER = Lever(
    "set_site_factors", lambda b: b.set_site_factors, _band_args,
    doc="Set SiteFactor for each job id (batched: one call per distinct value); an\n"
        "ArrayJobId's value is for the tasks in its pending record (ObservedJob.band_id).",
    record=lambda factors: ((SITE_FACTOR, {job_id: str(value) for job_id, value in factors.items() if value != 0}),
                            None), label="SiteFactor")
# Every method of an executor's target (the backend port's lever half), by name.
BY_NAME: dict[str, Lever] = {lever.name: lever for lever in (BAND_LEVER, *LEVERS.values())}
LEVER_NAMES = tuple(BY_NAME)
# Every lever action type: the batched SetBand and the table's rows.
LEVER_ACTIONS: tuple[type, ...] = (SetBand, *LEVERS)
# What RecordingBackend records, by lever name: each row's ``record`` (the first row of a
# name: UnpinNodes shares PinNodes's method and record).
RECORDED: dict[str, Callable[..., tuple]] = {}
for _lever in (BAND_LEVER, *LEVERS.values()):
    if _lever.record is not None:
        RECORDED.setdefault(_lever.name, _lever.record)
# The store's lever rows restore undoes, each with its name in restore's report, and the
# rows of a generic undo (``undo``), by row name: the row a lever's ``record`` writes.
LABELS: dict[str, str] = {SITE_FACTOR: "SiteFactor", PIN: "ReqNodeList", ADMIN_COMMENT: "AdminComment", HOLD: "hold"}
UNDO: dict[str, Lever] = {}
for _lever in LEVERS.values():
    if _lever.undo is not None:
        LABELS.setdefault(_lever.name, _lever.label or _lever.name)
        UNDO[_lever.name] = _lever
# The planner phases of the table's families, in the table's order.
PHASES: tuple[Lever, ...] = tuple(lever for lever in LEVERS.values() if lever.plan is not None)
SETTINGS: dict[str, Any] = {key: default for lever in LEVERS.values() for key, default in lever.settings.items()}


def action_row(action) -> tuple:
    """(decision id, kind, job id, value, cause id): a lever action as executors'
    outputs are compared (tests/test_lever_parity.py); the value is what the lever sets."""
    value = {"band": lambda a: a.site_factor, "pin": lambda a: a.nodes, "move": lambda a: a.to_partition,
             "share": lambda a: a.percent, "signal": lambda a: a.signal_name,
             "admin_comment": lambda a: a.text}.get(action.kind, lambda a: None)(action)
    return action.decision_id, action.kind, action.job_id, value, action.cause_id

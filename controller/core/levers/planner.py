"""The lever planner: every lever of a round planned by one pure function, the same in the
service (controller.service.round.levers carries its plan out) and in the simulator
(controller.replay.lever_replay).

    snapshot, view = build(observation, accounts)
    plan   = engine.step(snapshot)
    levers = planner.step(plan, view, book, ids)
    done   = executor.apply(levers)            # observe: nothing; shadow: logged; enforce: Slurm
    book.settle(levers, done)

Planned here: the SiteFactor bands of the GPU, CPU-only, MPS-only and (``preemption:
slurm``) running jobs within Slurm's RPC budget (controller.core.levers.bands), the
starts' pins and BeginTime releases and the pins' expiry (controller.core.levers.starts),
and the AdminComment lines (controller.core.levers.comments, ``comments``: planned after
the families still planned in the service, preemption, handoffs, partition moves and
sharing, in today's order). The planner knows no mode: ``view.rpc_budgeted`` says
whether the levers reach Slurm (and so its RPC budget).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from controller.core.actions import LeverAction, PinNodes, SetAdminComment, SetBand, UnpinNodes
from controller.core.levers.bands import plan_bands
from controller.core.levers.book import Done, LeverBook
from controller.core.levers.starts import START_DETAIL, plan_starts, plan_unpins
from controller.core.levers.view import LeverConfig, LeverView
from controller.core.plan import Plan


@dataclass
class LeverPlan:
    """One round's levers in the order they are carried out: the bands (one call), each
    start's levers (a pin, a release) in the plan's order, the expired pins' clearing;
    later the AdminComment lines. ``starts``: per start of the plan, its notes and
    levers in the order its report entry tells them."""

    round_id: int
    bands: list[SetBand] = field(default_factory=list)
    bands_changed: dict[str, int] = field(default_factory=dict)
    bands_waiting: int = 0
    bands_forgotten: list[str] = field(default_factory=list)
    starts: list[tuple] = field(default_factory=list)
    unpins: list[UnpinNodes] = field(default_factory=list)
    pins_forgotten: list[str] = field(default_factory=list)
    stopped_seen: dict[str, float] = field(default_factory=dict)  # job id -> now: its stop time first set
    rpc_spent: int = 0
    now: float = 0.0
    comments: list[SetAdminComment] = field(default_factory=list)
    comment_keys: dict[str, tuple] = field(default_factory=dict)  # job id -> the line's urgent key
    comment_due: list[tuple] = field(default_factory=list)  # the due refreshes looked at (CommentBook.settle)

    def pins(self) -> list[PinNodes]:
        return [part for _, parts in self.starts for part in parts if isinstance(part, PinNodes)]

    def start_levers(self) -> list[LeverAction]:
        """The starts' levers (pins, releases), in order."""
        return [part for _, parts in self.starts for part in parts if not isinstance(part, str)]

    def actions(self) -> list[LeverAction]:
        """Every lever of the plan, in the order carried out."""
        return [*self.bands, *self.start_levers(), *self.unpins, *self.comments]

    def entries(self, done: Done) -> list[tuple]:
        """The decisions the round report gets, as (action, applied, detail): each start
        (a decision: Slurm's scheduler starts the job, its band puts it first; "applied"
        only when a lever for it was carried out here) and each pin's clearing."""
        rows = []
        for start, parts in self.starts:
            details, applied = [START_DETAIL], False
            for part in parts:
                if isinstance(part, str):
                    details.append(part)
                else:
                    outcome = done.of(part)
                    details.append(outcome.detail if outcome is not None else "")
                    applied = applied or bool(outcome is not None and outcome.applied)
            rows.append((start, applied, "; ".join(details)))
        for unpin in self.unpins:
            outcome = done.of(unpin)
            rows.append((unpin, bool(outcome and outcome.applied), outcome.detail if outcome else ""))
        return rows


class LeverPlanner:
    """``step(plan, view, book, ids)``: the round's LeverPlan; pure (it reads the book and
    plans; ``LeverBook.settle`` books what was done). ``ids``: the decision-id allocator
    (controller.core.ids; every id the families mint goes through it)."""

    def __init__(self, config: LeverConfig):
        self.config = config

    def step(self, plan: Plan, view: LeverView, book: LeverBook, ids=None) -> LeverPlan:
        cfg = self.config
        out = LeverPlan(plan.round_id, now=view.now)
        # 1. SiteFactor bands, within Slurm's RPC budget (observe and shadow send nothing:
        # no RPC to budget, every band they would set is told)
        allowance = book.rpc.allowance(view.now) if view.rpc_budgeted else math.inf
        out.bands, out.bands_changed, out.bands_waiting, out.bands_forgotten = plan_bands(
            plan, view, book.bands_sent, allowance, cfg)
        out.rpc_spent = len(out.bands_changed)
        # 2. starts: pins for consolidation, release a requeued job's BeginTime
        out.starts, out.stopped_seen = plan_starts(plan, view, book.pins, cfg)
        # 3. expired pins, of the pins as booked after this round's (a pin is booked when
        # carried out or tried; a new one never expires in its round: pin_expiry_s >= 1)
        pins = book.pins
        new = out.pins()
        if new:
            pins = {**pins, **{pin.job_id: pin.expires_s for pin in new}}
        out.unpins, out.pins_forgotten = plan_unpins(plan.round_id, view, pins, book.pin_causes)
        return out

    def comments(self, plan: Optional[Plan], view: LeverView, book: LeverBook, ids=None) -> LeverPlan:
        """The AdminComment lines due this round (controller.core.levers.comments), within
        what Slurm's RPC budget leaves after the bands (one RPC a line); ``view.unjudged``
        gets none this round. Information, not a decision: the service plans them only
        when its levers reach Slurm."""
        out = LeverPlan(plan.round_id, now=view.now)
        out.comments, out.comment_keys, out.comment_due = book.comments.plan(
            plan, view.gpu, view.attained_gpu_s, self.config.comment_queues, view.preemptable, view.now,
            book.rpc.allowance(view.now), hold=view.unjudged)
        out.rpc_spent = len(out.comments)
        return out

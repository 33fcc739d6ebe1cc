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
the phases of the lever table's families (a row's ``plan``: controller.core.levers.table.
PHASES, so a new family registers in its row, not here), and the AdminComment lines
(controller.core.levers.comments, ``comments``: planned last).
The other families are phases of the same planner, called in the round's order by its
two callers (controller.service.round.levers, controller.replay.lever_replay) where a
phase needs what the executor did in the one before (a victim's signal delivered before
its row opens, a grace over only after the row is open): the handoffs watched
(``handoff_checks``; controller.core.levers.handoffs), the victims left to slurmctld
(``left_to_slurm``) or signalled and requeued by the controller (``kept_victims``,
``victims``, ``victim_step``, ``requeues``; controller.core.levers.preemption), the
partition moves (``moves``; controller.core.levers.moves) and GPU sharing's shares and
holds (``sharing``, ``holds``; controller.core.levers.sharing). The planner knows no
mode: ``view.rpc_budgeted`` says whether the levers reach Slurm (and so its RPC budget).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional

from controller.core.actions import HoldJob, LeverAction, MovePartition, PinNodes, ReleaseHold, SetAdminComment, \
    SetBand, UnpinNodes
from controller.core.levers import handoffs as handoff_rule
from controller.core.levers import moves as move_rule
from controller.core.levers import preemption as preemption_rule
from controller.core.levers import sharing as sharing_rule
from controller.core.levers.bands import plan_bands
from controller.core.levers.book import Done, LeverBook
from controller.core.levers.handoffs import HandoffBook, HandoffEvent
from controller.core.levers.preemption import PreemptionBook, Resolution, SlurmBook, VictimStep, VictimView
from controller.core.levers.sharing import ShareDecision, SharingBook, SharingView
from controller.core.levers.starts import START_DETAIL, plan_starts, plan_unpins
from controller.core.levers.table import PHASES
from controller.core.levers.view import LeverConfig, LeverView
from controller.core.plan import Plan, Preempt


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
    table_levers: list[LeverAction] = field(default_factory=list)  # the table's phases' (table.PHASES)

    def pins(self) -> list[PinNodes]:
        return [part for _, parts in self.starts for part in parts if isinstance(part, PinNodes)]

    def start_levers(self) -> list[LeverAction]:
        """The starts' levers (pins, releases), in order."""
        return [part for _, parts in self.starts for part in parts if not isinstance(part, str)]

    def actions(self) -> list[LeverAction]:
        """Every lever of the plan, in the order carried out."""
        return [*self.bands, *self.start_levers(), *self.unpins, *self.table_levers, *self.comments]

    def one_by_one(self) -> list[LeverAction]:
        """The levers carried out one call each, in order (all but the bands' batch)."""
        return [*self.start_levers(), *self.unpins, *self.table_levers, *self.comments]

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
        for lever in [*self.unpins, *self.table_levers]:
            outcome = done.of(lever)
            rows.append((lever, bool(outcome and outcome.applied), outcome.detail if outcome else ""))
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
        # 4. the table's families (controller.core.levers.table.PHASES: a row's ``plan``)
        for lever in PHASES:
            out.table_levers.extend(lever.plan(plan, view, book, cfg, plan.round_id))
        return out

    def comments(self, plan: Optional[Plan], view: LeverView, book: LeverBook) -> LeverPlan:
        """The AdminComment lines due this round (controller.core.levers.comments), within
        what Slurm's RPC budget leaves after the bands (one RPC a line); ``view.unjudged``
        gets none this round. Information, not a decision: the service plans them only
        when its levers reach Slurm."""
        # the bands the budget held back stay as the round's bands left them (settled with
        # these lines, a 0 here made the round stand and later rounds quiet while bands
        # waited: a burst of 1,000 jobs took 3.7x the bucket's time to be banded)
        out = LeverPlan(plan.round_id, now=view.now, bands_waiting=book.bands_waiting)
        out.comments, out.comment_keys, out.comment_due = book.comments.plan(
            plan, view.gpu, view.attained_gpu_s, self.config.comment_queues, view.preemptable, view.now,
            book.rpc.allowance(view.now), hold=view.unjudged)
        out.rpc_spent = len(out.comments)
        return out

    # -- the families planned in phases (the executor's results between them) --------------

    @property
    def strategy(self) -> preemption_rule.ControllerPreempts:
        """Who carries out the plan's victims (controller.core.levers.preemption.strategy_for)."""
        return preemption_rule.strategy_for(self.config.preemption)

    def handoff_checks(self, book: HandoffBook, state_of: Callable[[str], Optional[str]], now: float,
                       needs: Callable[[str], handoff_rule.Needs], extra_s: Callable[[object], float],
                       started: Callable[[str], tuple], round_id: int
                       ) -> list[tuple[HandoffEvent, Optional[dict], Optional[float]]]:
        """The watched handoffs that landed, failed, left or were let go this round
        (HandoffBook.check, within handoff_timeout_s plus ``extra_s`` of a watch), each
        with its decision entry (None for a job gone or a brake lifted: no decision) and
        a landed one's delay. ``started``: job id -> (its start time, Slurm's reason)."""
        timeout, out, checked = self.config.handoff_timeout_s, [], 0
        for event in book.check(state_of, now, timeout, needs, extra_s):
            if event.kind in ("gone", "released"):
                out.append((event, None, None))
                continue
            checked += 1
            start_time_s, reason = started(event.job_id)
            decision, delay = handoff_rule.handoff_decision(event, checked, round_id, now, timeout, start_time_s,
                                                            reason)
            out.append((event, decision, delay))
        return out

    def left_to_slurm(self, plan: Plan, jobs: Mapping, book: SlurmBook, bands: Iterable[SetBand],
                      bands_sent: bool) -> list[dict]:
        """``preemption: slurm``: the round's bands (``bands``: those carried out or said)
        remembered, Slurm's requeues of the victims it was left since observed, and the
        plan's victims left to it, citing the band decisions that rank them (none under
        the controller's own preemption). ``bands_sent``: whether bands reach Slurm."""
        strategy = self.strategy
        book.note_bands(bands)
        return [*strategy.requeues_seen(jobs, book, plan.round_id),
                *strategy.left_to_slurm(plan, jobs, book, bands_sent)]

    def kept_victims(self, plan: Plan, book: HandoffBook, nodes_of: Callable[[str], Iterable[str]],
                     leaving: set[str]) -> Optional[tuple[dict[str, str], list[tuple]]]:
        """The controller's own victims (None: it preempts none, slurmctld does): those the
        handoff rule keeps running (job id -> why) with their report entries, as
        (action, applied, detail)."""
        if not self.strategy.own_victims(plan):
            return None
        kept = book.kept(plan, nodes_of, leaving)
        return kept, [(action, False, f"kept running: {kept[action.job_id]}")
                      for action in plan.of_kind("preempt") if action.job_id in kept]

    def victims(self, plan: Plan, kept: Mapping[str, str], in_progress: set[str]) -> list[Preempt]:
        """The victims to look at now: not kept, not signalled already."""
        return preemption_rule.victims_to_signal(plan, kept, in_progress)

    def victim_step(self, action: Preempt, view: VictimView) -> VictimStep:
        """One victim's course: kept running (protected) or its signal and the requeue
        after its grace (controller.core.levers.preemption.preemption_step). One at a
        time: a victim's view may read its batch script."""
        return preemption_rule.preemption_step(action, view)

    def requeues(self, book: PreemptionBook, jobs: Mapping, graces: Mapping[str, float], now: float,
                 round_id: int, active_states: Iterable[str]) -> list[Resolution]:
        """The open preemptions' course this round: requeued after the grace (or ended
        inside it), closed when they resolved themselves (controller.core.levers.
        preemption.resolve_preemptions)."""
        settings = preemption_rule.RequeueSettings(self.config.requeue_ended, self.config.interval_s)
        return preemption_rule.resolve_preemptions(book, jobs, graces, now, round_id, settings, active_states)

    def moves(self, moves: Iterable, round_id: int) -> list[MovePartition]:
        """The MovePartition of each move planned (controller.partitions.moves plans them)."""
        return move_rule.move_actions(moves, round_id)

    def sharing(self, jobs: Iterable, nodes: Iterable, policy, book: SharingBook, view: SharingView,
                id_key: Callable[[str], tuple], round_id: int) -> tuple[list[str], list[tuple[ShareDecision, object]]]:
        """GPU sharing's notes (logged once) and its share decisions, each with its lever
        (SetMpsShare) or its decision entry (a wait, an advice: nothing set)."""
        planned = sharing_rule.plan_sharing(jobs, nodes, policy, book, view, id_key)
        return planned.notes, sharing_rule.share_levers(planned.decisions, round_id)

    def holds(self, book: SharingBook, round_id: int, id_key: Callable[[str], tuple]
              ) -> list[HoldJob | ReleaseHold]:
        """Hold the MPS jobs no GPU admits now; release those one admits again."""
        return sharing_rule.hold_levers(book, round_id, id_key)

"""The round's levers: the one service module that owns the lever planner
(controller.core.levers.planner) and its book (controller.core.levers.book.LeverBook),
loaded from the store's lever rows at start. ``Levers.run`` plans every lever of a round
with the planner (its ``step``: SiteFactor bands, pins (ReqNodeList) for consolidation,
a requeued job's BeginTime release, a pin's expiry; its phases: the handoffs watched,
the plan's victims left to slurmctld or signalled and requeued after their grace, the
partition moves, GPU sharing's shares and holds, the AdminComment lines), in today's
order, and carries each out through the executor, which alone knows the mode; intent
before action: a pin's row is written before the pin is set (and cleared with it), a
preemption's row opens once its signal was delivered, a requeue's preemption closes
before the requeue. The families' service modules (controller.service.round.preemption,
.handoff, .partition_moves, .sharing) keep only the reads (the contract, the partition
map, the pending reasons) and their rows; each one's own entry point, for a caller that
runs it alone (tests, benches), comes back here.

Slurm's own scheduler still starts the jobs: the bands make its priority order the
plan's order, a pin makes it place a skew-sensitive job where the plan placed it. The
pending tasks still inside a job array's record share one band, set on the
ArrayJobId, and are never pinned (slurm_plugin.arrays).
"""
from __future__ import annotations

from typing import Callable, Container, Iterable, Optional

from controller.core.actions import PinNodes, SetAdminComment, SetBand
from controller.core.levers.bands import RpcBudget
from controller.core.levers.book import Done, LeverBook
from controller.core.levers.comments import CommentBook
from controller.core.levers.planner import LeverPlan, LeverPlanner
from controller.core.levers.preemption import strategy_for
from controller.core.levers.table import SETTINGS
from controller.core.levers.view import LeverConfig
from controller.core.model import JobSpec
from controller.core.plan import Plan
from controller.service.acting.backend import ObservedJob
from controller.service.acting.executor import LeverExecutor
from controller.service.acting.restore import HOLD
from controller.service.ops.config import Config
from controller.service.ops.report import RoundReport, entry
from controller.service.round.accounting import Accounts
from controller.service.acting.backend import ACTIVE_STATES, TRANSIENT_STATES, numeric_id
from controller.service.round.snapshot import lever_view

# The families' service modules (round.preemption, .handoff, .partition_moves, .sharing:
# their reads and rows) import this one, so their objects come in untyped here.


def lever_config(config: Config, by_level: bool = True, by_index: bool = False) -> LeverConfig:
    """The planner's settings from the service's Config."""
    return LeverConfig(queue_count=len(config.queues_gpu_s) + 1, site_factor_band=config.site_factor_band,
                       thresholds_gpu_s=tuple(config.queues_gpu_s), by_level=by_level, by_index=by_index,
                       slurm_preempts=strategy_for(config.preemption).running_banded, preempt_qos=config.preempt_qos,
                       consolidate=config.placement == "consolidate", pack_limit=config.pack_limit,
                       pin_expiry_s=config.pin_expiry_s, requeue_settle_s=config.requeue_settle_s,
                       comment_queues=len(config.queues_gpu_s) + 1 if by_level else 0,  # 0: levels mean nothing
                       preemption=config.preemption, requeue_ended=config.preempt_requeue_ended,
                       interval_s=config.interval_s, handoff_timeout_s=config.handoff_timeout_s,
                       settings={key: getattr(config, key, default) for key, default in SETTINGS.items()})


def planner_for(config: Config) -> LeverPlanner:
    """The planner of a family's service module run on its own (tests, benches); the
    round's is ``Levers.planner``."""
    return LeverPlanner(lever_config(config))


class Levers:
    """The planner, its book and how both meet the executor and the store (``run``: a
    round's levers; the families' service modules come in through ``bind``). ``pins``: job
    id -> expiry (epoch s) of the ReqNodeList this controller set, kept in the store
    (written before the pin is set) so that a restarted or standby controller still
    clears it; ``pin_causes``: job id -> the start decision that pinned it (its expiry
    cites it); ``site_factors_set``: job id -> the SiteFactor last set (sent again only
    on change). All three are the book's (LeverBook)."""

    def __init__(self, config: Config, executor: LeverExecutor, accounts: Accounts, by_level: bool = True,
                 by_index: bool = False):
        self.config = config
        self.executor = executor
        self.accounts = accounts
        self.hold: set[str] = set()  # job ids no band is written to this round (the controller's)
        self.by_level = by_level
        self.by_index = by_index  # dgittins: inside a level by the plan's index (core.bands)
        self.store = accounts.store
        # every family's book (controller.core.levers.book), loaded from the store's rows:
        # the pins, the holds a previous run set (recorded by RecordingBackend: still ours
        # to release), the handoffs; the open preemptions are read from their rows each
        # round (controller.service.round.preemption)
        recorded = self.store.levers(config.cluster)
        self.book = LeverBook(RpcBudget(config.slurm_rpc_per_s, config.slurm_rpc_burst),
                              self.store.load_pins(config.cluster), self.store.pin_decisions(config.cluster),
                              CommentBook(config.admin_comment_refresh_s, config.admin_comment_max_per_round),
                              held=recorded.get(HOLD, {}), recorded=recorded)
        self.book.handoffs.load(self.store.load_handoffs(config.cluster))  # watched and braked handoffs
        self.planner = LeverPlanner(lever_config(config, by_level, by_index))
        # the families' service modules: their reads and rows (``bind``)
        self.handoffs = self.preemptions = self.mover = self.sharing = self.contract = None

    def bind(self, handoffs, preemptions, mover, sharing, contract) -> None:
        """The families' service modules the round reads through and persists with
        (controller.service.round.handoff, .preemption, .partition_moves, .sharing, .contract)."""
        self.handoffs, self.preemptions, self.mover, self.sharing = handoffs, preemptions, mover, sharing
        self.contract = contract

    def run(self, plan: Plan, observation, jobs, now: float, report: RoundReport, requeueing: Container[str],
            leaving: set[str], spec_of: Optional[Callable[[str], Optional[JobSpec]]] = None) -> None:
        """Every lever of the round, planned by the planner's phases and carried out in
        today's order (``jobs``: the round's split observation, RoundInput.split): the
        handoffs watched; the bands, starts' pins and releases, expired pins; the plan's
        victims (left to slurmctld, or signalled, and requeued after their grace); the
        partition moves; GPU sharing; the AdminComment lines."""
        observed, preemptions = jobs.observed, self.preemptions
        planner = self.planner
        check_handoffs(planner, self.handoffs, observed, now, report, preemptions.grace_for, observation.nodes,
                       spec_of)
        kept_from_slurm = planner.strategy.kept_running(observed, lambda job: preemptions.protected(job, now))
        step = self.apply(plan, observed, now, report, jobs.cpu_pending, requeueing, jobs.shared, kept_from_slurm,
                          jobs.cpu_running, self.contract.may_preempt_slurms)
        self.preempt(plan, observed, now, report, leaving, step.bands)
        # a job this controller pinned is never moved
        move_partitions(planner, self.mover, plan, observed, observation.nodes, now, report, set(self.pins))
        share(planner, self.sharing, observation, report)
        self.comment(plan, observed, now)

    def comment(self, plan: Plan, observed: dict[str, ObservedJob], now: float) -> None:
        """The AdminComment lines due. Information, not a decision: a read-only executor
        (observe, shadow) skips it."""
        if self.config.admin_comment and not self.executor.skips(SetAdminComment):
            self.write_comments(plan, observed, now, lambda job: not self.preemptions.protected(job, now))

    @property
    def pins(self) -> dict[str, float]:
        return self.book.pins

    @property
    def pin_causes(self) -> dict[str, str]:
        return self.book.pin_causes

    @property
    def site_factors_set(self) -> dict[str, int]:
        return self.book.bands_sent

    @property
    def rpc(self) -> RpcBudget:
        return self.book.rpc

    @property
    def bands_waiting(self) -> int:
        """Changed bands the budget held back this round (sent in a later one)."""
        return self.book.bands_waiting

    def apply(self, plan: Plan, observed: dict[str, ObservedJob], now: float, report: RoundReport,
              cpu_pending: dict[str, ObservedJob] | None = None, requeueing: Container[str] = (),
              shared: dict[str, ObservedJob] | None = None, kept_from_slurm: Container[str] = (),
              cpu_running: dict[str, ObservedJob] | None = None,
              may_preempt: Optional[Callable[[ObservedJob], bool]] = None) -> LeverPlan:
        """Plan this round's bands, starts and pin expiries (LeverPlanner.step) and carry
        them out. ``requeueing``: jobs that ended inside their grace period and are
        requeued this round; they keep their pin (Slurm keeps the ReqNodeList on requeue).
        ``shared``: the jobs that ask for MPS shares and no whole GPU (never in the plan;
        the pending ones get a band). ``kept_from_slurm``: under ``preemption: slurm``, the
        running jobs slurmctld must not preempt (Contract.why_not_slurms). ``cpu_running``
        (only under ``preemption: slurm``): the running CPU-only jobs; ``may_preempt``:
        whether a job's QOS lets it preempt preempt_qos's jobs."""
        view = lever_view(now, observed, self.accounts, cpu_pending=cpu_pending, shared=shared,
                          cpu_running=cpu_running, requeueing=requeueing, kept_from_slurm=kept_from_slurm,
                          may_preempt=may_preempt, unjudged=self.hold, acting=self.executor.sends(SetBand))
        levers = self.planner.step(plan, view, self.book)
        done = self.carry_out(levers)
        for action, applied, detail in levers.entries(done):
            report.applied.append(entry(action, applied=applied, detail=detail))
        return levers

    def write_comments(self, plan: Plan, observed: dict[str, ObservedJob], now: float,
                       preemptable: Callable[[ObservedJob], bool]) -> int:
        """This round's AdminComment lines (LeverPlanner.comments), carried out; returns
        the lines written. Information, not a decision: the caller asks only when the
        executor pulls levers."""
        view = lever_view(now, observed, self.accounts, unjudged=self.hold, acting=self.executor.sends(SetBand),
                          preemptable=preemptable)
        levers = self.planner.comments(plan, view, self.book)
        done = self.carry_out(levers)
        return sum(1 for action in levers.comments if getattr(done.of(action), "applied", False))

    def carry_out(self, levers: LeverPlan) -> Done:
        """Every lever of ``levers`` through the executor, in order, and the book settled
        with what it did: a pin's row written ahead (a crash between the row and the pin
        leaves a row to clear), the rows of the pins cleared removed."""
        executor, cluster = self.executor, self.config.cluster
        done = Done()
        if levers.bands:
            done.bands = executor.apply_bands(levers.bands)
        for lever in levers.one_by_one():
            if isinstance(lever, PinNodes):
                executor.when_acting(lambda pin=lever: self.store.set_pin(cluster, pin.job_id, pin.expires_s,
                                                                          pin.cause_id))
            done.by_id[lever.decision_id] = executor.apply(lever)
        for job_id, stopped in levers.stopped_seen.items():
            self.accounts.stopped_at.setdefault(job_id, stopped)
        delta = self.book.settle(levers, done)
        for job_id in delta.pins_cleared:
            executor.when_acting(lambda job_id=job_id: self.store.clear_pin(cluster, job_id))
        return done

    def forget(self, job_id: str) -> None:
        self.book.forget(job_id)

    def preempt(self, plan: Plan, observed: dict[str, ObservedJob], now: float, report: RoundReport,
                leaving: set[str], bands: list[SetBand]) -> None:
        """The plan's victims: under ``preemption: slurm`` left to slurmctld, citing the
        round's ``bands`` (and its requeues logged when observed); otherwise signalled
        now, but those the handoff rule keeps (a job the plan starts already had its
        preemption), their beneficiaries watched; then the grace periods over requeued
        (also those opened before a switch to slurm)."""
        planner, preemptions, handoffs = self.planner, self.preemptions, self.handoffs
        report.applied.extend(planner.left_to_slurm(plan, observed, self.book.slurm, bands,
                                                    self.executor.sends(SetBand)))
        own = planner.kept_victims(plan, handoffs.book, handoffs.nodes_of(observed), leaving)
        if own is not None:  # the controller's own: signal, grace, requeue
            kept, entries = own
            report.applied.extend(entry(action, applied=applied, detail=detail) for action, applied, detail in entries)
            begin_preemptions(planner, preemptions, plan, observed, now, report, kept)
            handoffs.expect(plan, report, now)
        advance_preemptions(planner, preemptions, observed, now, report)


def share(planner: LeverPlanner, sharing, observation, report: RoundReport) -> None:
    """GPU sharing (``sharing``: controller.service.round.sharing, its book and reads):
    each share decision logged once, with its SetMpsShare or as a decision without a
    lever (a wait, an advice); the holds of the jobs no GPU admits and the releases of
    those one admits again, each settled into the book."""
    if not sharing.config.gpu_sharing:
        return
    book, executor = sharing.book, sharing.executor
    try:
        notes, decisions = planner.sharing(observation.jobs, observation.nodes, sharing.config.colocation_policy(),
                                           book, sharing.view(observation), numeric_id, report.round_id)
    except Exception as err:  # an optional layer: never lose the round over it
        sharing.log_once(f"GPU sharing skipped: {type(err).__name__}: {err}")
        return
    for note in notes:
        sharing.log_once(note)
    for decision, lever in decisions:
        if isinstance(lever, dict):  # a decision without a lever (waits, advice): logged, nothing set
            report.applied.append(lever)
        else:
            outcome = executor.apply(lever)
            report.applied.append(entry(lever, applied=outcome.applied, detail=outcome.detail))
        book.logged[decision.job_id] = decision.signature
    for action in planner.holds(book, report.round_id, numeric_id):
        outcome = executor.apply(action)
        report.applied.append(entry(action, applied=outcome.applied, detail=outcome.detail))
        book.settle_hold(action, outcome.failed)
    book.end_round()


def move_partitions(planner: LeverPlanner, mover, plan: Plan, observed: dict[str, ObservedJob], nodes: list,
                    now: float, report: RoundReport, pinned: set[str] = frozenset()) -> None:
    """The round's partition moves (``mover``: controller.service.round.partition_moves, its
    reads and planned moves; ``pinned``: job ids this controller pinned: never moved),
    each carried out and settled (a refusal backs off, anything else starts the cool-down)."""
    moves = mover.planned(plan, observed, nodes, now, pinned)
    for action in planner.moves(moves, report.round_id):
        outcome = mover.executor.apply(action)
        mover.settle(action, outcome, now)
        report.applied.append(entry(action, applied=outcome.applied, detail=outcome.detail))


def check_handoffs(planner: LeverPlanner, handoffs, observed: dict[str, ObservedJob], now: float,
                   report: RoundReport, grace_of: Callable[[ObservedJob, float], float] = lambda job, at: 0.0,
                   nodes: Iterable = (), spec_of: Optional[Callable[[str], Optional[JobSpec]]] = None) -> None:
    """Log each watched job that started, or that did not within handoff_timeout_s (plus
    its victims' grace beyond preempt_grace_s; ``grace_of``: a job's grace), and lift the
    brakes whose jobs' needs changed (``nodes``: the observed nodes; ``spec_of``: a job's
    JobSpec this round); ``handoffs`` (controller.service.round.handoff) persists each."""
    checks = planner.handoff_checks(
        handoffs.book, lambda j: observed[j].state if j in observed else None, now,
        handoffs.needs(observed, nodes, spec_of), handoffs.extra_s(observed, grace_of),
        lambda j: (observed[j].start_time_s, observed[j].reason), report.round_id)
    for event, decision, delay in checks:
        handoffs.settle(event, delay)
        if decision is not None:
            report.applied.append(decision)


def begin_preemptions(planner: LeverPlanner, preemptions, plan: Plan, observed: dict[str, ObservedJob],
                      now: float, report: RoundReport, kept: Container[str] = ()) -> None:
    """Signal the plan's victims now, but those in ``kept`` (the handoff rule's, logged by
    the caller); ``advance_preemptions`` requeues them after the grace period. The
    preemption's row opens once its signal was delivered (intent before the requeue), and
    only when the executor pulls levers; a read-only one only says the requeue."""
    executor, contract = preemptions.executor, preemptions.contract
    victims = planner.victims(plan, kept, set())
    in_progress = (executor.when_acting(preemptions.leaving) or set()) if victims else set()
    for action in planner.victims(plan, kept, in_progress):
        step = planner.victim_step(action, preemptions.victim_view(observed[action.job_id], now))
        job = observed[action.job_id]
        if step.kept:
            report.applied.append(entry(action, applied=False, detail=step.kept))
            continue
        if step.signal is not None:
            outcome = executor.apply(step.signal)
            if outcome.failed:
                report.applied.append(entry(action, applied=False,
                                            detail=contract.signal_failed(job.job_id, outcome.detail)))
                continue
        opened = executor.when_acting(lambda: preemptions.open(job, now, action.decision_id))
        if opened is None:  # a read-only executor: the requeue after the grace is only said
            executor.apply(step.said)
            report.applied.append(entry(action, applied=False, detail=executor.would_text(step.how)))
        elif opened:
            contract.signal_failures.pop(job.job_id, None)
            report.applied.append(entry(action, applied=True, detail=step.how))


def advance_preemptions(planner: LeverPlanner, preemptions, observed: dict[str, ObservedJob],
                        now: float, report: RoundReport) -> None:
    """Requeue signalled jobs whose grace period is over; close what resolved itself.
    Each requeue cites the preemption decision that signalled the job."""
    book = preemptions.acting_book()
    for done in planner.requeues(book, observed, preemptions.graces(book, observed), now, report.round_id,
                                 ACTIVE_STATES | TRANSIENT_STATES):
        if done.kind == "finished":
            preemptions.finish(done.job_id, now)
        elif done.kind == "requeued":
            preemptions.close_requeued(done.job_id, now)
        else:
            if done.credit:
                # Written ahead: the run's service up to now (the next observation will
                # not see it running) and the closed preemption commit before the requeue,
                # so a store that cannot be written (or a lost lease) stops it; a crash
                # after the write leaves a running job the next plan decides about again.
                preemptions.accounts.credit_until(observed[done.job_id], preemptions.clock())
            # the preemption closed (counted) ahead, then the job requeued, citing it
            preemptions.close_requeued(done.requeue.job_id, now)
            outcome = preemptions.executor.apply(done.requeue)
            if outcome.applied:
                preemptions.accounts.stopped_at[done.requeue.job_id] = now
            report.applied.append(entry(done.requeue, applied=outcome.applied, detail=outcome.detail))


class AdminComments(CommentBook):
    """A CommentBook with its own RPC budget (``budget``; None: none) that carries its
    writes out through an executor: the AdminComment lines written one book at a time
    (tests, benches; the round writes them through ``Levers.comment``)."""

    def __init__(self, refresh_s: float = 300.0, max_per_round: int = 50, budget: Optional[RpcBudget] = None):
        super().__init__(refresh_s, max_per_round)
        self.budget = budget

    def apply(self, plan, observed: dict[str, ObservedJob], attained_gpu_s: Callable[[str], float], queues: int,
              preemptable, executor, now: float) -> int:
        """Write this round's AdminComment changes through ``executor``; returns the
        writes applied."""
        limit = self.budget.allowance(now) if self.budget is not None else None
        actions, keys, due = self.plan(plan, observed, attained_gpu_s, queues, preemptable, now, limit)
        if self.budget is not None:
            self.budget.spend(len(actions))
        outcomes = {action.decision_id: executor.apply(action).applied for action in actions}
        return self.settle(actions, keys, due, lambda action: outcomes[action.decision_id], now)

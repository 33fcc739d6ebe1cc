"""A replay that runs the controller's round and predicts every lever it pulls.

The other replay loops execute the engine's Start / Preempt on the simulated
cluster directly. This one does what the controller does (controller.service.
daemon ``Controller._round``): rounds on a fixed grid; each round's plan is turned
into lever actions by the same planner (controller.core.levers.planner.LeverPlanner: the
SiteFactor bands, pins, their expiry, the BeginTime release in its ``step``; the handoffs
watched, the checkpoint signal and the requeue after the grace period in its phases,
as controller.service.round.levers calls them), in the controller's order, and applied
through the same typed table (controller.core.levers.table.LEVERS) to ``SimSlurm``, the
simulated slurmctld (controller.replay.slurmctld). Then, as slurmctld's multifactor
priority and scheduler would, ``SimSlurm.schedule`` starts the pending jobs in SiteFactor order
(ties: the older job first), each where it fits, a pinned job only on its pin, a
requeued job only once released. So the bands are the simulator's start order, and
a wrong band changes what starts.

tests/test_lever_parity.py runs one workload through this and through the
controller against a scripted slurmctld and asserts the same actions in the same
rounds. The handoff rule (controller.core.levers.handoffs) holds back the same preemptions
as in the controller: a handoff fails here when SimSlurm does not start the job the
preemption was for (another job took the GPUs first), and the job is then braked
until a job on its nodes leaves, as in the controller. With ``admin_comment`` the
AdminComment lines are written too, by the same planner and book. With ``plan_moves``
the partition moves are planned from the same core input as the controller's
(controller.core.levers.moves.planned_moves; the partitions planner is handed in by the
caller, a room the replay may not import). With ``sharing_policy`` GPU sharing's shares
and holds are planned by the same planner phases (``LeverPlanner.sharing``, ``holds``)
for the MPS-only jobs handed in (``mps_jobs``; SimSlurm lists them pending and never
starts them), each node's GPUs free at the round's start its MPS pool (no MPS job runs).
The service
distribution is not learned here (as the controller learns it from its store), so
policies that read one (dgittins) plan without it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Optional

from controller.core.actions import LeverAction, SetBand
from controller.core.engine import Engine
from controller.core.levers.bands import RpcBudget
from controller.core.levers.book import Done, LeverBook
from controller.core.levers.comments import CommentBook
from controller.core.levers.handoffs import ClusterView, HandoffBook, Needs
from controller.core.levers.moves import planned_moves
from controller.core.levers.planner import LeverPlanner
from controller.core.levers.sharing import SharingBook, sharing_view
from controller.core.levers.preemption import OpenPreemption, PreemptionBook, VictimView, strategy_for
from controller.core.levers.table import LEVERS, SETTINGS
from controller.core.levers.view import LeverConfig, LeverView
from controller.core.model import InputError, JobSpec, JobState, Snapshot
from controller.core.placement import set_aside
from controller.core.protection import why_protected
from controller.core.policies import PolicyContext
from controller.core.round_writer import list_after
from controller.replay.cluster import plannable_free, RunState, SimCluster
from controller.replay.run_config import EPS, SimConfig
from controller.replay.slurmctld import SimSlurm, SlurmQos


@dataclass(frozen=True)
class LeverSettings:
    """The controller's settings the levers need (controller.service.ops.config names)."""

    site_factor_band: int = 100000
    pin_expiry_s: float = 300.0
    requeue_settle_s: float = 5.0
    handoff_timeout_s: float = 120.0
    signal_name: str = "USR1"  # the workload's declared checkpoint signal (--signal=B:USR1@...)
    batch_only: bool = True
    # Slurm's RPC budget for the bands (controller.core.levers.RpcBudget; 0: none)
    slurm_rpc_per_s: float = 1.0
    slurm_rpc_burst: int = 20
    # who carries out the plan's victims (controller.core.levers.preemption.strategy_for):
    # under "slurm" the running jobs are banded too and the controller signals nobody
    preemption: str = "controller"
    # the AdminComment lines (controller.core.levers.comments), and the protection rule the
    # line's "preemptable" reads (controller.core.protection.why_protected)
    admin_comment: bool = False
    admin_comment_refresh_s: float = 300.0
    admin_comment_max_per_round: int = 50
    preempt_min_runtime_s: float = 60.0
    preempt_max_per_job: Optional[int] = 10
    table_settings: Mapping[str, object] = field(default_factory=dict)  # the table's families' (LeverConfig.settings)
    # the partition moves: controller.partitions.moves.plan_moves with its settings bound (a room
    # the replay may not import: its caller hands it in; None: no moves), and their cool-down
    plan_moves: Optional[Callable] = None
    partition_move_cooldown_s: float = 600.0
    # GPU sharing: the MPS co-location policy (controller.core.levers.colocation; None: no
    # sharing) and the MPS-only jobs, as (job id, submitted at, shares, user, comment)
    sharing_policy: Optional[object] = None
    mps_jobs: tuple = ()


@dataclass
class LeverReplay:
    """Per round (1-based ids, as the controller's): its lever actions in the order
    applied, and the jobs the simulated slurmctld started after it, as (job id, nodes)."""

    levers: list[list[LeverAction]] = field(default_factory=list)
    starts: list[list[tuple[str, tuple[str, ...]]]] = field(default_factory=list)
    round_times_s: list[float] = field(default_factory=list)
    # jobs not finished when the replay stopped at max_rounds (0: it ran to the end)
    unfinished_jobs: int = 0
    # as SimResult's: preemptions (signals that ended in a requeue), those whose
    # beneficiaries Slurm's scheduler did not start on the GPUs they freed, and the
    # jobs that waited behind a usable victim more than two rounds in a row
    preemptions: int = 0
    useless_preemptions: int = 0
    waited_behind_victim: int = 0


MAX_LEVER_ROUNDS = 100_000  # a replay this long is a mistake (a tiny interval), not a study


class _OwnRecord:
    """SimSlurm has a record per job (no shared records, no gangs): a job's band and
    levers name its own id."""

    job_id: str

    @property
    def band_id(self) -> str:
        return self.job_id

    @property
    def lever_id(self) -> str:
        return self.job_id


@dataclass(frozen=True)
class _SimJob(_OwnRecord):
    """A job of SimSlurm as the lever planner sees it (controller.core.levers.view.JobFacts).
    SimSlurm has a record per job (no shared records, no gangs): its band and levers are
    its own, and a pin may name it."""

    job_id: str
    state: str
    site_factor: Optional[int]
    required_nodes: tuple
    excluded_nodes: tuple = ()
    qos: str = ""
    admin_comment: str = ""
    pinnable: bool = True


@dataclass(frozen=True)
class _MoveJob(_OwnRecord):
    """A job of SimSlurm as the partition moves read it (controller.core.levers.moves.
    planned_moves: the service's ObservedJob fields it reads)."""

    job_id: str
    state: str
    gpus: int
    partition: str
    submit_time_s: float
    gpus_by_node: tuple = ()
    start_time_s: Optional[float] = None
    required_nodes: tuple = ()


def _id_key(job_id: str) -> tuple:
    """Slurm's numeric job order (the service's numeric_id)."""
    return (int(job_id),) if job_id.isdigit() else (float("inf"), job_id)


@dataclass(frozen=True)
class _MpsJob(_OwnRecord):
    """A pending MPS-only job of SimSlurm as GPU sharing reads it (controller.core.levers.
    sharing: the service's ObservedJob fields it reads)."""

    job_id: str
    mps: int
    user: str
    comment: str
    submit_time_s: float
    waits_for: str = ""
    state: str = "PENDING"
    gpus: int = 0
    nodes: tuple = ()
    requeueable: bool = True
    restart_count: int = 0


@dataclass(frozen=True)
class _SharedNode:
    """A node as GPU sharing reads it: its free GPUs (none in use through MPS: SimSlurm
    never starts an MPS job)."""

    name: str
    gpus_free: int
    gpus_mps: int = 0
    available: bool = True


@dataclass(frozen=True)
class _Victim:
    """A signalled job SimSlurm still runs, as the requeue rule reads it (a job SimSlurm
    never requeues by itself nor ends inside its grace)."""

    state: str = "RUNNING"
    restart_count: int = 0
    end_time_s: Optional[float] = None


@dataclass(frozen=True)
class _Outcome:
    """What SimSlurm did of a lever (controller.core.levers.book.Outcome): a lever it
    refuses (the job no longer in the state the lever needs) is not applied, and not a
    failure Slurm may have carried out all the same."""

    applied: bool
    failed: bool = False
    detail: str = ""


class LeverRound:
    """The controller's round of levers on SimSlurm: the bands, the starts' pins and
    releases and the pins' expiry planned by the controller's own LeverPlanner
    (controller.core.levers.planner) from a view of SimSlurm, its LeverBook kept here
    as the service keeps it; then the preemptions (the open ones: OpenPreemption, as the
    store's rows) and the handoffs, planned by the same planner's phases."""

    def __init__(self, settings: LeverSettings, engine: Engine, slurm: SimSlurm, grace_s: float):
        self.settings = settings
        self.engine = engine
        self.slurm = slurm
        self.grace_s = grace_s
        self.stopped_at: dict[str, float] = {}
        self.open: dict[str, OpenPreemption] = {}  # signalled, not yet requeued, oldest first
        self.handoffs = HandoffBook()
        self.applied: list[LeverAction] = []
        self.book = LeverBook(RpcBudget(settings.slurm_rpc_per_s, settings.slurm_rpc_burst),
                              comments=CommentBook(settings.admin_comment_refresh_s,
                                                   settings.admin_comment_max_per_round))
        cfg = engine.config
        self.planner = LeverPlanner(LeverConfig(
            queue_count=len(cfg.thresholds_gpu_s) + 1, site_factor_band=settings.site_factor_band,
            thresholds_gpu_s=tuple(cfg.thresholds_gpu_s), by_level=engine.policy.discretized,
            by_index=engine.policy.bands_by_index, consolidate=cfg.placement == "consolidate",
            pack_limit=cfg.pack_limit, pin_expiry_s=settings.pin_expiry_s,
            requeue_settle_s=settings.requeue_settle_s, requeue_ended=False,
            handoff_timeout_s=settings.handoff_timeout_s, preemption=settings.preemption,
            slurm_preempts=strategy_for(settings.preemption).running_banded,
            comment_queues=len(cfg.thresholds_gpu_s) + 1 if engine.policy.discretized else 0,
            settings={**SETTINGS, **settings.table_settings}))
        # the partitions each job was submitted to (its allowed set, kept from first sight)
        self.submitted = {job_id: ",".join(job.spec.partitions) for job_id, job in slurm.by_id.items()}
        self.interval_s = 60.0  # the round interval (replay_levers sets its own)
        self.sharing_book = SharingBook()
        # every victim's view: the workload's declared signal, the replay's grace
        self.victim_view = VictimView("", settings.signal_name, settings.batch_only, settings.signal_name, grace_s)

    @property
    def pins(self) -> dict[str, float]:
        return self.book.pins

    @property
    def bands_waiting(self) -> int:
        return self.book.bands_waiting

    def view(self, now: float) -> LeverView:
        """What the planner may know of SimSlurm's jobs: the pending, running and
        signalled ones, with their band and node list as SimSlurm holds them."""
        slurm = self.slurm
        jobs: dict[str, _SimJob] = {}
        for job_id, job in slurm.by_id.items():
            if job_id in slurm.pending:
                state = "PENDING"
            elif job.running or job_id in slurm.leaving:
                state = "RUNNING"
            else:
                continue
            # a declared job runs in preempt_qos (reported as "": the controller's reading of
            # a QOS not reported), an undeclared one in "normal", which slurmctld never preempts
            jobs[job_id] = _SimJob(job_id, state, slurm.site_factor.get(job_id), slurm.pins.get(job_id, ()),
                                   qos="" if job.spec.preemptable else "normal",
                                   admin_comment=slurm.admin_comment.get(job_id, ""))
        # the running jobs slurmctld must not preempt (the controller's Levers.step:
        # strategy.kept_running with Preemptions.protected)
        kept = strategy_for(self.settings.preemption).kept_running(
            jobs, lambda job: self.protected(job.job_id, now))
        return LeverView(now=now, gpu=jobs, skew=lambda job_id: slurm.by_id[job_id].spec.skew,
                         started_once={j for j, job in slurm.pending.items() if job.first_start_s is not None},
                         begin_time_ours=lambda job: job.job_id in slurm.held, stopped_at=self.stopped_at,
                         kept_from_slurm=kept)

    def protected(self, job_id: str, now: float) -> str:
        """Why a running job must not be preempted now, or '' (the controller's
        Preemptions.protected): the contract (declared and requeue-able; under
        ``preemption: slurm`` its --signal's lead fits in the GraceTime, as the
        workload's does), then preempt_min_runtime_s / preempt_max_per_job."""
        state, settings = self.slurm.by_id[job_id], self.settings
        if not state.spec.preemptable:
            return "not requeueable (--no-requeue or JobRequeue=0): never preempted"
        run_start = state.run_start_s if state.run_start_s is not None else now
        return why_protected(run_start, state.preemptions, now, settings.preempt_min_runtime_s,
                             settings.preempt_max_per_job)

    def apply_bands(self, bands: list[SetBand]) -> None:
        """The round's SiteFactor changes in one call (as LeverExecutor.apply_bands)."""
        if bands:
            self.applied.extend(bands)
            self.slurm.set_site_factors({band.job_id: band.site_factor for band in bands})

    def apply(self, action: LeverAction) -> bool:
        """The executor: the action's lever from the shared table, on SimSlurm; False
        when SimSlurm refuses it (the job is no longer in the state the lever needs)."""
        self.applied.append(action)
        lever = LEVERS[type(action)]
        try:
            lever.method(self.slurm)(action.job_id, *lever.args(action))
        except RuntimeError:
            return False
        return True

    def run(self, plan, now: float) -> list[LeverAction]:
        slurm = self.slurm
        self.applied = []
        leaving = set(self.open)  # signalled before this round (the controller's Preemptions.leaving)
        self.free_seen = dict(slurm.cluster.free_by_node)  # the nodes as observed at the round's start
        # 0. the handoffs watched (their decisions are the controller's report: not kept here)
        self.planner.handoff_checks(self.handoffs, self._state, now, self._needs(), lambda watch: 0.0,
                                    lambda job_id: (None, ""), plan.round_id)
        # 1-3. the bands, the starts' pins and releases, the expired pins: the controller's
        # planner (controller.core.levers.planner), carried out on SimSlurm, its book settled
        levers = self.planner.step(plan, self.view(now), self.book)
        done = Done()
        if levers.bands:
            self.apply_bands(levers.bands)
            done.bands = _Outcome(True)
        for lever in [*levers.start_levers(), *levers.unpins, *levers.table_levers]:
            done.by_id[lever.decision_id] = _Outcome(self.apply(lever))
        for job_id, stopped in levers.stopped_seen.items():
            self.stopped_at.setdefault(job_id, stopped)
        self.book.settle(levers, done)
        # 4. the plan's victims: signalled (the controller's round.levers.begin_preemptions),
        # but those the handoff rule keeps (a job the plan starts already had its preemption)
        start_ids = [action.job_id for action in plan.of_kind("start")]
        own = self.planner.kept_victims(
            plan, self.handoffs, lambda job_id: [node for node, _ in slurm.by_id[job_id].placement], leaving)
        if own is not None:  # None: no victim of the controller's own (none, or slurmctld's)
            victims, causes = [], []
            for action in self.planner.victims(plan, own[0], set(self.open)):
                step = self.planner.victim_step(action, self.victim_view)
                if self.apply(step.signal):
                    self.open[action.job_id] = OpenPreemption(action.job_id, now, 0, action.decision_id)
                    victims.append(action.job_id)
                    causes.append(action.decision_id)
            self.handoffs.expect(start_ids, now, tuple(victims), tuple(causes))
        # 5. grace periods over: requeued (round.levers.advance_preemptions), oldest first;
        # a victim that left SimSlurm meanwhile ended
        running = {job_id: _Victim() for job_id in self.open if job_id in slurm.leaving}
        graces = {job_id: self.grace_s for job_id in running}
        for resolved in self.planner.requeues(PreemptionBook(self.open.values()), running, graces, now,
                                              plan.round_id, ("RUNNING", "PENDING")):
            del self.open[resolved.job_id]
            if resolved.requeue is not None and self.apply(resolved.requeue):
                self.stopped_at[resolved.job_id] = now
        # 6. the partition moves (the controller's round.levers.move_partitions)
        if self.settings.plan_moves is not None:
            self.move(plan, now)
        # 7. GPU sharing's shares and holds (the controller's round.levers.share)
        if self.settings.sharing_policy is not None:
            self.share(plan, now)
        # 8. the AdminComment lines (the controller's Levers.comment: after the partition
        # moves and GPU sharing)
        if self.settings.admin_comment:
            self.comment(plan, now)
        return self.applied

    def move(self, plan, now: float) -> None:
        """The moves the partitions planner plans (the same core input as the controller's:
        controller.core.levers.moves.planned_moves, from SimSlurm's jobs, their submitted
        partitions and its partition map), carried out on SimSlurm, the book settled."""
        slurm = self.slurm
        jobs: dict[str, _MoveJob] = {}
        for job_id, job in slurm.by_id.items():
            if job_id in slurm.pending:
                jobs[job_id] = _MoveJob(job_id, "PENDING", job.num_gpus, self.current_partition(job_id),
                                        job.spec.submit_time_s, required_nodes=slurm.pins.get(job_id, ()))
            elif job.running or job_id in slurm.leaving:
                jobs[job_id] = _MoveJob(job_id, "RUNNING", job.num_gpus, self.current_partition(job_id),
                                        job.spec.submit_time_s, tuple(job.placement), job.run_start_s)
        members: dict[str, list[str]] = {}
        for node in slurm.cluster.nodes:
            for partition in node.partitions:
                members.setdefault(partition, []).append(node.name)
        moves = planned_moves(plan.order, jobs, lambda job_id: self.submitted.get(job_id), now, self.book.moves,
                              set(self.book.pins), lambda: members, self.settings.plan_moves, slurm.cluster.nodes)
        for action in self.planner.moves(moves, plan.round_id):
            applied = self.apply(action)
            self.book.moves.settle(action.job_id, not applied, now, self.interval_s,
                                   self.settings.partition_move_cooldown_s)

    def share(self, plan, now: float) -> None:
        """The MPS jobs' shares and holds (LeverPlanner.sharing and holds, the view built by
        controller.core.levers.sharing.sharing_view from SimSlurm's holds), carried out on
        SimSlurm, the book settled as the controller's round.levers.share does."""
        slurm, book = self.slurm, self.sharing_book
        for job_id, at, shares, _, _ in self.settings.mps_jobs:
            if at <= now + EPS and job_id not in slurm.mps_pending:
                slurm.mps_pending[job_id] = shares
        jobs = [_MpsJob(job_id, slurm.mps_share.get(job_id, shares), user, comment, at,
                        "admin_hold" if job_id in slurm.admin_held else "")
                for job_id, at, shares, user, comment in self.settings.mps_jobs if job_id in slurm.mps_pending]
        nodes = [_SharedNode(name, free) for name, free in sorted(self.free_seen.items())]
        view = sharing_view(jobs, lambda job: job.waits_for, lambda job: job.waits_for)
        _, decisions = self.planner.sharing(jobs, nodes, self.settings.sharing_policy, book, view, _id_key,
                                            plan.round_id)
        for decision, lever in decisions:
            if not isinstance(lever, dict):  # a decision without a lever (waits, advice): nothing set
                self.apply(lever)
            book.logged[decision.job_id] = decision.signature
        for action in self.planner.holds(book, plan.round_id, _id_key):
            book.settle_hold(action, not self.apply(action))
        book.end_round()

    def current_partition(self, job_id: str) -> str:
        """The job's partition field: as moved, else as submitted."""
        return self.slurm.partition.get(job_id) or self.submitted.get(job_id, "")

    def comment(self, plan, now: float) -> None:
        """The AdminComment lines due (LeverPlanner.comments), written to SimSlurm; a
        running job is "preemptable" when declared and not protected by the time and count
        rules (the controller's Preemptions.protected)."""
        slurm = self.slurm

        def preemptable(job: _SimJob) -> bool:
            return not self.protected(job.job_id, now)

        view = replace(self.view(now), attained_gpu_s=lambda job_id: slurm.by_id[job_id].attained_gpu_s,
                       preemptable=preemptable)
        levers = self.planner.comments(plan, view, self.book)
        done = Done()
        for lever in levers.comments:
            done.by_id[lever.decision_id] = _Outcome(self.apply(lever))
        self.book.settle(levers, done)

    def _needs(self):
        """job id -> what its start depends on now (controller.core.levers.handoffs.Needs), from
        the jobs holding GPUs (running or leaving), listed once per round when asked."""
        slurm, view = self.slurm, []

        def needs(job_id: str) -> Needs:
            if not view:  # what each holder holds and what is free: the brake's fit rule, as the controller's
                holders = [job for job in slurm.by_id.values() if job.placement]
                view.append(ClusterView(slurm.cluster.nodes, [
                    (job.job_id, tuple(node for node, _ in job.placement)) for job in holders],
                    held={job.job_id: tuple((node, gpus, 0, 0) for node, gpus in job.placement) for job in holders},
                    free_gpus=slurm.cluster.free_by_node))
            return view[0].needs(slurm.by_id[job_id].spec)
        return needs

    def _state(self, job_id: str) -> str:
        """The job's state as Slurm reports it (a signalled job still runs)."""
        job = self.slurm.by_id[job_id]
        if job.running or job_id in self.slurm.leaving:
            return "RUNNING"
        return "PENDING" if job_id in self.slurm.pending else "COMPLETED"


def replay_levers(cfg: SimConfig, specs: Iterable[JobSpec], settings: LeverSettings = LeverSettings(),
                  start_s: Optional[float] = None, max_rounds: int = MAX_LEVER_ROUNDS,
                  narrowed: Mapping[str, str] = {}) -> LeverReplay:
    """Replay ``specs`` (with durations; a gang larger than a node takes whole nodes)
    with a round every
    ``cfg.round_interval_s`` from ``start_s`` (default: the first submission) until
    every job finished, or for ``max_rounds`` (then ``unfinished_jobs`` counts the rest);
    returns each round's levers and starts. ``narrowed``: job id -> the partition field
    a job still pending after its first round is left in (as a site's job_submit plugin
    or an admin narrows it; its allowed set stays the partitions it was submitted to)."""
    interval = cfg.round_interval_s
    if interval is None:
        raise InputError("round-interval-s: the lever replay needs a fixed round interval")
    jobs = [JobState(spec=spec, index=i) for i, spec in enumerate(sorted(specs, key=lambda s: s.submit_time_s))]
    for job in jobs:
        if job.spec.duration_s is None:
            raise InputError(f"job {job.job_id}: the simulator needs a duration")
        if job.num_gpus > cfg.gpus_per_node and job.num_gpus % cfg.gpus_per_node:
            raise InputError(f"job {job.job_id}: {job.num_gpus} GPUs is not a whole number of "
                             f"{cfg.gpus_per_node}-GPU nodes (the lever replay places whole nodes)")
    engine = Engine(cfg.engine)
    cluster = SimCluster(cfg, jobs, [RunState() for _ in jobs], None)
    slurm = SimSlurm(cluster, jobs)
    if strategy_for(settings.preemption).by_qos:  # slurmctld preempts: preempt/qos, GraceTime the replay's grace
        slurm.qos, slurm.grace_s = SlurmQos(), cfg.preempt_grace_s
    levers = LeverRound(settings, engine, slurm, cfg.preempt_grace_s)
    levers.interval_s = interval
    out = LeverReplay()
    now = start_s if start_s is not None else (jobs[0].spec.submit_time_s if jobs else 0.0)
    next_arrival = 0
    alive: dict[int, JobState] = {}  # submitted and not ended, in submit order (the controller's)
    while (next_arrival < len(jobs) or alive) and len(out.levers) < max_rounds:
        slurm.now = now
        for job in [*cluster.finish_due(now), *slurm.finish_leaving()]:
            del alive[job.index]
        while next_arrival < len(jobs) and jobs[next_arrival].spec.submit_time_s <= now + EPS:
            job = jobs[next_arrival]
            cluster.run_state[job.index].last_sync_s = job.spec.submit_time_s
            slurm.pending[job.job_id] = job
            alive[job.index] = job
            next_arrival += 1
        active = [job for job in alive.values() if job.job_id not in slurm.leaving]
        for job in active:
            cluster.sync(job, now)
        round_id = len(out.levers) + 1
        snapshot = Snapshot(now_s=now, jobs=active, nodes=cluster.nodes, round_id=round_id, explain=False,
                            free_by_node=plannable_free(cluster.free_by_node, (slurm.by_id[j] for j in slurm.leaving)),
                            capacity_gpus=cfg.capacity_gpus)
        # the controller's selection: jobs beyond reach wait after the planned ones, banded
        aside = set_aside(snapshot, eligible=cluster.eligible)[0] if cluster.reach_binds() else []
        plan = engine.step(snapshot)
        if aside:
            list_after(plan, aside, engine.policy,
                       PolicyContext(now_s=now, thresholds_gpu_s=cfg.engine.thresholds_gpu_s, service=None))
        for action in plan.of_kind("promote"):  # as the controller's accounts.promote
            job = slurm.by_id[action.job_id]
            job.queue_service_gpu_s = job.executed_since_promotion_s = job.waited_since_promotion_s = 0.0
            job.promotions += 1
        for job_id, (level, entry) in plan.positions.items():
            slurm.by_id[job_id].queue_level, slurm.by_id[job_id].queue_entry = level, entry
        cluster.expect(plan)
        out.levers.append(levers.run(plan, now))
        out.starts.append(slurm.schedule())
        for job_id, partition in narrowed.items():  # after the round of its first sight
            if job_id in slurm.pending and slurm.by_id[job_id].spec.submit_time_s > now - interval + EPS:
                slurm.move_partition(job_id, partition)
        cluster.judge_handoffs()  # the GPUs a requeue freed this round: did Slurm start the beneficiary there
        cluster.audit_waits(lambda: [slurm.by_id[job_id] for job_id in plan.order], now, engine.policy.preemptive)
        out.round_times_s.append(now)
        now += interval
    out.unfinished_jobs = len(jobs) - next_arrival + len(alive)
    cluster.judge_handoffs()
    out.preemptions, out.useless_preemptions = cluster.preemptions, cluster.useless_preemptions
    out.waited_behind_victim = len(cluster.waited_behind)
    return out

"""A replay that runs the controller's round and predicts every lever it pulls.

The other replay loops execute the engine's Start / Preempt on the simulated
cluster directly. This one does what the controller does (controller.service.
daemon ``Controller._round``): rounds on a fixed grid; each round's plan is turned
into lever actions by the same producers (controller.core.levers.bands for the SiteFactor
bands, controller.core.levers for pins, their expiry, the BeginTime release, the
checkpoint signal and the requeue after the grace period), in the controller's
order, and applied through the same typed table (controller.core.levers.table.LEVERS) to
``SimSlurm``, the simulated slurmctld (controller.replay.slurmctld). Then, as
slurmctld's multifactor priority and scheduler would, ``SimSlurm.schedule`` starts the
pending jobs in SiteFactor order (ties: the older job first), each where it fits, a pinned job only on its pin, a
requeued job only once released. So the bands are the simulator's start order, and
a wrong band changes what starts.

tests/test_lever_parity.py runs one workload through this and through the
controller against a scripted slurmctld and asserts the same actions in the same
rounds. The handoff rule (controller.core.levers.handoffs) holds back the same preemptions
as in the controller: a handoff fails here when SimSlurm does not start the job the
preemption was for (another job took the GPUs first), and the job is then braked
until a job on its nodes leaves, as in the controller. Not produced here: partition
moves and MPS shares (``SimSlurm`` carries those levers out, but their producers read
the partition map and the MPS pools, which a replay does not have). The service
distribution is not learned here (as the controller learns it from its store), so
policies that read one (dgittins) plan without it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from controller.core.actions import LeverAction, SetBand
from controller.core.levers.bands import band_actions, site_factors
from controller.core.engine import Engine
from controller.core.levers.handoffs import ClusterView, HandoffBook, Needs
from controller.core.levers.bands import RpcBudget, bands_in_budget, changed_bands
from controller.core.levers.preemption import requeue_after_grace, signal_for
from controller.core.levers.starts import pin_for_start, release_for_start, unpin_expired
from controller.core.levers.table import LEVERS
from controller.core.model import InputError, JobSpec, JobState, Snapshot
from controller.core.placement import set_aside
from controller.core.policies import PolicyContext
from controller.core.round_writer import list_after
from controller.replay.cluster import plannable_free, RunState, SimCluster
from controller.replay.run_config import EPS, SimConfig
from controller.replay.slurmctld import SimSlurm
from controller.core.ids import decision_id


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


class LeverRound:
    """The controller's per-job lever state, kept as controller.service.round.starts,
    .preemption and .handoff keep it: bands sent, pins set (expiry, cause), when a
    job stopped, the open preemptions (signalled at, decision id), the handoffs."""

    def __init__(self, settings: LeverSettings, engine: Engine, slurm: SimSlurm, grace_s: float):
        self.settings = settings
        self.engine = engine
        self.slurm = slurm
        self.grace_s = grace_s
        self.sent: dict[str, int] = {}
        self.pins: dict[str, float] = {}
        self.pin_causes: dict[str, str] = {}
        self.stopped_at: dict[str, float] = {}
        self.open: dict[str, tuple[float, str]] = {}
        self.handoffs = HandoffBook()
        self.applied: list[LeverAction] = []
        self.rpc = RpcBudget(settings.slurm_rpc_per_s, settings.slurm_rpc_burst)
        self.bands_waiting = 0

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
        cfg, slurm, engine_cfg = self.settings, self.slurm, self.engine.config
        self.applied = []
        leaving = set(self.open)  # signalled before this round (the controller's Preemptions.leaving)
        self.handoffs.check(self._state, now, cfg.handoff_timeout_s, self._needs())
        # 1. bands (controller.service.round.starts.Starts.apply)
        pending = slurm.pending
        started = {j for j, job in pending.items() if job.first_start_s is not None}
        factors = site_factors(plan.order, plan.levels, pending, started, len(engine_cfg.thresholds_gpu_s) + 1,
                               cfg.site_factor_band, self.engine.policy.discretized,
                               plan.keys if self.engine.policy.bands_by_index else None)
        changed = changed_bands(factors, self.sent, slurm.site_factor.get)
        # within the RPC budget, as the controller (no running job is banded here)
        changed, self.bands_waiting = bands_in_budget(changed, slurm.site_factor.get,
                                                      {a.job_id for a in plan.of_kind("start")}, (),
                                                      self.rpc.allowance(now))
        self.rpc.spend(len(changed))
        self.apply_bands(band_actions(plan.round_id, changed, plan.levels))
        self.sent.update(changed)
        # 2. the plan's starts: pins, releases
        for action in plan.of_kind("start"):
            job = slurm.by_id[action.job_id]
            pin, _ = pin_for_start(action, skew=job.spec.skew, pack_limit=engine_cfg.pack_limit,
                                   consolidate=engine_cfg.placement == "consolidate",
                                   required_nodes=slurm.pins.get(job.job_id, ()), excluded_nodes=(),
                                   pinned_here=job.job_id in self.pins, expires_s=now + cfg.pin_expiry_s)
            if pin is not None and self.apply(pin):
                self.pins[job.job_id] = pin.expires_s
                self.pin_causes[job.job_id] = pin.cause_id
            if job.job_id in slurm.held:
                release, _ = release_for_start(action, self.stopped_at.setdefault(job.job_id, now), now,
                                               cfg.requeue_settle_s)
                if release is not None:
                    self.apply(release)
        # 3. expired pins of jobs that still wait; forgotten when the job is gone
        expired = 0
        for job_id, expiry in list(self.pins.items()):
            job = slurm.by_id[job_id]
            if job.finish_time_s is not None:
                self._drop_pin(job_id)
            elif job_id in pending and now >= expiry:
                expired += 1
                self.apply(unpin_expired(plan.round_id, expired, job_id, expiry, now,
                                         self.pin_causes.get(job_id, "")))
                self._drop_pin(job_id)
        # 4. the plan's victims: signalled (controller.service.round.preemption.Preemptions.begin),
        # but those the handoff rule keeps (a job the plan starts already had its preemption)
        start_ids = [action.job_id for action in plan.of_kind("start")]
        kept = self.handoffs.kept(plan, lambda job_id: [node for node, _ in slurm.by_id[job_id].placement], leaving)
        how = f"signal {cfg.signal_name}, requeue after {self.grace_s:g}s"
        victims, causes = [], []
        for action in plan.of_kind("preempt"):
            if action.job_id in self.open or action.job_id in kept:
                continue
            if self.apply(signal_for(action, cfg.signal_name, cfg.batch_only, how)):
                self.open[action.job_id] = (now, action.decision_id)
                victims.append(action.job_id)
                causes.append(action.decision_id)
        self.handoffs.expect(start_ids, now, tuple(victims), tuple(causes))
        # 5. grace periods over: requeued (Preemptions.advance), oldest first
        requeued = 0
        for job_id, (signalled_s, cause) in sorted(self.open.items(), key=lambda item: item[1][0]):
            if job_id not in slurm.leaving:  # ended meanwhile
                del self.open[job_id]
                continue
            if now >= signalled_s + self.grace_s:
                requeued += 1
                del self.open[job_id]
                if self.apply(requeue_after_grace(decision_id(plan.round_id, "requeue", requeued), job_id, self.grace_s, cause)):
                    self.stopped_at[job_id] = now
        return self.applied

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

    def _drop_pin(self, job_id: str) -> None:
        self.pins.pop(job_id, None)
        self.pin_causes.pop(job_id, None)


def replay_levers(cfg: SimConfig, specs: Iterable[JobSpec], settings: LeverSettings = LeverSettings(),
                  start_s: Optional[float] = None, max_rounds: int = MAX_LEVER_ROUNDS) -> LeverReplay:
    """Replay ``specs`` (with durations; a gang larger than a node takes whole nodes)
    with a round every
    ``cfg.round_interval_s`` from ``start_s`` (default: the first submission) until
    every job finished, or for ``max_rounds`` (then ``unfinished_jobs`` counts the rest);
    returns each round's levers and starts."""
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
    levers = LeverRound(settings, engine, slurm, cfg.preempt_grace_s)
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
        cluster.judge_handoffs()  # the GPUs a requeue freed this round: did Slurm start the beneficiary there
        cluster.audit_waits(lambda: [slurm.by_id[job_id] for job_id in plan.order], now, engine.policy.preemptive)
        out.round_times_s.append(now)
        now += interval
    out.unfinished_jobs = len(jobs) - next_arrival + len(alive)
    cluster.judge_handoffs()
    out.preemptions, out.useless_preemptions = cluster.preemptions, cluster.useless_preemptions
    out.waited_behind_victim = len(cluster.waited_behind)
    return out

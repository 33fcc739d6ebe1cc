"""Trace-driven, discrete-event simulated GPU cluster running the real engine.

The simulator is an executor: it builds a Snapshot, asks ``Engine.step`` for a
plan, and applies its Start / Preempt / Promote actions to the simulated cluster
(controller.replay.cluster.SimCluster), exactly as the Slurm backend does. This
module is the generic loop; MLFQ and fixed-order policies replay through the
incremental one (controller.replay.mlfq_replay) when they can, on the same cluster (with
Slurm's start order too; slurmctld's own preemption only here). Time advances from event to event (arrival, completion, MLFQ
demotion, starvation promotion, or the quantum of a continuously drifting
priority); with ``round_interval_s`` rounds happen only on that fixed grid, as in
the real controller, while completions still happen at their exact times.

Running jobs' counters are kept lazily (synced when a round reads them), and a
round with every active job fitting skips ordering: these two keep an 82k-job
replay fast. Everything is deterministic: no randomness, ties by arrival index.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, Optional

from controller.core.engine import Engine
from controller.core.model import InputError, JobSpec, JobState, Snapshot
from controller.core.placement import Eligibility, set_aside
from controller.core.policies.base import PolicyContext
from controller.core.plan_stands import threshold_above
from controller.core.protection import run_time_over_s
from controller.replay.slurm_order import SlurmOrder
from controller.replay.slurm_preemption import SlurmPreempts
from controller.replay.slurmctld import SlurmQos
from controller.replay import mlfq_replay
from controller.replay.cluster import learner_for, RunState, SimCluster  # noqa: F401
from controller.replay.run_config import EPS, JobOutcome, ReplayCut, SimConfig, SimResult, WATCH_EVERY  # noqa: F401


class Simulation:
    def __init__(self, config: SimConfig, progress: Optional[Callable[[float], None]] = None,
                 watch: Optional[Callable[[float], None]] = None, slurm_preemption: Optional[SlurmQos] = None):
        """``progress(fraction of jobs finished)`` every 2000 rounds; ``watch(fraction)``
        every WATCH_EVERY passes of the event loop, whatever happens in them (a
        deadline or an interrupt: it raises ReplayCut to stop the replay).
        ``slurm_preemption`` (with ``config.slurm_starts``): slurmctld, not the plan,
        chooses the victims, with these QOS (controller.replay.slurm_preemption), as
        under the controller's ``preemption: slurm``."""
        self.config = config
        self.engine = Engine(config.engine)
        if slurm_preemption is not None and not config.slurm_starts:
            raise InputError("slurm_preemption: needs slurm_starts (slurmctld preempts only where it starts the jobs)")
        if config.slurm_starts:
            self.engine = SlurmOrder(self.engine, config.time_limit_s)
        if slurm_preemption is not None:
            self.engine = SlurmPreempts(self.engine, slurm_preemption)
        self.progress = progress
        self.watch = watch

    # -- public ------------------------------------------------------------
    def run(self, specs: Iterable[JobSpec]) -> SimResult:
        cfg = self.config
        capacity = cfg.capacity_gpus
        jobs: list[JobState] = []
        dropped: list[str] = []
        eligible = Eligibility(cfg.node_table()) if cfg.node_kinds else None
        for spec in sorted(specs, key=lambda s: s.submit_time_s):
            if eligible is None and (spec.gpu_type or spec.reservation):
                spec = dataclasses.replace(spec, gpu_type="", reservation="")  # one type: every node's
            if eligible is not None and not spec.partitions and spec.partition != "default":
                spec = dataclasses.replace(spec, partitions=tuple(p for p in spec.partition.split(",") if p))
            if eligible is not None and eligible.allowed(spec) == frozenset():
                raise InputError(f"job {spec.job_id}: no node of partitions {','.join(spec.partitions) or 'any'}"
                                 f" with GPU type {spec.gpu_type or 'any'} in --node-kinds")
            if spec.num_gpus > capacity:
                if cfg.drop_oversize:
                    dropped.append(spec.job_id)
                    continue
                raise InputError(f"job {spec.job_id}: needs {spec.num_gpus} GPUs but the cluster has {capacity}"
                                 " (use --drop-oversize to drop such jobs)")
            if spec.duration_s is None:
                raise InputError(f"job {spec.job_id}: the simulator needs a duration")
            jobs.append(JobState(spec=spec, index=len(jobs)))
        self._jobs = jobs
        self.run_state = [RunState() for _ in jobs]
        engine_cfg = cfg.engine
        policy = self.engine.policy
        # Slurm's starts (SlurmOrder) replay on the incremental loop too; slurmctld's own
        # preemption (SlurmPreempts) only on the generic one, which hands it every job
        if cfg.incremental and (policy.discretized or policy.static_order) and cfg.round_interval_s is None \
                and not isinstance(self.engine, SlurmPreempts):
            return mlfq_replay.run_mlfq(cfg, self.engine, self.run_state, jobs, dropped, self.progress, self.watch)
        return self._loop(jobs, dropped)

    # -- the event loop -------------------------------------------------------
    def _loop(self, jobs: list[JobState], dropped: list[str]) -> SimResult:
        """The generic loop: every round hands the engine every active job."""
        cfg = self.config
        engine_cfg = cfg.engine
        policy = self.engine.policy
        learned = learner_for(cfg, policy) if cfg.service is None else None
        cluster = SimCluster(cfg, jobs, self.run_state, learned)
        active: dict[int, JobState] = {}
        waiting: dict[int, JobState] = {}
        timeline: list[tuple[float, int, int]] = []
        demand = 0
        promotions = rounds = events = 0
        next_arrival = 0
        total = len(jobs)
        interval = cfg.round_interval_s
        last_round_s = -math.inf
        now = jobs[0].spec.submit_time_s if jobs else 0.0
        if interval is not None:
            now = math.ceil(now / interval - EPS) * interval
        private = self.run_state
        index_of = {job.job_id: job.index for job in jobs}
        handoff = cluster.handoff
        min_runtime = engine_cfg.preempt_min_runtime_s
        sync_job = cluster.sync
        # Waiting jobs only accrue waiting time, which only starvation promotion
        # reads: with promotion off, only running jobs need syncing.
        sync_waiting = math.isfinite(engine_cfg.promote_knob)

        def sync_all() -> None:
            for job in active.values():
                if job.running or sync_waiting:
                    sync_job(job, now)

        def finish_due(t: float) -> None:
            nonlocal demand, events
            for job in cluster.finish_due(t):
                demand -= job.num_gpus
                del active[job.index]
                events += 1

        aside: set[int] = set()  # the last round's jobs beyond reach (controller.core.placement.set_aside)
        watch, passes = self.watch, 0
        while next_arrival < total or active or cluster.leaving or cluster.settling:
            passes += 1
            if watch is not None and passes % WATCH_EVERY == 0:
                watch(len(cluster.outcomes) / max(total, 1))
            # 1. completions up to now, at their exact times; victims whose grace period
            # is over are requeued, then wait out the requeue delay
            finish_due(now)
            events += cluster.release_due(now)
            for job in cluster.settled_due(now):
                active[job.index] = job
                waiting[job.index] = job
                demand += job.num_gpus
                events += 1
            # 2. arrivals up to now
            while next_arrival < total and jobs[next_arrival].spec.submit_time_s <= now + EPS:
                job = jobs[next_arrival]
                private[job.index].last_sync_s = job.spec.submit_time_s
                active[job.index] = job
                waiting[job.index] = job
                demand += job.num_gpus
                next_arrival += 1
                events += 1
            # 3. a round, if anyone waits (and something could start: a non-preemptive
            # policy cannot start anything while every GPU is busy)
            if waiting and (policy.preemptive or cluster.busy < cfg.capacity_gpus):
                rounds += 1
                snapshot = Snapshot(
                    now_s=now, jobs=list(active.values()), nodes=cluster.nodes,
                    service=cfg.service if learned is None else learned.current,
                    round_id=rounds, sync=sync_all, allow_fast_path=True, detailed=False,
                    free_by_node=cluster.plannable_free(), waiting=list(waiting.values()),
                    demand_gpus=demand, capacity_gpus=cfg.capacity_gpus, max_gpus_per_node=cluster.max_per_node)
                # the controller's selection (its round: RoundInput.plan): jobs beyond reach wait outside the walk
                aside = ({job.index for job in set_aside(snapshot, eligible=cluster.eligible)[0]}
                         if cluster.reach_binds() else set())
                plan = self.engine.step(snapshot)
                cluster.expect(plan)
                for action in plan.actions:
                    job = active[index_of[action.job_id]]
                    sync_job(job, now)  # before the plan changes its state
                    if action.kind == "promote":
                        job.queue_service_gpu_s = 0.0
                        job.executed_since_promotion_s = 0.0
                        job.waited_since_promotion_s = 0.0
                        job.promotions += 1
                        promotions += 1
                    elif action.kind == "preempt" and handoff:
                        # signalled: it keeps its GPUs through the grace period and
                        # leaves the plannable set until its requeue delay is over
                        del active[job.index]
                        demand -= job.num_gpus
                        if cluster.signal(job, now):
                            events += 1
                    elif action.kind == "preempt":
                        cluster.stop(job, now)
                        waiting[job.index] = job
                    else:  # start
                        if handoff and not cluster.fits(action.placement):
                            continue  # planned onto a victim's GPUs still in its grace period
                        cluster.start(job, action.placement, now)
                        del waiting[job.index]
                for job_id, (level, entry) in plan.positions.items():
                    job = jobs[index_of[job_id]]
                    job.queue_level = level
                    job.queue_entry = entry
                cluster.judge_handoffs()
                if waiting:
                    cluster.audit_waits(lambda: self._walk_order(active.values(), now, snapshot.service), now,
                                        policy.preemptive)
                last_round_s = now
                timeline.append((now, len(waiting), cluster.busy))
                if self.progress is not None and rounds % 2000 == 0:
                    self.progress(len(cluster.outcomes) / max(total, 1))
            # 4. the next moment something can change
            candidates = []
            if next_arrival < total:
                candidates.append(jobs[next_arrival].spec.submit_time_s)
            next_completion = cluster.next_completion_s()
            if next_completion < math.inf:
                candidates.append(next_completion)
            if waiting:
                # a job set aside is promoted at the next round it is not (it cannot wake the
                # loop at once: it would wake it at every next float while it stays aside)
                candidates.extend(self._priority_change_times(
                    active.values(), [job for job in waiting.values() if job.index not in aside] if aside
                    else waiting.values(), now))
                if min_runtime > 0 and policy.preemptive:  # a running job's protection ends
                    ends = (run_time_over_s(job.run_start_s, min_runtime) for job in active.values() if job.running)
                    candidates.extend(end for end in ends if end > now)
            if cluster.leaving:
                candidates.append(cluster.leaving[0][0])
            if cluster.settling:
                candidates.append(cluster.settling[0][0])
            if not candidates:
                if waiting:
                    raise InputError("simulation stalled: jobs wait but nothing can ever run them "
                                     f"(first waiting: {next(iter(waiting.values())).job_id})")
                break
            t_next = min(candidates)
            if interval is not None:
                grid = math.ceil(t_next / interval - EPS) * interval
                if waiting and policy.drifts_while_running:
                    grid = min(grid, last_round_s + interval)
                if grid <= now + EPS:
                    grid = now + interval
                finish_due(grid)  # completions before the next round happen at their own times
                t_next = grid
            # never stand still: an event computed at "now" moves to the next float
            now = t_next if t_next > now else math.nextafter(now, math.inf)

        return cluster.result(policy.name, rounds, events, dropped, promotions, timeline)

    def _walk_order(self, active, now: float, service) -> list[JobState]:
        """The active jobs in the policy's order now (the wait audit's walk order; the
        engine's own order is not kept outside detailed rounds)."""
        ctx = PolicyContext(now_s=now, thresholds_gpu_s=self.config.engine.thresholds_gpu_s, service=service)
        return [job for _, job in self.engine.policy.ordered(list(active), ctx)]

    def _priority_change_times(self, active, waiting, now: float) -> list[float]:
        """When the order may change with no arrival or completion: demotion of a
        running job, starvation promotion of a waiting one, or the policy's quantum."""
        engine_cfg = self.config.engine
        policy = self.engine.policy
        times: list[float] = []
        if policy.drifts_while_running:
            times.append(now + engine_cfg.quantum_s)
        if policy.discretized:
            thresholds = engine_cfg.thresholds_gpu_s
            for job in active:
                if not job.running:
                    continue
                p = self.run_state[job.index]
                served = job.queue_service_gpu_s + job.spec.num_gpus * (now - p.last_sync_s)
                threshold = threshold_above(thresholds, served)
                if threshold is not None:
                    times.append(now + (threshold - served) / job.spec.num_gpus)
            knob = engine_cfg.promote_knob
            if math.isfinite(knob):
                for job in waiting:
                    if job.queue_service_gpu_s >= thresholds[0]:
                        p = self.run_state[job.index]
                        waited = job.waited_since_promotion_s + (now - p.last_sync_s)
                        times.append(max(now, now + knob * job.executed_since_promotion_s - waited))
        return times

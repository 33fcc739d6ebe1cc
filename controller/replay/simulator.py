"""Trace-driven, discrete-event simulated GPU cluster running the real engine.

The simulator is an executor: it builds a Snapshot, asks ``Engine.step`` for a
plan, and applies its Start / Preempt / Promote actions, exactly as the Slurm
backend does. Time advances from event to event (arrival, completion, MLFQ
demotion, starvation promotion, or the quantum of a continuously drifting
priority); with ``round_interval_s`` rounds happen only on that fixed grid, as in
the real controller, while completions still happen at their exact times.

Running jobs' counters are kept lazily (synced when a round reads them), and a
round with every active job fitting skips ordering: these two keep an 82k-job
replay fast. Everything is deterministic: no randomness, ties by arrival index.
"""
from __future__ import annotations

import bisect
import heapq
import math
from typing import Callable, Iterable, Optional

from controller.core.engine import Engine
from controller.core.gittins import LearnedDistribution
from controller.core.model import InputError, JobSpec, JobState, Node, Snapshot
from controller.core.placement import COUNT_NODE, is_spread
from controller.core.policies.base import LEVEL_TOLERANCE_GPU_S
from controller.core.protection import run_time_over_s
from controller.replay import mlfq_replay
from controller.replay.cluster import (JobOutcome, RunState, SimConfig, SimResult, charge_grace,  # noqa: F401
                                       outcome_of, plannable_free)

_EPS = 1e-9


class Simulation:
    def __init__(self, config: SimConfig, progress: Optional[Callable[[float], None]] = None):
        self.config = config
        self.engine = Engine(config.engine)
        self.progress = progress

    # -- public ------------------------------------------------------------
    def run(self, specs: Iterable[JobSpec]) -> SimResult:
        cfg = self.config
        capacity = cfg.capacity_gpus
        jobs: list[JobState] = []
        dropped: list[str] = []
        for spec in sorted(specs, key=lambda s: s.submit_time_s):
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
        if (cfg.incremental and (policy.discretized or policy.static_order)
                and not math.isfinite(engine_cfg.promote_knob) and cfg.round_interval_s is None):
            return mlfq_replay.run_mlfq(cfg, self.engine, self.run_state, jobs, dropped, self.progress)
        return self._loop(jobs, dropped)

    # -- the event loop -------------------------------------------------------
    def _loop(self, jobs: list[JobState], dropped: list[str]) -> SimResult:
        cfg = self.config
        engine_cfg = cfg.engine
        policy = self.engine.policy
        count_mode = engine_cfg.placement == "count"
        if count_mode:
            nodes = [Node(COUNT_NODE, cfg.capacity_gpus, cfg.capacity_gpus)]
        else:
            nodes = [Node(f"n{i:04d}", cfg.gpus_per_node, cfg.gpus_per_node) for i in range(cfg.nodes)]
        free_by_node = {n.name: n.gpus_total for n in nodes}
        max_per_node = max(n.gpus_total for n in nodes)
        learned = LearnedDistribution() if cfg.service is None else None
        active: dict[int, JobState] = {}
        waiting: dict[int, JobState] = {}
        completions: list[tuple[float, int, int]] = []  # (time, index, version)
        outcomes: list[JobOutcome] = []
        timeline: list[tuple[float, int, int]] = []
        demand = 0
        busy = 0
        preemptions = promotions = rounds = events = 0
        overhead_total = 0.0
        next_arrival = 0
        total = len(jobs)
        interval = cfg.round_interval_s
        last_round_s = -math.inf
        now = jobs[0].spec.submit_time_s if jobs else 0.0
        if interval is not None:
            now = math.ceil(now / interval - _EPS) * interval
        private = self.run_state
        index_of = {job.job_id: job.index for job in jobs}
        overhead_per = cfg.preempt_pause_s + cfg.preempt_resume_s
        handoff = cfg.preempt_grace_s > 0 or cfg.requeue_delay_s > 0
        min_runtime = engine_cfg.preempt_min_runtime_s
        # (grace over, index, signalled at, would finish at): holds its GPUs
        leaving: list[tuple[float, int, float, float]] = []
        settling: list[tuple[float, int]] = []  # (may start again, index): requeued, not yet eligible

        def sync_job(job: JobState, t: float) -> None:
            p = private[job.index]
            dt = t - p.last_sync_s
            if dt <= 0:
                return
            if job.running:
                lost = min(p.overhead_left_s, dt)
                p.overhead_left_s -= lost
                job.progress_s += (dt - lost) * p.speed
                job.executed_s += dt
                job.executed_since_promotion_s += dt
                served = job.spec.num_gpus * dt
                job.attained_gpu_s += served
                job.queue_service_gpu_s += served
            else:
                job.waited_since_promotion_s += dt
            p.last_sync_s = t

        # Waiting jobs only accrue waiting time, which only starvation promotion
        # reads: with promotion off, only running jobs need syncing.
        sync_waiting = math.isfinite(engine_cfg.promote_knob)

        def sync_all() -> None:
            for job in active.values():
                if job.running or sync_waiting:
                    sync_job(job, now)

        def completion_time(job: JobState) -> float:
            p = private[job.index]
            left = max(job.spec.duration_s - job.progress_s, 0.0)
            return p.last_sync_s + p.overhead_left_s + left / p.speed

        def finish(job: JobState, t: float) -> None:
            nonlocal demand, busy
            sync_job(job, t)
            job.progress_s = job.spec.duration_s
            job.running = False
            job.finish_time_s = t
            for node, gpus in job.placement:
                free_by_node[node] += gpus
            busy -= job.spec.num_gpus
            demand -= job.spec.num_gpus
            job.placement = ()
            del active[job.index]
            outcomes.append(outcome_of(job, t))
            if learned is not None:
                learned.add(job.attained_gpu_s)

        def release(job: JobState, signalled_s: float, done_s: float) -> None:
            """The grace period is over: the controller requeues the victim. It was
            charged service until now (as the controller's accounting does) but made no
            progress after the signal (its restart resumes from that checkpoint), unless
            grace_work_kept: then it progressed, and finished if ``done_s`` (when its
            work ends) came first."""
            nonlocal busy, preemptions
            p = private[job.index]
            charge_grace(job, p, min(now, done_s) - signalled_s, cfg.grace_work_kept)
            for node, gpus in job.placement:
                free_by_node[node] += gpus
            busy -= job.spec.num_gpus
            job.placement = ()
            p.last_sync_s = now
            if done_s <= now + _EPS:  # ended within its grace period: never requeued
                job.preemptions -= 1
                preemptions -= 1
                job.progress_s = job.spec.duration_s
                job.finish_time_s = done_s
                outcomes.append(outcome_of(job, done_s))
                if learned is not None:
                    learned.add(job.attained_gpu_s)
                return
            heapq.heappush(settling, (now + cfg.requeue_delay_s, job.index))

        def fits(placement) -> bool:
            return all(free_by_node.get(node, 0) >= gpus for node, gpus in placement)

        while next_arrival < total or active or leaving or settling:
            # 1. completions up to now, at their exact times
            while completions and completions[0][0] <= now + _EPS:
                t_done, index, version = heapq.heappop(completions)
                job = jobs[index]
                if private[index].version != version or not job.running:
                    continue
                finish(job, t_done)
                events += 1
            # victims whose grace period is over are requeued (at a round, as the
            # controller's advance() does), then wait out the requeue delay
            while leaving and leaving[0][0] <= now + _EPS:
                _, index, signalled_s, done_s = heapq.heappop(leaving)
                release(jobs[index], signalled_s, done_s)
                events += 1
            while settling and settling[0][0] <= now + _EPS:
                _, index = heapq.heappop(settling)
                job = jobs[index]
                active[index] = job
                waiting[index] = job
                demand += job.spec.num_gpus
                events += 1
            # 2. arrivals up to now
            while next_arrival < total and jobs[next_arrival].spec.submit_time_s <= now + _EPS:
                job = jobs[next_arrival]
                private[job.index].last_sync_s = job.spec.submit_time_s
                active[job.index] = job
                waiting[job.index] = job
                demand += job.spec.num_gpus
                next_arrival += 1
                events += 1
            # 3. a round, if anyone waits (and something could start: a non-preemptive
            # policy cannot start anything while every GPU is busy)
            if waiting and (policy.preemptive or busy < cfg.capacity_gpus):
                rounds += 1
                snapshot = Snapshot(
                    now_s=now, jobs=list(active.values()), nodes=nodes,
                    service=cfg.service if learned is None else learned.current,
                    round_id=rounds, sync=sync_all, allow_fast_path=True, detailed=False,
                    free_by_node=plannable_free(free_by_node, (jobs[entry[1]] for entry in leaving)) if leaving
                    else free_by_node, waiting=list(waiting.values()),
                    demand_gpus=demand, capacity_gpus=cfg.capacity_gpus, max_gpus_per_node=max_per_node)
                # sync waiting jobs before the plan changes their state
                plan = self.engine.step(snapshot)
                for action in plan.actions:
                    job = active[index_of[action.job_id]]
                    sync_job(job, now)
                    if action.kind == "promote":
                        job.queue_service_gpu_s = 0.0
                        job.executed_since_promotion_s = 0.0
                        job.waited_since_promotion_s = 0.0
                        job.promotions += 1
                        promotions += 1
                    elif action.kind == "preempt" and handoff:
                        # signalled: it keeps its GPUs through the grace period and
                        # leaves the plannable set until its requeue delay is over
                        done_s = completion_time(job) if cfg.grace_work_kept else math.inf
                        job.running = False
                        job.preemptions += 1
                        preemptions += 1
                        private[job.index].version += 1
                        del active[job.index]
                        demand -= job.spec.num_gpus
                        if cfg.preempt_grace_s > 0:
                            heapq.heappush(leaving, (min(now + cfg.preempt_grace_s, done_s), job.index, now, done_s))
                        else:  # no grace period: its GPUs change hands at once (only the requeue delay)
                            release(job, now, done_s)
                            events += 1
                    elif action.kind == "preempt":
                        job.running = False
                        for node, gpus in job.placement:
                            free_by_node[node] += gpus
                        busy -= job.spec.num_gpus
                        job.placement = ()
                        job.preemptions += 1
                        preemptions += 1
                        private[job.index].version += 1
                        waiting[job.index] = job
                    else:  # start
                        if handoff and not fits(action.placement):
                            continue  # planned onto a victim's GPUs still in its grace period
                        p = private[job.index]
                        job.running = True
                        job.run_start_s = now
                        job.placement = action.placement
                        for node, gpus in action.placement:
                            free_by_node[node] -= gpus
                        busy += job.spec.num_gpus
                        if job.first_start_s is None:
                            job.first_start_s = now
                        if job.preemptions:
                            p.overhead_left_s = overhead_per
                            overhead_total += overhead_per
                        sensitive = (engine_cfg.placement != "count" and job.spec.skew > engine_cfg.pack_limit)
                        p.speed = cfg.spread_speed if sensitive and is_spread(
                            action.placement, job.num_gpus, cfg.gpus_per_node) else 1.0
                        p.version += 1
                        del waiting[job.index]
                        heapq.heappush(completions, (completion_time(job), job.index, p.version))
                for job_id, (level, entry) in plan.positions.items():
                    job = jobs[index_of[job_id]]
                    job.queue_level = level
                    job.queue_entry = entry
                last_round_s = now
                timeline.append((now, len(waiting), busy))
                if self.progress is not None and rounds % 2000 == 0:
                    self.progress(len(outcomes) / max(total, 1))
            # 4. the next moment something can change
            candidates = []
            if next_arrival < total:
                candidates.append(jobs[next_arrival].spec.submit_time_s)
            while completions and (private[completions[0][1]].version != completions[0][2]
                                   or not jobs[completions[0][1]].running):
                heapq.heappop(completions)
            if completions:
                candidates.append(completions[0][0])
            if waiting:
                candidates.extend(self._priority_change_times(active.values(), waiting.values(), now))
                if min_runtime > 0 and policy.preemptive:  # a running job's protection ends
                    ends = (run_time_over_s(job.run_start_s, min_runtime) for job in active.values() if job.running)
                    candidates.extend(end for end in ends if end > now)
            if leaving:
                candidates.append(leaving[0][0])
            if settling:
                candidates.append(settling[0][0])
            if not candidates:
                if waiting:
                    raise InputError("simulation stalled: jobs wait but nothing can ever run them "
                                     f"(first waiting: {next(iter(waiting.values())).job_id})")
                break
            t_next = min(candidates)
            if interval is not None:
                grid = math.ceil(t_next / interval - _EPS) * interval
                if waiting and policy.drifts_while_running:
                    grid = min(grid, last_round_s + interval)
                if grid <= now + _EPS:
                    grid = now + interval
                # completions before the next round happen at their own times
                while completions and completions[0][0] <= grid + _EPS:
                    t_done, index, version = heapq.heappop(completions)
                    job = jobs[index]
                    if private[index].version == version and job.running:
                        finish(job, t_done)
                        events += 1
                t_next = grid
            # never stand still: an event computed at "now" moves to the next float
            now = t_next if t_next > now else math.nextafter(now, math.inf)

        outcomes.sort(key=lambda o: (o.submit_s, o.job_id))
        return SimResult(policy=policy.name, outcomes=outcomes, capacity_gpus=cfg.capacity_gpus,
                         preemptions=preemptions, preemption_overhead_s=overhead_total, rounds=rounds,
                         events=events, dropped_oversize=dropped, promotions=promotions, timeline=timeline)

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
                level = bisect.bisect_right(thresholds, served + LEVEL_TOLERANCE_GPU_S)
                if level < len(thresholds):
                    times.append(now + (thresholds[level] - served) / job.spec.num_gpus)
            knob = engine_cfg.promote_knob
            if math.isfinite(knob):
                for job in waiting:
                    if job.queue_service_gpu_s >= thresholds[0]:
                        p = self.run_state[job.index]
                        waited = job.waited_since_promotion_s + (now - p.last_sync_s)
                        times.append(max(now, now + knob * job.executed_since_promotion_s - waited))
        return times

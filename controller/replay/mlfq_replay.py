"""The event loop of a replay with one queue book kept alive: MLFQ policies (dlas,
dgittins) and the fixed-order non-preemptive ones (fifo, fifo-skip: one queue).

The generic loop (controller.replay.simulator) hands the engine every active job at
every round; the engine then rebuilds the queues, which costs O(n log n) a round.
Here the simulator keeps a ``QueueBook`` up to date from the events themselves
(arrival: enters Q_1; exact crossing of a threshold: enters the queue below;
completion: leaves) and from each plan's places, and passes it to ``Engine.step``.
A round then costs what it changes. Decisions are the engine's, walked by the same
book code the controller uses; tests/test_mlfq_replay.py checks that both loops
give identical replays.

Used when starvation promotion is off, rounds are event-driven and a preemption
costs no grace period, requeue delay or victim protection (the defaults: see
SimConfig.charges_handoff); otherwise the generic loop runs.
"""
from __future__ import annotations

import bisect
import heapq
import math
from typing import TYPE_CHECKING

import numpy as np

from controller.core.gittins import LearnedDistribution
from controller.core.model import InputError, JobState, Node, Snapshot
from controller.core.placement import COUNT_NODE, is_spread
from controller.core.policies.base import LEVEL_TOLERANCE_GPU_S
from controller.core.queue_book import QueueBook
from controller.core.queues import ENTERED

if TYPE_CHECKING:
    from controller.replay.simulator import Simulation, SimResult

_EPS = 1e-9


def run_mlfq(sim: "Simulation", jobs: list[JobState], dropped: list[str]) -> "SimResult":
    from controller.replay.simulator import JobOutcome, SimResult

    cfg = sim.config
    engine_cfg = cfg.engine
    engine = sim.engine
    policy = engine.policy
    thresholds = engine_cfg.thresholds_gpu_s if policy.discretized else ()  # fifo: one queue
    num_levels = len(thresholds) + 1
    capacity = cfg.capacity_gpus
    count_mode = engine_cfg.placement == "count"
    if count_mode:
        nodes = [Node(COUNT_NODE, capacity, capacity)]
    else:
        nodes = [Node(f"n{i:04d}", cfg.gpus_per_node, cfg.gpus_per_node) for i in range(cfg.nodes)]
    free_by_node = {n.name: n.gpus_total for n in nodes}
    max_per_node = max(n.gpus_total for n in nodes)
    learned = LearnedDistribution() if cfg.service is None and policy.uses_service_distribution else None
    service = cfg.service
    private = sim._private
    index_of = {job.job_id: job.index for job in jobs}
    overhead_per = cfg.preempt_pause_s + cfg.preempt_resume_s
    book = QueueBook(num_levels)
    ordered_waiting = policy.uses_service_distribution  # waiting order depends on the distribution

    def waiting_value(job: JobState, level: int, served_gpu_s: float) -> float:
        return policy.waiting_value(service, thresholds, level, served_gpu_s) if ordered_waiting else 0.0

    book.within_function = lambda job, level: waiting_value(job, level, job.queue_service_gpu_s)

    completions: list[tuple[float, int, int]] = []  # (time, index, version)
    demotions: list[tuple[float, int, int]] = []  # (crossing time, index, version)
    outcomes: list[JobOutcome] = []
    timeline: list[tuple[float, int, int]] = []
    busy = 0
    waiting_jobs = 0  # jobs without GPUs (the book also lists entered jobs that still run)
    preemptions = rounds = events = 0
    overhead_total = 0.0
    next_arrival = 0
    total = len(jobs)
    now = jobs[0].spec.submit_time_s if jobs else 0.0

    def sync(job: JobState, t: float) -> None:
        """Bring a running job's counters to time t (waiting jobs accrue nothing here)."""
        p = private[job.index]
        dt = t - p.last_sync_s
        if dt > 0 and job.running:
            lost = min(p.overhead_left_s, dt)
            p.overhead_left_s -= lost
            job.progress_s += (dt - lost) * p.speed
            job.executed_s += dt
            job.executed_since_promotion_s += dt
            served = job.num_gpus * dt
            job.attained_gpu_s += served
            job.queue_service_gpu_s += served
        p.last_sync_s = t

    def schedule_demotion(job: JobState, t: float, served_gpu_s: float) -> None:
        level = bisect.bisect_right(thresholds, served_gpu_s + LEVEL_TOLERANCE_GPU_S)
        if level < len(thresholds):
            p = private[job.index]
            heapq.heappush(demotions, (t + (thresholds[level] - served_gpu_s) / job.num_gpus, job.index, p.version))

    def start(job: JobState, placement) -> None:
        nonlocal busy, waiting_jobs, overhead_total
        p = private[job.index]
        p.last_sync_s = now
        job.running = True
        job.run_start_s = now
        job.placement = placement
        for node, gpus in placement:
            free_by_node[node] -= gpus
        busy += job.num_gpus
        waiting_jobs -= 1
        if job.first_start_s is None:
            job.first_start_s = now
        if job.preemptions:
            p.overhead_left_s = overhead_per
            overhead_total += overhead_per
        sensitive = not count_mode and job.spec.skew > engine_cfg.pack_limit
        p.speed = cfg.spread_speed if sensitive and is_spread(placement, job.num_gpus, cfg.gpus_per_node) else 1.0
        p.version += 1
        left = max(job.spec.duration_s - job.progress_s, 0.0)
        heapq.heappush(completions, (now + p.overhead_left_s + left / p.speed, job.index, p.version))
        schedule_demotion(job, now, job.queue_service_gpu_s)

    def stop(job: JobState) -> None:
        nonlocal busy, waiting_jobs, preemptions
        sync(job, now)
        job.running = False
        for node, gpus in job.placement:
            free_by_node[node] += gpus
        busy -= job.num_gpus
        waiting_jobs += 1
        job.placement = ()
        job.preemptions += 1
        preemptions += 1
        private[job.index].version += 1

    def finish(job: JobState, t: float) -> None:
        nonlocal busy
        sync(job, t)
        job.progress_s = job.spec.duration_s
        job.running = False
        job.finish_time_s = t
        for node, gpus in job.placement:
            free_by_node[node] += gpus
        busy -= job.num_gpus
        job.placement = ()
        book.remove(job)
        outcomes.append(JobOutcome(
            job.job_id, job.num_gpus, job.spec.submit_time_s, job.first_start_s, t, job.spec.duration_s,
            job.preemptions, job.attained_gpu_s, job.executed_s, job.spec.user, job.spec.partition))
        if learned is not None:
            learned.add(job.attained_gpu_s)

    def current(heap) -> bool:
        """Drop stale entries (the job stopped or restarted since it was pushed)."""
        while heap and (private[heap[0][1]].version != heap[0][2] or not jobs[heap[0][1]].running):
            heapq.heappop(heap)
        return bool(heap)

    def rekey_waiting() -> None:
        """The distribution changed: every waiting order value of Q_1..Q_{K-1} too."""
        def values(level: int, items) -> list[float]:
            if not items or service is None or len(service) == 0:
                return [0.0] * len(items)
            served = [thresholds[level - 1] if group == ENTERED and job.running else job.queue_service_gpu_s
                      for (_, group, _), _, job in items]
            ends = [thresholds[level]] * len(items)
            return (-service.indices(np.asarray(served), np.asarray(ends))).tolist()
        book.rekey(values, levels=range(len(thresholds)))

    snapshot = Snapshot(now_s=now, jobs=[], nodes=nodes, service=service, round_id=0, detailed=False,
                        explain=False, free_by_node=free_by_node, capacity_gpus=capacity,
                        max_gpus_per_node=max_per_node, queue_book=book)
    while next_arrival < total or completions or waiting_jobs:
        # 1. everything that happens at this moment: completions, arrivals, crossings
        while current(completions) and completions[0][0] <= now + _EPS:
            t_done, index, _ = heapq.heappop(completions)
            finish(jobs[index], t_done)
            events += 1
        while next_arrival < total and jobs[next_arrival].spec.submit_time_s <= now + _EPS:
            job = jobs[next_arrival]
            private[job.index].last_sync_s = job.spec.submit_time_s
            book.add_waiting(job, 0, ENTERED, job.spec.submit_time_s, waiting_value(job, 0, 0.0))
            waiting_jobs += 1
            next_arrival += 1
            events += 1
        while current(demotions) and demotions[0][0] <= now + _EPS:
            t_cross, index, _ = heapq.heappop(demotions)
            job = jobs[index]
            level = book.level_of(job) + 1
            book.remove(job)
            book.add_waiting(job, level, ENTERED, t_cross, waiting_value(job, level, thresholds[level - 1]))
            schedule_demotion(job, t_cross, thresholds[level - 1])
            events += 1
        # 2. a round, if any job waits for GPUs (and, without preemption, some are free)
        if waiting_jobs and (policy.preemptive or busy < capacity):
            if learned is not None and learned.current is not service:
                service = learned.current
                if ordered_waiting:
                    rekey_waiting()
            rounds += 1
            # one snapshot object for the whole replay: only its time, round and
            # distribution change (the book and node table are live)
            snapshot.now_s, snapshot.round_id, snapshot.service = now, rounds, service
            plan = engine.step(snapshot)
            for action in plan.actions:
                job = jobs[index_of[action.job_id]]
                if action.kind == "preempt":
                    stop(job)
                else:
                    start(job, action.placement)
                    if not policy.discretized:  # no places: a started job joins the running list
                        book.remove(job)
                        book.add_running(job, 0)
            for job_id, (level, entry) in plan.positions.items():
                job = jobs[index_of[job_id]]
                job.queue_level = level
                job.queue_entry = entry
            book.apply_positions(plan.positions, lambda job_id: jobs[index_of[job_id]])
            timeline.append((now, waiting_jobs, busy))
            if sim.progress is not None and rounds % 2000 == 0:
                sim.progress(len(outcomes) / max(total, 1))
        # 3. the next moment something changes
        t_next = math.inf
        if next_arrival < total:
            t_next = jobs[next_arrival].spec.submit_time_s
        if current(completions):
            t_next = min(t_next, completions[0][0])
        if current(demotions):
            t_next = min(t_next, demotions[0][0])
        if t_next == math.inf:
            if waiting_jobs:
                raise InputError("simulation stalled: jobs wait but nothing can ever run them")
            break
        now = t_next if t_next > now else math.nextafter(now, math.inf)

    outcomes.sort(key=lambda o: (o.submit_s, o.job_id))
    return SimResult(policy=policy.name, outcomes=outcomes, capacity_gpus=capacity,
                     preemptions=preemptions, preemption_overhead_s=overhead_total, rounds=rounds,
                     events=events, dropped_oversize=dropped, promotions=0, timeline=timeline)

"""The event loop of a replay with one queue book kept alive: MLFQ policies (dlas,
dgittins) and the fixed-order non-preemptive ones (fifo, fifo-skip: one queue).

The generic loop (controller.replay.simulator) hands the engine every active job at
every round; the engine then rebuilds the queues, which costs O(n log n) a round.
Here the simulator keeps a ``QueueBook`` up to date from the events themselves
(arrival: enters Q_1; exact crossing of a threshold: enters the queue below;
completion: leaves) and from each plan's places, and passes it to ``Engine.step``.
A round then costs what it changes. Decisions are the engine's, walked by the same
book code the controller uses; tests/test_mlfq_replay.py (and tests/test_simcost.py,
with the costs) check that both loops give identical replays.

Used when starvation promotion is off and rounds are event-driven; otherwise the
generic loop runs. The controller's preemption costs (SimConfig.charges_handoff) are
charged as the generic loop charges them, with the same results:

- a victim of a grace period leaves the book at its signal and keeps its GPUs until
  the grace period is over (the plan sees them free: they are the beneficiary's, and
  a start planned onto them waits), then waits ``requeue_delay_s`` and re-enters the
  book at the place the engine would give it (its old place, or the tail of a lower
  queue if its grace-period service crossed a threshold);
- while victims are out of the book, the book's head and tail bounds are taken from
  the jobs in it, as the engine's per-round book does (``_Places``), so that a
  victim's place compares with the places given meanwhile as it does there;
- victim protection (``preempt_min_runtime_s``, ``preempt_max_per_job``) is kept on
  each running job's ``keeps_gpus`` from its start, with the engine's own rule, and
  the book recounts it (``QueueBook.repin``) when its minimum run time is over
  (``run_time_over_s``): a moment the loop wakes at, as the generic loop does.
"""
from __future__ import annotations

import bisect
import heapq
import math
from typing import Callable, Optional

import numpy as np

from controller.core.engine import Engine
from controller.core.gittins import LearnedDistribution
from controller.core.model import InputError, JobState, Node, Snapshot
from controller.core.placement import COUNT_NODE, is_spread
from controller.core.policies.base import LEVEL_TOLERANCE_GPU_S
from controller.core.protection import run_time_over_s, why_protected
from controller.core.queue_book import QueueBook
from controller.core.queues import ENTERED, SETTLED_WAITING
from controller.replay.cluster import (JobOutcome, RunState, SimConfig, SimResult, charge_grace, outcome_of,
                                       plannable_free)

_EPS = 1e-9


class _Places:
    """The smallest and largest ``queue_entry`` of the jobs in the book: the engine's
    per-round book takes its head and tail bounds from them (QueueBook.build). Needed
    only while victims in a grace period or requeue delay are out of the book: their
    places must compare with the places given meanwhile as in the generic loop."""

    def __init__(self):
        self.entry_of: dict[int, float] = {}
        self._low: list[tuple[float, int]] = []
        self._high: list[tuple[float, int]] = []

    def set(self, index: int, entry) -> None:
        if entry is None:
            self.entry_of.pop(index, None)
            return
        self.entry_of[index] = entry
        heapq.heappush(self._low, (entry, index))
        heapq.heappush(self._high, (-entry, index))
        if len(self._low) > 4 * len(self.entry_of) + 64:  # drop stale items now and then
            self._low = [(e, i) for i, e in self.entry_of.items()]
            self._high = [(-e, i) for i, e in self.entry_of.items()]
            heapq.heapify(self._low)
            heapq.heapify(self._high)

    def drop(self, index: int) -> None:
        self.entry_of.pop(index, None)

    def bounds(self) -> tuple[float, float]:
        """(top, bottom) as QueueBook.build sets them for these jobs."""
        entry_of, low, high = self.entry_of, self._low, self._high
        while low and entry_of.get(low[0][1]) != low[0][0]:
            heapq.heappop(low)
        while high and entry_of.get(high[0][1]) != -high[0][0]:
            heapq.heappop(high)
        if not low:
            return 0.0, 0.0
        return -high[0][0] + 1.0, low[0][0] - 1.0


def run_mlfq(cfg: SimConfig, engine: Engine, private: list[RunState], jobs: list[JobState], dropped: list[str],
             progress: Optional[Callable[[float], None]] = None) -> SimResult:
    """Replay ``jobs`` (sorted by submit time; ``private`` their run states) with
    ``engine``'s policy; ``dropped``: the oversize jobs left out."""
    engine_cfg = cfg.engine
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
    index_of = {job.job_id: job.index for job in jobs}
    overhead_per = cfg.preempt_pause_s + cfg.preempt_resume_s
    book = QueueBook(num_levels)
    ordered_waiting = policy.uses_service_distribution  # waiting order depends on the distribution
    # the controller's preemption costs (as in Simulation._loop)
    handoff = cfg.preempt_grace_s > 0 or cfg.requeue_delay_s > 0
    min_runtime = engine_cfg.preempt_min_runtime_s
    max_per_job = engine_cfg.preempt_max_per_job
    protects = engine_cfg.protects_victims and policy.preemptive
    leaving: list[tuple[float, int, float, float]] = []  # (grace over, index, signalled at, would finish at)
    settling: list[tuple[float, int]] = []  # (may start again, index): requeued, not yet eligible
    run_ends: list[tuple[float, int, int]] = []  # (minimum run time over, index, version)
    places = _Places() if handoff else None

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
        if protects:
            # what the engine's rule says from now on (the book counts it as pinned when
            # the plan's places put it in a running list)
            job.keeps_gpus = bool(why_protected(now, job.preemptions, now, min_runtime, max_per_job))
            if min_runtime > 0:
                heapq.heappush(run_ends, (run_time_over_s(now, min_runtime), job.index, p.version))

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

    def signal(job: JobState) -> None:
        """Preempted with a grace period: out of the book, keeps its GPUs until released."""
        nonlocal preemptions
        book.remove(job)
        places.drop(job.index)
        sync(job, now)
        p = private[job.index]
        done_s = now + p.overhead_left_s + max(job.spec.duration_s - job.progress_s, 0.0) / p.speed \
            if cfg.grace_work_kept else math.inf
        job.running = False
        job.preemptions += 1
        preemptions += 1
        p.version += 1
        if cfg.preempt_grace_s > 0:
            heapq.heappush(leaving, (min(now + cfg.preempt_grace_s, done_s), job.index, now, done_s))
        else:  # no grace period: its GPUs change hands at once (Simulation._loop)
            release(job, now, done_s)

    def release(job: JobState, signalled_s: float, done_s: float) -> None:
        """The grace period is over (Simulation._loop's release: the same charges)."""
        nonlocal busy, preemptions
        p = private[job.index]
        charge_grace(job, p, min(now, done_s) - signalled_s, cfg.grace_work_kept)
        for node, gpus in job.placement:
            free_by_node[node] += gpus
        busy -= job.num_gpus
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

    def requeued(job: JobState) -> None:
        """Eligible again: into the book where the engine's own book would put it."""
        nonlocal waiting_jobs
        served = job.queue_service_gpu_s
        level = bisect.bisect_right(thresholds, served + LEVEL_TOLERANCE_GPU_S)
        if job.queue_entry is not None and job.queue_level == level:
            book.add_waiting(job, level, SETTLED_WAITING, job.queue_entry, waiting_value(job, level, served))
        else:  # its grace-period service crossed a threshold: enters the lower queue now
            book.add_waiting(job, level, ENTERED, now, waiting_value(job, level, served))
        places.set(job.index, job.queue_entry)
        waiting_jobs += 1

    def fits(placement) -> bool:
        return all(free_by_node.get(node, 0) >= gpus for node, gpus in placement)

    def end_protection() -> None:
        """Minimum run times over by now: the engine's rule (mark_protected) again."""
        while run_ends and run_ends[0][0] <= now:
            _, index, version = heapq.heappop(run_ends)
            job = jobs[index]
            if private[index].version == version and job.running:
                job.keeps_gpus = bool(why_protected(job.run_start_s, job.preemptions, now, min_runtime, max_per_job))
                book.repin(job)

    def next_run_end() -> float:
        """The earliest end of a running job's minimum run time after now (the generic
        loop wakes there)."""
        end_protection()
        while run_ends and (private[run_ends[0][1]].version != run_ends[0][2] or not jobs[run_ends[0][1]].running):
            heapq.heappop(run_ends)
        return run_ends[0][0] if run_ends else math.inf

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
        if places is not None:
            places.drop(job.index)
        outcomes.append(outcome_of(job, t))
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
    while next_arrival < total or completions or waiting_jobs or leaving or settling:
        # 1. everything that happens at this moment: completions, requeues, arrivals, crossings
        while current(completions) and completions[0][0] <= now + _EPS:
            t_done, index, _ = heapq.heappop(completions)
            finish(jobs[index], t_done)
            events += 1
        while leaving and leaving[0][0] <= now + _EPS:
            _, index, signalled_s, done_s = heapq.heappop(leaving)
            release(jobs[index], signalled_s, done_s)
            events += 1
        while settling and settling[0][0] <= now + _EPS:
            requeued(jobs[heapq.heappop(settling)[1]])
            events += 1
        while next_arrival < total and jobs[next_arrival].spec.submit_time_s <= now + _EPS:
            job = jobs[next_arrival]
            private[job.index].last_sync_s = job.spec.submit_time_s
            book.add_waiting(job, 0, ENTERED, job.spec.submit_time_s, waiting_value(job, 0, 0.0))
            waiting_jobs += 1
            next_arrival += 1
            events += 1
        round_now = waiting_jobs and (policy.preemptive or busy < capacity)
        while current(demotions) and demotions[0][0] <= now + _EPS:
            t_cross, index, _ = heapq.heappop(demotions)
            job = jobs[index]
            level = book.level_of(job) + 1
            book.remove(job)
            # the engine's entry for a job demoted while running is "the round's time -
            # its service over the threshold", never after the round: a crossing a hair
            # after a round held now enters at now
            entry = min(t_cross, now) if round_now else t_cross
            book.add_waiting(job, level, ENTERED, entry, waiting_value(job, level, thresholds[level - 1]))
            schedule_demotion(job, t_cross, thresholds[level - 1])
            events += 1
        # 2. a round, if any job waits for GPUs (and, without preemption, some are free)
        if round_now:
            if learned is not None and learned.current is not service:
                service = learned.current
                if ordered_waiting:
                    rekey_waiting()
            rounds += 1
            if protects:
                end_protection()
            if handoff:
                book.top, book.bottom = places.bounds()
            # one snapshot object for the whole replay: only its time, round and
            # distribution change (the book and node table are live)
            snapshot.now_s, snapshot.round_id, snapshot.service = now, rounds, service
            snapshot.free_by_node = (plannable_free(free_by_node, (jobs[entry[1]] for entry in leaving)) if leaving
                                     else free_by_node)
            plan = engine.step(snapshot)
            signalled: set[str] = set()
            for action in plan.actions:
                job = jobs[index_of[action.job_id]]
                if action.kind == "preempt":
                    if handoff:
                        signal(job)
                        signalled.add(job.job_id)
                    else:
                        stop(job)
                elif handoff and not fits(action.placement):
                    continue  # planned onto a victim's GPUs still in its grace period: waits
                else:
                    start(job, action.placement)
                    if not policy.discretized:  # no places: a started job joins the running list
                        book.remove(job)
                        book.add_running(job, 0)
            positions = plan.positions
            for job_id, (level, entry) in positions.items():
                job = jobs[index_of[job_id]]
                job.queue_level = level
                job.queue_entry = entry
                if places is not None and job.job_id not in signalled:
                    places.set(job.index, entry)
            if signalled:  # out of the book until requeued; their places wait on the job
                positions = {job_id: place for job_id, place in positions.items() if job_id not in signalled}
            book.apply_positions(positions, lambda job_id: jobs[index_of[job_id]])
            timeline.append((now, waiting_jobs, busy))
            if progress is not None and rounds % 2000 == 0:
                progress(len(outcomes) / max(total, 1))
        # 3. the next moment something changes
        t_next = math.inf
        if next_arrival < total:
            t_next = jobs[next_arrival].spec.submit_time_s
        if current(completions):
            t_next = min(t_next, completions[0][0])
        if current(demotions):
            t_next = min(t_next, demotions[0][0])
        if leaving:
            t_next = min(t_next, leaving[0][0])
        if settling:
            t_next = min(t_next, settling[0][0])
        if waiting_jobs and protects and min_runtime > 0:  # a running job's protection ends
            t_next = min(t_next, next_run_end())
        if t_next == math.inf:
            if waiting_jobs:
                raise InputError("simulation stalled: jobs wait but nothing can ever run them")
            break
        now = t_next if t_next > now else math.nextafter(now, math.inf)

    outcomes.sort(key=lambda o: (o.submit_s, o.job_id))
    return SimResult(policy=policy.name, outcomes=outcomes, capacity_gpus=capacity,
                     preemptions=preemptions, preemption_overhead_s=overhead_total, rounds=rounds,
                     events=events, dropped_oversize=dropped, promotions=0, timeline=timeline)

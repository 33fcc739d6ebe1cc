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

Used when rounds are event-driven; otherwise the generic loop runs. Starvation
promotion (a finite PROMOTEKNOB) is kept here as an event too: a job that starts to
wait in a queue below the first has a fixed moment when it has waited PROMOTEKNOB x
its execution since its last promotion (its counters do not move while it waits), so
the loop wakes then and, at that round, moves it to the tail of Q_1 exactly as the
engine's own promotion does (``RoundWriter.promotion_context``: level 0, entered at
the round's time, its counters reset), instead of rebuilding every queue every round.
That moment is computed once per wait where the generic loop adds up each round's
wait, so the two can differ in a float's last digit and, rarely, order a tie the other
way (tests/test_tune_budget.py checks identical replays for knobs 2 to 16).
Both loops drive the same simulated cluster
(controller.replay.cluster.SimCluster: GPUs, starts, stops, completions, the
grace/requeue path), so the controller's preemption costs (SimConfig.charges_handoff)
are charged by the same code, with the same results; what this loop adds is the book:

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
  (``run_time_over_s``): a moment the loop wakes at, as the generic loop does;
- where some job may use only some nodes, the pending jobs beyond reach
  (controller.core.placement.beyond_reach, the controller's own selection) leave the
  book for the round's walk and come back at their places after it; the book's bounds
  are then taken from the jobs in it (``_Places``), and such a job's starvation
  promotion waits for a round that does not set it aside, as in the generic loop;
- with Slurm starting the jobs (SimConfig.slurm_starts: the engine is a
  controller.replay.slurm_order.SlurmOrder), the loop tells it each arrival, start, stop
  and promotion, so that it keeps the pending jobs in Slurm's order between rounds; a
  job Slurm started where the plan gave it no place joins its level's running list at
  its place (``settle_slurm_starts``), as the generic loop's next book would list it,
  and Slurm's band for a job promoted at this round is the one before (the generic
  loop promotes after the step). tests/test_slurm_starts_loops.py checks both loops
  replay alike. slurmctld's own preemption (SlurmPreempts) stays on the generic loop.
"""
from __future__ import annotations

import bisect
import heapq
import math
from typing import Callable, Optional

import numpy as np

from controller.core.engine import Engine
from controller.core.model import InputError, JobState, Snapshot
from controller.core.placement import beyond_reach
from controller.core.policies.base import LEVEL_TOLERANCE_GPU_S, judged_at
from controller.core.policies.dgittins import known, quantum_ends
from controller.core.protection import run_time_over_s, why_protected
from controller.core.queue_book import QueueBook
from controller.core.queues import ENTERED, SETTLED_WAITING
from controller.core.policies.base import STARVATION_TOLERANCE_S
from controller.replay.cluster import learner_for, RunState, SimCluster
from controller.replay.run_config import EPS, SimConfig, SimResult, WATCH_EVERY
from controller.replay.slurm_order import SlurmOrder
from controller.replay.stale_heap import StaleHeap


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


def _node_class(job: JobState) -> tuple:
    """What the nodes a job may use follow from (controller.core.placement.Eligibility's
    key), and whether it has node constraints: jobs alike in it are judged alike by the
    walk's reach (controller.core.victims.OwnNodesReach.class_key)."""
    spec = job.spec
    return spec.partitions, spec.gpu_type, spec.reservation, spec.features, spec.constrained


def settle_slurm_starts(book: QueueBook, started: list[JobState]) -> None:
    """Jobs Slurm started where the plan gave them no place (settled waiting jobs the
    plan did not start): they run at their place, as the next round's book built from
    the jobs would list them (controller.core.queues: settled running, by entry)."""
    for job in started:
        level, key = book.where[job.index]
        if key is None:  # the plan's place put it in a running list
            continue
        if key[1] != SETTLED_WAITING:
            raise AssertionError(f"job {job.job_id}: Slurm started an entered job the plan gave no place")
        book.remove(job)
        book.add_running(job, level)
        running = book.running[level]
        if len(running) > 1:
            items = reversed(running.values())
            next(items)
            before = next(items)
            if (before.queue_entry, before.index) > (job.queue_entry, job.index):  # its place is earlier
                book.running[level] = dict(sorted(running.items(), key=lambda item: (item[1].queue_entry, item[0])))


def run_mlfq(cfg: SimConfig, engine: Engine, private: list[RunState], jobs: list[JobState], dropped: list[str],
             progress: Optional[Callable[[float], None]] = None,
             watch: Optional[Callable[[float], None]] = None) -> SimResult:
    """Replay ``jobs`` (sorted by submit time; ``private`` their run states) with
    ``engine``'s policy; ``dropped``: the oversize jobs left out. ``watch(fraction of
    jobs finished)`` is called every WATCH_EVERY passes of the loop; it may raise
    ReplayCut to stop the replay."""
    engine_cfg = cfg.engine
    policy = engine.policy
    thresholds = engine_cfg.thresholds_gpu_s if policy.discretized else ()  # fifo: one queue
    num_levels = len(thresholds) + 1
    capacity = cfg.capacity_gpus
    learned = learner_for(cfg, policy) if cfg.service is None and policy.uses_service_distribution else None
    seen_version = learned.version if learned is not None else 0
    cluster = SimCluster(cfg, jobs, private, learned)
    service = cfg.service
    job_of = {job.job_id: job for job in jobs}.__getitem__  # a plan's job id -> its job
    book = QueueBook(num_levels)
    ordered_waiting = policy.uses_service_distribution  # waiting order depends on the distribution
    # the controller's preemption costs (as in the generic loop)
    handoff = cluster.handoff
    min_runtime = engine_cfg.preempt_min_runtime_s
    max_per_job = engine_cfg.preempt_max_per_job
    protects = engine_cfg.protects_victims and policy.preemptive
    run_ends: list[tuple[float, int, int]] = []  # (minimum run time over, index, version)
    # the controller's selection: pending jobs beyond reach leave the book for the
    # round (controller.core.placement.beyond_reach), only where some job may use only
    # some nodes
    reach = cluster.reach_matters
    places = _Places() if handoff or reach else None
    discretized = policy.discretized
    knob = engine_cfg.promote_knob if discretized else math.inf
    promoting = math.isfinite(knob)
    # (when it has waited long enough, index, version): waiting jobs below Q_1
    promotion_due: list[tuple[float, int, int]] = []
    promotion_wakeups: list[tuple[float, int, int]] = []  # those the loop wakes for

    def waits_still(item) -> bool:  # valid_due's test: a job that starts or is promoted bumps its version
        return private[item[1]].version == item[2] and not jobs[item[1]].running

    # every preemption pushes a moment that its job's next start makes stale, mostly far
    # ahead: the heaps are pruned as they grow (controller.replay.stale_heap)
    due_push = StaleHeap(promotion_due, waits_still).push
    wakeup_push = StaleHeap(promotion_wakeups, waits_still).push
    promotions = 0
    # Slurm starts the jobs (SimConfig.slurm_starts): the plan's starts are replaced by
    # Slurm's (controller.replay.slurm_order), which keeps the pending jobs from the events
    slurm = engine if isinstance(engine, SlurmOrder) else None
    if slurm is not None:
        slurm.track(job_of, cluster.nodes)

    def waiting_value(job: JobState, level: int, served_gpu_s: float) -> float:
        return policy.waiting_value(service, thresholds, level, served_gpu_s, job.spec) if ordered_waiting else 0.0

    if ordered_waiting:  # else the book's own within value, 0.0 (as waiting_value's)
        book.within_function = lambda job, level: waiting_value(job, level, job.queue_service_gpu_s)
    if cluster.reach_matters:  # waiting lists per node class too: the walk passes a class out of reach whole
        book.class_function = _node_class

    demotions: list[tuple[float, int, int]] = []  # (crossing time, index, version)
    # a preempted job's crossing stays behind, stale (current()'s test)
    demotion_push = StaleHeap(demotions, lambda item: private[item[1]].version == item[2]
                              and jobs[item[1]].running).push
    timeline: list[tuple[float, int, int]] = []
    waiting_jobs = 0  # jobs without GPUs (the book also lists entered jobs that still run)
    rounds = events = 0
    next_arrival = 0
    total = len(jobs)
    now = jobs[0].spec.submit_time_s if jobs else 0.0

    def schedule_demotion(job: JobState, t: float, served_gpu_s: float) -> None:
        level = bisect.bisect_right(thresholds, served_gpu_s + LEVEL_TOLERANCE_GPU_S)
        if level < len(thresholds):
            p = private[job.index]
            demotion_push((t + (thresholds[level] - served_gpu_s) / job.num_gpus, job.index, p.version))

    def start(job: JobState, placement) -> None:
        nonlocal waiting_jobs
        if promoting:  # its wait counts towards its next promotion (only promotion reads it)
            job.waited_since_promotion_s += now - private[job.index].last_sync_s
        private[job.index].last_sync_s = now
        cluster.start(job, placement, now)
        if slurm is not None:
            slurm.started(job)
        waiting_jobs -= 1
        schedule_demotion(job, now, job.queue_service_gpu_s)
        if protects:
            # what the engine's rule says from now on (the book counts it as pinned when
            # the plan's places put it in a running list)
            job.keeps_gpus = bool(why_protected(now, job.preemptions, now, min_runtime, max_per_job))
            if min_runtime > 0:
                heapq.heappush(run_ends, (run_time_over_s(now, min_runtime), job.index, private[job.index].version))

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
        if promoting:
            starts_waiting(job)

    def starts_waiting(job: JobState) -> None:
        """Its promotion moment, if it waits below Q_1: its counters stand still
        while it waits, so the moment is known now (the generic loop's wake time)."""
        if book.level_of(job) == 0:
            return
        p = private[job.index]
        due = p.last_sync_s + knob * job.executed_since_promotion_s - job.waited_since_promotion_s
        due_push((due, job.index, p.version))
        # The generic loop wakes for it only if its service reached the first threshold
        # exactly (not just within the level's tolerance); otherwise the next round that
        # happens anyway promotes it, here as there.
        if job.queue_service_gpu_s >= thresholds[0]:
            wakeup_push((due, job.index, p.version))

    def valid_due(heap=promotion_due) -> bool:
        """Drop stale promotion moments (the job started, or was promoted, since)."""
        while heap and (private[heap[0][1]].version != heap[0][2] or jobs[heap[0][1]].running):
            heapq.heappop(heap)
        return bool(heap)

    def drop_wakeups(limit: float) -> None:
        """This round handled every wake-up up to ``limit``: a stale one left would wake
        the loop again at once, forever."""
        while promotion_wakeups and promotion_wakeups[0][0] <= limit:  # stale or not
            heapq.heappop(promotion_wakeups)

    def promote_due() -> None:
        """Starvation promotions at this round, as the engine makes them: every job
        below Q_1 that has waited PROMOTEKNOB x its execution goes to the tail of Q_1
        (entered now) with its counters reset. Returns (job, its queue service before)."""
        nonlocal promotions
        # the engine's test has a tolerance: a moment that far ahead is due now too
        limit = now + STARVATION_TOLERANCE_S + EPS
        if not promotion_due or promotion_due[0][0] > limit:  # most rounds: nobody is due (stale items wait)
            if promotion_wakeups and promotion_wakeups[0][0] <= limit:
                drop_wakeups(limit)
            return ()
        due_now, not_yet, deferred = [], [], []
        while valid_due() and promotion_due[0][0] <= limit:
            item = heapq.heappop(promotion_due)
            job, p = jobs[item[1]], private[item[1]]
            if job.index not in book.where:  # set aside this round: promoted at the next round it is not
                deferred.append(item)
                continue
            waited = job.waited_since_promotion_s + (now - p.last_sync_s)
            if book.level_of(job) == 0:
                continue
            if waited + STARVATION_TOLERANCE_S < knob * job.executed_since_promotion_s:
                not_yet.append(item)  # the moment's float rounding: the engine's test says later
                continue
            due_now.append(job)
        drop_wakeups(limit)
        for item in deferred:
            due_push(item)
        for item in not_yet:
            job = jobs[item[1]]
            waited = job.waited_since_promotion_s + (now - private[item[1]].last_sync_s)
            later = (now + knob * job.executed_since_promotion_s - waited, item[1], item[2])
            due_push(later)
            if job.queue_service_gpu_s >= thresholds[0]:
                wakeup_push(later)
        promoted = []
        for job in sorted(due_now, key=lambda j: j.index):
            book.remove(job)
            promoted.append((job, job.queue_service_gpu_s))
            job.queue_service_gpu_s = 0.0
            job.executed_since_promotion_s = 0.0
            job.waited_since_promotion_s = 0.0
            job.promotions += 1
            private[job.index].last_sync_s = now
            private[job.index].version += 1  # its old promotion moment is stale
            book.add_waiting(job, 0, ENTERED, now, waiting_value(job, 0, 0.0))
            promotions += 1
        return promoted

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

    def current(heap) -> bool:
        """Drop stale entries (the job stopped or restarted since it was pushed)."""
        while heap and (private[heap[0][1]].version != heap[0][2] or not jobs[heap[0][1]].running):
            heapq.heappop(heap)
        return bool(heap)

    def rekey_waiting() -> None:
        """The distribution changed: every waiting order value too."""
        def values(level: int, items) -> list[float]:
            if not items or not known(service):
                return [0.0] * len(items)
            served = [judged_at(thresholds, level, group == ENTERED and job.running, job.queue_level,
                                job.queue_service_gpu_s) for (_, group, _), _, job in items]
            ends = quantum_ends(thresholds, [level] * len(items), served)
            return (-np.asarray(service.indices_for([job.spec for _, _, job in items], served, ends))).tolist()
        book.rekey(values, levels=range(len(thresholds) + 1))

    snapshot = Snapshot(now_s=now, jobs=[], nodes=cluster.nodes, service=service, round_id=0, detailed=False,
                        explain=False, free_by_node=cluster.free_by_node, capacity_gpus=capacity,
                        max_gpus_per_node=cluster.max_per_node, queue_book=book)
    passes = 0
    while next_arrival < total or cluster.completions or waiting_jobs or cluster.leaving or cluster.settling:
        passes += 1
        if watch is not None and passes % WATCH_EVERY == 0:
            watch(len(cluster.outcomes) / max(total, 1))
        # 1. everything that happens at this moment: completions, requeues, arrivals, crossings
        # (each heap's head read here first: most passes have none of some kinds due)
        completions = cluster.completions
        if completions and completions[0][0] <= now + EPS:
            for job in cluster.finish_due(now):
                book.remove(job)
                if slurm is not None:
                    slurm.ended(job)
                if places is not None:
                    places.drop(job.index)
                events += 1
        if cluster.leaving:
            events += cluster.release_due(now)
        if cluster.settling:
            for job in cluster.settled_due(now):
                requeued(job)
                events += 1
        while next_arrival < total and jobs[next_arrival].spec.submit_time_s <= now + EPS:
            job = jobs[next_arrival]
            private[job.index].last_sync_s = job.spec.submit_time_s
            book.add_waiting(job, 0, ENTERED, job.spec.submit_time_s, waiting_value(job, 0, 0.0))
            waiting_jobs += 1
            next_arrival += 1
            events += 1
            if slurm is not None:
                slurm.arrived(job)
        round_now = waiting_jobs and (policy.preemptive or cluster.busy < capacity)
        while demotions:  # current(demotions), inlined: the loop's most frequent test
            t_cross, index, version = demotions[0]
            job = jobs[index]
            if private[index].version != version or not job.running:  # stale: the job stopped or restarted
                heapq.heappop(demotions)
                continue
            if t_cross > now + EPS:
                break
            heapq.heappop(demotions)
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
            if learned is not None and (learned.current is not service or learned.version != seen_version):
                service, seen_version = learned.current, learned.version
                if ordered_waiting:
                    rekey_waiting()
            rounds += 1
            free_now = cluster.plannable_free()
            aside_places = ()
            if reach and cluster.reach_binds():
                aside = beyond_reach(list(book.jobs()), cluster.nodes, free_now, cluster.eligible)
                aside_places = [(job, book.where[job.index]) for job in aside]
                for job in aside:  # out of the book for this round's walk, as out of the controller's snapshot
                    book.remove(job)
                    places.drop(job.index)
            promoted = promote_due() if promoting else ()
            if slurm is not None:  # Slurm's band is the one before this round's promotion
                slurm.service_before = {job.job_id: served for job, served in promoted}
            if protects:
                end_protection()
            if places is not None:
                book.top, book.bottom = places.bounds()
            # one snapshot object for the whole replay: only its time, round and
            # distribution change (the book and node table are live)
            snapshot.now_s, snapshot.round_id, snapshot.service = now, rounds, service
            snapshot.free_by_node = free_now
            plan = engine.step(snapshot)
            cluster.expect(plan)
            signalled: set[str] = set()
            stopped: list[JobState] = []
            started: list[JobState] = []
            for action in plan.actions:
                job = job_of(action.job_id)
                if action.kind == "preempt":
                    if handoff:  # out of the book, keeps its GPUs until released
                        book.remove(job)
                        places.drop(job.index)
                        cluster.signal(job, now)
                        signalled.add(job.job_id)
                        if slurm is not None:
                            slurm.ended(job)
                    else:
                        cluster.stop(job, now)
                        waiting_jobs += 1
                        if slurm is not None:
                            slurm.ended(job)
                        if promoting:
                            stopped.append(job)
                elif handoff and not cluster.fits(action.placement):
                    continue  # planned onto a victim's GPUs still in its grace period: waits
                else:
                    start(job, action.placement)
                    started.append(job)
                    if not discretized:  # no places: a started job joins the running list
                        book.remove(job)
                        book.add_running(job, 0)
            positions = plan.positions
            for job_id, (level, entry) in positions.items():
                job = job_of(job_id)
                job.queue_level = level
                job.queue_entry = entry
                if places is not None and job.job_id not in signalled:
                    places.set(job.index, entry)
            if signalled:  # out of the book until requeued; their places wait on the job
                positions = {job_id: place for job_id, place in positions.items() if job_id not in signalled}
            book.apply_positions(positions, job_of)
            for job, (level, (within, group, entry)) in aside_places:  # back where they were
                book.add_waiting(job, level, group, entry, within)
                places.set(job.index, job.queue_entry)
            if slurm is not None:
                slurm.promoted()
                if discretized:
                    settle_slurm_starts(book, started)
            for job in stopped:  # waits at its level (the plan's place): its promotion moment
                starts_waiting(job)
            cluster.judge_handoffs()
            if waiting_jobs:
                cluster.audit_waits(book.order, now, policy.preemptive, book)
            timeline.append((now, waiting_jobs, cluster.busy))
            if progress is not None and rounds % 2000 == 0:
                progress(len(cluster.outcomes) / max(total, 1))
        # 3. the next moment something changes
        t_next = cluster.next_completion_s()
        t_handoff = cluster.next_handoff_s()
        if t_handoff < t_next:
            t_next = t_handoff
        if next_arrival < total and jobs[next_arrival].spec.submit_time_s < t_next:
            t_next = jobs[next_arrival].spec.submit_time_s
        if current(demotions) and demotions[0][0] < t_next:
            t_next = demotions[0][0]
        if waiting_jobs and protects and min_runtime > 0:  # a running job's protection ends
            t_next = min(t_next, next_run_end())
        if waiting_jobs and promoting and valid_due(promotion_wakeups):
            t_next = min(t_next, max(promotion_wakeups[0][0], now))
        if t_next == math.inf:
            if waiting_jobs:
                raise InputError("simulation stalled: jobs wait but nothing can ever run them")
            break
        now = t_next if t_next > now else math.nextafter(now, math.inf)

    return cluster.result(policy.name, rounds, events, dropped, promotions, timeline)

"""The simulated cluster both replay loops drive, and each job's run state (the run's
configuration and results: controller.replay.run_config).

``SimCluster`` is written once for controller.replay.simulator (the generic loop)
and controller.replay.mlfq_replay (the loop with a queue book kept alive): nodes and
their free GPUs, each job's counters (synced lazily), starts, stops, completions at
their exact times, and the controller's preemption (controller.service.round.preemption)
as the simulator charges it: a signalled victim keeps its GPUs through its grace
period (``leaving``), is then requeued and waits out the requeue delay
(``settling``) before it may start again. The loops only decide when rounds happen
and keep their own view of who waits (a job list, or a queue book). Every loop also
hands it each round's plan and walk order for two audits of the victim rule
(``judge_handoffs``: preemptions that started nobody; ``audit_waits``: jobs that
waited behind a usable victim), reported in SimResult.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from controller.core.conditioned import ConditionedDistributions
from controller.core.gittins import LearnedDistribution
from controller.core.model import JobState, Node
from controller.core.placement import COUNT_NODE, Eligibility, hand_over, is_spread, place, place_constrained
from controller.core.protection import protection
from controller.core.victims import victims_for
from controller.replay.stale_heap import StaleHeap
from controller.replay.wait_audit import Candidates, from_book, open_items
from controller.replay.wait_audit import listed as every_candidate
from controller.replay.run_config import (BEHIND_VICTIM_ROUNDS, EPS, EXAMPLES_KEPT, JobOutcome, SimConfig,
                                          SimResult, outcome_of)


@dataclass
class RunState:
    """The simulator's own per-job state: when its counters were last synced, its speed
    (spread gangs run slower), restart overhead still to pay, and a version that
    outdates queued events when the job stops or restarts."""

    last_sync_s: float = 0.0
    speed: float = 1.0
    overhead_left_s: float = 0.0
    version: int = 0


def charge_grace(job: JobState, p: RunState, held_s: float, work_kept: bool) -> None:
    """A victim held its GPUs ``held_s`` seconds after the signal: charged as service
    (as the controller's accounting does); progress only if the job checkpoints on
    its own (``work_kept``: SimConfig.grace_work_kept), less any restart overhead left."""
    job.executed_s += held_s
    job.executed_since_promotion_s += held_s
    job.attained_gpu_s += job.num_gpus * held_s
    job.queue_service_gpu_s += job.num_gpus * held_s
    if work_kept:
        lost = min(p.overhead_left_s, held_s)
        p.overhead_left_s -= lost
        job.progress_s += (held_s - lost) * p.speed


def plannable_free(free_by_node: dict[str, int], victims: Iterable[JobState]) -> dict[str, int]:
    """Free GPUs as the plan sees them: a victim's GPUs in its grace period are promised
    to the job its preemption made room for (as the controller's snapshot counts them),
    so no second victim is preempted for that job; a start planned onto them waits
    until they are really free (both replay loops)."""
    free = dict(free_by_node)
    for job in victims:
        for node, gpus in job.placement:
            free[node] += gpus
    return free


def learner_for(cfg: SimConfig, policy):
    """What a replay learns its service distribution(s) into from the jobs that end:
    per key for a policy that reads them per job (dgittins), unless turned off."""
    return ConditionedDistributions(window=cfg.service_window) if cfg.conditioned and policy.conditions_service else LearnedDistribution()


def _open_sets(smallest: dict, short: dict) -> int:
    """How many node sets still have a gang that their refusals (``short``) let through."""
    return sum(1 for nodes, gang in smallest.items() if gang < short.get(nodes, gang + 1))


def _refusals() -> dict:
    """audit_waits' node set -> fewest GPUs refused there (a test swaps in one that forgets)."""
    return {}


class SimCluster:
    """Nodes, GPUs and the jobs' run states of one replay (times in seconds).

    ``jobs`` are the replay's jobs (``job.index`` their position), ``run_state`` their
    RunState, ``learned`` the distribution learned from finished jobs (None: given or
    unused). Counters: ``busy`` GPUs, ``preemptions`` (a victim that finishes in its
    grace period is not one), ``overhead_total_s`` of restarts."""

    def __init__(self, cfg: SimConfig, jobs: list[JobState], run_state: list[RunState],
                 learned: Optional[LearnedDistribution]):
        self.cfg = cfg
        self.jobs = jobs
        self.run_state = run_state
        self.learned = learned
        self.count_mode = cfg.engine.placement == "count"
        if self.count_mode:
            self.nodes = [Node(COUNT_NODE, cfg.capacity_gpus, cfg.capacity_gpus)]
        else:
            self.nodes = cfg.node_table()
        self.free_by_node = {n.name: n.gpus_total for n in self.nodes}
        self.max_per_node = max(n.gpus_total for n in self.nodes)
        self.handoff = cfg.preempt_grace_s > 0 or cfg.requeue_delay_s > 0  # preemption costs a grace/requeue
        self.busy = 0
        self.preemptions = 0
        self.overhead_total_s = 0.0
        self.outcomes: list[JobOutcome] = []
        self.completions: list[tuple[float, int, int]] = []  # (time, index, version)
        # a stopped job's completion stays behind, stale (controller.replay.stale_heap)
        self._completions = StaleHeap(self.completions, lambda item: run_state[item[1]].version == item[2]
                                      and jobs[item[1]].running)
        # (grace over, index, signalled at, would finish at): signalled, holds its GPUs
        self.leaving: list[tuple[float, int, float, float]] = []
        self.settling: list[tuple[float, int]] = []  # (may start again, index): requeued, not yet eligible
        self._overhead_per_restart_s = cfg.preempt_pause_s + cfg.preempt_resume_s
        # The handoff audit (expect, judge_handoffs): this round's plan, victim id ->
        # (its nodes, the indices of the jobs the plan starts on them); each signalled
        # victim's (signalled at, nodes, beneficiaries) until its GPUs are free, then
        # judged at the end of that round.
        self._index_of = {job.job_id: job.index for job in jobs}
        self._plan = None
        self._for_whom: Optional[dict[str, tuple[frozenset, tuple[int, ...]]]] = {}
        self._open: dict[int, tuple[float, frozenset, tuple[int, ...]]] = {}
        self._freed: list[tuple[int, float, frozenset, tuple[int, ...]]] = []
        self.useless_preemptions = 0
        self.useless_examples: list[tuple[str, tuple[str, ...], float]] = []
        # The wait audit (audit_waits): job index -> rounds in a row it waited behind a
        # usable victim (this round's), and (longest such run, when it began) of those
        # that went past BEHIND_VICTIM_ROUNDS.
        self.eligible = None if self.count_mode else Eligibility(self.nodes)
        # Where every job may use every node and places on any free GPUs, the walk's
        # cluster-wide count is exact (controller.core.victims): a job it leaves waiting
        # has fewer free and lower-priority preemptable GPUs than it needs, so no job can
        # wait behind a usable victim and the wait audit has nothing to find.
        self._allowed = [] if self.count_mode else [self.eligible.allowed(job.spec) for job in jobs]
        # Some job may use only some nodes: a round sets aside the pending jobs beyond
        # reach, as the controller does (controller.core.placement.beyond_reach: where
        # every job may use every node, none ever is, and the loops skip the question).
        self.reach_matters = any(allowed is not None for allowed in self._allowed)
        # On the nodes a job may use, the GPUs free or held by preemptable jobs are all
        # their GPUs but those of running jobs that are not preemptable (``kept_busy``;
        # a signalled victim's count as free): with none of those running, only a job
        # larger than all its nodes is beyond reach, and ``reach_binds`` spares the
        # rounds the question.
        self.kept_busy = 0
        totals = {n.name: n.gpus_total for n in self.nodes}
        self._larger_than_its_nodes = self.reach_matters and any(
            allowed is not None and sum(totals[name] for name in allowed) < job.num_gpus
            for allowed, job in zip(self._allowed, jobs))
        self._waits_exact = self.count_mode or not any(
            self._allowed[job.index] is not None or job.spec.constrained
            or (cfg.engine.placement == "consolidate" and job.spec.skew > cfg.engine.pack_limit) for job in jobs)
        self._behind: dict[int, tuple[int, float]] = {}
        self.waited_behind: dict[int, tuple[int, float]] = {}

    def allowed_again(self, job: JobState) -> None:
        """The nodes ``job`` may use, again from its spec (its partitions moved)."""
        if not self.count_mode:
            self._allowed[job.index] = self.eligible.allowed(job.spec)

    # -- a job's counters ---------------------------------------------------------
    def sync(self, job: JobState, t: float) -> None:
        """Bring the job's counters to time ``t``: service and progress if it runs,
        waiting time (read only by starvation promotion) if not."""
        p = self.run_state[job.index]
        dt = t - p.last_sync_s
        if dt <= 0:
            return
        if job.running:
            lost = min(p.overhead_left_s, dt)
            p.overhead_left_s -= lost
            job.progress_s += (dt - lost) * p.speed
            job.executed_s += dt
            job.executed_since_promotion_s += dt
            served = job.num_gpus * dt
            job.attained_gpu_s += served
            job.queue_service_gpu_s += served
        else:
            job.waited_since_promotion_s += dt
        p.last_sync_s = t

    def completion_time(self, job: JobState) -> float:
        """When the running job's work ends, from its last sync."""
        p = self.run_state[job.index]
        left = max(job.spec.duration_s - job.progress_s, 0.0)
        return p.last_sync_s + p.overhead_left_s + left / p.speed

    # -- what a plan does ---------------------------------------------------------
    def fits(self, placement) -> bool:
        """The slots are really free now (not a victim's still in its grace period)."""
        free_by_node = self.free_by_node
        return all(free_by_node.get(node, 0) >= gpus for node, gpus in placement)

    def reach_binds(self) -> bool:
        """Some pending job may be beyond reach now (controller.core.placement.beyond_reach
        may find one): False tells a round it would find none."""
        return self.reach_matters and (self.kept_busy > 0 or self._larger_than_its_nodes)

    def plannable_free(self) -> dict[str, int]:
        """Free GPUs as the round's plan sees them (plannable_free)."""
        if not self.leaving:
            return self.free_by_node
        jobs = self.jobs
        return plannable_free(self.free_by_node, (jobs[entry[1]] for entry in self.leaving))

    def start(self, job: JobState, placement, now: float) -> None:
        """Start the job on ``placement`` (its counters synced to ``now``); a restart
        pays the checkpoint pause and restore, a sensitive gang spread over extra nodes
        runs at ``spread_speed``."""
        cfg = self.cfg
        p = self.run_state[job.index]
        job.running = True
        job.run_start_s = now
        job.placement = placement
        free_by_node = self.free_by_node
        for node, gpus in placement:
            free_by_node[node] -= gpus
        self.busy += job.num_gpus
        if not job.spec.preemptable:
            self.kept_busy += job.num_gpus
        if job.first_start_s is None:
            job.first_start_s = now
        if job.preemptions:
            p.overhead_left_s = self._overhead_per_restart_s
            self.overhead_total_s += self._overhead_per_restart_s
        sensitive = not self.count_mode and job.spec.skew > cfg.engine.pack_limit
        p.speed = cfg.spread_speed if sensitive and is_spread(placement, job.num_gpus, cfg.gpus_per_node) else 1.0
        p.version += 1
        self._completions.push((self.completion_time(job), job.index, p.version))

    def _free(self, job: JobState) -> None:
        free_by_node = self.free_by_node
        for node, gpus in job.placement:
            free_by_node[node] += gpus
        self.busy -= job.num_gpus
        if not job.spec.preemptable:
            self.kept_busy -= job.num_gpus
        job.placement = ()

    def stop(self, job: JobState, now: float) -> None:
        """Preempted with no grace period and no requeue delay: its GPUs change hands
        now and it waits again at once."""
        self.sync(job, now)
        self._signalled(job, now)
        job.running = False
        self._free(job)
        job.preemptions += 1
        self.preemptions += 1
        self.run_state[job.index].version += 1
        self._gpus_freed(job)

    def signal(self, job: JobState, now: float) -> bool:
        """Preempted as the controller does it: signalled now, it keeps its GPUs through
        the grace period (``leaving``), then ``release``. Returns True when there is no
        grace period (released at once: only the requeue delay)."""
        cfg = self.cfg
        done_s = self.signal_now(job, now)
        if cfg.preempt_grace_s > 0:
            heapq.heappush(self.leaving, (min(now + cfg.preempt_grace_s, done_s), job.index, now, done_s))
            return False
        self.release(job, now, done_s, now)
        return True

    def signal_now(self, job: JobState, now: float) -> float:
        """The signal itself: the job stops running (it keeps its GPUs until
        ``release``) and counts a preemption; returns when its work would end (inf
        unless grace_work_kept). The lever replay (controller.replay.lever_replay)
        releases it when its Requeue action comes, as the controller does."""
        self.sync(job, now)
        done_s = self.completion_time(job) if self.cfg.grace_work_kept else math.inf
        self._signalled(job, now)
        job.running = False
        job.preemptions += 1
        self.preemptions += 1
        self.run_state[job.index].version += 1
        return done_s

    def release(self, job: JobState, signalled_s: float, done_s: float, now: float) -> None:
        """The grace period is over: the controller requeues the victim. It was charged
        service until now (as the controller's accounting does) but made no progress
        after the signal (its restart resumes from that checkpoint), unless
        grace_work_kept: then it progressed, and finished if ``done_s`` (when its work
        ends) came first."""
        cfg = self.cfg
        p = self.run_state[job.index]
        charge_grace(job, p, min(now, done_s) - signalled_s, cfg.grace_work_kept)
        self._free(job)
        p.last_sync_s = now
        if done_s <= now + EPS and cfg.requeue_ended_in_grace:
            # ended within its grace period, requeued all the same: nothing left to do but
            # its restart (and whatever restart cost that pays) when it runs again
            job.progress_s = job.spec.duration_s
            self._gpus_freed(job)
            heapq.heappush(self.settling, (now + cfg.requeue_delay_s, job.index))
            return
        if done_s <= now + EPS:  # ended within its grace period: never requeued
            self._open.pop(job.index, None)  # not a preemption: nothing to judge
            job.preemptions -= 1
            self.preemptions -= 1
            job.progress_s = job.spec.duration_s
            job.finish_time_s = done_s
            self._record(job, done_s)
            return
        self._gpus_freed(job)
        heapq.heappush(self.settling, (now + cfg.requeue_delay_s, job.index))

    # -- did each preemption start somebody ---------------------------------------
    def expect(self, plan) -> None:
        """The round's plan (a controller.core.plan.Plan), before its actions are
        applied: each victim's beneficiaries are the jobs the plan starts on a node the
        victim holds (the victim rule keeps every victim no placed newcomer needs:
        controller.core.protection.needed_victims, victims.victims_for). A victim the
        executor then signals or stops is watched from there (``_signalled``); the plan
        is read only in a round that preempts, at its first victim."""
        self._plan, self._for_whom = plan, None

    def _signalled(self, job: JobState, now: float) -> None:
        if self._for_whom is None:
            self._for_whom = self._victims_of(self._plan)
        expected = self._for_whom.get(job.job_id)
        if expected is not None:
            self._open[job.index] = (now, *expected)

    def _victims_of(self, plan) -> dict[str, tuple[frozenset, tuple[int, ...]]]:
        """victim id -> (its nodes, the indices of the jobs ``plan`` starts on them)."""
        if plan is None:
            return {}
        jobs, index_of = self.jobs, self._index_of
        starts = [(index_of[action.job_id], {node for node, _ in action.placement})
                  for action in plan.actions if action.kind == "start"]
        for_whom = {}
        for action in plan.actions:
            if action.kind == "preempt":
                nodes = frozenset(node for node, _ in jobs[index_of[action.job_id]].placement)
                for_whom[action.job_id] = (nodes, tuple(index for index, placed in starts if nodes & placed))
        return for_whom

    def _gpus_freed(self, job: JobState) -> None:
        opened = self._open.pop(job.index, None)
        if opened is not None:
            self._freed.append((job.index, *opened))

    def judge_handoffs(self) -> None:
        """At the end of a round (its starts made): every preemption whose victim's GPUs
        were freed since the last judgement is judged. It started somebody when one of
        its beneficiaries runs now, started at or after the signal, with GPUs on a node
        the victim held; otherwise it counts in ``useless_preemptions`` (a preemption
        that started nobody: the GPUs it freed went to someone else, or to nobody). The
        GPUs are free at the victim's requeue (the grace period's end; at once with
        none), and the first round from then is when the beneficiary starts on them,
        so that round is the handoff's time-out. A victim whose work ended within its
        grace period was never preempted: not judged."""
        if not self._freed:
            return
        jobs = self.jobs
        for victim, signalled_s, nodes, beneficiaries in self._freed:
            if any(jobs[b].running and jobs[b].run_start_s is not None and jobs[b].run_start_s >= signalled_s - EPS
                   and any(node in nodes for node, _ in jobs[b].placement) for b in beneficiaries):
                continue
            self.useless_preemptions += 1
            if len(self.useless_examples) < EXAMPLES_KEPT:
                self.useless_examples.append((jobs[victim].job_id, tuple(jobs[b].job_id for b in beneficiaries),
                                              signalled_s))
        self._freed.clear()

    # -- who waited behind a victim it could have had -----------------------------------
    def fit(self, job: JobState, free_by_node: dict[str, int]):
        """The slots the plan would give ``job`` on these free GPUs (nothing taken),
        or None: the engine's own placement (controller.core.round_writer.fit)."""
        spec = job.spec
        allowed = self._allowed[job.index]
        engine_cfg = self.cfg.engine
        consolidate = engine_cfg.placement == "consolidate" and spec.skew > engine_cfg.pack_limit
        if spec.constrained or allowed is not None:
            return place_constrained(job.num_gpus, free_by_node, spec, consolidate=consolidate,
                                     max_gpus_per_node=self.max_per_node, allowed=allowed)
        return place(job.num_gpus, free_by_node, consolidate=consolidate, max_gpus_per_node=self.max_per_node)

    def walk_pieces(self, order, now: float, book=None) -> tuple[list, list[tuple[int, list]], Optional[list]]:
        """audit_waits' view of the walk order: (the candidate victims as (place, job),
        in order: running jobs the victim rule lets go), (first place, jobs) spans that
        hold every job that does not run, in order (with running jobs among them, which
        the audit passes), and per span its class lists (QueueBook.by_class: (gang size,
        class) -> items; None without them). From ``book``'s pieces where it keeps its
        class lists, else from ``order()``: equal (tests/test_class_walk.py checks it
        every round)."""
        engine_cfg = self.cfg.engine
        protects = engine_cfg.protects_victims
        min_runtime, max_per_job = engine_cfg.preempt_min_runtime_s, engine_cfg.preempt_max_per_job
        if book is not None and book.class_function is not None:
            listed, levels = book.running_places()
            spans = levels[1::2]  # the waiting items (a level's running list holds only running jobs)
            lists = book.by_class
        else:
            ordered = order()
            if not isinstance(ordered, list):
                ordered = list(ordered)
            spans, lists = [(0, ordered)], None
            listed = enumerate(ordered)
        if protects:
            candidates = [(rank, job) for rank, job in listed
                          if job.running and not protection(job, now, min_runtime, max_per_job)]
        else:  # the rule without its time and count parts (protection's first test)
            candidates = [(rank, job) for rank, job in listed if job.running and job.spec.preemptable]
        return candidates, spans, lists

    def audit_view(self, order, now: float, book=None) -> tuple[Candidates, list[tuple[int, list]], Optional[list]]:
        """walk_pieces' answer with its candidates as a wait_audit.Candidates: read lazily
        from ``book`` where it keeps its class lists and no protection rule beyond
        JobSpec.preemptable is on (its kept movable GPUs are the candidates')."""
        if book is not None and book.class_function is not None and not self.cfg.engine.protects_victims:
            candidates, levels = from_book(book, self.free_by_node)
            return candidates, levels[1::2], book.by_class
        listed, spans, lists = self.walk_pieces(order, now, book)
        return every_candidate(listed, self.free_by_node), spans, lists

    def _smallest_gangs(self, lists: dict) -> dict:
        """Node set -> the smallest gang among a level's class lists ((gang, class) ->
        items): every job of a class may use the same nodes (its class is their key)."""
        allowed_of, smallest = self._allowed, {}
        for (gang, _), items in lists.items():
            nodes = allowed_of[items[0][1]]
            if gang < smallest.get(nodes, gang + 1):
                smallest[nodes] = gang
        return smallest

    def audit_waits(self, order: Callable[[], Iterable[JobState]], now: float, preemptive: bool = True,
                    book=None) -> None:
        """At the end of a round: which pending jobs waited behind a usable victim.

        ``order()``: the round's jobs in walk order, highest priority first. Walking
        it, a pending job waits behind a usable victim when the core's victim choice
        (controller.core.victims.victims_for, with the engine's placement) finds, among
        the running jobs after it in the order that the victim rule lets go
        (controller.core.protection.protection: preemptable, not protected) on the
        nodes it may use (controller.core.placement.Eligibility), a non-empty set whose
        GPUs, with the free ones, place it. The jobs before it claim first: a victim or
        free GPUs so found for one job are gone for the jobs after it, so two jobs are
        never counted behind the same victim. Jobs a preemption was made for, whose
        victims still hold their GPUs, are not asked. A job so found in more than
        BEHIND_VICTIM_ROUNDS rounds in a row counts in ``waited_behind``.

        Cheap on purpose: nothing to do without a preemptive policy, or where the walk's
        count is exact (count mode; every job may use every node and none needs a
        consolidated or constrained placement), the walk stops at the lowest-priority
        candidate victim, and the core's search runs only for a job whose nodes hold
        enough free and candidate GPUs; the candidates a job's walk passed leave the
        reach only when a sum or a search reads it. ``book``: the replay's QueueBook
        with its class lists kept (``order`` is its ``order``): the walk reads the
        book's pieces (QueueBook.order_parts), visiting only its waiting jobs, not
        every job."""
        if not preemptive or self._waits_exact:
            return
        candidates, spans, lists = self.audit_view(order, now, book)
        behind: dict[int, tuple[int, float]] = {}
        if candidates.lowest is not None:
            lowest = candidates.lowest
            promised = {b for _, _, beneficiaries in self._open.values() for b in beneficiaries}
            free = dict(self.free_by_node)
            version, sums = 0, {}
            # node set -> the fewest GPUs refused there: within_reach only shrinks in this
            # walk, so a later job of that set asking as many is refused without a sum
            short = _refusals()
            claimed: set[int] = set()
            allowed_of, fit = self._allowed, self.fit  # the nodes each job may use: fixed for the replay

            def refused(job: JobState) -> bool:
                return job.num_gpus >= short.get(allowed_of[job.index], job.num_gpus + 1)
            for number, (first, listed) in enumerate(spans):
                if first >= lowest:
                    break
                # with class lists: node set -> its smallest gang in the span; the span is
                # left once every node set there refused its smallest (all the rest would be)
                smallest = None if lists is None or not short else self._smallest_gangs(lists[number])
                if smallest is not None and not _open_sets(smallest, short):
                    continue
                # a span much longer than its class lists: read through them (open_items)
                walked = enumerate(listed, first) if lists is None or len(listed) <= 4 * len(lists[number]) \
                    else open_items(lists[number], book.merged[number], first, refused)
                for rank, job in walked:
                    if rank >= lowest:
                        break
                    if job.running or job.index in promised:
                        continue
                    allowed = allowed_of[job.index]
                    if job.num_gpus >= short.get(allowed, job.num_gpus + 1):
                        continue
                    if candidates.pass_before(rank, claimed):  # those before leave the reach (lowest > rank)
                        version += 1
                    # per node: the free GPUs and those of the candidates after the walk's place
                    within_reach = candidates.within_reach
                    cached = sums.get(allowed)
                    if cached is None or cached[0] != version:
                        cached = (version, sum(within_reach.values()) if allowed is None
                                  else sum(within_reach[node] for node in allowed))
                        sums[allowed] = cached
                    if cached[1] < job.num_gpus:
                        short[allowed] = job.num_gpus
                        if lists is not None:
                            if smallest is None:
                                smallest = self._smallest_gangs(lists[number])
                            if not _open_sets(smallest, short):
                                break
                        continue
                    lower = [victim for victim in candidates.rest() if victim.index not in claimed]
                    usable = (lambda node: True) if allowed is None else allowed.__contains__
                    found = victims_for(job, reversed(lower), free, usable, fit)
                    if found is None:
                        continue
                    victims, slots = found
                    hand_over(free, victims, slots, claimed)
                    for node, gpus in slots:
                        within_reach[node] -= gpus
                    version += 1
                    if victims:
                        count, since = self._behind.get(job.index, (0, now))
                        behind[job.index] = (count + 1, since)
        self._behind = behind
        for index, (count, since) in behind.items():
            if count > BEHIND_VICTIM_ROUNDS:
                self.waited_behind[index] = max(self.waited_behind.get(index, (0, since)), (count, since))

    def finish(self, job: JobState, t: float) -> None:
        """The running job's work ended at ``t``."""
        self.sync(job, t)
        job.progress_s = job.spec.duration_s
        job.running = False
        job.finish_time_s = t
        self._free(job)
        self._record(job, t)

    def _record(self, job: JobState, end_s: float) -> None:
        self.outcomes.append(outcome_of(job, end_s))
        if self.learned is not None:
            self.learned.add_job(job.spec, job.attained_gpu_s)

    # -- the events up to a moment ------------------------------------------------
    def finish_due(self, t: float):
        """Finish every running job whose work ends by ``t``, at its own time; yields each."""
        completions, jobs, run_state = self.completions, self.jobs, self.run_state
        while completions and completions[0][0] <= t + EPS:
            t_done, index, version = heapq.heappop(completions)
            job = jobs[index]
            if run_state[index].version != version or not job.running:
                continue
            self.finish(job, t_done)
            yield job

    def release_due(self, now: float) -> int:
        """Requeue the victims whose grace period is over by ``now`` (at a round, as the
        controller's advance() does); returns how many."""
        leaving, jobs = self.leaving, self.jobs
        count = 0
        while leaving and leaving[0][0] <= now + EPS:
            _, index, signalled_s, done_s = heapq.heappop(leaving)
            self.release(jobs[index], signalled_s, done_s, now)
            count += 1
        return count

    def settled_due(self, now: float):
        """Yield each requeued job whose requeue delay is over by ``now``: it may start again."""
        settling, jobs = self.settling, self.jobs
        while settling and settling[0][0] <= now + EPS:
            yield jobs[heapq.heappop(settling)[1]]

    def next_completion_s(self) -> float:
        """The earliest completion still to come (inf: none)."""
        completions, jobs, run_state = self.completions, self.jobs, self.run_state
        while completions and (run_state[completions[0][1]].version != completions[0][2]
                               or not jobs[completions[0][1]].running):
            heapq.heappop(completions)
        return completions[0][0] if completions else math.inf

    def next_handoff_s(self) -> float:
        """The earliest end of a grace period or of a requeue delay (inf: none)."""
        t = self.leaving[0][0] if self.leaving else math.inf
        return min(t, self.settling[0][0]) if self.settling else t

    def result(self, policy: str, rounds: int, events: int, dropped: list[str], promotions: int,
               timeline: list[tuple[float, int, int]]) -> SimResult:
        outcomes = sorted(self.outcomes, key=lambda o: (o.submit_s, o.job_id))
        self.judge_handoffs()  # victims freed after the last round
        longest = sorted(self.waited_behind.items(), key=lambda item: (-item[1][0], item[1][1], item[0]))
        behind_examples = [(self.jobs[index].job_id, count, since) for index, (count, since) in longest[:EXAMPLES_KEPT]]
        return SimResult(policy=policy, outcomes=outcomes, capacity_gpus=self.cfg.capacity_gpus,
                         preemptions=self.preemptions, preemption_overhead_s=self.overhead_total_s, rounds=rounds,
                         events=events, dropped_oversize=dropped, promotions=promotions, timeline=timeline,
                         useless_preemptions=self.useless_preemptions, waited_behind_victim=len(self.waited_behind),
                         useless_examples=list(self.useless_examples), behind_examples=behind_examples)

"""One scheduling round: ``Engine.step(snapshot) -> Plan``, a pure function.

The walk is the Tiresias one: jobs in priority order, each gets its full gang if
that many GPUs are free, otherwise it is skipped (and preempted if running).
Skipping keeps utilization high under all-or-nothing allocation. Placement then
puts the new gangs on nodes; a gang that cannot be placed as its skew demands
waits, and lower-priority waiting gangs may use the GPUs it left (backfill).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from controller.core.mlfq_round import count_starts, mlfq_step, static_order_step
from controller.core.model import InputError, JobState, Snapshot
from controller.core.placement import Eligibility, FreeGpus, NodeTotals, check_mode, nodes_are_real
from controller.core.plan import Plan
from controller.core.plan_stands import stands_until
from controller.core.policies import Policy, PolicyContext, get_policy
from controller.core.protection import mark_protected, may_preempt
from controller.core.round_writer import RoundWriter, release_placements
from controller.core.victims import choose_victims


@dataclass(frozen=True)
class EngineConfig:
    """Scheduling knobs. Thresholds are hi_1..hi_{K-1} in GPU-seconds (K = len + 1)."""

    policy: str = "dlas"
    thresholds_gpu_s: tuple[float, ...] = (3600.0,)
    promote_knob: float = math.inf  # PROMOTEKNOB; inf disables starvation promotion
    placement: str = "consolidate"
    pack_limit: float = 0.5  # PACKLIMIT: skew above it means consolidation-sensitive
    quantum_s: float = 60.0  # re-plan period for continuously drifting priorities
    priority_expression: Optional[str] = None  # policy 'learned': its function's text (default: published)
    # Victim protection (controller.core.protection): a running job whose current run
    # is younger than this (seconds), or already preempted preempt_max_per_job times
    # (None = no limit), keeps its GPUs. The controller passes its own settings.
    preempt_min_runtime_s: float = 0.0
    preempt_max_per_job: Optional[int] = None

    def __post_init__(self):
        check_thresholds(self.thresholds_gpu_s)
        check_mode(self.placement)
        if not (self.promote_knob > 0):
            raise InputError(f"promote_knob value {self.promote_knob!r} must be > 0 (inf disables)")
        if not (0.0 <= self.pack_limit <= 1.0):
            raise InputError(f"pack_limit value {self.pack_limit!r} must be within 0..1")
        if not (self.quantum_s > 0):
            raise InputError(f"quantum_s value {self.quantum_s!r} must be > 0")
        if not (self.preempt_min_runtime_s >= 0) or not math.isfinite(self.preempt_min_runtime_s):
            raise InputError(f"preempt_min_runtime_s value {self.preempt_min_runtime_s!r} must be >= 0")
        if self.preempt_max_per_job is not None and not (self.preempt_max_per_job >= 0):
            raise InputError(f"preempt_max_per_job value {self.preempt_max_per_job!r} must be >= 0")
        get_policy(self.policy, self.priority_expression)

    @property
    def protects_victims(self) -> bool:
        """True when the protection rules beyond JobSpec.preemptable are on."""
        return self.preempt_min_runtime_s > 0 or self.preempt_max_per_job is not None


def check_thresholds(thresholds: tuple[float, ...]) -> None:
    """K >= 2 queues: at least one threshold, all positive and strictly increasing."""
    if not thresholds:
        raise InputError("queues: at least one threshold is needed (K >= 2)")
    previous = 0.0
    for value in thresholds:
        if not (value > previous) or not math.isfinite(value):
            raise InputError(f"queues: threshold {value!r} must be finite and greater than {previous!r}")
        previous = value


@dataclass
class _Walk:
    """Scratch state of one round."""

    selected: list[JobState] = field(default_factory=list)
    blocked_by: Optional[JobState] = None


class Engine:
    def __init__(self, config: EngineConfig, policy: Optional[Policy] = None):
        self.config = config
        self.policy = policy or get_policy(config.policy, config.priority_expression)
        self._eligible: Optional[Eligibility] = None
        # the nodes the last Eligibility was made for, and whether they are real ones
        # (placement.nodes_are_real): kept while the nodes are the same
        self._nodes: Optional[tuple] = None
        self._real_nodes = True

    def writer(self, plan: Plan) -> RoundWriter:
        """The round writer of ``plan`` with this engine's policy and settings."""
        cfg = self.config
        return RoundWriter(plan, self.policy, cfg.placement, cfg.pack_limit, cfg.thresholds_gpu_s, cfg.promote_knob)

    # -- the round ---------------------------------------------------------
    def step(self, snapshot: Snapshot) -> Plan:
        plan = Plan(round_id=snapshot.round_id, now_s=snapshot.now_s)
        if snapshot.queue_book is None and self.config.protects_victims:
            # (a kept book's owner, the fast replay loop, marks protection itself and
            # recounts its pinned GPUs in place: QueueBook.repin)
            cfg = self.config
            mark_protected(snapshot.jobs, snapshot.now_s, cfg.preempt_min_runtime_s, cfg.preempt_max_per_job)
        writer = self.writer(plan)
        writer.eligible = self.eligibility(snapshot.nodes)
        writer.real_nodes = self._real_nodes
        if self.policy.discretized:
            plan = mlfq_step(writer, snapshot)
            if snapshot.queue_book is None:  # the controller's round (a replay loop keeps its own clock)
                cfg = self.config
                plan.stands_until_s, plan.acts_until_s = stands_until(
                    plan, snapshot.jobs, self.policy, cfg.thresholds_gpu_s, cfg.promote_knob,
                    cfg.preempt_min_runtime_s, cfg.preempt_max_per_job)
            return plan
        if snapshot.queue_book is not None:
            return static_order_step(writer, snapshot)
        if snapshot.allow_fast_path and self._fast_path(snapshot, writer):
            return plan
        plan.actions.clear()
        if snapshot.sync is not None:
            snapshot.sync()
        ctx = writer.promotion_context(snapshot)
        keyed = self.policy.ordered(snapshot.jobs, ctx)
        ordered = [job for _, job in keyed]
        walk = self._select(ordered, self._capacity(snapshot))
        self._apply_walk(snapshot, ordered, walk, ctx, writer)
        if snapshot.detailed:
            plan.order = [job.spec.job_id for job in ordered]
            level, display = self.policy.level, self.policy.display_from_key
            plan.levels = {job_id: level(job, ctx) for job_id, job in zip(plan.order, ordered)}
            plan.keys = {job_id: display(key, job, ctx) for job_id, (key, job) in zip(plan.order, keyed)}
        return plan

    def eligibility(self, nodes) -> Eligibility:
        """The round's Eligibility. The last round's answers stand while the nodes are the
        same (a replay's always are): where no node reports CPUs or memory (nothing in it
        changes within a round: no NodeRoom) the last one itself, else a new one that
        keeps its answers."""
        key = tuple(nodes)
        last = self._eligible
        if last is not None and key == self._nodes and last.room() is None:
            return last
        self._eligible = Eligibility(nodes, last)
        if key != self._nodes:
            self._nodes, self._real_nodes = key, nodes_are_real(key)
        return self._eligible

    def _capacity(self, snapshot: Snapshot) -> int:
        return snapshot.total_gpus

    def _select(self, ordered: list[JobState], capacity: int) -> _Walk:
        """The all-or-nothing walk with skipping (or head-of-line blocking for strict FIFO)."""
        walk = _Walk()
        free = capacity
        preemptive = self.policy.preemptive
        kept = [job for job in ordered if job.running and not may_preempt(job, preemptive)]
        if kept:
            # Running jobs that cannot be preempted keep their GPUs (all of them under a
            # non-preemptive policy); only what is left is handed out in order.
            walk.selected.extend(kept)
            free -= sum(job.num_gpus for job in kept)
            ordered = [job for job in ordered if not job.running or may_preempt(job, preemptive)]
        for job in ordered:
            if walk.blocked_by is not None and not job.running:
                continue
            if job.num_gpus <= free:
                walk.selected.append(job)
                free -= job.num_gpus
            elif self.policy.head_of_line_blocking and not job.running:
                walk.blocked_by = job
        return walk

    def _apply_walk(self, snapshot: Snapshot, ordered: list[JobState], walk: _Walk,
                    ctx: PolicyContext, writer: RoundWriter) -> None:
        selected_ids = {job.job_id for job in walk.selected}
        count_mode = writer.count_mode
        free_by_node = snapshot.free_gpus_by_node()
        max_per_node = snapshot.max_gpus_per_node
        position = {job.job_id: i + 1 for i, job in enumerate(ordered)} if snapshot.detailed else {}
        newcomers = [job for job in walk.selected if not job.running]

        def level_of(job: JobState) -> int:
            return self.policy.level(job, ctx)

        victims = [job for job in ordered if job.running and job.job_id not in selected_ids]
        unplaced: list[JobState] = []
        beneficiary = shortfalls = None
        on_nodes = not count_mode or nodes_are_real(snapshot.nodes)  # else the replay's pseudo-node
        if not on_nodes:
            free_total = self._capacity(snapshot) - sum(j.num_gpus for j in walk.selected if j.running)
            free_gpus = NodeTotals(snapshot.nodes)
            starts = []
            for rank, job in enumerate(newcomers):
                slots = writer.place(job, free_gpus, max_per_node)
                if slots is None:
                    unplaced.append(job)
                    continue
                free_total -= job.num_gpus
                starts.append((job, slots, rank))
        else:
            walk_gpus = sum(job.num_gpus for job in victims)
            choice = choose_victims(newcomers, victims, lambda: ordered, free_by_node,
                                    place=lambda job, free: writer.place_on_nodes(job, free, max_per_node),
                                    fit=lambda job, free: writer.fit(job, free, max_per_node),
                                    allowed=writer.allowed, preemptive=self.policy.preemptive,
                                    explain=snapshot.detailed and snapshot.explain, room=writer.node_room,
                                    per_node=count_mode)
            starts, unplaced, free_gpus = choice.starts, choice.unplaced, choice.free_gpus
            beneficiary, shortfalls = choice.beneficiary, choice.shortfalls
            if count_mode:  # the count decides who starts; the victims stay the node-aware ones
                free_gpus = NodeTotals(snapshot.nodes)
                starts, unplaced = count_starts(writer, newcomers, free_gpus, max_per_node)
                free_total = (self._capacity(snapshot) - sum(j.num_gpus for j in walk.selected if j.running)
                              - sum(job.num_gpus for job, _, _ in starts))
            elif choice.per_node_set:
                free_total = free_gpus.total
            else:  # the walk's victims stand (those no placement uses keep running): as counted before
                released = dict(free_by_node)
                release_placements(victims, released)
                free_total = (sum(released.values()) - sum(job.num_gpus for job, _, _ in starts)
                              - (walk_gpus - sum(job.num_gpus for job in choice.victims)))
            victims = choice.victims
            leaving = {job.job_id for job in victims}
            selected_ids.update(job.job_id for job in ordered if job.running and job.job_id not in leaving)
        writer.preempt(victims, newcomers, level_of, beneficiary)
        for job, slots, rank in starts:
            writer.start(job, slots, f"queue {level_of(job) + 1}: {job.num_gpus} GPUs free at"
                                     f" priority position {position.get(job.job_id, rank + 1)}")
        if not count_mode and walk.blocked_by is None:
            # Backfill: GPUs left by a gang that waits for a consolidated slot.
            backfilled, free_total = writer.backfill(ordered, lambda job: job.job_id in selected_ids, free_gpus,
                                                     free_total, max_per_node)
            selected_ids.update(job.job_id for job in backfilled)
        if snapshot.detailed and snapshot.explain:
            writer.explain_waits(ordered, level_of, walk.blocked_by, selected_ids, unplaced, free_total,
                                 max_per_node, snapshot.nodes, shortfalls)

    # -- the uncontended case ---------------------------------------------
    def _fast_path(self, snapshot: Snapshot, writer: RoundWriter) -> bool:
        """Every active job fits: every policy runs them all; no order is needed.

        Returns False (full round needed) if any newcomer cannot be placed.
        """
        if snapshot.demand() > self._capacity(snapshot):
            return False
        free_gpus = NodeTotals(snapshot.nodes) if writer.count_mode else FreeGpus(snapshot.free_gpus_by_node())
        max_per_node = snapshot.max_gpus_per_node
        for job in snapshot.waiting_jobs():
            slots = writer.place(job, free_gpus, max_per_node)
            if slots is None:
                return False
            writer.start(job, slots, "all active jobs fit: start")
        return True

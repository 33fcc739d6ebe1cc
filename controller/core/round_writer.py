"""What a round writes into its plan, for every walk: decision ids, starvation
promotions, placement, starts, preemptions, backfill and wait reasons.

The engine's generic walk (controller.core.engine) and the MLFQ walks over a queue
book (controller.core.mlfq_round) decide differently fast, but write the same
actions with the same reasons through one ``RoundWriter``: the controller, the
simulator and ``explain`` read one vocabulary.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Optional

from controller.core.model import JobState, Snapshot
from controller.core.placement import (COUNT_NODE, Eligibility, NodeRoom, describe_constraints,
                                       describe_resources, minimum_nodes, nodes_are_real, place,
                                       place_constrained)
from controller.core.plan import Plan, Preempt, Promote, Start
from controller.core.policies import Policy, PolicyContext
from controller.core.policies.base import STARVATION_TOLERANCE_S
from controller.core.ids import decision_id

Slots = tuple[tuple[str, int], ...]


class RoundWriter:
    """Writes one round's actions into ``plan``. ``placement`` and ``pack_limit`` are
    EngineConfig's (placement mode, PACKLIMIT); ``thresholds_gpu_s`` and
    ``promote_knob`` (inf: off) its queue settings."""

    def __init__(self, plan: Plan, policy: Policy, placement: str, pack_limit: float,
                 thresholds_gpu_s: tuple[float, ...], promote_knob: float):
        self.plan = plan
        self.policy = policy
        self.placement = placement
        self.count_mode = placement == "count"  # the placement mode is count (read per start)
        self.pack_limit = pack_limit
        self.thresholds_gpu_s = thresholds_gpu_s
        self.promote_knob = promote_knob
        # the round's nodes per job kind (partitions, GPU type, reservation); set by
        # the engine from the snapshot, None = every node fits every job
        self.eligible: Optional[Eligibility] = None
        # the round's nodes are a cluster's, not count mode's pseudo-node
        # (placement.nodes_are_real); set by the engine, which keeps it while the nodes
        # stay the same; None: asked of the nodes (on_real_nodes)
        self.real_nodes: Optional[bool] = None

    def allowed(self, job: JobState) -> Optional[frozenset]:
        """The nodes ``job`` may use this round, None = all (controller.core.placement)."""
        return None if self.eligible is None else self.eligible.allowed(job.spec)

    def on_real_nodes(self, nodes) -> bool:
        """The round's ``nodes`` are a cluster's (placement.nodes_are_real)."""
        return nodes_are_real(nodes) if self.real_nodes is None else self.real_nodes

    def node_room(self) -> Optional[NodeRoom]:
        """The round's CPUs and memory free per node (None: the nodes report neither)."""
        return None if self.eligible is None else self.eligible.room()

    def decision_id(self) -> str:
        """The id of the next action: ``r<round>.<n>``."""
        return decision_id(self.plan.round_id, "engine", len(self.plan.actions) + 1)

    def consolidates(self, job: JobState) -> bool:
        """The gang must sit on as few nodes as possible (skew above PACKLIMIT)."""
        return self.placement == "consolidate" and job.spec.skew > self.pack_limit

    # -- what comes first ----------------------------------------------------
    def promotion_context(self, snapshot: Snapshot) -> PolicyContext:
        """The round's policy context. Starvation promotions happen first (written
        here), so a promoted job competes in Q_1 now."""
        override: dict[str, float] = {}
        knob = self.promote_knob
        if math.isfinite(knob):
            base = PolicyContext(now_s=snapshot.now_s, thresholds_gpu_s=self.thresholds_gpu_s)
            for job in snapshot.jobs:
                if job.running or base.level(job) == 0:
                    continue
                if job.waited_since_promotion_s + STARVATION_TOLERANCE_S >= knob * job.executed_since_promotion_s:
                    override[job.job_id] = 0.0
                    self.plan.actions.append(Promote(
                        self.decision_id(), job.job_id,
                        f"starvation: waited {job.waited_since_promotion_s:.0f}s >= PROMOTEKNOB {knob:g}"
                        f" x executed {job.executed_since_promotion_s:.0f}s; back to queue 1"))
        return PolicyContext(now_s=snapshot.now_s, thresholds_gpu_s=self.thresholds_gpu_s,
                             service=snapshot.service, queue_service_override=override)

    # -- placement and the actions --------------------------------------------
    def place(self, job: JobState, free, max_per_node: int) -> Optional[Slots]:
        """Slots for ``job`` on ``free`` (a FreeGpus, taken here), or None: it waits.
        Count mode: ``free`` is the NodeTotals, read only for a constrained job."""
        spec = job.spec
        if self.count_mode:
            allowed = self.allowed(job)
            if (spec.constrained or allowed is not None) and not free.fits(spec, allowed):
                return None
            return ((COUNT_NODE, job.num_gpus),)
        return self.place_on_nodes(job, free, max_per_node)

    def place_on_nodes(self, job: JobState, free, max_per_node: int) -> Optional[Slots]:
        """``place`` on the round's real nodes, whatever the mode (count mode: as spread,
        where the victim rule places a newcomer, controller.core.victims)."""
        spec = job.spec
        eligible = self.eligible  # allowed() and node_room() read here once (a replay places often)
        allowed, room = (None, None) if eligible is None else (eligible.allowed(spec), eligible.room())
        consolidate = self.consolidates(job)
        if room is not None and room.checks(spec):  # only the nodes with its CPUs, memory free (--exclusive)
            allowed = room.nodes_fitting(spec, free.free if allowed is None else allowed)
            slots = free.place_constrained(spec, consolidate=consolidate, max_gpus_per_node=max_per_node,
                                           allowed=allowed)
        elif spec.constrained or allowed is not None:  # its own --nodelist / -N, its partitions, type
            slots = free.place_constrained(spec, consolidate=consolidate, max_gpus_per_node=max_per_node,
                                           allowed=allowed)
        else:
            slots = free.place(job.num_gpus, consolidate=consolidate, max_gpus_per_node=max_per_node)
        if slots is not None:
            for node, gpus in slots:
                free.take(node, gpus)
            if room is not None:
                room.take(spec, slots)
        return slots

    def fit(self, job: JobState, free_by_node: dict[str, int], max_per_node: int) -> Optional[Slots]:
        """What ``place`` would answer on these free GPUs (a plain dict, nothing taken):
        the victim rule's trial placements (controller.core.victims)."""
        spec = job.spec
        allowed = self.allowed(job)
        consolidate = self.consolidates(job)
        if spec.constrained or allowed is not None:
            return place_constrained(job.num_gpus, free_by_node, spec, consolidate=consolidate,
                                     max_gpus_per_node=max_per_node, allowed=allowed)
        return place(job.num_gpus, free_by_node, consolidate=consolidate, max_gpus_per_node=max_per_node)

    def start(self, job: JobState, slots: Slots, reason: str) -> None:
        actions = self.plan.actions
        actions.append(Start(decision_id(self.plan.round_id, "engine", len(actions) + 1), job.job_id, slots, reason))

    def preempt(self, victims: Iterable[JobState], newcomers: list[JobState],
                level_of: Callable[[JobState], int], beneficiary: Optional[dict] = None) -> None:
        """Each victim yields its GPUs to the round's newcomers (named in the reason), or,
        where the victim rule chose it for one newcomer (``beneficiary``: victim's index
        -> that newcomer, controller.core.victims), to that one, on the nodes it may use."""
        names = None  # the newcomers named, at the first victim that yields to them all
        actions, round_id = self.plan.actions, self.plan.round_id
        for job in victims:
            target = beneficiary.get(job.index) if beneficiary else None
            if target is not None:
                reason = (f"yields {job.num_gpus} GPUs: lower priority than {target.job_id}, on nodes it may use"
                          f" (queue {level_of(job) + 1})")
            else:
                if names is None:
                    names = ", ".join([other.job_id for other in newcomers[:3]]) + (
                        " ..." if len(newcomers) > 3 else "")
                reason = (f"yields {job.num_gpus} GPUs: lower priority than {names or 'higher-priority jobs'}"
                          f" (queue {level_of(job) + 1})")
            actions.append(Preempt(decision_id(round_id, "engine", len(actions) + 1), job.job_id, reason))

    def backfill(self, walk_order: Iterable[JobState], passed: Callable[[JobState], bool], free_gpus,
                 free_total: int, max_per_node: int) -> tuple[list[JobState], int]:
        """Start later waiting gangs on the GPUs left by a gang that waits for a
        consolidated slot or on its own nodes (placement only). ``passed(job)``: the
        walk already selected it. Returns (the backfilled jobs, GPUs left free)."""
        backfilled: list[JobState] = []
        # free GPUs per node set asked about, until a start changes them: most waiting
        # jobs of a cluster with partitions find their own nodes full, and skip here for
        # the price of a lookup (place would say None: it needs that many free there)
        free_on: dict[frozenset, int] = {}
        for job in walk_order:
            if job.running or passed(job) or job.num_gpus > free_total:
                continue
            allowed = self.allowed(job)
            if allowed is not None:
                free = free_on.get(allowed)
                if free is None:
                    free = free_on[allowed] = free_gpus.free_on(allowed)
                if job.num_gpus > free:
                    continue
            slots = self.place(job, free_gpus, max_per_node)
            if slots is not None:
                free_on.clear()
                free_total -= job.num_gpus
                backfilled.append(job)
                self.start(job, slots, "backfill: GPUs left free by a gang waiting for placement")
        return backfilled, free_total

    # -- why the others wait ------------------------------------------------------
    def explain_waits(self, ordered: list[JobState], level_of: Callable[[JobState], int],
                      blocked_by: Optional[JobState], selected_ids: set, unplaced: list[JobState],
                      free_total: int, max_per_node: int, nodes=(), shortfalls: Optional[dict] = None) -> None:
        """A reason for every job in ``ordered`` (walk order) that neither runs nor starts.
        ``shortfalls``: job id -> controller.core.victims.Shortfall, what holds the nodes
        of a newcomer with its own node set that no preemption could place."""
        plan = self.plan
        unplaced_ids = {job.job_id for job in unplaced}
        started = {a.job_id for a in plan.of_kind("start")}
        for position, job in enumerate(ordered):
            if job.running or job.job_id in started:
                continue
            level = level_of(job) + 1
            if job.job_id in unplaced_ids:
                allowed = self.allowed(job)
                shortfall = shortfalls.get(job.job_id) if shortfalls else None
                room = self.node_room()
                if room is not None and room.checks(job.spec) and (shortfall is not None or not (
                        job.spec.constrained or allowed is not None or self.consolidates(job))):
                    plan.wait_reasons[job.job_id] = resource_reason(job, shortfall, level_of)
                elif job.spec.constrained or allowed is not None:
                    plan.wait_reasons[job.job_id] = constraint_reason(job, nodes, allowed, shortfall, level_of)
                elif self.consolidates(job):
                    need = minimum_nodes(job.num_gpus, max_per_node)
                    plan.wait_reasons[job.job_id] = (
                        f"waiting for consolidation: needs {job.num_gpus} GPUs on {need} node(s)"
                        f" (skew {job.spec.skew:.2f} > PACKLIMIT {self.pack_limit:g})")
                else:
                    plan.wait_reasons[job.job_id] = f"GPUs fragmented: needs {job.num_gpus} GPUs, no node set fits"
            elif blocked_by is not None and job is not blocked_by and job.job_id not in selected_ids:
                plan.wait_reasons[job.job_id] = f"strict FIFO: behind head-of-line job {blocked_by.job_id}"
            else:
                plan.wait_reasons[job.job_id] = (
                    f"queue {level}: {position} job(s) ahead, needs {job.num_gpus} GPUs, {max(free_total, 0)} free")


def release_placements(victims: Iterable[JobState], free_by_node: dict[str, int]) -> None:
    """Count the victims' GPUs free again on the nodes the round plans on."""
    for job in victims:
        for node, gpus in job.placement:
            if node in free_by_node:
                free_by_node[node] += gpus


def resource_reason(job: JobState, shortfall=None, level_of: Optional[Callable[[JobState], int]] = None) -> str:
    """Why a job that asks for CPUs, memory or --exclusive beyond GPUs waits: no node
    it may use has them free, even with the lower-priority jobs there preempted (what
    holds those nodes: its ``shortfall``)."""
    text = f"needs {describe_resources(job.spec)} per node beside {job.num_gpus} GPUs"
    if shortfall is not None:
        return f"{text}: {shortfall_text(job, shortfall, level_of)}; no job is preempted for it"
    return f"{text}: no node has them free now; no job is preempted for it"


def constraint_reason(job: JobState, nodes, allowed: Optional[frozenset] = None, shortfall=None,
                      level_of: Optional[Callable[[JobState], int]] = None) -> str:
    """Why a job with its own node constraints (or partitions, GPU type, reservation:
    ``allowed`` nodes) waits: (on this cluster's available nodes, all GPUs free) no
    allowed node set could ever hold it; or, with its ``shortfall``
    (controller.core.victims), which nodes it waits for and what holds them; else none
    of its allowed node sets is free now."""
    text = describe_constraints(job.spec, kinds=allowed is not None)
    totals = {n.name: n.gpus_total for n in nodes if n.available}
    if totals and place_constrained(job.num_gpus, totals, job.spec, consolidate=False,
                                    max_gpus_per_node=0, allowed=allowed) is None:
        return (f"node constraints ({text}): {job.num_gpus} GPUs cannot fit on the available nodes"
                " even when all are free")
    if shortfall is not None:
        return f"node constraints ({text}): {shortfall_text(job, shortfall, level_of)}"
    return f"node constraints ({text}): needs {job.num_gpus} GPUs, no allowed node set has them free now"


def shortfall_text(job: JobState, shortfall, level_of: Optional[Callable[[JobState], int]],
                   named: int = 4) -> str:
    """"waits for 4 GPUs on ab[1-2] (0 free): held by job 7 (queue 1, higher priority), ...":
    the nodes a job may use and the jobs holding them, at most ``named`` of them by id."""
    def who(holder: JobState, why: str) -> str:
        queue = f"queue {level_of(holder) + 1}, " if level_of is not None else ""
        return f"job {holder.job_id} ({queue}{why})"

    held = [who(holder, why) for holder, why in shortfall.holders[:named]]
    if len(shortfall.holders) > named:
        held.append(f"{len(shortfall.holders) - named} more")
    text = (f"waits for {job.num_gpus} GPUs on {hostlist(shortfall.nodes)} ({shortfall.free_gpus} free): "
            + (f"held by {', '.join(held)}" if held else "no layout fits"))
    if shortfall.spared:
        names = ", ".join(other.job_id for other in shortfall.spared[:named])
        more = f" and {len(shortfall.spared) - named} more" if len(shortfall.spared) > named else ""
        text += f"; preempting the lower-priority job(s) there ({names}{more}) would not make it fit"
    return text


def hostlist(names) -> str:
    """Node names as a short Slurm-style host list: ab1, ab2, ab4 -> ab[1-2,4]."""
    groups: dict[tuple[str, int], list[int]] = {}
    for name in sorted(names):
        stem = name.rstrip("0123456789")
        digits = name[len(stem):]
        width = len(digits) if len(digits) > 1 and digits.startswith("0") else 0  # gpu01: zero-padded
        groups.setdefault((stem, width), []).append(int(digits) if digits else -1)
    parts = []
    for (stem, width), numbers in sorted(groups.items()):
        spans = []
        for number in sorted(numbers):
            if spans and number >= 0 and number == spans[-1][1] + 1:
                spans[-1][1] = number
            else:
                spans.append([number, number])
        for low, high in spans:
            if low < 0:
                parts.append(stem)  # a name without digits
            elif len(spans) - (spans[0][0] < 0) == 1 and low == high:
                parts.append(f"{stem}{low:0{width}d}")
        ranges = [f"{low:0{width}d}" if low == high else f"{low:0{width}d}-{high:0{width}d}"
                  for low, high in spans if low >= 0]
        if len(ranges) > 1 or (ranges and "-" in ranges[0]):
            parts.append(f"{stem}[{','.join(ranges)}]")
    return ",".join(parts) if parts else "no available node"


def list_after(plan: Plan, jobs: Iterable[JobState], policy: Policy, ctx: PolicyContext) -> None:
    """Put jobs the round did not plan (set aside: controller.core.placement.set_aside;
    waiting on Slurm) into ``plan`` after the planned ones, in the order given: each
    with its level (so its SiteFactor band is set) and displayed key; no action, so no
    job ever yields for them. The caller writes their wait reasons."""
    jobs = list(jobs)
    policy.prepare(jobs, ctx)  # per-round values some policies compute in bulk
    for job in jobs:
        job_id = job.job_id
        plan.order.append(job_id)
        plan.levels[job_id] = policy.level(job, ctx)
        plan.keys[job_id] = policy.display_value(job, ctx)

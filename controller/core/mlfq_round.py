"""One round of an MLFQ policy (dlas, dgittins): walk the queue book, place, re-place.

``Engine.step`` calls ``mlfq_step`` for discretized policies. The book is the
snapshot's own (a simulator keeps one alive across rounds) or is built from the
snapshot's jobs (the controller, every round); the walk, the actions and the new
places (``Plan.positions``, rule in controller.core.queues) are the same code.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from controller.core.model import JobState, Snapshot
from controller.core.placement import FreeGpus, NodeTotals
from controller.core.plan import Plan, Preempt, Start
from controller.core.policies import PolicyContext
from controller.core.protection import pinned
from controller.core.queue_book import QueueBook
from controller.core.queues import ENTERED, groups_and_entries

if TYPE_CHECKING:
    from controller.core.engine import Engine


def build_book(engine: "Engine", jobs: list[JobState], ctx: PolicyContext) -> QueueBook:
    """The book of a snapshot's jobs (levels after this round's promotions)."""
    levels = ctx.precompute_levels(jobs).tolist()
    groups, entries = groups_and_entries(jobs, levels, ctx.thresholds_gpu_s, ctx.now_s, ctx.queue_service)
    within = engine.policy.waiting_order(jobs, levels, groups, ctx)
    return QueueBook.build(jobs, levels, groups, entries, within, len(ctx.thresholds_gpu_s) + 1)


def mlfq_step(engine: "Engine", snapshot: Snapshot, plan: Plan) -> Plan:
    book = snapshot.queue_book
    if book is None:
        if snapshot.sync is not None:
            snapshot.sync()
        ctx = engine._context(snapshot, plan)  # starvation promotions first
        book = build_book(engine, snapshot.jobs, ctx)
    else:
        ctx = PolicyContext(now_s=snapshot.now_s, thresholds_gpu_s=engine.config.thresholds_gpu_s,
                            service=snapshot.service)
    capacity = snapshot.total_gpus
    preempted, selected = book.walk(capacity)
    if not preempted and not selected and not book.entered and not snapshot.detailed:
        return plan  # nothing moves (a simulator round while every GPU stays where it is)
    chosen = {job.index for job in selected}
    # entered jobs still holding GPUs (demoted since the last round) that the walk passed over
    where = book.where
    passed_over = sorted([(*where[index], index, job) for index, job in book.entered.items() if index not in chosen])
    leaving = preempted + [item[3] for item in passed_over if item[3].running and not pinned(item[3])]
    newcomers = [job for job in selected if not job.running]
    count_mode = engine.config.placement == "count"
    free_by_node = None if count_mode else snapshot.free_gpus_by_node()
    base_free = None if count_mode else dict(free_by_node)  # before any victim leaves
    if free_by_node is not None:
        for job in leaving:
            for node, gpus in job.placement:
                if node in free_by_node:
                    free_by_node[node] += gpus
    started: list[JobState] = []
    unplaced: list[JobState] = []
    free_gpus = NodeTotals(snapshot.nodes) if count_mode else FreeGpus(free_by_node)
    max_per_node = snapshot.max_gpus_per_node
    starts = []
    for rank, job in enumerate(newcomers):
        slots = engine._place(job, free_gpus, max_per_node, count_mode)
        if slots is None:
            unplaced.append(job)
            continue
        started.append(job)
        starts.append((job, slots, rank))
    if leaving and not count_mode:
        leaving = _needed_victims(leaving, [slots for _, slots, _ in starts], base_free, free_gpus)
        preempted = [job for job in preempted if job in leaving]
    if leaving:
        names = ", ".join(job.job_id for job in newcomers[:3]) + (" ..." if len(newcomers) > 3 else "")
        for job in leaving:
            plan.actions.append(Preempt(
                engine._decision_id(plan), job.job_id,
                f"yields {job.num_gpus} GPUs: lower priority than {names or 'higher-priority jobs'}"
                f" (queue {book.level_of(job) + 1})"))
    for job, slots, rank in starts:
        plan.actions.append(Start(engine._decision_id(plan), job.job_id, slots,
                                  f"queue {book.level_of(job) + 1}: {job.num_gpus} GPUs free at"
                                  f" priority position {rank + 1} among waiting jobs"))
    backfilled = _backfill(engine, book, chosen, free_gpus, max_per_node, plan) if unplaced and not count_mode \
        else []
    plan.positions = _next_positions(book, selected, started, backfilled, preempted, passed_over)
    if snapshot.detailed:
        _describe(engine, book, ctx, plan, selected, unplaced, snapshot)
    return plan


def _needed_victims(leaving: list[JobState], placements, base_free: dict[str, int],
                    free_gpus: FreeGpus) -> list[JobState]:
    """The victims whose GPUs a placed newcomer really uses; the others keep running.

    The walk counts GPUs, not nodes: a gang it selects may then find no placement (its
    own --nodelist/-N, consolidation), and the victims chosen for it would be preempted
    for nothing, their GPUs left to backfill (lower-priority jobs). Per node, the
    newcomers' GPUs beyond what was free before any victim left are the need; victims
    there (in walk order) are kept while the need is covered. A kept victim's GPUs are
    taken back out of ``free_gpus`` (they were counted free; the need shows they are
    not used), so backfill cannot use them either."""
    need: dict[str, int] = {}
    for slots in placements:
        for node, gpus in slots:
            need[node] = need.get(node, 0) + gpus
    for node in need:
        need[node] = max(0, need[node] - base_free.get(node, 0))
    needed: list[JobState] = []
    for job in leaving:
        if any(need.get(node, 0) > 0 for node, _ in job.placement):
            needed.append(job)
            for node, gpus in job.placement:
                if node in need:
                    need[node] = max(0, need[node] - gpus)
        else:
            for node, gpus in job.placement:
                if node in free_gpus.free:
                    free_gpus.take(node, gpus)
    return needed


def _backfill(engine: "Engine", book, chosen: set, free_gpus: FreeGpus, max_per_node: int,
              plan: Plan) -> list[JobState]:
    """Start later waiting gangs on the GPUs left by a gang that waits for a
    consolidated slot or on its own nodes (placement only: in count mode only a job
    whose own nodes could never hold it waits, and its share of the walk stays idle
    for the round)."""
    backfilled: list[JobState] = []
    free_total = free_gpus.total
    for job in book.order():
        if job.running or job.index in chosen or job.num_gpus > free_total:
            continue
        slots = engine._place(job, free_gpus, max_per_node, False)
        if slots is not None:
            free_total -= job.num_gpus
            backfilled.append(job)
            plan.actions.append(Start(engine._decision_id(plan), job.job_id, slots,
                                      "backfill: GPUs left free by a gang waiting for placement"))
    return backfilled


def static_order_step(engine: "Engine", snapshot: Snapshot, plan: Plan) -> Plan:
    """A round of a non-preemptive policy with a fixed order (fifo, fifo-skip) over
    the executor's book (one level, keys in arrival order): the same decisions as
    the generic walk, at the cost of what it starts."""
    book = snapshot.queue_book
    selected, blocked = book.walk_non_preemptive(snapshot.total_gpus, engine.policy.head_of_line_blocking)
    count_mode = engine.config.placement == "count"
    free_gpus = NodeTotals(snapshot.nodes) if count_mode else FreeGpus(snapshot.free_gpus_by_node())
    max_per_node = snapshot.max_gpus_per_node
    unplaced = False
    for rank, job in enumerate(selected):
        slots = engine._place(job, free_gpus, max_per_node, count_mode)
        if slots is None:
            unplaced = True
            continue
        plan.actions.append(Start(engine._decision_id(plan), job.job_id, slots,
                                  f"queue 1: {job.num_gpus} GPUs free at priority position {rank + 1}"
                                  " among waiting jobs"))
    if unplaced and not blocked and not count_mode:
        _backfill(engine, book, {job.index for job in selected}, free_gpus, max_per_node, plan)
    return plan


def _next_positions(book: QueueBook, selected, started, backfilled, preempted, passed_over) -> dict:
    """Running jobs new to the running lists join their tails in walk order; settled
    running jobs that lost their GPUs go to the heads of the waiting lists in walk
    order; entered jobs left waiting join the tails of the waiting lists."""
    changes: dict[str, tuple[int, float]] = {}
    tail = book.top
    started_ids = {job.index for job in started}
    for job in selected:
        if job.running or job.index in started_ids:
            changes[job.job_id] = (book.level_of(job), tail)
            tail += 1.0
        elif book.group_of(job) == ENTERED:  # selected but not placed: waits at the tail
            changes[job.job_id] = (book.level_of(job), tail)
            tail += 1.0
    for job in backfilled:
        changes[job.job_id] = (book.level_of(job), tail)
        tail += 1.0
    head = book.bottom - len(preempted)
    for job in preempted:
        head += 1.0
        changes[job.job_id] = (book.level_of(job), head)
    for level, _, _, job in passed_over:  # tails: running ones (pinned) or waiting ones
        if job.job_id not in changes:
            changes[job.job_id] = (level, tail)
            tail += 1.0
    return changes


def _describe(engine, book: QueueBook, ctx, plan: Plan, selected, unplaced, snapshot) -> None:
    """The order, levels, displayed keys and wait reasons the controller shows."""
    from controller.core.engine import _Walk

    ordered = book.order()
    plan.order = [job.job_id for job in ordered]
    display = engine.policy.display_from_key
    levels, keys, where = plan.levels, plan.keys, book.where
    for job in ordered:
        level, key = where[job.index]
        levels[job.job_id] = level
        keys[job.job_id] = display((level,) if key is None else (level, key[0]), job, ctx)
    if snapshot.explain:
        selected_ids = {job.job_id for job in selected} | {a.job_id for a in plan.of_kind("start")}
        stopped = {a.job_id for a in plan.of_kind("preempt")}
        free_total = snapshot.total_gpus - sum(j.num_gpus for j in ordered if j.job_id in selected_ids or (
            j.running and j.job_id not in stopped))
        engine._explain_waits(ordered, _Walk(selected=list(selected)), selected_ids, unplaced, free_total,
                              snapshot.max_gpus_per_node, _LevelsFromBook(book, ctx), plan, snapshot.nodes)


class _LevelsFromBook:
    """Stands in for the context in wait reasons: levels come from the book."""

    def __init__(self, book: QueueBook, ctx):
        self._book, self._ctx = book, ctx

    def level(self, job):
        return self._book.level_of(job)

    def __getattr__(self, name):
        return getattr(self._ctx, name)

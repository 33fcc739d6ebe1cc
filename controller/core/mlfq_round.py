"""One round of an MLFQ policy (dlas, dgittins): walk the queue book, place, re-place.

``Engine.step`` calls ``mlfq_step`` for discretized policies. The book is the
snapshot's own (a simulator keeps one alive across rounds) or is built from the
snapshot's jobs (the controller, every round); the walk, the actions and the new
places (``Plan.positions``, rule in controller.core.queues) are the same code. Who
yields to the walk's newcomers is controller.core.victims' to decide in every mode
on real nodes (count mode: the walk's count decides who starts, the victims are still
chosen on the nodes each newcomer may use; only the replay's count on its one
pseudo-node keeps the walk's victims). The actions are written by
the engine's ``RoundWriter`` (controller.core.round_writer), with the generic walk's
reasons and decision ids.
"""
from __future__ import annotations

from controller.core.model import JobState, Snapshot
from controller.core.placement import FreeGpus, NodeTotals
from controller.core.plan import Plan
from controller.core.policies import Policy, PolicyContext
from controller.core.protection import may_preempt
from controller.core.queue_book import QueueBook
from controller.core.queues import ENTERED, SETTLED_RUNNING, groups_and_entries
from controller.core.round_writer import RoundWriter
from controller.core.victims import OwnNodesReach, choose_victims


def build_book(policy: Policy, jobs: list[JobState], ctx: PolicyContext) -> QueueBook:
    """The book of a snapshot's jobs (levels after this round's promotions)."""
    levels = ctx.precompute_levels(jobs).tolist()
    groups, entries = groups_and_entries(jobs, levels, ctx.thresholds_gpu_s, ctx.now_s, ctx.queue_service)
    policy.regroup(jobs, levels, groups, ctx)
    within = policy.waiting_order(jobs, levels, groups, ctx)
    return QueueBook.build(jobs, levels, groups, entries, within, len(ctx.thresholds_gpu_s) + 1)


def mlfq_step(writer: RoundWriter, snapshot: Snapshot) -> Plan:
    plan = writer.plan
    book = snapshot.queue_book
    if book is None:
        if snapshot.sync is not None:
            snapshot.sync()
        ctx = writer.promotion_context(snapshot)  # starvation promotions first
        book = build_book(writer.policy, snapshot.jobs, ctx)
    else:
        ctx = None  # read only by a detailed round's description (_describe): built there
    capacity = snapshot.total_gpus
    count_mode = writer.count_mode
    # real nodes (every mode but the replay's count on its pseudo-node): victims per node
    on_nodes = not count_mode or writer.on_real_nodes(snapshot.nodes)
    # placement modes: a job that may use only some nodes is taken only if its own nodes
    # hold what it needs, free or held by lower-priority preemptable jobs (OwnNodesReach)
    free_by_node = snapshot.free_gpus_by_node() if on_nodes else None
    reach = None if count_mode else OwnNodesReach(book, free_by_node, writer.allowed, lists_refused=snapshot.detailed,
                                                  class_keys=book.reach_keys(writer.eligible))
    preempted, selected = book.walk(capacity, reach)
    if not preempted and not selected and not book.entered and not snapshot.detailed:
        return plan  # nothing moves (a simulator round while every GPU stays where it is)
    where = book.where
    entered = book.entered
    # the walk's jobs: read for the entered jobs it passed over and by backfill (never in count mode)
    chosen = {job.index for job in selected} if entered or not count_mode else None
    # entered jobs still holding GPUs (demoted since the last round) that the walk passed over
    passed_over = sorted([(*where[index], index, job) for index, job in entered.items()
                          if index not in chosen]) if entered else []
    leaving = preempted + [item[3] for item in passed_over if may_preempt(item[3], True)] if passed_over else preempted
    newcomers = [job for job in selected if not job.running]
    max_per_node = snapshot.max_gpus_per_node
    beneficiary = None
    shortfalls = None
    if not on_nodes:  # no nodes: the walk's count decides alone, as in a simulator that models none
        free_gpus = NodeTotals(snapshot.nodes)
        starts, unplaced = _place_all(writer, newcomers, free_gpus, max_per_node)
    else:
        choice = choose_victims(newcomers, leaving, book.order, free_by_node,
                                place=lambda job, free: writer.place_on_nodes(job, free, max_per_node),
                                fit=lambda job, free: writer.fit(job, free, max_per_node),
                                allowed=writer.allowed, explain=snapshot.detailed and snapshot.explain,
                                room=writer.node_room, passed=reach.refused if reach else (), per_node=count_mode,
                                book=book if book.class_function is not None else None)
        starts, unplaced, free_gpus = choice.starts, choice.unplaced, choice.free_gpus
        leaving, beneficiary, shortfalls = choice.victims, choice.beneficiary, choice.shortfalls
        # the settled running jobs that lose their GPUs, walk order (they wait at their queues' heads)
        preempted = [job for job in leaving if book.group_of(job) == SETTLED_RUNNING]
        if count_mode:
            free_gpus = NodeTotals(snapshot.nodes)
            starts, unplaced = count_starts(writer, newcomers, free_gpus, max_per_node)
    if leaving:
        writer.preempt(leaving, newcomers, book.level_of, beneficiary)
    started = set()  # their indices
    for job, slots, rank in starts:
        started.add(job.index)
        writer.start(job, slots, f"queue {where[job.index][0] + 1}: {job.num_gpus} GPUs free at"
                                 f" priority position {rank + 1} among waiting jobs")
    backfilled = _backfill(writer, book, chosen, free_gpus, max_per_node) if unplaced and not count_mode else []
    plan.positions = _next_positions(book, selected, started, backfilled, preempted, passed_over)
    if snapshot.detailed:
        # a job the walk passed waits as one no preemption could place (its shortfall)
        waiting_on_nodes = unplaced + reach.refused if reach is not None else unplaced
        if ctx is None:
            ctx = PolicyContext(now_s=snapshot.now_s, thresholds_gpu_s=writer.thresholds_gpu_s,
                                service=snapshot.service)
        _describe(writer, book, ctx, selected, waiting_on_nodes, snapshot, shortfalls)
    return plan


def count_starts(writer: RoundWriter, newcomers: list[JobState], totals: NodeTotals, max_per_node: int):
    """Count mode on real nodes: the count decides which newcomers start (every one that
    fits its allowed nodes at all), in walk order, on the pseudo-node as ever (the victim
    rule's placements only chose who yields; names stay out of count mode's starts)."""
    return _place_all(writer, newcomers, totals, max_per_node)


def _place_all(writer: RoundWriter, newcomers: list[JobState], free_gpus, max_per_node: int):
    """Count mode's placements: each newcomer, walk order (nobody's GPUs are named)."""
    starts, unplaced = [], []
    for rank, job in enumerate(newcomers):
        slots = writer.place(job, free_gpus, max_per_node)
        if slots is None:
            unplaced.append(job)
        else:
            starts.append((job, slots, rank))
    return starts, unplaced


def _backfill(writer: RoundWriter, book: QueueBook, chosen: set, free_gpus: FreeGpus,
              max_per_node: int) -> list[JobState]:
    """Backfill in the book's walk order (in count mode only a job whose own nodes
    could never hold it waits, and its share of the walk stays idle for the round)."""
    backfilled, _ = writer.backfill(book.order(), lambda job: job.index in chosen, free_gpus, free_gpus.total,
                                    max_per_node)
    return backfilled


def static_order_step(writer: RoundWriter, snapshot: Snapshot) -> Plan:
    """A round of a non-preemptive policy with a fixed order (fifo, fifo-skip) over
    the executor's book (one level, keys in arrival order): the same decisions as
    the generic walk, at the cost of what it starts."""
    book = snapshot.queue_book
    selected, blocked = book.walk_non_preemptive(snapshot.total_gpus, writer.policy.head_of_line_blocking)
    count_mode = writer.count_mode
    free_gpus = NodeTotals(snapshot.nodes) if count_mode else FreeGpus(snapshot.free_gpus_by_node())
    max_per_node = snapshot.max_gpus_per_node
    unplaced = False
    for rank, job in enumerate(selected):
        slots = writer.place(job, free_gpus, max_per_node)
        if slots is None:
            unplaced = True
            continue
        writer.start(job, slots, f"queue 1: {job.num_gpus} GPUs free at priority position {rank + 1}"
                                 " among waiting jobs")
    if unplaced and not blocked and not count_mode:
        _backfill(writer, book, {job.index for job in selected}, free_gpus, max_per_node)
    return writer.plan


def _next_positions(book: QueueBook, selected, started_ids: set, backfilled, preempted, passed_over) -> dict:
    """Running jobs new to the running lists (``started_ids``: the indices of the jobs
    the round starts) join their tails in walk order; settled running jobs that lost
    their GPUs go to the heads of the waiting lists in walk order; entered jobs left
    waiting join the tails of the waiting lists."""
    changes: dict[str, tuple[int, float]] = {}
    tail = book.top
    where = book.where  # job index -> (level, key): book.level_of inlined (every round)
    for job in selected:
        if job.running or job.index in started_ids:
            changes[job.job_id] = (where[job.index][0], tail)
            tail += 1.0
        elif book.group_of(job) == ENTERED:  # selected but not placed: waits at the tail
            changes[job.job_id] = (where[job.index][0], tail)
            tail += 1.0
    for job in backfilled:
        changes[job.job_id] = (where[job.index][0], tail)
        tail += 1.0
    head = book.bottom - len(preempted)
    for job in preempted:
        head += 1.0
        changes[job.job_id] = (where[job.index][0], head)
    for level, _, _, job in passed_over:  # tails: running ones (pinned) or waiting ones
        if job.job_id not in changes:
            changes[job.job_id] = (level, tail)
            tail += 1.0
    return changes


def _describe(writer: RoundWriter, book: QueueBook, ctx, selected, unplaced, snapshot, shortfalls=None) -> None:
    """The order, levels, displayed keys and wait reasons the controller shows."""
    plan = writer.plan
    ordered = book.order()
    plan.order = [job.job_id for job in ordered]
    display = writer.policy.display_from_key
    levels, keys, where = plan.levels, plan.keys, book.where
    for job in ordered:
        level, key = where[job.index]
        levels[job.job_id] = level
        keys[job.job_id] = display((level,) if key is None else (level, key[0]), job, ctx)
    if snapshot.explain and hasattr(ctx.service, "describe"):
        plan.index_sources = {job.job_id: ctx.service.describe(job.spec) for job in ordered}
    if snapshot.explain:
        selected_ids = {job.job_id for job in selected} | {a.job_id for a in plan.of_kind("start")}
        stopped = {a.job_id for a in plan.of_kind("preempt")}
        free_total = snapshot.total_gpus - sum(j.num_gpus for j in ordered if j.job_id in selected_ids or (
            j.running and j.job_id not in stopped))
        writer.explain_waits(ordered, book.level_of, None, selected_ids, unplaced, free_total,
                             snapshot.max_gpus_per_node, snapshot.nodes, shortfalls)

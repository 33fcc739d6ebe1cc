"""Which running jobs yield their GPUs to the round's newcomers: decided once, here.

The walks (controller.core.queue_book, the engine's generic walk) count GPUs over
the whole cluster. Where every newcomer may use every node, that count is the
truth and its victims stand: the newcomers are placed in walk order on the free
GPUs and the victims' (controller.core.placement), and a victim whose GPUs no
placed newcomer uses keeps running (controller.core.protection.needed_victims).
That is the published walk, and every result of the simulator on a cluster with
one partition, one GPU type and jobs without node constraints.

Where a newcomer may use only some nodes (its partitions, GPU type, reservation,
--nodelist/--exclude/-N), a global count picks victims it cannot use and misses
those it could (issue 28: a v100 job requeued for an a100 job; a queue-1 job of a
one-node partition left waiting behind the queue-2 job on that node while the walk
picked others). Then each newcomer, in walk order, goes on the free GPUs (with what
the victims of the newcomers before it leave over) if it fits there; otherwise its
candidates are the running jobs the victim rule lets go (protection.may_preempt)
that come after it in the walk (strictly lower priority) and hold GPUs on nodes it
may use, taken lowest priority first until it can be placed on the freed and free
GPUs of those nodes. Victims that placement does not need keep running. When no
set of candidates makes it fit, nobody is preempted for it, and its ``Shortfall``
says what holds its nodes.

Count mode (``placement: count``) on real nodes: the walk's count decides which
newcomers start and in what order, but its victims were never placed, so they never
stand: every newcomer goes the second way (``per_node``), and who yields to it is a
set on the nodes it may use that makes it fit, as in spread (issue 35: a v100 job
requeued for an a100-partition job, another victim named every round). Only the
replay's count on its one pseudo-node, where no job has a node, keeps the walk's.

A newcomer that asks for more CPUs or memory per node than some node has free, or
for --exclusive (controller.core.placement.NodeRoom.checks), goes the second way
too, and fits a node only where, once its victims there leave, those are free
(--exclusive: every CPU, so every job on the node is a victim): a victim is chosen
or kept for its CPUs and memory as for its GPUs, never more than that needs
(issue 28: a job whose --mem no freed node holds had a victim preempted for it).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from controller.core.model import JobState
from controller.core.placement import FreeGpus, NodeRoom
from controller.core.protection import may_preempt, needed_victims, pinned
from controller.core.reach import PLAIN, OwnNodesReach  # noqa: F401 (the walk's reach: callers import it here)

Slots = tuple[tuple[str, int], ...]


@dataclass
class Shortfall:
    """Why a newcomer that may use only some nodes waits: those nodes (``nodes``,
    sorted), the GPUs free on them when it was its turn, and what holds the rest:
    ``holders`` (walk order) are (job, why) with why one of HIGHER (a running job
    before it in the walk), PINNED (one the victim rule keeps: no checkpoint contract
    or protected) and STARTING (a newcomer before it placed there this round);
    ``spared``: the lower-priority jobs it could have preempted there, which would not
    have made it fit."""

    nodes: tuple[str, ...]
    free_gpus: int
    holders: list[tuple[JobState, str]] = field(default_factory=list)
    spared: list[JobState] = field(default_factory=list)


HIGHER, PINNED, STARTING = "higher priority", "may not be preempted", "starts now"


@dataclass
class VictimChoice:
    """The round's outcome for its newcomers: ``starts`` (job, slots, rank among the
    newcomers), ``victims`` (walk order), ``unplaced`` (newcomers left waiting),
    ``free_gpus`` (what is left for backfill), ``per_node_set`` (False: the walk's
    victims stood), ``beneficiary`` (victim's index -> the newcomer it yields to) and
    ``shortfalls`` (job id -> Shortfall, for the unplaced newcomers with their own node
    set, when asked for)."""

    starts: list[tuple[JobState, Slots, int]]
    victims: list[JobState]
    unplaced: list[JobState]
    free_gpus: FreeGpus
    per_node_set: bool = False
    beneficiary: dict[int, JobState] = field(default_factory=dict)
    shortfalls: dict[str, Shortfall] = field(default_factory=dict)


def choose_victims(newcomers: list[JobState], walk_victims: list[JobState],
                   order: Callable[[], Iterable[JobState]],
                   free_by_node: dict[str, int], *, place: Callable, fit: Callable,
                   allowed: Callable[[JobState], Optional[frozenset]], preemptive: bool = True,
                   explain: bool = False, room: Callable[[], Optional[NodeRoom]] = lambda: None,
                   passed: list[JobState] = (), per_node: bool = False, book=None) -> VictimChoice:
    """Place the round's ``newcomers`` (walk order) and choose who yields to them.

    ``walk_victims``: the running jobs the walk's count left out (walk order);
    ``order()``: every job of the round in walk order (asked only when a newcomer may
    use only some nodes); ``free_by_node``: free GPUs per available node before anyone
    leaves (not changed). ``place(job, free_gpus)``: its slots on a FreeGpus, taken
    there, or None; ``fit(job, free_by_node)``: the same answer on a plain dict,
    nothing taken; ``allowed(job)``: the nodes its partitions, GPU type and
    reservation allow (None = all). ``preemptive``: the policy may preempt at all.
    ``explain``: also build the unplaced newcomers' Shortfalls. ``room()``: the round's
    NodeRoom (None: the nodes report no CPUs or memory), which ``place`` keeps too.
    ``passed``: the waiting jobs the walk passed for want of GPUs within reach on their
    own nodes (OwnNodesReach); with ``explain``, their Shortfalls too. ``per_node``:
    choose per newcomer even where every one may use every node (count mode on real
    nodes: the count's victims were never placed, so they do not stand). ``book``: the
    round's QueueBook where it keeps its class lists (``order`` is its ``order``): without
    ``explain``, the places of the newcomers and running jobs are read from its pieces,
    not from every job (tests/test_class_walk.py checks them against ``order()``)."""
    node_room = room()
    if not (per_node and newcomers) and not any(_has_own_nodes(job, allowed, node_room) for job in newcomers):
        choice = _walk_victims_stand(newcomers, walk_victims, free_by_node, place)
        if explain and passed:
            order = list(order())
            rank = {job.index: position for position, job in enumerate(order)}
            leaving = {victim.index: victim for victim in choice.victims}
            free = choice.free_gpus.free
            for job in passed:
                choice.shortfalls[job.job_id] = _shortfall(job, order, rank, _usable(job, allowed, free), free,
                                                           leaving, choice.starts, preemptive)
        return choice
    from_book = book is not None and not explain
    if from_book:
        order = ()  # read only to explain
        parts = book.order_parts()
        rank = {job.index: book.place_in_order(job, parts[0]) for job in newcomers}
        first = min(rank.values())
        # the candidates are listed at the first victim search (most rounds place their
        # newcomers on free GPUs); before it nobody leaves, and the book's kept sums give
        # each newcomer's reach
        placed, candidates, candidate_ranks = [], None, []
    else:
        order = list(order())
        rank = {job.index: position for position, job in enumerate(order)}
        # walk order; only a job after the first newcomer can be of lower priority than one
        first = min(rank[job.index] for job in newcomers)
        candidates = [job for job in order[first + 1:] if job.running and may_preempt(job, preemptive)]
        candidate_ranks = [rank[job.index] for job in candidates]
    free_gpus = FreeGpus(free_by_node)
    leaving: dict[int, JobState] = {}
    beneficiary: dict[int, JobState] = {}
    starts: list[tuple[JobState, Slots, int]] = []
    unplaced: list[JobState] = []
    shortfalls: dict[str, Shortfall] = {}
    # node set -> (GPUs, rank) of a newcomer those nodes could not hold even with every
    # lower-priority job there gone. A newcomer after it asking as many GPUs of the same
    # nodes is out of reach too (fewer candidates after it, free GPUs only taken since),
    # until victims leave: the many newcomers of one full partition cost one look.
    out_of_reach: dict[Optional[frozenset], tuple[int, int]] = {}
    passed_at = 0

    def describe_passed(before: int) -> None:
        """The Shortfalls of the jobs the walk passed ahead of walk position ``before``,
        as their nodes stand at their turn."""
        nonlocal passed_at
        while passed_at < len(passed) and rank[passed[passed_at].index] < before:
            job = passed[passed_at]
            shortfalls[job.job_id] = _shortfall(job, order, rank, _usable(job, allowed, free_gpus.free),
                                                free_gpus.free, leaving, starts, preemptive)
            passed_at += 1

    for position, job in enumerate(newcomers):
        nodes, own_rank = allowed(job), rank[job.index]
        if explain and passed:
            describe_passed(own_rank)
        known = out_of_reach.get(nodes)
        lower: list[JobState] = []
        reachable = known is None or job.num_gpus < known[0] or own_rank < known[1]
        if reachable:
            if candidates is None:
                reachable = _book_reach(book, job, own_rank, nodes, free_gpus, parts[1], preemptive) >= job.num_gpus
            else:
                lower = candidates[bisect_right(candidate_ranks, own_rank):]
                if leaving:
                    lower = [victim for victim in lower if victim.index not in leaving]
                # out of reach: neither place (its GPUs must be free there) nor victims_for can hold it
                reachable = _within_reach(job, nodes, free_gpus, lower)
            if not reachable and (known is None or job.num_gpus < known[0]):
                out_of_reach[nodes] = (job.num_gpus, own_rank)
        slots = place(job, free_gpus) if reachable else None
        if slots is None:
            found = None
            if reachable:
                if candidates is None:  # the first search: nobody leaves yet
                    # the running jobs after the first newcomer that may_preempt lets go (inlined)
                    placed = [(place, other) for place, other in book.running_places(first, parts)[0]
                              if other.running and not other.keeps_gpus and other.spec.preemptable] \
                        if preemptive else []
                    candidates, candidate_ranks = [other for _, other in placed], [place for place, _ in placed]
                    lower = candidates[bisect_right(candidate_ranks, own_rank):]
                found = victims_for(job, reversed(lower), free_gpus.free, _usable(job, allowed, free_gpus.free), fit,
                                    node_room)
            if found is None:
                unplaced.append(job)
                if explain and _has_own_nodes(job, allowed, node_room):
                    shortfalls[job.job_id] = _shortfall(job, order, rank, _usable(job, allowed, free_gpus.free),
                                                        free_gpus.free, leaving, starts, preemptive)
                continue
            victims, slots = found
            out_of_reach.clear()  # their GPUs free again: what was out of reach may not be
            for victim in victims:
                leaving[victim.index] = victim
                beneficiary[victim.index] = job
                for node, gpus in victim.placement:
                    if node in free_gpus.free:
                        free_gpus.give(node, gpus)
                if node_room is not None:
                    node_room.give(victim.spec)
            for node, gpus in slots:
                free_gpus.take(node, gpus)
            if node_room is not None:
                node_room.take(job.spec, slots)
        starts.append((job, slots, position))
    if explain:
        describe_passed(len(order))
    if leaving and from_book:  # every victim is one of ``placed``'s candidates, listed in walk order
        victims = [job for _, job in placed if job.index in leaving]
    else:
        victims = sorted(leaving.values(), key=lambda victim: rank[victim.index])
    return VictimChoice(starts, victims, unplaced, free_gpus, True, beneficiary, shortfalls)


def victims_for(job: JobState, lowest_first: Iterable[JobState], free_by_node: dict[str, int],
                usable: Callable[[str], bool], fit: Callable, room: Optional[NodeRoom] = None
                ) -> Optional[tuple[list[JobState], Slots]]:
    """The victims, taken lowest priority first, whose GPUs make ``job`` fit, or None.

    ``lowest_first``: its candidates (running, preemptable, after it in the walk),
    lowest priority first; ``free_by_node``: free GPUs now (not changed);
    ``usable(node)``: the job may run there. Candidates are added one by one until
    ``fit`` places the job on the free and freed GPUs of its usable nodes; then the
    victims on no node of that placement, and those whose GPUs the placement does not
    need (highest priority first), keep running. Returns (victims, slots) or None.

    ``room``: the round's NodeRoom; when it checks the job, a node counts only where
    the job's CPUs, memory (and --exclusive: every CPU) are free once the victims
    chosen so far leave (_ResourceTrial)."""
    if room is not None and room.checks(job.spec):
        return _ResourceTrial(job, room, free_by_node, usable).victims(lowest_first, fit)
    trial = {node: free for node, free in free_by_node.items() if free > 0 and usable(node)}
    total = sum(trial.values())
    # the candidates are every running job after the job in the walk, most of them on
    # other nodes: each is tested against this set, a one-node job without a list built
    on = {node for node in free_by_node if usable(node)}
    gains: list[tuple[JobState, list[tuple[str, int]]]] = []
    gained = 0  # their GPUs there, summed as they are listed
    for victim in lowest_first:
        placement = victim.placement
        if len(placement) == 1:
            if placement[0][0] in on:
                gains.append((victim, list(placement)))
                gained += placement[0][1]
        else:
            gain = [slot for slot in placement if slot[0] in on]
            if gain:
                gains.append((victim, gain))
                gained += sum(gpus for _, gpus in gain)
    if total + gained < job.num_gpus:
        return None
    everything = dict(trial)
    for _, gain in gains:
        for node, gpus in gain:
            everything[node] = everything.get(node, 0) + gpus
    if fit(job, everything) is None:
        return None  # not even with every candidate gone (its layout, -N, consolidation)
    chosen: list[tuple[JobState, list[tuple[str, int]]]] = []
    slots = None
    for victim, gain in gains:
        chosen.append((victim, gain))
        for node, gpus in gain:
            trial[node] = trial.get(node, 0) + gpus
            total += gpus
        if total >= job.num_gpus:
            slots = fit(job, trial)
            if slots is not None:
                break
    if slots is None:
        return None
    need = {}
    for node, gpus in slots:
        short = gpus - free_by_node.get(node, 0)
        if short > 0:
            need[node] = need.get(node, 0) + short
    kept = [(victim, gain) for victim, gain in chosen if any(node in need for node, _ in gain)]
    cover: dict[str, int] = {}
    for _, gain in kept:
        for node, gpus in gain:
            cover[node] = cover.get(node, 0) + gpus
    for item in reversed(list(kept)):  # highest priority first: spare what the need leaves
        victim, gain = item
        if all(cover[node] - gpus >= need[node] for node, gpus in gain if node in need):
            kept.remove(item)
            for node, gpus in gain:
                cover[node] -= gpus
    return [victim for victim, _ in reversed(kept)], slots


class _ResourceTrial:
    """victims_for for a newcomer whose CPUs, memory or --exclusive some node may
    lack: the same lowest-first choice, where a node holds the job only when the
    NodeRoom says it fits there with what the chosen victims hold on it freed, and a
    victim is spared only when the placement still fits, GPUs and room, without it."""

    def __init__(self, job: JobState, room: NodeRoom, free_by_node: dict[str, int], usable):
        self.job, self.room, self.free_by_node, self.usable = job, room, free_by_node, usable

    def _freed(self, victims) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """(free GPUs, CPUs freed, MB freed) per usable node with ``victims`` gone (GPUs:
        only nodes with some)."""
        gpus = {node: free for node, free in self.free_by_node.items() if free > 0 and self.usable(node)}
        cpus: dict[str, int] = {}
        mem: dict[str, int] = {}
        for victim in victims:
            self._add(victim, gpus, cpus, mem)
        return gpus, cpus, mem

    def _add(self, victim: JobState, gpus: dict, cpus: dict, mem: dict) -> None:
        for node, count in victim.placement:
            if node in self.free_by_node and self.usable(node):
                gpus[node] = gpus.get(node, 0) + count
        for node, held_cpus, held_mb in victim.spec.held_by_node:
            cpus[node] = cpus.get(node, 0) + held_cpus
            mem[node] = mem.get(node, 0) + held_mb

    def _with_room(self, gpus: dict, cpus: dict, mem: dict) -> dict[str, int]:
        """The nodes of ``gpus`` where the job has room with ``cpus``, ``mem`` freed there."""
        spec, fits = self.job.spec, self.room.fits
        return {node: free for node, free in gpus.items() if fits(spec, node, cpus.get(node, 0), mem.get(node, 0))}

    def _holds(self, slots: Slots, victims) -> bool:
        """``slots`` still fit, GPUs and room, with only ``victims`` gone."""
        gpus = self._with_room(*self._freed(victims))
        return all(gpus.get(node, 0) >= count for node, count in slots)

    def victims(self, lowest_first: Iterable[JobState], fit: Callable) -> Optional[tuple[list[JobState], Slots]]:
        job = self.job
        candidates = [victim for victim in lowest_first
                      if any(node in self.free_by_node and self.usable(node) for node, _ in victim.placement)]
        if fit(job, self._with_room(*self._freed(candidates))) is None:
            return None  # not even with every candidate gone (room, layout, -N, consolidation)
        gpus, cpus, mem = self._freed(())
        chosen: list[JobState] = []
        slots = fit(job, self._with_room(gpus, cpus, mem))
        for victim in candidates:
            if slots is not None:
                break
            chosen.append(victim)
            self._add(victim, gpus, cpus, mem)
            slots = fit(job, self._with_room(gpus, cpus, mem))
        if slots is None:
            return None
        on_slots = {node for node, _ in slots}
        kept = [victim for victim in chosen if any(node in on_slots for node, _ in victim.placement)]
        for victim in reversed(list(kept)):  # highest priority first: spare what the placement does not need
            rest = [other for other in kept if other is not victim]
            if self._holds(slots, rest):
                kept = rest
        return kept, slots


def _walk_victims_stand(newcomers, walk_victims, free_by_node, place) -> VictimChoice:
    """Every newcomer may use every node: the walk's victims, less those no placement uses."""
    free_gpus = FreeGpus(free_by_node, [job.placement for job in walk_victims])
    starts, unplaced = [], []
    for position, job in enumerate(newcomers):
        slots = place(job, free_gpus)
        if slots is None:
            unplaced.append(job)
        else:
            starts.append((job, slots, position))
    victims = (needed_victims(walk_victims, [slots for _, slots, _ in starts], free_by_node, free_gpus)
               if walk_victims else [])
    return VictimChoice(starts, victims, unplaced, free_gpus)


def _within_reach(job: JobState, nodes: Optional[frozenset], free_gpus: FreeGpus, lower: list[JobState]) -> bool:
    """The GPUs free on ``nodes`` (None: every node) and those its ``lower`` candidates
    hold there reach the job's count: a bound on what victims_for can free (it counts
    no more nodes, no other jobs), which most newcomers of a cluster with partitions
    miss (their nodes held by higher priority), so they skip its trial at this cost."""
    free = free_gpus.free
    nodes = free if nodes is None else nodes
    reach = free_gpus.free_on(nodes)
    for victim in lower:
        if reach >= job.num_gpus:
            break
        for node, gpus in victim.placement:
            if node in nodes and node in free:
                reach += gpus
    return reach >= job.num_gpus


def _book_reach(book, job: JobState, own_rank: int, nodes: Optional[frozenset], free_gpus: FreeGpus, still,
                preemptive: bool) -> int:
    """_within_reach's sum before anybody leaves, from the book's pieces: the GPUs free
    on ``nodes`` (None: every node) and held there by the candidates after ``own_rank``
    (the job's place in the walk): the book's movable GPUs below its level (the running
    lists after its own) and the entered jobs that still run placed after it (``still``:
    order_parts'). tests/test_choice_reach.py checks it against the candidates' sum."""
    free = free_gpus.free
    nodes = free if nodes is None else nodes
    reach = free_gpus.free_on(nodes)
    if not preemptive:
        return reach
    below = book.movable_below[book.level_of(job)]
    reach += sum(map(below.__getitem__, below.keys() & nodes & free.keys()))
    for place, other in still:
        if place > own_rank and other.running and not other.keeps_gpus and other.spec.preemptable:
            reach += sum(gpus for node, gpus in other.placement if node in nodes and node in free)
    return reach


def _has_own_nodes(job: JobState, allowed, room: Optional[NodeRoom] = None) -> bool:
    """The job may use only some of the round's nodes (its constraints, or the CPUs,
    memory or --exclusive some node lacks)."""
    return job.spec.constrained or allowed(job) is not None or (room is not None and room.checks(job.spec))


def _usable(job: JobState, allowed, free_by_node: dict[str, int]) -> Callable[[str], bool]:
    """node -> the job may run there (its partitions, type, reservation; not --exclude'd)."""
    nodes = allowed(job)
    excluded = frozenset(job.spec.excluded_nodes)
    if nodes is None and not excluded:
        return free_by_node.__contains__
    if nodes is None:
        return lambda node: node in free_by_node and node not in excluded
    # a set's own test (no Python call a node: victims_for asks it of every candidate's nodes)
    return (nodes - excluded if excluded else nodes).__contains__


def _shortfall(job, order, rank, usable, free_by_node, leaving, starts, preemptive) -> Shortfall:
    required = [node for node in job.spec.required_nodes if node in free_by_node]
    if required and any(free_by_node[node] <= 0 for node in required):
        nodes = tuple(sorted(required))  # --nodelist: a full listed node alone keeps it waiting
    else:
        nodes = tuple(sorted(node for node in free_by_node if usable(node)))
    usable = frozenset(nodes).__contains__
    free = sum(free_by_node[node] for node in nodes)
    own = rank[job.index]
    holders: list[tuple[JobState, str]] = []
    spared: list[JobState] = []
    for other in order:
        if not other.running or other.index in leaving:
            continue
        if not any(usable(node) for node, _ in other.placement):
            continue
        if pinned(other):
            holders.append((other, PINNED))
        elif rank[other.index] < own:
            holders.append((other, HIGHER))
        elif not preemptive:  # the policy preempts nobody
            holders.append((other, PINNED))
        else:
            spared.append(other)
    for other, slots, _ in starts:
        if any(usable(node) for node, _ in slots):
            holders.append((other, STARTING))
    return Shortfall(nodes, free, holders, spared)

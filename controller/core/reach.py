"""How far the walk may go for a waiting job that may use only some nodes
(``OwnNodesReach``, asked by controller.core.queue_book.QueueBook.walk; the victims
themselves are chosen in controller.core.victims)."""
from __future__ import annotations

from itertools import repeat
from typing import Callable, Optional

from controller.core.model import JobState
from controller.core.protection import may_preempt

_ZEROS = repeat(0)  # the default of every node a reach's sum asks
PLAIN = "plain"  # OwnNodesReach.class_key of a job that may use every node (never refused)


class OwnNodesReach:
    """What the walk (controller.core.queue_book.QueueBook.walk) may hand a waiting
    job that may use only some nodes (its partitions, GPU type, reservation, node
    constraints): the GPUs within its reach on those nodes, free or held by running
    jobs after it in the walk that the victim rule lets go (protection.may_preempt),
    less what the jobs the walk took before it claimed there (issue 28: a queue-1 job
    of a partition whose only nodes run queue-2 jobs waited while hundreds of queue-1
    jobs of another, full partition used up the walk's cluster-wide count). A job short
    of its need is passed (``admits`` False: it waits, and its share of the count stays
    for the jobs after it); the rule is controller.replay.cluster.SimCluster.audit_waits'.

    A bound, not a placement (controller.core.victims.choose_victims places): a job the
    walk takes claims its GPUs on its nodes' free GPUs first, then on the candidates'
    (those of the lowest priority, so the walk passing a higher one takes its GPUs off
    what is left); a job that may use every node claims none and is never passed, so
    where every job may use every node the walk is its cluster-wide count, unchanged.
    Nothing is counted until the first job with its own nodes asks (``admits``, or the
    class walk's ``within`` for a level's lists of such jobs), so a round without one
    costs a lookup per job it takes."""

    def __init__(self, book, free_by_node: dict[str, int], allowed: Callable[[JobState], Optional[frozenset]],
                 lists_refused: bool = True, class_keys: Optional[dict] = None):
        self.book = book
        # False: ``refused`` is left empty, and the walk may pass a node set's waiting jobs
        # without asking (QueueBook._take_by_class) once one was refused
        self.lists_refused = lists_refused
        self.free_by_node = free_by_node
        self.allowed = allowed
        self.level = 0
        self.started = False
        self.kept_jobs: set[int] = set()  # entered running jobs the walk kept before the count began
        self.refused: list[JobState] = []  # the waiting jobs passed, walk order (with lists_refused)
        # node set -> its GPUs within reach now (``within``), dropped when a claim or an
        # uncount touches one of its nodes (``_touched``) and all at a level's entry
        self.sums: dict[Optional[frozenset], int] = {}
        # node set -> the fewest GPUs a job of it would be refused (one more than its
        # last sum): once counting starts a reach only shrinks (claims, uncounts), so a
        # later job of that set asking as many is refused without summing its nodes again
        self.short: dict[Optional[frozenset], int] = {}
        self.sorted_nodes: dict[frozenset, tuple[str, ...]] = {}
        # node class (QueueBook.class_function) -> class_key, kept by the class walk: the
        # nodes a class may use do not change within the round (``class_keys``: the
        # caller's, kept across rounds while ``allowed`` answers alike, QueueBook.reach_keys)
        self.class_keys: dict = {} if class_keys is None else class_keys

    def class_key(self, job: JobState):
        """What ``admits`` judges ``job`` by besides its GPUs: its nodes, or PLAIN."""
        nodes = self.allowed(job)
        return PLAIN if nodes is None and not job.spec.constrained else nodes

    def out_of_reach(self, key, need: int) -> bool:
        """A job of ``class_key`` ``key`` asking ``need`` GPUs would be refused now, as one
        of that key asking no more was (nothing counted: False)."""
        return key is not PLAIN and need >= self.short.get(key, need + 1)

    def plain(self, job: JobState) -> bool:
        """The job may use every node: the walk's count stands for it."""
        return not job.spec.constrained and self.allowed(job) is None

    def enter(self, level: int) -> None:
        """The walk reached ``level``: its running jobs are no longer below the jobs it takes."""
        self.level = level
        if not self.started:
            return
        book = self.book
        if book.class_function is not None:  # the book keeps the level's movable GPUs per node
            on = book.movable_on[level]
            if on:  # as _uncount job by job, each step subtracting and stopping at 0: on a node
                # no claim or entered job touched that leaves the book's sum below ``level``
                below, dirty = self.below, self.dirty
                self.below = fresh = self._below(level)
                for node in dirty:
                    left = below.get(node, 0)
                    fresh[node] = max(left - on.get(node, 0), 0) if left > 0 else left
                self.sums.clear()
        else:
            for job in book.running[level].values():
                self._uncount(job)

    def kept(self, job: JobState) -> None:
        """The walk keeps an entered running job: its GPUs are no victim's."""
        if self.started:
            self._uncount(job)
        else:
            self.kept_jobs.add(job.index)

    def admits(self, job: JobState, key=None) -> bool:
        """The walk may take waiting ``job`` (claimed on its nodes if so); ``key``: its
        ``class_key`` where the walk knows it (None: asked here)."""
        nodes = self.allowed(job) if key is None else key
        if key is PLAIN or (key is None and nodes is None and not job.spec.constrained):
            return True  # plain(): the walk's count stands for it
        need = job.num_gpus
        if not self.started:
            self._start()
        elif need >= self.short.get(nodes, need + 1):
            if self.lists_refused:
                self.refused.append(job)
            return False
        if self.within(nodes) < need:
            if self.lists_refused:
                self.refused.append(job)
            return False
        self._claim(nodes, need)
        return True

    def within(self, key) -> int:
        """The GPUs a job of ``class_key`` ``key`` (not PLAIN) could be handed now on its
        nodes, free or a candidate's (the count starts here if it had not). A reach only
        shrinks during the walk, so every gang above it is refused from now on: ``short``
        records that, and larger gangs of ``key`` are passed without summing again."""
        if not self.started:
            self._start()
        gpus = self.sums.get(key)
        if gpus is None:
            free, below = self.free, self.below
            if key is None:
                gpus = sum(free.values()) + sum(below.values())
            else:
                gpus = sum(map(free.get, key, _ZEROS))
                if below:  # none at the last level but the entered jobs': often empty there
                    gpus += sum(map(below.get, key, _ZEROS))
            self.sums[key] = gpus
            self.short[key] = min(self.short.get(key, gpus + 1), gpus + 1)
        return gpus

    def _start(self) -> None:
        """Count the free GPUs and the candidates below the walk's level (and the entered
        running jobs it has not kept)."""
        book = self.book
        # a node with no free GPU counts none either way (every sum and claim reads it as
        # 0), so the copy keeps it; only a node reported below zero must go
        self.free = free = dict(self.free_by_node)
        if free and min(free.values()) < 0:
            self.free = {node: gpus for node, gpus in free.items() if gpus > 0}
        self.dirty: set[str] = set()  # nodes where ``below`` is not the book's movable_below
        if book.class_function is not None:  # the book keeps the movable GPUs per node below each level
            self.below = self._below(self.level)
        else:
            self.below = {}
            for level in range(self.level + 1, book.num_levels):
                for job in book.running[level].values():
                    self._count(job)
        for job in book.entered.values():
            if job.index not in self.kept_jobs:
                self._count(job)
        self.started = True

    def _below(self, level: int) -> dict[str, int]:
        """The book's movable GPUs per node below ``level``, on the round's nodes."""
        below, free = self.book.movable_below[level], self.free_by_node
        return dict(below) if below.keys() <= free.keys() else {n: g for n, g in below.items() if n in free}

    def _count(self, job: JobState) -> None:
        if may_preempt(job, True):
            below, free = self.below, self.free_by_node
            for node, gpus in job.placement:
                if node in free:
                    below[node] = below.get(node, 0) + gpus
                    self.dirty.add(node)

    def _uncount(self, job: JobState) -> None:
        if may_preempt(job, True):
            below, changed = self.below, []
            for node, gpus in job.placement:
                left = below.get(node, 0)
                if left > 0:  # what a claim took there first went to lower candidates
                    below[node] = max(left - gpus, 0)
                    self.dirty.add(node)
                    changed.append(node)
            if changed:
                self._touched(changed)

    def _claim(self, nodes: Optional[frozenset], need: int) -> None:
        if nodes is None:
            ordered = tuple(sorted(self.free_by_node))
        else:
            ordered = self.sorted_nodes.get(nodes)
            if ordered is None:
                ordered = self.sorted_nodes[nodes] = tuple(sorted(nodes))
        for pool in (self.free, self.below):
            for node in ordered:
                if need <= 0:
                    break
                have = pool.get(node, 0)
                if have > 0:
                    taken = min(have, need)
                    pool[node] = have - taken
                    need -= taken
                    if pool is self.below:
                        self.dirty.add(node)
        self._touched(nodes)

    def _touched(self, nodes) -> None:
        """Drop the kept sums of the node sets that share a node with ``nodes`` (None: every node)."""
        sums = self.sums
        if nodes is None:
            sums.clear()
            return
        for key in [key for key in sums if key is None or not key.isdisjoint(nodes)]:
            del sums[key]

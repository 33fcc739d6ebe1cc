"""The wait audit's candidate victims (controller.replay.cluster.SimCluster.audit_waits),
read only as far as its walk goes.

The audit walks the waiting jobs in walk order; a running job the victim rule lets go
(a candidate) counts for a waiting job while it comes later in the walk. Its view
holds the place of the last candidate (the walk stops there), the GPUs per node free
or held by candidates (``within_reach``: those after the walk's place, once the walk
has passed the others) and the candidates themselves, handed out in walk order as the
walk passes them (``pass_before``) or as a victim search needs the rest (``rest``).

Built from a list of every candidate (``listed``), or from the simulator's queue book
(``from_book``): then the view begins at the walk's first pass, its sums from the book's
kept preemptable GPUs per node below that place's level (QueueBook.movable_below), and
the candidates are read lazily from its pieces from that place on, so a round costs what
the walk visits, not every running job (tests/test_wait_audit.py checks the two equal on
random books; tests/test_class_walk.py every audited replay round).
"""
from __future__ import annotations

import bisect
import heapq
from typing import Callable, Iterator, Optional

from controller.core.model import JobState


class Candidates:
    """``lowest``: the last candidate's place (None: no candidate); ``within_reach``:
    per node, free GPUs plus those of every candidate not passed yet (none: before the
    first pass of a view from the book)."""

    def __init__(self, items: Iterator[tuple[int, JobState]], lowest: Optional[int],
                 within_reach: Optional[dict[str, int]]):
        self._items = items
        self._head = next(items, None)  # the first candidate not passed yet (None: none left)
        self.lowest = lowest
        self.within_reach = within_reach

    def pass_before(self, rank: int, claimed: set[int]) -> bool:
        """Pass the candidates placed before ``rank`` (a waiting job's place): their GPUs,
        unless ``claimed`` (a victim already found), leave ``within_reach``. True when
        some were passed."""
        head, items, within = self._head, self._items, self.within_reach
        if head is None or head[0] >= rank:
            return False
        while head is not None and head[0] < rank:
            victim = head[1]
            if victim.index not in claimed:
                for node, gpus in victim.placement:
                    within[node] -= gpus
            head = next(items, None)
        self._head = head
        return True

    def remaining(self) -> list[tuple[int, JobState]]:
        """(place, job) of the candidates not passed yet, in walk order."""
        if self._head is None:
            return []
        left = [self._head, *self._items]
        self._items = iter(left[1:])
        return left

    def rest(self) -> list[JobState]:
        """The candidates not passed yet, in walk order."""
        return [job for _, job in self.remaining()]


class _FromBook(Candidates):
    """Candidates read from the simulator's book, begun at the walk's first pass (before
    it nobody is claimed): then ``within_reach`` is the free GPUs plus the book's kept
    movable GPUs below the level of that place and the entered jobs that still run
    after it, and the candidates are read from that place on."""

    def __init__(self, book, parts, free_by_node: dict[str, int], lowest: Optional[int]):
        self.book, self.parts, self.free_by_node = book, parts, free_by_node
        self._items, self._head, self.lowest, self.within_reach = iter(()), None, lowest, None

    def pass_before(self, rank: int, claimed: set[int]) -> bool:
        if self.within_reach is not None:
            return super().pass_before(rank, claimed)
        spans, still = self.parts
        level = max(at for at in range(len(spans) // 2) if spans[2 * at + 1][0] <= rank)
        within = self.within_reach = dict(self.free_by_node)
        for node, gpus in self.book.movable_below[level].items():
            within[node] += gpus
        for place, job in still:
            if place > rank and is_candidate(job):
                for node, gpus in job.placement:
                    within[node] += gpus
        self._items = self.book.running_in_order(self.parts, is_candidate, rank)
        self._head = next(self._items, None)
        return True

    def remaining(self) -> list[tuple[int, JobState]]:
        if self.within_reach is None:
            raise RuntimeError("the candidates are read from the walk's first pass on")
        return super().remaining()


def listed(candidates: list[tuple[int, JobState]], free_by_node: dict[str, int]) -> Candidates:
    """From every candidate as (place, job), in walk order."""
    within_reach = dict(free_by_node)
    for _, victim in candidates:
        for node, gpus in victim.placement:
            within_reach[node] += gpus
    return Candidates(iter(candidates), candidates[-1][0] if candidates else None, within_reach)


def is_candidate(job: JobState) -> bool:
    """The victim rule without its time and count parts (protection's first test)."""
    return job.running and job.spec.preemptable


def from_book(book, free_by_node: dict[str, int]) -> tuple[Candidates, list]:
    """From the simulator's book (its class lists kept, no protection rule beyond
    JobSpec.preemptable: its movable GPUs are the candidates'); with order_parts' spans."""
    parts = book.order_parts()
    last = book.last_running(parts, is_candidate)
    return _FromBook(book, parts, free_by_node, last if last >= 0 else None), parts[0]


def open_items(lists: dict, merged: list, first: int, refused: Callable[[JobState], bool]
               ) -> Iterator[tuple[int, JobState]]:
    """Lazily, (place, job) of a span's waiting items in walk order (``merged``: them all,
    sorted; ``first``: the span's first place), from its class lists ((gang, class) ->
    items), passing a list whole once its head is ``refused`` at its turn: a class's jobs
    may use the same nodes, and the audit's refusals only grow stricter as it walks, so
    the rest of that list would be refused too. Equal to ``enumerate(jobs, first)`` less
    jobs the audit would refuse; the audit of a long queue of full partitions visits its
    open classes' jobs, not every job waiting there."""
    heap = [(items[0], 0, items) for items in lists.values()]  # items are unique: never compared past them
    heapq.heapify(heap)
    while heap:
        item, at, items = heap[0]
        if refused(item[2]):
            heapq.heappop(heap)
            continue
        yield first + bisect.bisect_left(merged, (item[0], item[1])), item[2]
        if at + 1 < len(items):
            heapq.heapreplace(heap, (items[at + 1], at + 1, items))
        else:
            heapq.heappop(heap)

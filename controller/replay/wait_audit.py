"""The wait audit's candidate victims (controller.replay.cluster.SimCluster.audit_waits),
read only as far as its walk goes.

The audit walks the waiting jobs in walk order; a running job the victim rule lets go
(a candidate) counts for a waiting job while it comes later in the walk. Its view
holds the place of the last candidate (the walk stops there), the GPUs per node free
or held by candidates (``within_reach``: those after the walk's place, once the walk
has passed the others) and the candidates themselves, handed out in walk order as the
walk passes them (``passed_before``) or as a victim search needs the rest (``rest``).

Built from a list of every candidate (``listed``), or from the simulator's queue book
(``from_book``): then the sums come from the book's kept preemptable GPUs per node
(QueueBook.movable_on) and the candidates are read lazily from its pieces, so a round
costs what the walk visits, not every running job (tests/test_wait_audit.py checks the
two equal, round after round).
"""
from __future__ import annotations

from typing import Iterator, Optional

from controller.core.model import JobState


class Candidates:
    """``lowest``: the last candidate's place (None: no candidate); ``within_reach``:
    per node, free GPUs plus every candidate's (the caller takes off what it passes)."""

    def __init__(self, items: Iterator[tuple[int, JobState]], lowest: Optional[int], within_reach: dict[str, int]):
        self._items = items
        self._head = next(items, None)  # the first candidate not passed yet (None: none left)
        self.lowest = lowest
        self.within_reach = within_reach

    def passed_before(self, rank: int) -> list[JobState]:
        """The candidates placed before ``rank`` not passed yet: now passed."""
        head, items, passed = self._head, self._items, []
        while head is not None and head[0] < rank:
            passed.append(head[1])
            head = next(items, None)
        self._head = head
        return passed

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
    within_reach = dict(free_by_node)
    for on in book.movable_on:
        for node, gpus in on.items():
            within_reach[node] += gpus
    for _, job in parts[1]:  # entered jobs that still run: counted job by job
        if is_candidate(job):
            for node, gpus in job.placement:
                within_reach[node] += gpus
    return Candidates(book.running_in_order(parts, is_candidate), last if last >= 0 else None, within_reach), parts[0]

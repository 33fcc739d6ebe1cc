"""Heaps of a replay's future moments, their stale items dropped now and then.

A replay keeps its moments (completions, threshold crossings, promotion moments) in
heaps of ``(time, job index, version, ...)`` and deletes lazily: a job that stops or
restarts bumps its version, and its old items are dropped only when they reach the
top. A moment far ahead (a promotion due at PROMOTEKNOB x a long execution, the
completion of a long job that keeps being preempted) may stay buried for the rest of
the replay, so with many preemptions the heap grows with every one of them, and every
push and pop pays its depth. ``StaleHeap.push`` rebuilds the heap from its live items
whenever it has doubled since the last rebuild: amortised O(1) a push, and the heap
stays within twice its live size.

Dropping stale items never changes what a reader sees: each reader skips them anyway,
and a stale item never becomes live again (versions only grow), so the live items are
popped in the same order, ties included (the items are whole tuples).
"""
from __future__ import annotations

import heapq
from typing import Callable

# no rebuild below this many items: small heaps are cheap as they are
MIN_PRUNED = 4096


class StaleHeap:
    """Pushes onto ``heap`` (a plain list: readers index and pop it with heapq), which
    it rebuilds from the items ``live(item)`` keeps once it has doubled."""

    __slots__ = ("heap", "live", "limit")

    def __init__(self, heap: list, live: Callable[[tuple], bool]):
        self.heap = heap
        self.live = live
        self.limit = MIN_PRUNED

    def push(self, item: tuple) -> None:
        heap = self.heap
        heapq.heappush(heap, item)
        if len(heap) > self.limit:
            live = self.live
            heap[:] = [item for item in heap if live(item)]  # in place: readers hold the list
            heapq.heapify(heap)
            self.limit = max(MIN_PRUNED, 2 * len(heap))

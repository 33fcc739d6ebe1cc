"""The walk over a level's waiting lists kept per node class (QueueBook._take_by_class,
the simulator's book where jobs may use only some nodes; tests/test_class_walk.py
checks it against the walk over the size lists, QueueBook._take_waiting)."""
from __future__ import annotations

import bisect
import heapq

from controller.core.protection import pinned
from controller.core.reach import PLAIN

_UNASKED = object()  # the marker of a class whose reach key the walk has not asked


def take_by_class(book, level: int, free: int, selected: list, skip_pinned: bool, reach) -> int:
    """``_take_waiting`` over the level's per-class lists (one heap merge, the same
    order and takes), where a list whose gang is beyond its class's reach (at the
    level's entry: ``reach.within``; or once a gang as large was refused) is passed
    whole: a reach only shrinks during the walk, so every waiting job there would be
    refused too (not listed: ``reach.lists_refused`` is off). Its entered jobs that
    still run are visited all the same (the walk keeps them)."""
    if min(book.waiting[level]) > free:
        return free
    lists = book.by_class[level]
    keys = reach.class_keys  # class -> its reach key (reach.class_key of one of its jobs)
    short = reach.short  # reach.out_of_reach, inlined
    running_at = None  # (size, class) -> sorted positions of the running jobs listed there
    # (head item, its place, gang, class, the list): items are unique, so the heap
    # never compares past the first field. Most lists are beyond reach at the entry,
    # most rounds: passed before the merge (each cost a refusal and heap steps there).
    # One reach a class (its gangs ascending: those its reach holds are a prefix), not
    # one a list: the rounds of a cluster with many partitions ask it for each
    heap, sums = [], reach.sums  # within's kept sums, read first: most lists share one
    held_of = None  # class -> its reach, for the classes with lists passed at the entry
    for kind, sizes in book.class_sizes[level].items():
        if sizes[0] > free:
            continue
        key = keys.get(kind, _UNASKED)
        if key is _UNASKED:
            key = keys[kind] = reach.class_key(lists[sizes[0], kind][0][2])
        held = free if key is PLAIN else min(free, sums[key] if key in sums else reach.within(key))
        for size in sizes:
            if size > held:
                if size <= free:
                    if held_of is None:
                        held_of = {}
                    held_of[kind] = held
                break
            items = lists[size, kind]
            heap.append((items[0], 0, size, kind, items))
    if held_of is not None:  # a passed list's first entered job that still runs is walked
        running_at = book.running_positions(level)
        for (size, kind), positions in running_at.items():
            if held_of.get(kind, free) < size <= free:
                items = lists[size, kind]
                heap.append((items[positions[0]], positions[0], size, kind, items))
    heapq.heapify(heap)
    while heap:
        item, at, size, kind, items = heap[0]
        if size > free:  # only a take lowers what fits
            heapq.heappop(heap)
            continue
        job = item[2]
        step = at + 1
        if skip_pinned and pinned(job):  # a pinned entered job keeps its GPUs (already set aside)
            taken = False
        elif job.running:
            reach.kept(job)
            taken = True
        else:
            key = keys.get(kind)  # asked at the entry for every list merged
            if key is not PLAIN and size >= short.get(key, size + 1):
                if running_at is None:
                    running_at = book.running_positions(level)
                positions = running_at.get((size, kind), ())
                step = positions[bisect.bisect_right(positions, at)] if positions and positions[-1] > at \
                    else len(items)
                taken = False
            else:
                taken = reach.admits(job, key)
        if taken:
            selected.append(job)
            free -= size
        if step < len(items):
            heapq.heapreplace(heap, (items[step], step, size, kind, items))
        else:
            heapq.heappop(heap)
        if free <= 0:
            break
    return free

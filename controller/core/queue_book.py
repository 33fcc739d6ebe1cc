"""The MLFQ queues as ordered structures, and the round's walk over them.

A ``QueueBook`` holds, per queue level, the running jobs in their FIFO order and
the other jobs (settled waiting, and entered: see controller.core.queues) in one
sorted list per gang size. The round's walk (``walk``) then costs what it decides,
not the number of jobs: a level whose running jobs all fit is passed in O(1), and
waiting jobs are taken from the heads of the size lists that still fit, until the
GPUs run out or no size fits. Inside a size list every job needs the same GPUs, so
the walk only ever takes a prefix of each list.

The engine builds a book from a snapshot's jobs (``QueueBook.build``: what the
controller does every round). The simulator keeps one book alive across rounds and
applies each plan's places to it (``apply_positions``), so that a round costs
O(changes x log n). Both walk the same book code, and a test checks that the two
give identical replays. Where jobs may use only some nodes, the simulator's book also
keeps (``class_function``) its waiting lists per node class, each level's waiting items
in order and its preemptable running GPUs per node: the walk passes a class its reach
refused whole (``_take_by_class``; tests/test_class_walk.py checks it against the walk
over the size lists).

Order inside a level (smaller first): settled running jobs by entry, then the rest
by ``(within, group, entry, index)``: ``within`` is the policy's waiting order
(-Gittins index for dgittins in Q_1..Q_{K-1}, else 0), ``group`` 1 = settled
waiting, 2 = entered, ``entry`` the place (settled) or the entering time (entered).
"""
from __future__ import annotations

import bisect
from itertools import count
from typing import Iterator, Optional

from controller.core.model import JobState
from controller.core.class_walk import take_by_class
from controller.core.protection import pinned
from controller.core.queues import ENTERED, SETTLED_RUNNING, SETTLED_WAITING

def _place(item: tuple) -> int:
    return item[0]


_RUNNING = None  # marker of a job in a level's running list (it has no waiting key)


class QueueBook:
    """Per level: running jobs (insertion-ordered dict) and waiting lists per gang size."""

    def __init__(self, num_levels: int):
        self.num_levels = num_levels
        self.running: list[dict[int, JobState]] = [{} for _ in range(num_levels)]
        self.running_gpus = [0] * num_levels
        # level -> gang size -> sorted list of (key, job.index, job)
        self.waiting: list[dict[int, list]] = [{} for _ in range(num_levels)]
        self.where: dict[int, tuple[int, Optional[tuple]]] = {}  # job.index -> (level, key or _RUNNING)
        self.entered: dict[int, JobState] = {}  # group 2 members, by job.index
        self.waiting_count = 0  # jobs in waiting lists (entered running jobs included)
        # running jobs that may not be preempted (JobSpec.preemptable False) keep their
        # GPUs whatever the order: the walk hands out only what they leave
        self.pinned_gpus = 0
        self.pinned_running_gpus = [0] * num_levels  # of those, in the running lists
        # the jobs counted in pinned_gpus, as they were when added: a job removed after
        # its state changed in place (started while listed as waiting) uncounts what it
        # counted; ``repin`` recounts a job whose protection began or ended
        self.pinned: set[int] = set()
        # the simulator's book also keeps its waiting lists per node class (``class_function``
        # set before any job is added; None: not kept): level -> (gang size, class) -> sorted
        # items, so the walk passes a class whose nodes hold nothing within reach whole
        self.by_class: list[dict[tuple, list]] = [{} for _ in range(num_levels)]
        self.class_of: dict[int, object] = {}  # job.index -> its class (waiting jobs)
        # level -> class -> the gang sizes of its lists, ascending: the class walk asks a
        # class's reach once and takes the prefix of its lists that reach holds
        self.class_sizes: list[dict[object, list[int]]] = [{} for _ in range(num_levels)]
        # with them, per level every waiting item in key order: ``order`` reads it unsorted
        self.merged: list[list] = [[] for _ in range(num_levels)]
        self.merged_jobs: list[list[JobState]] = [[] for _ in range(num_levels)]  # their jobs, same order
        # and per level the GPUs per node of the running jobs the walk may preempt (not
        # pinned), for OwnNodesReach's counts; job.index -> (level, placement) counted
        self.movable_on: list[dict[str, int]] = [{} for _ in range(num_levels)]
        self.movable_of: dict[int, tuple] = {}
        # per level the sum of movable_on over the levels after it (what OwnNodesReach
        # counts below the walk's level; tests/test_class_walk.py checks it)
        self.movable_below: list[dict[str, int]] = [{} for _ in range(num_levels)]
        self.top = 0.0  # above every place in use: where tails start
        self.bottom = 0.0  # below every place in use: where heads end

    # -- building -------------------------------------------------------------
    @classmethod
    def build(cls, jobs, levels, groups, entries, within, num_levels: int) -> "QueueBook":
        """A book from per-job columns (aligned with ``jobs``); ``within`` may be None.

        One numpy sort of all jobs gives every list its order (and the walk order
        ``order`` returns): the controller builds a book every round."""
        import numpy as np

        book = cls(num_levels)
        count = len(jobs)
        entries_in_use = [job.queue_entry for job in jobs if job.queue_entry is not None]
        if entries_in_use:
            book.top = max(entries_in_use) + 1.0
            book.bottom = min(entries_in_use) - 1.0
        if count == 0:
            return book
        level_column = np.asarray(levels, dtype=np.int64)
        group_column = np.asarray(groups, dtype=np.int64)
        entry_column = np.asarray(entries, dtype=float)
        within_column = np.zeros(count) if within is None else np.asarray(within, dtype=float)
        index_column = np.fromiter((job.index for job in jobs), dtype=np.int64, count=count)
        running = group_column == SETTLED_RUNNING
        # walk order: level, then settled running by (entry, index), then the others by
        # (within, group, entry, index)
        within_column = np.where(running, 0.0, within_column)
        order = np.lexsort((index_column, entry_column, group_column, within_column, ~running, level_column))
        within_list, entry_list = within_column.tolist(), entry_column.tolist()
        waiting, where, entered = book.waiting, book.where, book.entered
        walk_order = []
        for i in order.tolist():
            job = jobs[i]
            level = levels[i]
            walk_order.append(job)
            if groups[i] == SETTLED_RUNNING:
                book.add_running(job, level)
                continue
            key = (within_list[i], groups[i], entry_list[i])
            # items arrive in walk order, so each size list is already sorted
            waiting[level].setdefault(job.num_gpus, []).append((key, job.index, job))
            where[job.index] = (level, key)
            book.waiting_count += 1
            if pinned(job):
                book.pinned_gpus += job.num_gpus
                book.pinned.add(job.index)
            if groups[i] == ENTERED:
                entered[job.index] = job
        book._order = (book._version, walk_order)
        return book

    def add_running(self, job: JobState, level: int) -> None:
        """At the tail of the level's running jobs."""
        self.running[level][job.index] = job
        self._version += 1
        self.running_gpus[level] += job.num_gpus
        self.where[job.index] = (level, _RUNNING)
        if pinned(job):
            self.pinned_gpus += job.num_gpus
            self.pinned_running_gpus[level] += job.num_gpus
            self.pinned.add(job.index)
        elif self.class_function is not None:
            self._movable(job.index, level, tuple(job.placement))

    def add_waiting(self, job: JobState, level: int, group: int, entry: float, within: float = 0.0) -> None:
        """Into the level's list for the job's gang size (group 1 settled, 2 entered)."""
        key = (within, group, entry)
        bisect.insort(self.waiting[level].setdefault(job.num_gpus, []), (key, job.index, job))
        if self.class_function is not None:
            kind = self.class_of[job.index] = self.class_function(job)
            lists, place = self.by_class[level], (job.num_gpus, kind)
            if place not in lists:
                lists[place] = []
                bisect.insort(self.class_sizes[level].setdefault(kind, []), job.num_gpus)
            bisect.insort(lists[place], (key, job.index, job))
            merged, item = self.merged[level], (key, job.index, job)
            at = bisect.bisect_right(merged, item)
            merged.insert(at, item)
            self.merged_jobs[level].insert(at, job)
        self.where[job.index] = (level, key)
        self.waiting_count += 1
        self._version += 1
        if pinned(job):
            self.pinned_gpus += job.num_gpus
            self.pinned.add(job.index)
        if group == ENTERED:
            self.entered[job.index] = job

    def remove(self, job: JobState) -> None:
        """The job leaves the book (finished, or about to be put elsewhere)."""
        level, key = self.where.pop(job.index)
        self._version += 1
        counted = job.index in self.pinned
        if counted:
            self.pinned.discard(job.index)
            self.pinned_gpus -= job.num_gpus
        if key is _RUNNING:
            del self.running[level][job.index]
            self.running_gpus[level] -= job.num_gpus
            if counted:
                self.pinned_running_gpus[level] -= job.num_gpus
            elif job.index in self.movable_of:
                self._unmovable(job.index)
            return
        lists = self.waiting[level]
        items = lists[job.num_gpus]
        del items[bisect.bisect_left(items, (key, job.index))]
        if not items:
            del lists[job.num_gpus]  # only sizes with jobs stay: the walk reads min(lists)
        if self.class_function is not None:
            kinds = self.by_class[level]
            place = (job.num_gpus, self.class_of.pop(job.index))
            items = kinds[place]
            del items[bisect.bisect_left(items, (key, job.index))]
            if not items:
                del kinds[place]
                sizes = self.class_sizes[level][place[1]]
                sizes.remove(place[0])
                if not sizes:
                    del self.class_sizes[level][place[1]]
            merged = self.merged[level]
            at = bisect.bisect_left(merged, (key, job.index))
            del merged[at]
            del self.merged_jobs[level][at]
        self.waiting_count -= 1
        self.entered.pop(job.index, None)

    def repin(self, job: JobState) -> None:
        """Recount a listed job whose pinned state changed in place (``keeps_gpus`` set or
        cleared: its protection began or ended); its place does not change."""
        counted, pinned_now = job.index in self.pinned, pinned(job)
        if counted == pinned_now:
            return
        change = job.num_gpus if pinned_now else -job.num_gpus
        if pinned_now:
            self.pinned.add(job.index)
        else:
            self.pinned.discard(job.index)
        self.pinned_gpus += change
        level, key = self.where[job.index]
        if key is _RUNNING:
            self.pinned_running_gpus[level] += change
            if self.class_function is not None:
                if pinned_now:
                    self._unmovable(job.index)
                else:
                    self._movable(job.index, level, tuple(job.placement))

    def _movable(self, index: int, level: int, placement: tuple) -> None:
        self.movable_of[index] = (level, placement)
        for on in [self.movable_on[level]] + self.movable_below[:level]:
            for node, gpus in placement:
                on[node] = on.get(node, 0) + gpus

    def _unmovable(self, index: int) -> None:
        level, placement = self.movable_of.pop(index)
        for on in [self.movable_on[level]] + self.movable_below[:level]:
            for node, gpus in placement:
                left = on[node] - gpus
                if left:
                    on[node] = left
                else:
                    del on[node]

    def apply_positions(self, positions: dict, jobs_by_id) -> None:
        """Put each job whose place changed where the plan says (after the plan's
        actions are applied: ``job.running`` tells its group). ``positions`` must be in
        the order the plan assigned them (tails in walk order)."""
        where, pinned_ones, by_class = self.where, self.pinned, self.class_function is not None
        for job_id, (level, entry) in positions.items():
            job = jobs_by_id(job_id)
            was_level, was_key = where[job.index]
            items = None
            if (was_level == level and was_key is not _RUNNING and was_key[1] == SETTLED_WAITING and not job.running
                    and not by_class and job.index not in pinned_ones):
                items = self.waiting[level][job.num_gpus]
            if items is not None and len(items) > 1:
                # settled waiting before and after, at its level, not alone in its list: its
                # item moves inside the list and nothing else of remove + add_waiting changes,
                # dict orders included (the plan's picks that Slurm did not start move every
                # round: SimConfig.slurm_starts)
                del items[bisect.bisect_left(items, (was_key, job.index))]
                key = (self._within_of(job, level), SETTLED_WAITING, entry)
                bisect.insort(items, (key, job.index, job))
                del where[job.index]
                where[job.index] = (level, key)
                self._version += 1
            else:
                self.remove(job)
                if job.running:
                    self.add_running(job, level)
                else:
                    self.add_waiting(job, level, SETTLED_WAITING, entry, self._within_of(job, level))
            if entry >= self.top:
                self.top = entry + 1.0
            if entry <= self.bottom:
                self.bottom = entry - 1.0

    def rekey(self, within_of, levels) -> None:
        """Recompute the ``within`` part of every waiting key in ``levels``:
        ``within_of(level, items)`` returns the new values for a list's
        ``(key, index, job)`` items, in their order (the waiting order's inputs changed)."""
        for level in levels:
            for size, items in self.waiting[level].items():
                fresh = []
                for ((_, group, entry), index, job), within in zip(items, within_of(level, items)):
                    key = (within, group, entry)
                    fresh.append((key, index, job))
                    self.where[index] = (level, key)
                fresh.sort()
                self.waiting[level][size] = fresh
            if self.class_function is not None:
                kinds: dict[tuple, list] = {}
                for size, items in self.waiting[level].items():
                    for item in items:  # in order: each class's list stays sorted
                        kinds.setdefault((size, self.class_of[item[1]]), []).append(item)
                self.by_class[level] = kinds
                sizes: dict[object, list[int]] = {}
                for size, kind in sorted(kinds, key=lambda place: place[0]):
                    sizes.setdefault(kind, []).append(size)
                self.class_sizes[level] = sizes
                self.merged[level] = sorted(item for items in kinds.values() for item in items)
                self.merged_jobs[level] = [job for _, _, job in self.merged[level]]

    def _within_of(self, job: JobState, level: int) -> float:
        return self.within_function(job, level) if self.within_function is not None else 0.0

    within_function = None  # (job, level) -> within value; set by the executor for dgittins
    class_function = None  # job -> its node class (equal for jobs a reach judges alike); see __init__

    # -- the walk -------------------------------------------------------------
    def walk(self, capacity: int, reach=None) -> tuple[list[JobState], list[JobState]]:
        """The all-or-nothing walk with skipping, in the MLFQ order.

        Returns (preempted: settled running jobs that no longer fit, selected: jobs
        from the waiting lists that get their gang), both in walk order. Settled
        running jobs that keep their GPUs are not listed. ``reach``: where jobs may use
        only some nodes, a controller.core.reach.OwnNodesReach; a waiting job it does
        not admit (too few GPUs within its reach on its own nodes) is passed, and its
        share of the count stays for the jobs after it.
        """
        free = capacity - self.pinned_gpus
        preempted: list[JobState] = []
        selected: list[JobState] = []
        for level in range(self.num_levels):
            if reach is not None:
                reach.enter(level)
            running = self.running[level]
            if running:
                movable = self.running_gpus[level] - self.pinned_running_gpus[level]
                if movable <= free:
                    free -= movable
                else:
                    pinned_here = self.pinned_running_gpus[level] > 0
                    jobs = iter(running.values())
                    for job in jobs:
                        if pinned_here and pinned(job):
                            continue
                        if job.num_gpus <= free:
                            free -= job.num_gpus
                        else:
                            preempted.append(job)
                        if not free:  # every later job with GPUs loses them: listed in one pass
                            preempted += [job for job in jobs if job.num_gpus and not (pinned_here and pinned(job))]
            if free > 0 and self.waiting_count and self.waiting[level]:
                if reach is not None and self.class_function is not None and not reach.lists_refused:
                    free = self._take_by_class(level, free, selected, self.pinned_gpus > 0, reach)
                else:
                    free = self._take_waiting(self.waiting[level], free, selected, self.pinned_gpus > 0, reach)
        return preempted, selected

    def walk_non_preemptive(self, capacity: int, head_of_line: bool) -> tuple[list[JobState], bool]:
        """The walk of a policy that never preempts (fifo, fifo-skip), one level:
        running jobs keep their GPUs; waiting jobs are taken in key order while they
        fit (``head_of_line``: stop at the first that does not). Returns (selected,
        blocked: the walk stopped at a job that did not fit)."""
        free = capacity - sum(self.running_gpus)
        selected: list[JobState] = []
        lists = self.waiting[0]
        if not head_of_line:
            if free > 0 and lists:
                self._take_waiting(lists, free, selected, False)
            return selected, False
        cursors = {size: 0 for size, items in lists.items() if items}
        while cursors:
            size = min(cursors, key=lambda s: lists[s][cursors[s]])
            if size > free:
                return selected, True
            selected.append(lists[size][cursors[size]][2])
            free -= size
            cursors[size] += 1
            if cursors[size] >= len(lists[size]):
                del cursors[size]
        return selected, False

    @staticmethod
    def _take_waiting(lists: dict[int, list], free: int, selected: list, skip_pinned: bool, reach=None) -> int:
        """Merge the size lists in key order, taking every job that fits (and that
        ``reach``, if given, admits)."""
        if min(lists) > free:
            return free
        if len(lists) == 1 and not skip_pinned:  # one gang size: the walk takes a prefix
            ((size, items),) = lists.items()
            count = min(len(items), free // size)
            prefix = [item[2] for item in items[:count]]
            if reach is None or all(job.running or reach.plain(job) for job in prefix):
                if reach is not None:
                    for job in prefix:
                        if job.running:
                            reach.kept(job)
                selected.extend(prefix)
                return free - count * size
        cursors = {size: 0 for size, items in lists.items() if items and size <= free}
        while cursors:
            for size in ([size for size, at in cursors.items() if pinned(lists[size][at][2])] if skip_pinned else ()):
                # a pinned entered job keeps its GPUs (already set aside): pass it
                at = cursors[size] + 1
                while at < len(lists[size]) and pinned(lists[size][at][2]):
                    at += 1
                if at < len(lists[size]):
                    cursors[size] = at
                else:
                    del cursors[size]
            if not cursors:
                break
            best_size, best_key = None, None
            for size, at in cursors.items():
                key = lists[size][at]
                if best_key is None or key < best_key:
                    best_size, best_key = size, key
            job = best_key[2]
            if reach is None:
                taken = True
            elif job.running:
                reach.kept(job)
                taken = True
            else:
                taken = reach.admits(job)
            if taken:
                selected.append(job)
                free -= best_size
            at = cursors[best_size] + 1
            if at < len(lists[best_size]):
                cursors[best_size] = at
            else:
                del cursors[best_size]
            if free <= 0:
                break
            if taken:  # only a take lowers what fits
                for size in [size for size in cursors if size > free]:
                    del cursors[size]
        return free

    def _take_by_class(self, level: int, free: int, selected: list, skip_pinned: bool, reach) -> int:
        """The walk over the level's class lists (controller.core.class_walk)."""
        return take_by_class(self, level, free, selected, skip_pinned, reach)

    def running_positions(self, level: int) -> dict[tuple, list[int]]:
        """(size, class) -> sorted positions in the level's class lists of the entered jobs
        that still run."""
        positions: dict[tuple, list[int]] = {}
        lists = self.by_class[level]
        for index, job in self.entered.items():
            where_level, key = self.where[index]
            if where_level != level or not job.running or key is _RUNNING:
                continue
            place = (job.num_gpus, self.class_of[index])
            positions.setdefault(place, []).append(bisect.bisect_left(lists[place], (key, index)))
        for found in positions.values():
            found.sort()
        return positions

    # -- reading ----------------------------------------------------------------
    def level_of(self, job: JobState) -> int:
        return self.where[job.index][0]

    def group_of(self, job: JobState) -> int:
        key = self.where[job.index][1]
        return SETTLED_RUNNING if key is _RUNNING else key[1]

    def key_of(self, job: JobState) -> Optional[tuple]:
        return self.where[job.index][1]

    def jobs(self) -> Iterator[JobState]:
        """Every job in the book, in no particular order."""
        for level in range(self.num_levels):
            yield from self.running[level].values()
            for items in self.waiting[level].values():
                for _, _, job in items:
                    yield job

    def order(self) -> list[JobState]:
        """Every job in walk order (for reports and backfill: O(n log n); the result is
        kept until the book changes)."""
        if self._order is None or self._order[0] != self._version:
            ordered: list[JobState] = []
            kept = self.class_function is not None  # self.merged is kept
            for level in range(self.num_levels):  # its running jobs, then its waiting items
                ordered.extend(self.running[level].values())
                ordered.extend(self.merged_jobs[level] if kept else [job for _, _, job in sorted(
                    item for items in self.waiting[level].values() for item in items)])
            self._order = (self._version, ordered)
        return self._order[1]

    def reach_keys(self, eligible) -> dict:
        """The class walk's reach key per class (OwnNodesReach.class_keys), kept across
        rounds while the round's Eligibility is the same one (the engine keeps it while
        the nodes are: the same answers, so the same keys); a new one starts them anew."""
        if self._keys_for is not eligible or self._class_keys is None:
            self._keys_for, self._class_keys = eligible, {}
        return self._class_keys

    _keys_for = _class_keys = None

    _order = None
    _version = 0

    def order_parts(self) -> tuple[list[tuple[int, list[JobState]]], list[tuple[int, JobState]]]:
        """``order()``'s pieces without building it (only with the class lists kept):
        (per level, (where its running jobs start in ``order()``, those jobs), then
        (where its waiting items start, their jobs: merged_jobs, not copied)), and
        (place in ``order()``, job) of every listed entered job that still runs, in no
        particular order."""
        spans: list[tuple[int, list[JobState]]] = []
        at = 0
        for level in range(self.num_levels):
            running = list(self.running[level].values())
            spans.append((at, running))
            at += len(running)
            spans.append((at, self.merged_jobs[level]))
            at += len(self.merged_jobs[level])
        still = [(self.place_in_order(job, spans), job) for job in self.entered.values() if job.running]
        return spans, [(place, job) for place, job in still if place is not None]

    def place_in_order(self, job: JobState, spans: list) -> Optional[int]:
        """A listed waiting item's place in ``order()`` (``spans``: order_parts'), None
        for a job in a running list."""
        level, key = self.where[job.index]
        if key is _RUNNING:
            return None
        return spans[2 * level + 1][0] + bisect.bisect_left(self.merged[level], (key, job.index))

    def running_places(self, after: int = -1, parts=None) -> tuple[list[tuple[int, JobState]], list]:
        """(place in ``order()``, job) of every listed job that runs placed after ``after``
        (-1: all), in walk order, and order_parts' spans (only with the class lists kept;
        ``parts``: order_parts' answer where the caller has it). A running list before
        ``after`` is passed whole."""
        spans, still = parts if parts is not None else self.order_parts()
        listed: list[tuple[int, JobState]] = []
        begin = after + 1
        for first, running in spans[0::2]:
            end = first + len(running)
            if end > begin:
                listed += zip(range(first, end), running) if first >= begin else \
                    zip(range(begin, end), running[begin - first:])
        if still:  # entered jobs that still run, at their places among the waiting items
            listed += [item for item in still if item[0] > after]
            listed.sort(key=_place)
        return listed, spans

    def running_in_order(self, parts, keep, after: int = -1) -> Iterator[tuple[int, JobState]]:
        """Lazily, (place in ``order()``, job) of every listed job placed after ``after``
        that runs and that ``keep(job)`` lets through, in walk order (``parts``:
        order_parts'; equal to ``running_places()`` so filtered, tests/test_wait_audit.py
        checks it)."""
        spans, still = parts
        still = sorted((item for item in still if item[0] > after), key=_place)
        at, begin = 0, after + 1
        for first, running in spans[0::2]:
            if first + len(running) <= begin:
                continue  # wholly before ``after``
            while at < len(still) and still[at][0] < first:
                if keep(still[at][1]):
                    yield still[at]
                at += 1
            for item in zip(count(max(first, begin)), running[max(begin - first, 0):]):
                if keep(item[1]):
                    yield item
        for item in still[at:]:
            if keep(item[1]):
                yield item

    def last_running(self, parts, keep) -> int:
        """The place of the last job ``running_in_order`` yields (-1: none), read from the end."""
        spans, still = parts
        last = max((place for place, job in still if keep(job)), default=-1)
        for first, running in reversed(spans[0::2]):
            for at in range(len(running) - 1, -1, -1):
                if first + at <= last:
                    return last
                if keep(running[at]):
                    return first + at
        return last


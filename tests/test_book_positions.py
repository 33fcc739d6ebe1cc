"""QueueBook.apply_positions moves a job settled waiting before and after, at its level,
inside its list (issue 37: the plan's picks that Slurm's order did not start move every
round); the book it leaves is the one each job's removal and re-adding leaves: places,
lists, walk order, entered and pinned jobs, counts."""
from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.core.model import JobSpec, JobState  # noqa: E402
from controller.core.queue_book import QueueBook  # noqa: E402
from controller.core.queues import ENTERED, SETTLED_WAITING  # noqa: E402

LEVELS = 3


def _book(seed: int) -> tuple[QueueBook, list[JobState]]:
    rng = random.Random(seed)
    jobs = []
    book = QueueBook(LEVELS)
    for index in range(40):
        spec = JobSpec(f"j{index}", rng.choice((1, 2, 4, 8)), float(index), 100.0,
                       preemptable=rng.random() < 0.8)
        job = JobState(spec=spec, index=index)
        jobs.append(job)
        level = rng.randrange(LEVELS)
        if rng.random() < 0.3:
            job.running = True
            book.add_running(job, level)
        else:
            book.add_waiting(job, level, rng.choice((SETTLED_WAITING, ENTERED)), rng.uniform(-50.0, 50.0))
    return book, jobs


def _state(book: QueueBook) -> tuple:
    return (dict(book.where), {level: {size: [(key, index) for key, index, _ in items] for size, items in lists.items()}
                               for level, lists in enumerate(book.waiting)},
            [job.index for job in book.order()], sorted(book.entered), sorted(book.pinned), book.waiting_count,
            book.pinned_gpus, list(book.running_gpus), book.top, book.bottom)


def test_moved_in_place_as_removed_and_added():
    for seed in range(30):
        rng = random.Random(1000 + seed)
        book, jobs = _book(seed)
        reference, twins = _book(seed)
        positions = {}
        for job in rng.sample(jobs, 15):
            level = book.where[job.index][0] if rng.random() < 0.7 else rng.randrange(LEVELS)
            positions[job.spec.job_id] = (level, rng.choice((book.top + len(positions), book.bottom - 1.0,
                                                             rng.uniform(-60.0, 60.0))))
            if rng.random() < 0.2:  # the round started or stopped it
                job.running = twins[job.index].running = not job.running
        book.apply_positions(positions, {job.spec.job_id: job for job in jobs}.__getitem__)
        for job_id, (level, entry) in positions.items():  # each job out and back in
            job = twins[int(job_id[1:])]
            reference.remove(job)
            if job.running:
                reference.add_running(job, level)
            else:
                reference.add_waiting(job, level, SETTLED_WAITING, entry)
            if entry >= reference.top:
                reference.top = entry + 1.0
            if entry <= reference.bottom:
                reference.bottom = entry - 1.0
        ours, theirs = _state(book), _state(reference)
        assert ours == theirs
        # the dicts' orders too (jobs() reads the lists in their sizes' order)
        assert list(book.where.items()) == list(reference.where.items())
        assert [list(lists) for lists in book.waiting] == [list(lists) for lists in reference.waiting]

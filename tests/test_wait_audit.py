"""The wait audit's candidates read lazily from the simulator's book
(controller.replay.wait_audit.from_book: the book's kept movable GPUs, its running
lists and entered jobs that still run, read in walk order as far as asked) equal those
taken from the whole walk order (``listed``), over many rounds of adds, removes and
rekeys; the audit replays are checked the same way in tests/test_class_walk.py."""
from __future__ import annotations

import random

import pytest

from controller.core.model import JobSpec, JobState
from controller.core.queue_book import QueueBook
from controller.core.queues import ENTERED, SETTLED_WAITING
from controller.replay import wait_audit

NODES = [f"n{i}" for i in range(8)]


def _book_and_jobs(seed: int):
    rng = random.Random(seed)
    book = QueueBook(3)
    book.class_function = lambda job: job.spec.partitions
    book.within_function = lambda job, level: 0.0
    jobs = [JobState(spec=JobSpec(f"j{i}", rng.choice([1, 2, 4]), 0.0, 10.0, partitions=(rng.choice("xy"),),
                                  preemptable=rng.random() > 0.2), index=i) for i in range(120)]
    return rng, book, jobs


def _place(rng, job: JobState) -> None:
    nodes = rng.sample(NODES, 2)
    job.placement = ((nodes[0], job.num_gpus - 1), (nodes[1], 1)) if job.num_gpus > 1 else ((nodes[0], 1),)
    job.placement = tuple((node, gpus) for node, gpus in job.placement if gpus)
    job.running = True


def random_step(rng, book, jobs, listed: set[int]) -> None:
    """One random change to ``book``: a listed job leaves, or another comes in as a
    settled running job, an entered job that still runs (demoted this round) or a
    waiting one, at a random level."""
    job = rng.choice(jobs)
    if job.index in listed:
        book.remove(job)
        listed.discard(job.index)
        job.running, job.placement = False, ()
        return
    level, kind = rng.randrange(3), rng.random()
    if kind < 0.4:
        _place(rng, job)
        book.add_running(job, level)
    elif kind < 0.6:
        _place(rng, job)
        book.add_waiting(job, level, ENTERED, float(rng.randrange(50)))
    else:
        book.add_waiting(job, level, rng.choice([SETTLED_WAITING, ENTERED]), float(rng.randrange(50)))
    listed.add(job.index)


def _straight(book, free) -> tuple:
    """The candidates from the whole walk order, as the audit took them before."""
    return wait_audit.listed([(place, job) for place, job in enumerate(book.order()) if wait_audit.is_candidate(job)],
                             free)


def _compare(rng, book, free) -> int:
    """From a random waiting job's place on, passes to later ones hand out the
    candidates placed between them, and the reach is the free GPUs plus the GPUs of the
    candidates after the place (claimed ones excepted, as the audit claims them)."""
    fast, full = wait_audit.from_book(book, free)[0], _straight(book, free)
    assert fast.lowest == full.lowest
    if full.lowest is None:
        return 0
    ordered = book.order()
    waiting = [place for place, job in enumerate(ordered) if not job.running and place < full.lowest]
    if not waiting:
        return 0
    every = [(place, job) for place, job in full.remaining()]
    claimed: set[int] = set()
    for rank in sorted(rng.sample(waiting, min(3, len(waiting)))):
        fast.pass_before(rank, claimed)
        full.pass_before(rank, claimed)
        assert fast.within_reach == full.within_reach
        if not claimed:
            expected = dict(free)
            for place, job in every:
                if place > rank:
                    for node, gpus in job.placement:
                        expected[node] += gpus
            assert fast.within_reach == expected
        assert [(place, job.index) for place, job in fast.remaining()] == \
            [(place, job.index) for place, job in every if place > rank] == \
            [(place, job.index) for place, job in full.remaining()]
        later = [job for place, job in every if place > rank]
        if later and rng.random() < 0.5:  # a victim found: claimed, its GPUs stay in the reach when passed
            claimed.add(rng.choice(later).index)
    return 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_lazy_candidates_equal_those_of_the_walk_order(seed):
    rng, book, jobs = _book_and_jobs(seed)
    free = {node: rng.randrange(3) for node in NODES}
    listed: set[int] = set()
    compared = entered_running = 0
    for step in range(800):
        random_step(rng, book, jobs, listed)
        if step % 100 == 99:
            book.rekey(lambda level, items: [rng.choice([0.0, -1.0]) for _ in items], range(3))
        if step % 10 == 9:
            entered_running += sum(1 for j in book.entered.values() if j.running and j.spec.preemptable)
            compared += _compare(rng, book, free)
    assert compared > 40 and entered_running > 0


def test_the_lazy_candidates_check_fails_off_by_one(monkeypatch):
    """The check above fails when an entered running job's place is one off."""
    parts = QueueBook.order_parts

    def off_by_one(self):
        spans, still = parts(self)
        return spans, [(place + 1, job) for place, job in still]

    monkeypatch.setattr(QueueBook, "order_parts", off_by_one)
    with pytest.raises(AssertionError):
        for seed in (1, 2, 3):
            test_the_lazy_candidates_equal_those_of_the_walk_order(seed)


def _audited(walked, short: dict, refuse_every: int) -> list:
    """The (place, job) an audit-like walk visits: it passes a job its class refused as
    many GPUs, and refuses (its gang, its class) at every ``refuse_every``-th visit (the
    audit's refusals only grow stricter)."""
    seen = []
    for place, job in walked:
        if job.num_gpus >= short.get(job.spec.partitions, job.num_gpus + 1):
            continue
        seen.append((place, job.job_id))
        if len(seen) % refuse_every == 0:
            short[job.spec.partitions] = job.num_gpus
    return seen


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_open_items_visit_what_the_walk_order_visits(seed):
    """wait_audit.open_items (a long span read through its class lists, each passed whole
    once its head is refused) visits the jobs the walk over every item visits, in order,
    at the same places."""
    rng = random.Random(seed)
    book = QueueBook(1)
    book.class_function = lambda job: job.spec.partitions
    for i in range(300):
        job = JobState(spec=JobSpec(f"j{i}", rng.choice([1, 2, 4, 8]), 0.0, 10.0, partitions=(rng.choice("xyzw"),)),
                       index=i)
        book.add_waiting(job, 0, rng.choice([SETTLED_WAITING, ENTERED]), float(rng.randrange(100)))
    first, every = 17, rng.choice([2, 3, 5])
    by_walk = _audited(enumerate(book.merged_jobs[0], first), {}, every)
    short: dict = {}
    by_lists = _audited(wait_audit.open_items(book.by_class[0], book.merged[0], first,
                                              lambda job: job.num_gpus >= short.get(job.spec.partitions,
                                                                                    job.num_gpus + 1)), short, every)
    assert by_lists == by_walk and len(by_walk) < 300

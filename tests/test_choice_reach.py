"""The victim choice's reach before anybody leaves, from the simulator's book
(controller.core.victims._book_reach: the book's kept movable GPUs below the newcomer's
level and its entered jobs that still run) equals the sum over the candidate victims
after the newcomer (the running jobs the victim rule lets go, from the walk order),
every time a round asks, through starts, preemptions, demotions and protections that
end; and the check fails when the sum is one level or one place off."""
from __future__ import annotations

import pytest

from controller.core import victims
from controller.core.protection import may_preempt
from tests.test_class_walk import outcomes, replay_protected, workload


def _checked(monkeypatch) -> list:
    reach = victims._book_reach
    checked = []

    def checking(book, job, own_rank, nodes, free_gpus, still, preemptive):
        fast = reach(book, job, own_rank, nodes, free_gpus, still, preemptive)
        free = free_gpus.free
        use = free if nodes is None else nodes
        ordered = book.order()
        assert ordered[own_rank] is job
        expected = free_gpus.free_on(use) + sum(
            gpus for place, other in enumerate(ordered) if place > own_rank and may_preempt(other, preemptive)
            for node, gpus in other.placement if node in use and node in free)
        assert fast == expected
        checked.append(expected - free_gpus.free_on(use))
        return fast

    monkeypatch.setattr(victims, "_book_reach", checking)
    return checked


@pytest.mark.parametrize("policy", ["dlas", "dgittins"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_books_reach_equals_the_candidates_sum(policy, seed, monkeypatch):
    checked = _checked(monkeypatch)
    outcomes(workload(seed), policy)
    replay_protected(seed, policy, max_per_job=2)  # protections that end (repin)
    assert len(checked) > 50 and sum(1 for held in checked if held) > 10  # candidates held GPUs there


@pytest.mark.parametrize("shift", [1, -1])
def test_the_reach_check_fails_a_level_off(shift, monkeypatch):
    """The check above fails when the sum reads the kept GPUs below another level."""
    from controller.core.queue_book import QueueBook
    level_of = QueueBook.level_of

    def off(self, job):
        level = level_of(self, job)
        return min(max(level + shift, 0), self.num_levels - 1)

    reach = victims._book_reach

    def shifted(book, *args):
        book.level_of = off.__get__(book)
        try:
            return reach(book, *args)
        finally:
            del book.level_of

    monkeypatch.setattr(victims, "_book_reach", shifted)
    _checked(monkeypatch)
    with pytest.raises(AssertionError):
        for seed in (1, 2, 3):
            outcomes(workload(seed), "dlas")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_books_reach_equals_the_candidates_sum_on_random_books(seed):
    """On books built at random (running jobs at every level, entered jobs that still
    run before and after the waiting jobs), for every waiting job and node set."""
    from controller.core.placement import FreeGpus
    from tests.test_wait_audit import NODES, _book_and_jobs, random_step
    rng, book, jobs = _book_and_jobs(seed)
    free_gpus = FreeGpus({node: rng.randrange(3) for node in NODES})
    listed: set[int] = set()
    asked = before = 0
    for step in range(600):
        random_step(rng, book, jobs, listed)
        if step % 20 != 19:
            continue
        ordered = book.order()
        still = book.order_parts()[1]
        for own_rank, waiting in enumerate(ordered):
            if waiting.running:
                continue
            before += sum(1 for place, _ in still if place < own_rank)
            for nodes in (None, frozenset(NODES[:3]), frozenset(NODES[2:7])):
                use = free_gpus.free if nodes is None else nodes
                expected = free_gpus.free_on(use) + sum(
                    gpus for place, other in enumerate(ordered) if place > own_rank and may_preempt(other, True)
                    for node, gpus in other.placement if node in use)
                assert victims._book_reach(book, waiting, own_rank, nodes, free_gpus, still, True) == expected
                assert victims._book_reach(book, waiting, own_rank, nodes, free_gpus, still, False) == \
                    free_gpus.free_on(use)
                asked += 1
    assert asked > 100 and before > 0  # entered running jobs before some waiting jobs too

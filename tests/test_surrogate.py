"""The surrogate fitness (controller/partitions/surrogate.py) against the exact evaluator.

The surrogate's fluid model is exact in two cases, which pin its arithmetic down:
jobs that each need a whole partition run one after the other (start = the work
ahead / the partition's GPUs), and jobs that all fit side by side start now. On
those, every individual must score the same as layer 2; elsewhere it only ranks
(tests/test_allocator.py measures how well)."""
import itertools

import numpy as np
import pytest

from controller.partitions.exact import ExactEvaluator
from controller.partitions.model import AllocationProblem, JobTable, Objective, Partition, RunningJob
from controller.partitions.surrogate import SurrogateEvaluator

OBJECTIVES = [Objective(), Objective(2.0, 0.5, 1000.0)]


def _all_individuals(n, partitions):
    return np.array(list(itertools.product(range(partitions), repeat=n)), dtype=np.uint8)


def _both(problem, objective):
    sched = np.arange(len(problem.jobs))  # rows are already in priority order
    return (ExactEvaluator(problem, sched, objective, 10**5), SurrogateEvaluator(problem, sched, objective))


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_whole_partition_jobs_score_exactly(objective):
    # two partitions of 2 nodes x 4 GPUs; every job takes both nodes (2 workers of 4 GPUs)
    rng = np.random.default_rng(4)
    rows = [(f"j{i}", float(rng.integers(1, 50)), 8, 2, int(rng.integers(1, 4)), float(rng.integers(0, 30)), 0)
            for i in range(7)]
    running = [RunningJob("r", 1, 12.0, 8, ((0, 4), (1, 4)), remaining_s=12.0)]
    problem = AllocationProblem(0.0, [Partition("a", 2, 4), Partition("b", 2, 4)], JobTable.build(rows), running)
    exact, surrogate = _both(problem, objective)
    pop = _all_individuals(7, 2)
    approx = surrogate.fitness(pop)
    assert approx.tolist() == pytest.approx([exact.fitness(ind.astype(np.int64)) for ind in pop], rel=1e-12)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_jobs_that_fit_side_by_side_start_now(objective):
    rows = [("a", 10.0, 2, 1, 1, 5.0, 0), ("b", 3.0, 4, 2, 3, 0.0, 0), ("c", 30.0, 1, 1, 2, 9.0, 1),
            ("d", 7.0, 1, 1, 1, 0.0, 1)]
    problem = AllocationProblem(100.0, [Partition("a", 2, 4), Partition("b", 1, 8)], JobTable.build(rows))
    exact, surrogate = _both(problem, objective)
    pop = _all_individuals(4, 2)
    values = [exact.fitness(ind.astype(np.int64)) for ind in pop]
    assert surrogate.fitness(pop).tolist() == pytest.approx(values, rel=1e-12)
    # and that is the hand value: every job starts now, the longest (30 s) sets the horizon
    u_q = np.array([1 * 5.0, 3 * 0.0, 2 * 9.0, 1 * 0.0])
    c_util = (2 * 10 + 4 * 3 + 1 * 30 + 1 * 7) / (16 * 30.0)
    assert values[0] == pytest.approx(objective.combine(u_q.mean(), u_q.max(), c_util))


def test_a_batch_scores_like_its_rows_one_by_one():
    rng = np.random.default_rng(9)
    rows = [(str(i), float(rng.integers(1, 100)), int(g), 1, int(rng.integers(1, 4)), float(rng.integers(0, 50)),
             int(rng.integers(3))) for i, g in enumerate(rng.choice([1, 2, 4, 8], size=25))]
    parts = [Partition("a", 2, 8), Partition("b", 1, 8), Partition("c", 3, 4)]
    running = [RunningJob("r", 2, 40.0, 4, ((1, 4),), remaining_s=40.0)]
    problem = AllocationProblem(0.0, parts, JobTable.build(rows), running)
    _, surrogate = _both(problem, Objective())
    feasible = problem.feasible
    pop = np.array([[rng.choice(np.flatnonzero(f)) for f in feasible] for _ in range(12)], dtype=np.uint8)
    batch = surrogate.fitness(pop)
    single = [float(surrogate.fitness(ind)[0]) for ind in pop]  # smaller calls reuse the larger buffers
    assert batch.tolist() == single
    assert surrogate.fitness(pop[::-1]).tolist() == batch[::-1].tolist()
    assert len(set(batch.tolist())) > 1  # the individuals differ, so must (most of) their scores

"""The exact local search after EVO (controller/partitions/local_search.py)."""
import numpy as np
import pytest

from controller.partitions.evo import random_individual
from controller.partitions.exact import ExactEvaluator
from controller.partitions.instances import generate_partition_instance
from controller.partitions.local_search import local_search
from controller.partitions.mct import mct_assignment
from controller.partitions.model import AllocationProblem, JobTable, Objective, Partition, priority_rank
from controller.partitions.snapshot import snapshot_from_instance


class CountingEvaluator(ExactEvaluator):
    calls = 0

    def fitness(self, ind, hint=None):
        self.calls += 1
        return super().fitness(ind, hint)


def test_moves_the_job_that_sets_c_max():
    # two 1 x 8-GPU partitions, both whole-node jobs queued in the first: the second waits 10 s
    jobs = JobTable.build([("a", 10.0, 8, 1, 1, 0.0, 0), ("b", 10.0, 8, 1, 1, 0.0, 0)])
    problem = AllocationProblem(0.0, [Partition("p", 1, 8), Partition("q", 1, 8)], jobs)
    sched = np.arange(2)
    ev = CountingEvaluator(problem, sched, Objective(), 1000)
    start = np.array([0, 0])
    value = ev.fitness(start)
    best, best_val = local_search(ev, start, value, problem.feasible, sched, {}, None, moves=2)
    assert best.tolist() == [0, 1]
    assert value == pytest.approx(Objective().combine(5.0, 10.0, 0.5))  # b waits 10 s; 160 GPU-s in 16 x 20
    assert best_val == pytest.approx(0.0)  # both start now, side by side
    assert start.tolist() == [0, 0]  # the given individual is not changed in place
    assert local_search(ev, start, value, problem.feasible, sched, {}, None, moves=0)[0] is start


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_never_worse_exact_and_within_its_budget(seed):
    inst = generate_partition_instance(seed, 4, nodes_range=(3, 8), arrivals_per_node=8)
    problem = snapshot_from_instance(inst, max_pending=40, replay="none")
    prio = problem.jobs.gpus * problem.jobs.duration_s
    rank = priority_rank(prio)
    sched = np.argsort(rank, kind="stable")
    feas = problem.feasible[sched]
    record: dict = {}
    mct = mct_assignment(problem, rank, sched, record)[sched]
    alt = record.pop("alt", {})
    assert alt  # jobs with a runner-up partition: the second half of the budget has work
    ev = CountingEvaluator(problem, sched, Objective(), 10**5)
    start = random_individual(feas, np.random.default_rng(seed))
    value = ev.fitness(start)
    ev.calls = 0
    best, best_val = local_search(ev, start, value, feas, sched, alt, mct, moves=12)
    assert ev.calls <= 12
    assert best_val <= value
    assert feas[np.arange(sched.size), best].all()
    fresh = ExactEvaluator(problem, sched, Objective(), 10**5)
    assert best_val == pytest.approx(fresh.fitness(best), rel=1e-12)

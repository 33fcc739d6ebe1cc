"""Jobs beyond reach in a replay: the replay loops set aside the pending jobs the
controller sets aside (controller.core.placement.set_aside / beyond_reach: on the
nodes they may use, fewer GPUs are free or held by preemptable running jobs than they
need), so such a job no longer takes a share of the walk's cluster-wide count ahead
of another partition's job; and the lever replay and the controller (on the scripted
slurmctld, with partitions) pull the same levers for it."""
from __future__ import annotations

import random

import pytest

from bench.lever_parity import controlled, simulated
from controller.core.engine import EngineConfig
from controller.core.model import JobSpec
from controller.core.queue_book import QueueBook
from controller.replay import lever_replay, mlfq_replay, simulator
from controller.replay.cluster import SimCluster
from controller.replay.run_config import SimConfig
from controller.replay.simulator import Simulation

DLAS = EngineConfig(policy="dlas", thresholds_gpu_s=(1000.0,))
# partition a: three 4-GPU nodes; partition b: one
KINDS = ((3, ("a",), ""), (1, ("b",), ""))


def replay(incremental: bool):
    """P (a, 4 GPUs, not preemptable) holds one of a's nodes for 9000 s, so X (a, 12
    GPUs, from t=10) can start nowhere before P ends: beyond reach. V (b, 4 GPUs) is in
    queue 2 by t=250; Y (b, 4 GPUs) arrives at t=500 in queue 1. Counted cluster-wide,
    X's 12 GPUs and P's 4 leave Y none of the 16; set aside, X leaves Y its 4, and V
    yields to Y at once."""
    config = SimConfig(nodes=4, gpus_per_node=4, engine=DLAS, node_kinds=KINDS, incremental=incremental)
    specs = [JobSpec("P", 4, 0.0, 9000.0, partitions=("a",), preemptable=False),
             JobSpec("V", 4, 0.0, 9000.0, partitions=("b",)),
             JobSpec("X", 12, 10.0, 100.0, partitions=("a",)),
             JobSpec("Y", 4, 500.0, 100.0, partitions=("b",))]
    return Simulation(config).run(specs)


def starts(result) -> dict[str, tuple[float, float]]:
    return {o.job_id: (o.start_s, o.end_s) for o in result.outcomes}


@pytest.mark.parametrize("incremental", [True, False], ids=["mlfq-loop", "generic-loop"])
def test_a_job_beyond_reach_no_longer_delays_another_partitions_job(incremental):
    result = replay(incremental)
    times = starts(result)
    assert times["Y"][0] == 500.0  # V yields to it in its arrival round
    assert times["X"][0] >= 9000.0  # only once P has ended
    assert result.preemptions == 1
    assert result.waited_behind_victim == 0


def test_both_loops_give_the_same_replay():
    assert starts(replay(True)) == starts(replay(False))


def count_only_walk(monkeypatch) -> None:
    """The walk as it was before it checked a job's own nodes (OwnNodesReach): the
    cluster-wide count alone."""
    walk = QueueBook.walk
    monkeypatch.setattr(QueueBook, "walk", lambda self, capacity, reach=None: walk(self, capacity))


@pytest.mark.parametrize("incremental", [True, False], ids=["mlfq-loop", "generic-loop"])
def test_without_the_set_aside_the_walk_passes_the_job_beyond_reach(incremental, monkeypatch):
    """Without the set-aside, the walk's own check (controller.core.victims.OwnNodesReach:
    X's nodes hold 8 of its 12 GPUs within reach) passes X, and V yields to Y at once."""
    monkeypatch.setattr(mlfq_replay, "beyond_reach", lambda *args: [])
    monkeypatch.setattr(simulator, "set_aside", lambda *args, **kwargs: ([], set()))
    result = replay(incremental)
    assert starts(result)["Y"][0] == 500.0
    assert result.preemptions == 1


@pytest.mark.parametrize("incremental", [True, False], ids=["mlfq-loop", "generic-loop"])
def test_without_either_the_job_waits_behind_its_victim(incremental, monkeypatch):
    """What the loops did before they set aside what the controller sets aside, on the
    count-only walk: X's share of the count holds Y back until P ends (the next round:
    no event between), behind V, a usable victim."""
    monkeypatch.setattr(mlfq_replay, "beyond_reach", lambda *args: [])
    monkeypatch.setattr(simulator, "set_aside", lambda *args, **kwargs: ([], set()))
    count_only_walk(monkeypatch)
    result = replay(incremental)
    assert starts(result)["Y"][0] == 9000.0
    assert result.preemptions == 0


# (job id, submitted at round, GPUs, rounds of work, checkpointable, skew, partition):
# the replay above on the lever-parity cluster (4 nodes of 4 GPUs, 60 s rounds,
# threshold 3600 GPU-s: V is in queue 2 from its 15th round); X is -N 3
BEYOND_REACH = [
    (1, 0, 4, 60, False, 0.0, "a"),  # P: --no-requeue, on one of a's nodes
    (2, 0, 4, 60, True, 0.0, "b"),  # V
    (3, 1, 12, 5, True, 0.0, "a"),  # X: beyond reach until P ends
    (4, 20, 4, 5, True, 0.0, "b"),  # Y
]


def test_the_lever_replay_and_the_controller_set_aside_the_same_job(tmp_path):
    sim = simulated(workload=BEYOND_REACH, node_kinds=KINDS)
    real = controlled(len(sim), tmp_path, workload=BEYOND_REACH, node_kinds=KINDS)
    for round_id, (predicted, done) in enumerate(zip(sim, real), 1):
        assert predicted == done, f"round {round_id}"
    assert len(sim) == len(real)
    start_round = {row[2]: k for k, actions in enumerate(sim, 1) for row in actions if row[1] == "start"}
    signalled = {row[2] for actions in sim for row in actions if row[1] == "signal"}
    assert signalled == {"2"}  # V yields to Y
    assert start_round["4"] < start_round["1"] + 60 - 30  # Y runs long before P ends
    assert start_round["3"] > 60  # X only after P
    assert any(row[1] == "band" and row[2] == "3" for actions in sim for row in actions)  # X is banded all the same


def test_the_comparison_sees_a_lever_replay_that_does_not_set_aside(monkeypatch):
    """Without the set-aside (and the walk's own check of X's nodes), X's share of the
    count keeps the plan from signalling V for Y in round 21, where the controller
    signals it."""
    sim = simulated(workload=BEYOND_REACH, node_kinds=KINDS)
    monkeypatch.setattr(lever_replay, "set_aside", lambda *args, **kwargs: ([], set()))
    count_only_walk(monkeypatch)
    blind = simulated(workload=BEYOND_REACH, node_kinds=KINDS)
    assert ("r21.1.signal", "signal", "2", "USR1", "r21.1") in sim[20]
    assert not any(row[1] == "signal" for row in blind[20])


@pytest.mark.parametrize("incremental", [True, False], ids=["mlfq-loop", "generic-loop"])
def test_rounds_that_skip_the_question_give_the_replay_that_asks_it_every_round(incremental, monkeypatch):
    """SimCluster.reach_binds spares a round beyond_reach only when it would find
    nobody: a seeded two-partition workload with jobs that are not preemptable replays
    the same with the question asked every round."""
    rng = random.Random(5)
    specs = [JobSpec(f"j{k}", rng.choice((1, 2, 4, 8)), rng.uniform(0.0, 3000.0), rng.uniform(100.0, 4000.0),
                     partitions=(rng.choice("ab"),), preemptable=rng.random() < 0.7) for k in range(60)]
    config = SimConfig(nodes=4, gpus_per_node=4, engine=DLAS, node_kinds=((2, ("a",), ""), (2, ("b",), "")),
                       incremental=incremental)
    cheap = starts(Simulation(config).run(specs))
    monkeypatch.setattr(SimCluster, "reach_binds", lambda self: self.reach_matters)
    assert starts(Simulation(config).run(specs)) == cheap


def test_both_loops_set_aside_and_promote_alike():
    """With starvation promotion on, a job set aside is promoted at the next round
    that does not set it aside, in both loops (a seeded two-partition workload that
    sets jobs aside and promotes: the same starts and ends, to a float's last digits)."""
    rng = random.Random(5)
    specs = [JobSpec(f"j{k}", rng.choice((1, 2, 4, 8)), rng.uniform(0.0, 3000.0), rng.uniform(100.0, 4000.0),
                     partitions=(rng.choice("ab"),), preemptable=rng.random() < 0.7) for k in range(60)]
    engine = EngineConfig(policy="dlas", thresholds_gpu_s=(1000.0,), promote_knob=2.0)
    results = [Simulation(SimConfig(nodes=4, gpus_per_node=4, engine=engine, incremental=incremental,
                                    node_kinds=((2, ("a",), ""), (2, ("b",), "")))).run(specs)
               for incremental in (True, False)]
    assert results[0].promotions == results[1].promotions > 0
    fast, generic = (starts(result) for result in results)
    assert fast.keys() == generic.keys()
    for job_id, (start_s, end_s) in fast.items():
        assert generic[job_id] == (pytest.approx(start_s, abs=1e-6), pytest.approx(end_s, abs=1e-6)), job_id

"""The MLFQ replay with a queue book kept across rounds gives the same replay as the
generic loop, where the engine rebuilds the queues from the jobs every round (what
the controller does)."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from controller.core.engine import EngineConfig
from controller.core.gittins import ServiceDistribution
from controller.core.model import JobSpec
from controller.replay.simulator import SimConfig, Simulation
from controller.replay.traces import load_trace

from tests.conftest import FIXTURE_TRACES


def replay(specs, incremental, **kwargs):
    engine = kwargs.pop("engine")
    result = Simulation(SimConfig(incremental=incremental, engine=engine, **kwargs)).run(specs)
    return [(o.job_id, o.start_s, o.end_s, o.preemptions) for o in result.outcomes], result.preemptions


def assert_same(specs, **kwargs):
    fast, fast_preemptions = replay(specs, True, **kwargs)
    slow, slow_preemptions = replay(specs, False, **kwargs)
    assert fast_preemptions == slow_preemptions
    for a, b in zip(fast, slow):
        assert a[0] == b[0] and a[3] == b[3]
        assert a[1] == pytest.approx(b[1], abs=1e-6) and a[2] == pytest.approx(b[2], abs=1e-6)


# submit times on a coarse grid, so that several jobs arrive at once
rows = st.lists(st.tuples(st.sampled_from([1, 1, 2, 4, 8]), st.integers(0, 40).map(lambda t: 75 * t),
                          st.integers(1, 4000), st.floats(0, 0.9)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows, st.sampled_from(["dlas", "dgittins", "fifo", "fifo-skip"]), st.sampled_from(["count", "consolidate", "spread"]),
       st.sampled_from([(200.0,), (200.0, 900.0), (50.0, 400.0, 3000.0)]), st.booleans())
def test_incremental_equals_generic(rows, policy, placement, thresholds, given_service):
    specs = [JobSpec(f"j{i}", g, float(t), float(d), skew=s) for i, (g, t, d, s) in enumerate(rows)]
    service = ServiceDistribution([100, 300, 800, 2000, 9000]) if given_service else None
    assert_same(specs, nodes=2, gpus_per_node=8, service=service, preempt_pause_s=3.0,
                engine=EngineConfig(policy=policy, placement=placement, thresholds_gpu_s=thresholds))


@pytest.mark.parametrize("policy", ["dlas", "dgittins", "fifo", "fifo-skip"])
def test_incremental_equals_generic_on_itp_cluster10(policy):
    """A public trace (260 jobs, 2 x 8 GPUs), the parity benchmark's settings."""
    specs = load_trace(FIXTURE_TRACES / "itp_cluster10_tiresias.csv")
    assert_same(specs, nodes=2, gpus_per_node=8,
                engine=EngineConfig(policy=policy, placement="count", thresholds_gpu_s=(3250.0, 7200.0)))


@pytest.mark.parametrize("incremental", [True, False])
def test_demotion_at_the_exact_crossing(incremental):
    """A 4-GPU job crosses 100 GPU-s at t = 25 s exactly; the 1-s-old job of its own
    queue waits until then (no preemption inside a queue), then starts as the other
    one drops to queue 2 (the reference simulator would wake up later)."""
    specs = [JobSpec("a", 4, 0.0, 1000.0), JobSpec("b", 4, 1.0, 10.0)]
    result = Simulation(SimConfig(nodes=1, gpus_per_node=4, incremental=incremental,
                                  engine=EngineConfig(policy="dlas", thresholds_gpu_s=(100.0,),
                                                      placement="count"))).run(specs)
    by_id = {o.job_id: o for o in result.outcomes}
    assert by_id["b"].start_s == pytest.approx(25.0, abs=1e-9)
    assert by_id["b"].end_s == pytest.approx(35.0, abs=1e-9)
    assert by_id["a"].preemptions == 1 and by_id["a"].end_s == pytest.approx(1010.0, abs=1e-9)


def test_jobs_without_a_checkpoint_contract_replay_the_same_in_both_loops():
    """A job that may not be preempted (JobSpec.preemptable False) is counted as pinned
    from the moment it runs: the kept book must not lose that count when the job moves
    from its waiting list to a running list (it did: every such workload differed)."""
    import random

    rng = random.Random(3)
    for _ in range(20):
        specs = [JobSpec(f"j{i}", rng.choice([1, 2, 4, 8]), float(75 * rng.randint(0, 40)),
                         float(rng.randint(1, 4000)), preemptable=rng.random() < 0.7) for i in range(40)]
        assert_same(specs, nodes=2, gpus_per_node=8,
                    engine=EngineConfig(policy="dlas", placement="count", thresholds_gpu_s=(200.0, 900.0)))

"""Simulator invariants (hypothesis), determinism, preemption cost, oversize jobs."""
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from controller.core.engine import EngineConfig
from controller.core.model import InputError, JobSpec
from controller.core.policies import POLICIES
from controller.replay.simulator import SimConfig, Simulation


class CheckedSimulation(Simulation):
    """Wraps the engine to check every plan against the cluster it was made for."""

    def __init__(self, config):
        super().__init__(config)
        inner = self.engine.step
        self.starts = []

        def checked(snapshot):
            plan = inner(snapshot)
            free = dict(snapshot.free_by_node)
            # an MLFQ replay passes its queue book instead of the job list
            jobs = snapshot.jobs if snapshot.queue_book is None else list(snapshot.queue_book.jobs())
            by_id = {j.job_id: j for j in jobs}
            for action in plan.actions:
                if action.kind == "preempt":
                    for node, gpus in by_id[action.job_id].placement:
                        free[node] += gpus
            for action in plan.of_kind("start"):
                job = by_id[action.job_id]
                assert not job.running
                # all-or-nothing: a start places exactly the gang
                assert sum(g for _, g in action.placement) == job.num_gpus
                for node, gpus in action.placement:
                    free[node] -= gpus
                self.starts.append(action.job_id)
            # GPUs in use never exceed capacity, on any node
            assert all(v >= 0 for v in free.values()), free
            return plan

        self.engine.step = checked


job_lists = st.lists(
    st.tuples(st.integers(1, 8), st.integers(0, 500), st.integers(1, 400), st.floats(0, 0.9)),
    min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job_lists, st.sampled_from(sorted(POLICIES)), st.sampled_from(["count", "consolidate", "spread"]),
       st.sampled_from([None, 7.0]), st.sampled_from([0.0, 5.0]), st.sampled_from([math.inf, 1.5]))
def test_invariants(rows, policy, placement, interval, cost, knob):
    specs = [JobSpec(f"j{i}", g, float(t), float(d), skew=s) for i, (g, t, d, s) in enumerate(rows)]
    config = SimConfig(nodes=2, gpus_per_node=4, round_interval_s=interval, preempt_pause_s=cost,
                       engine=EngineConfig(policy=policy, placement=placement, thresholds_gpu_s=(200.0, 800.0),
                                           promote_knob=knob, quantum_s=30))
    sim = CheckedSimulation(config)
    result = sim.run(specs)
    assert len(result.outcomes) == len(specs)  # every job finishes
    busy_peak = max((busy for _, _, busy in result.timeline), default=0)
    assert busy_peak <= 8
    for o in result.outcomes:
        assert o.jct_s >= o.duration_s - 1e-6  # JCT >= duration
        assert o.start_s >= o.submit_s - 1e-9
        # attained service = GPUs x time run
        assert o.attained_gpu_s == pytest.approx(o.num_gpus * o.executed_s, rel=1e-9, abs=1e-6)
        # time run = useful work + preemption overhead (+ slow-down when spread)
        assert o.executed_s >= o.duration_s - 1e-6
    if cost == 0:
        assert result.preemption_overhead_s == 0
    else:
        assert result.preemption_overhead_s == pytest.approx(cost * sum(o.preemptions for o in result.outcomes))


def test_deterministic_byte_identical(tmp_path):
    from controller.replay.results import summarize, write_job_csv
    from controller.replay.synthetic import generate

    jobs = generate(200, seed=3, total_gpus=16, gpus_per_node=8, load=1.3)
    outputs = []
    for run in range(2):
        result = Simulation(SimConfig(nodes=2, gpus_per_node=8, engine=EngineConfig(policy="dgittins"))).run(jobs)
        path = tmp_path / f"run{run}.csv"
        write_job_csv(path, result)
        outputs.append((path.read_bytes(), summarize(result)))
    assert outputs[0] == outputs[1]


def test_preemption_cost_charged_per_preemption():
    jobs = [JobSpec("long", 4, 0, 1000), JobSpec("short", 4, 10, 5)]
    config = SimConfig(nodes=1, gpus_per_node=4, preempt_pause_s=3, preempt_resume_s=7,
                       engine=EngineConfig(policy="dlas", thresholds_gpu_s=(30,), placement="count"))
    result = Simulation(config).run(jobs)
    by_id = {o.job_id: o for o in result.outcomes}
    assert result.preemptions == 1 and result.preemption_overhead_s == 10
    # long ran 10 s (40 GPU-s: queue 2), yielded 5 s to short, then paid 10 s of
    # overhead before finishing its last 990 s
    assert by_id["short"].end_s == 15
    assert by_id["long"].end_s == pytest.approx(15 + 10 + 990)


def test_slowdown_when_sensitive_job_is_spread():
    # a, b, c leave 1 + 1 + 2 GPUs free on three nodes when the 4-GPU VGG job arrives
    jobs = [JobSpec("a", 3, 0, 100), JobSpec("b", 3, 0, 100), JobSpec("c", 2, 0, 500),
            JobSpec("vgg", 4, 1, 100, skew=0.7)]
    base = dict(nodes=3, gpus_per_node=4, spread_speed=0.5)
    spread = Simulation(SimConfig(**base, engine=EngineConfig(policy="fifo-skip", placement="spread"))).run(jobs)
    vgg = {o.job_id: o for o in spread.outcomes}["vgg"]
    assert (vgg.start_s, vgg.end_s) == (1, pytest.approx(201))  # spread over 3 nodes: half speed
    packed = Simulation(SimConfig(**base, engine=EngineConfig(policy="fifo-skip", placement="consolidate"))).run(jobs)
    vgg = {o.job_id: o for o in packed.outcomes}["vgg"]
    assert (vgg.start_s, vgg.end_s) == (100, 200)  # waited for one whole node, full speed


def test_oversize_job_is_an_error_or_dropped():
    jobs = [JobSpec("big", 64, 0, 10), JobSpec("ok", 1, 0, 10)]
    with pytest.raises(InputError, match="job big: needs 64 GPUs but the cluster has 16"):
        Simulation(SimConfig(nodes=2, gpus_per_node=8)).run(jobs)
    result = Simulation(SimConfig(nodes=2, gpus_per_node=8, drop_oversize=True)).run(jobs)
    assert result.dropped_oversize == ["big"] and len(result.outcomes) == 1


def test_round_interval_delays_starts_to_the_grid():
    jobs = [JobSpec("a", 1, 0.5, 10), JobSpec("b", 1, 3.2, 4)]
    result = Simulation(SimConfig(nodes=1, gpus_per_node=1, round_interval_s=5,
                                  engine=EngineConfig(policy="fifo", placement="count"))).run(jobs)
    by_id = {o.job_id: o for o in result.outcomes}
    assert by_id["a"].start_s == 5 and by_id["a"].end_s == 15
    assert by_id["b"].start_s == 15 and by_id["b"].end_s == 19


@pytest.mark.parametrize("kwargs, field", [({"nodes": 0}, "nodes"), ({"gpus_per_node": -1}, "gpus-per-node"),
                                           ({"round_interval_s": 0}, "round-interval-s")])
def test_bad_cluster_config(kwargs, field):
    with pytest.raises(InputError, match=field):
        SimConfig(**kwargs)

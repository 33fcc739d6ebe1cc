"""The simulator charges what the controller costs, with the controller's own protection rules."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from controller.core.gittins import ServiceDistribution

from controller.core.engine import Engine, EngineConfig
from controller.core.model import InputError, JobSpec, JobState, Node, Snapshot
from controller.core.protection import protection


def _round(config: EngineConfig, jobs, now: float):
    nodes = [Node("n0", 4, 4 - sum(j.num_gpus for j in jobs if j.running))]
    return Engine(config).step(Snapshot(now_s=now, jobs=jobs, nodes=nodes))


def _running_long_job(**fields):
    """A 4-GPU job past the first threshold (queue 2), running since run_start_s."""
    job = JobState(JobSpec("old", 4, 0.0), index=0, attained_gpu_s=8000.0, queue_service_gpu_s=8000.0,
                   running=True, placement=(("n0", 4),), first_start_s=0.0, **fields)
    newcomer = JobState(JobSpec("new", 4, 1900.0), index=1)
    return job, newcomer


@pytest.mark.parametrize("policy", ["dlas", "las"])
def test_engine_preempts_an_unprotected_victim(policy):
    old, new = _running_long_job(run_start_s=0.0)
    plan = _round(EngineConfig(policy=policy, preempt_min_runtime_s=60.0, preempt_max_per_job=2), [old, new], 2000.0)
    assert [a.job_id for a in plan.of_kind("preempt")] == ["old"]
    assert [a.job_id for a in plan.of_kind("start")] == ["new"]


@pytest.mark.parametrize("policy", ["dlas", "las"])
def test_engine_never_plans_a_victim_that_ran_too_short(policy):
    old, new = _running_long_job(run_start_s=1990.0)  # ran 10 s of this run
    plan = _round(EngineConfig(policy=policy, preempt_min_runtime_s=60.0), [old, new], 2000.0)
    assert not plan.of_kind("preempt") and not plan.of_kind("start")
    assert "preempt_min_runtime_s" in protection(old, 2000.0, 60.0)


@pytest.mark.parametrize("policy", ["dlas", "las"])
def test_engine_never_plans_a_victim_preempted_too_often(policy):
    old, new = _running_long_job(run_start_s=0.0, preemptions=2)
    plan = _round(EngineConfig(policy=policy, preempt_max_per_job=2), [old, new], 2000.0)
    assert not plan.of_kind("preempt") and not plan.of_kind("start")
    # one fewer preemption so far: it may go
    old, new = _running_long_job(run_start_s=0.0, preemptions=1)
    plan = _round(EngineConfig(policy=policy, preempt_max_per_job=2), [old, new], 2000.0)
    assert [a.job_id for a in plan.of_kind("preempt")] == ["old"]


def test_engine_protection_settings_are_bounded():
    with pytest.raises(InputError, match="preempt_min_runtime_s value -1"):
        EngineConfig(preempt_min_runtime_s=-1.0)
    with pytest.raises(InputError, match="preempt_max_per_job value -1"):
        EngineConfig(preempt_max_per_job=-1)


# -- the simulator's costs, on a hand-computed case ----------------------------------
# One 4-GPU node, dlas with one threshold of 3,600 GPU-s. A (4 GPUs, 10,000 s) runs
# from 0 and drops to queue 2 at 900 s; B (4 GPUs, 100 s) arrives at 2,000 s in
# queue 1 and preempts A. With no costs B runs 2,000..2,100 and A ends at 10,100.

from controller.core.engine import EngineConfig as _EngineConfig  # noqa: E402
from controller.replay.simulator import SimConfig, Simulation  # noqa: E402


def _two_jobs(incremental=True, preempt_min_runtime_s=0.0, preempt_max_per_job=None, **sim):
    engine = _EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,), preempt_min_runtime_s=preempt_min_runtime_s,
                           preempt_max_per_job=preempt_max_per_job)
    config = SimConfig(nodes=1, gpus_per_node=4, engine=engine, incremental=incremental, **sim)
    result = Simulation(config).run([JobSpec("A", 4, 0.0, 10000.0), JobSpec("B", 4, 2000.0, 100.0)])
    return {o.job_id: (o.start_s, o.end_s, o.preemptions) for o in result.outcomes}


def test_no_costs_hand_case():
    assert _two_jobs() == {"A": (0.0, 10100.0, 1), "B": (2000.0, 2100.0, 0)}


def test_grace_period_delays_the_preemptor_by_exactly_grace_s():
    # A keeps its GPUs 30 s after the signal: B starts at 2,030; A's 30 s after the
    # signal's checkpoint are lost, so A ends 30 s later too
    assert _two_jobs(preempt_grace_s=30.0) == {"A": (0.0, 10130.0, 1), "B": (2030.0, 2130.0, 0)}


def test_grace_work_kept_loses_nothing_and_a_victim_may_finish_in_its_grace():
    # the job checkpoints on its own: only the 30 s wait of B remains
    assert _two_jobs(preempt_grace_s=30.0, grace_work_kept=True) == {"A": (0.0, 10100.0, 1),
                                                                      "B": (2030.0, 2130.0, 0)}
    engine = _EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,))
    config = SimConfig(nodes=1, gpus_per_node=4, engine=engine, preempt_grace_s=30.0, grace_work_kept=True)
    result = Simulation(config).run([JobSpec("A", 4, 0.0, 2010.0), JobSpec("B", 4, 2000.0, 100.0)])
    # A's work ends 10 s into its grace period: it finishes, never requeued; B starts then
    assert {o.job_id: (o.start_s, o.end_s, o.preemptions) for o in result.outcomes} == {
        "A": (0.0, 2010.0, 0), "B": (2010.0, 2110.0, 0)}
    assert result.preemptions == 0


def test_requeue_delay_holds_the_victim_back():
    # a delay shorter than B's run changes nothing; a longer one delays A's restart
    assert _two_jobs(preempt_grace_s=30.0, requeue_delay_s=50.0)["A"] == (0.0, 10130.0, 1)
    # released at 2,030, eligible at 2,230 (B ended at 2,130); 8,000 s of work left: ends 10,230
    assert _two_jobs(preempt_grace_s=30.0, requeue_delay_s=200.0)["A"] == (0.0, 10230.0, 1)


def test_min_runtime_delays_the_preemption_until_the_victim_ran_long_enough():
    assert _two_jobs(preempt_min_runtime_s=2500.0) == {"A": (0.0, 10100.0, 1), "B": (2500.0, 2600.0, 0)}


def test_max_per_job_zero_means_never_preempted():
    assert _two_jobs(preempt_max_per_job=0) == {"A": (0.0, 10000.0, 0), "B": (10000.0, 10100.0, 0)}


def test_round_interval_and_grace_on_the_grid():
    # rounds every 60 s: the signal at 2,040, the requeue at the round of 2,100 (B starts
    # there), A eligible from 2,300, started at the round of 2,340 with 7,960 s left
    result = _two_jobs(round_interval_s=60.0, preempt_grace_s=30.0, requeue_delay_s=200.0)
    assert result == {"A": (0.0, 10300.0, 1), "B": (2100.0, 2200.0, 0)}


def test_one_victim_per_waiting_job_through_the_grace_period():
    # A and B (4 GPUs each) drop to queue 2 at 900 s; E runs on the third node from
    # 1,200 s. C (4 GPUs) arrives at 2,000 s: B is signalled (300 s grace). At 2,100 s
    # E drops to queue 2 too, and that round must not preempt E for C: B's GPUs in
    # its grace period are C's (counting them as busy preempted a second job).
    engine = _EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,))
    config = SimConfig(nodes=3, gpus_per_node=4, engine=engine, round_interval_s=10.0, preempt_grace_s=300.0)
    result = Simulation(config).run([JobSpec("A", 4, 0.0, 10000.0), JobSpec("B", 4, 0.0, 10000.0),
                                     JobSpec("E", 4, 1200.0, 5000.0), JobSpec("C", 4, 2000.0, 100.0)])
    outcomes = {o.job_id: o for o in result.outcomes}
    assert {j: o.preemptions for j, o in outcomes.items()} == {"A": 0, "B": 1, "E": 0, "C": 0}
    assert outcomes["C"].start_s == 2300.0


def _replays(specs, policy, engine_options=None, **sim):
    """Both loops on the same workload: [(job, start, end, preemptions)], total preemptions,
    and how many replays went through the fast loop (controller.replay.mlfq_replay)."""
    import controller.replay.mlfq_replay as mlfq_replay

    results, fast_calls = [], []
    real = mlfq_replay.run_mlfq

    def counted(*args):
        fast_calls.append(1)
        return real(*args)

    mlfq_replay.run_mlfq = counted
    try:
        for incremental in (True, False):
            engine = _EngineConfig(policy=policy, **(engine_options or {}))
            result = Simulation(SimConfig(engine=engine, incremental=incremental, **sim)).run(specs)
            results.append(([(o.job_id, o.start_s, o.end_s, o.preemptions) for o in result.outcomes],
                            result.preemptions))
    finally:
        mlfq_replay.run_mlfq = real
    return results, len(fast_calls)


def _assert_same(fast, generic):
    """The same decisions (who, how often preempted) and the same times, to float noise."""
    assert fast[1] == generic[1]
    assert [(j, p) for j, _, _, p in fast[0]] == [(j, p) for j, _, _, p in generic[0]]
    for (_, start, end, _), (_, start_g, end_g, _) in zip(fast[0], generic[0]):
        assert start == pytest.approx(start_g, abs=1e-6) and end == pytest.approx(end_g, abs=1e-6)


@pytest.mark.parametrize("policy", ["dlas", "dgittins", "fifo"])
def test_both_replay_loops_agree_with_the_costs_on(policy):
    specs = [JobSpec(f"j{i}", [1, 2, 4, 8][i % 4], 37.0 * i, 50.0 + (i * 7919) % 3000) for i in range(60)]
    (fast, generic), fast_calls = _replays(
        specs, policy, dict(thresholds_gpu_s=(400.0, 4000.0), preempt_min_runtime_s=120.0, preempt_max_per_job=3),
        nodes=2, gpus_per_node=8, preempt_grace_s=30.0, requeue_delay_s=10.0)
    assert fast_calls == 1  # the incremental setting really ran the fast loop, with the costs
    _assert_same(fast, generic)
    assert max(p for *_, p in generic[0]) <= 3  # preempt_max_per_job holds in the replay
    if policy != "fifo":
        assert generic[1] > 10  # the costs were charged on many preemptions


# submit times on a coarse grid (several jobs arrive at once), as in tests/test_mlfq_replay.py
_rows = st.lists(st.tuples(st.sampled_from([1, 1, 2, 4, 8]), st.integers(0, 40).map(lambda t: 75 * t),
                           st.integers(1, 4000), st.floats(0, 0.9), st.booleans()), min_size=1, max_size=60)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows, st.sampled_from(["dlas", "dgittins"]), st.sampled_from(["count", "consolidate", "spread"]),
       st.sampled_from([(200.0,), (200.0, 900.0), (50.0, 400.0, 3000.0)]), st.booleans(),
       st.sampled_from([0.0, 7.5, 30.0, 75.0]), st.sampled_from([0.0, 10.0, 75.0, 200.0]),
       st.sampled_from([0.0, 60.0, 150.0]), st.sampled_from([None, 0, 1, 3]), st.booleans())
def test_fast_loop_charges_the_costs_as_the_generic_loop(rows, policy, placement, thresholds, given_service, grace_s,
                                                         delay_s, min_runtime_s, max_per_job, grace_work_kept):
    """Random workloads, every cost on and off: the fast loop gives the generic loop's replay
    (some jobs without a checkpoint contract: JobSpec.preemptable False)."""
    specs = [JobSpec(f"j{i}", g, float(t), float(d), skew=s, preemptable=p or i % 3 != 0)
             for i, (g, t, d, s, p) in enumerate(rows)]
    (fast, generic), fast_calls = _replays(
        specs, policy, dict(placement=placement, thresholds_gpu_s=thresholds, preempt_min_runtime_s=min_runtime_s,
                            preempt_max_per_job=max_per_job),
        nodes=2, gpus_per_node=8, preempt_pause_s=3.0, preempt_grace_s=grace_s, requeue_delay_s=delay_s,
        grace_work_kept=grace_work_kept,
        service=ServiceDistribution([100, 300, 800, 2000, 9000]) if given_service else None)
    assert fast_calls == 1
    _assert_same(fast, generic)


def test_no_grace_period_hands_the_gpus_over_at_once():
    # grace 0, requeue delay 200 s: B starts at 2,000 exactly (not a float step later);
    # A lost nothing, is eligible again at 2,200 (B ended at 2,100): 8,000 s left, ends 10,200
    for incremental in (True, False):
        assert _two_jobs(incremental=incremental, requeue_delay_s=200.0) == {"A": (0.0, 10200.0, 1),
                                                                            "B": (2000.0, 2100.0, 0)}


def test_protection_ends_at_a_float_the_rule_agrees_with():
    """The simulators wake at run_time_over_s: there the engine's rule lets the job go, one
    float earlier it does not (a plain sum can round below the rule's own comparison)."""
    import math
    import random

    from controller.core.protection import run_time_over_s, why_protected

    rng = random.Random(7)
    for _ in range(2000):
        start, minimum = rng.uniform(0, 1e6), rng.choice([rng.uniform(0.1, 600), 60.0, 30.0])
        over = run_time_over_s(start, minimum)
        assert abs(over - (start + minimum)) <= 4 * math.ulp(start + minimum)
        assert why_protected(start, 0, over, minimum, None) == ""
        assert why_protected(start, 0, math.nextafter(over, -math.inf), minimum, None) != ""


def test_cli_flags_charge_the_costs_and_reject_bad_values(tmp_path):
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    trace = tmp_path / "two.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\nA,0,10000,4\nB,2000,100,4\n")

    def simulate(*flags):
        return subprocess.run([sys.executable, "-m", "controller.cli.main", "simulate", "--trace", str(trace),
                               "--nodes", "1", "--gpus-per-node", "4", "--policy", "dlas", "--quiet", *flags],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)

    base = json.loads(simulate("--json").stdout)["summaries"][0]
    costly = simulate("--json", "--preempt-grace-s", "30", "--requeue-delay-s", "200")
    assert costly.returncode == 0, costly.stderr
    # A ends 130 s later (30 s grace lost + 100 s more delay), B starts 30 s later: +160 s over 2 jobs
    assert json.loads(costly.stdout)["summaries"][0]["avg_jct_s"] == pytest.approx(base["avg_jct_s"] + 80.0)
    never = json.loads(simulate("--json", "--preempt-max-per-job", "0").stdout)["summaries"][0]
    assert never["preemptions"] == 0 and base["preemptions"] == 1
    # --like-controller: the controller's interval, grace, settle (hand case of
    # test_round_interval_and_grace_on_the_grid: A ends 10,300, B 2,200 - 2,000)
    config = tmp_path / "tiresias.yaml"
    config.write_text("interval_s: 60\npreempt_grace_s: 30\nrequeue_settle_s: 200\npreempt_min_runtime_s: 0\n")
    like = simulate("--json", "--like-controller", str(config))
    assert like.returncode == 0, like.stderr
    assert json.loads(like.stdout)["summaries"][0]["avg_jct_s"] == pytest.approx((10300.0 + 200.0) / 2)
    # an explicit flag wins: no requeue delay, A starts at the round after B ends (2,220)
    like = simulate("--json", "--like-controller", str(config), "--requeue-delay-s", "0")
    assert json.loads(like.stdout)["summaries"][0]["avg_jct_s"] == pytest.approx((10180.0 + 200.0) / 2)
    for flag, value in (("--preempt-grace-s", "-1"), ("--requeue-delay-s", "1e99"),
                        ("--preempt-min-runtime-s", "nan"), ("--preempt-max-per-job", "-2")):
        proc = simulate(flag, value)
        assert proc.returncode == 2 and flag in proc.stderr and value in proc.stderr

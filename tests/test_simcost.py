"""The simulator charges what the controller costs, with the controller's own protection rules."""
import pytest

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


@pytest.mark.parametrize("policy", ["dlas", "dgittins", "fifo"])
def test_both_replay_loops_agree_with_the_costs_on(policy):
    # (with these costs both settings run the generic loop: SimConfig.charges_handoff)
    specs = [JobSpec(f"j{i}", [1, 2, 4, 8][i % 4], 37.0 * i, 50.0 + (i * 7919) % 3000) for i in range(60)]
    results = []
    for incremental in (True, False):
        engine = _EngineConfig(policy=policy, thresholds_gpu_s=(400.0, 4000.0), preempt_min_runtime_s=120.0,
                               preempt_max_per_job=3)
        config = SimConfig(nodes=2, gpus_per_node=8, engine=engine, incremental=incremental,
                           preempt_grace_s=30.0, requeue_delay_s=10.0)
        result = Simulation(config).run(specs)
        results.append([(o.job_id, o.start_s, o.end_s, o.preemptions) for o in result.outcomes])
    assert results[0] == results[1]
    assert max(p for *_, p in results[0]) <= 3  # preempt_max_per_job holds in the replay


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

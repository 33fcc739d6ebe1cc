"""controller.replay.slurm_order: Slurm, not the plan, starts the replayed controller's
jobs (SimConfig.slurm_starts): priority order, and backfill reserving nodes for a
waiting job by the running jobs' time limits."""
from controller.core.engine import EngineConfig
from controller.core.model import JobSpec
from controller.replay.simulator import SimConfig, Simulation

JOBS = [JobSpec("long", 4, 0.0, 100.0), JobSpec("gang", 8, 1.0, 10.0), JobSpec("small", 1, 2.0, 10.0)]


def starts(**config):
    cfg = SimConfig(nodes=2, gpus_per_node=4, engine=EngineConfig(policy="dlas", thresholds_gpu_s=(1e9,)), **config)
    result = Simulation(cfg).run(JOBS)
    return {o.job_id: o.start_s for o in result.outcomes}


def test_the_plan_lets_a_small_job_pass_a_waiting_gang():
    assert starts()["small"] < 10  # the engine's walk skips the gang that cannot start


def test_slurm_with_time_limits_reserves_the_nodes_for_the_gang_ahead_of_the_small_job():
    got = starts(slurm_starts=True, time_limit_s=3600.0)
    assert got["gang"] >= 100.0 and got["small"] >= got["gang"], got  # backfill: nothing ends before the reservation


def test_slurm_without_time_limits_starts_the_small_job_at_once():
    got = starts(slurm_starts=True)
    assert got["small"] < 10 and got["gang"] >= 100.0, got


def test_simulate_like_controller_with_slurm_starts_from_the_command_line(tmp_path, capsys):
    import json

    from controller.cli.main import main

    config = tmp_path / "c.yaml"
    config.write_text("interval_s: 1\npreempt_grace_s: 10\n")
    base = ["simulate", "--trace", "tests/fixtures/traces/tiresias_60_job.csv", "--nodes", "4", "--gpus-per-node", "4",
            "--policy", "dlas", "--like-controller", str(config), "--json", "--quiet"]
    results = []
    for extra in ([], ["--slurm-starts"], ["--slurm-starts", "--time-limit-min", "60"]):
        assert main(base + extra) == 0
        results.append(json.loads(capsys.readouterr().out))
    assert len({json.dumps(r, sort_keys=True) for r in results}) == 3  # each flag changes the replay

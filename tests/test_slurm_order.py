"""controller.replay.slurm_order: Slurm, not the plan, starts the replayed controller's
jobs (SimConfig.slurm_starts): priority order, and backfill reserving nodes for a
waiting job by the running jobs' time limits."""
import pytest

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


def _walk_as_written_first(snapshot, levels, limit_s, per_node):
    """Slurm's starts the straightforward way (SlurmOrder before issue 37): every node
    tested with node_fits for every pending job, every job tried, every reservation
    sorted afresh."""
    from controller.core.placement import node_fits
    from controller.replay.slurmctld import by_band, gang, pick_nodes, reservation, start_walk

    on_node = {node.name: [] for node in snapshot.nodes}
    for job in snapshot.jobs:
        if job.running:
            for node, gpus in job.placement:
                on_node[node].append((job.run_start_s + (limit_s or 0.0), gpus))
    free = snapshot.free_gpus_by_node()
    node_of = {node.name: node for node in snapshot.nodes}
    usable_now, starts = [[]], []

    def place(job, reserved):
        usable_now[0] = [node for node in on_node if node not in reserved and node_fits(node_of[node], job.spec)]
        return pick_nodes(free, usable_now[0], *gang(job.num_gpus, per_node))

    def start(job, nodes):
        gpus, _ = gang(job.num_gpus, per_node)
        for node in nodes:
            free[node] -= gpus
            on_node[node].append((snapshot.now_s + (limit_s or 0.0), gpus))
        starts.append((job.job_id, tuple((node, gpus) for node in nodes)))

    def reserve(job, reserved):
        return reservation(usable_now[0], free, on_node, snapshot.now_s, *gang(job.num_gpus, per_node))

    pending = [job for job in snapshot.jobs if not job.running]
    start_walk(pending, by_band(lambda job: levels[job.job_id]), place, start,
               reserve if limit_s is not None else None)
    return starts


@pytest.mark.parametrize("limit_s", [None, 3600.0])
@pytest.mark.parametrize("seed", range(6))
def test_slurm_orders_memos_start_what_the_straightforward_walk_starts(seed, limit_s):
    """SlurmOrder's per-class nodes, its stop when nothing is free outside the
    reservations, its failed-gang memo and its reservation sort per start (issue 37)
    give the straightforward walk's starts, round after round of a changing cluster."""
    import random

    from controller.core.model import JobState, Node, Snapshot
    from controller.core.plan import Plan
    from controller.replay.slurm_order import SlurmOrder

    rng = random.Random(seed)
    kinds = [(("a",), ""), (("b",), "v100"), (("a", "b"), ""), ((), "a100")]
    nodes = [Node(f"n{i:02d}", 8, 8, partitions=kinds[i % 4][0], gpu_type=kinds[i % 4][1]) for i in range(12)]

    class Inner:  # the plan: bands only (Slurm starts the jobs)
        policy = None
        config = EngineConfig(policy="dlas")

        def step(self, snapshot):
            return Plan(round_id=snapshot.round_id, now_s=snapshot.now_s)

    order = SlurmOrder(Inner(), limit_s)
    jobs, running, made = [], {}, 0
    for round_id in range(1, 25):
        now = 100.0 * round_id
        for _ in range(rng.randint(3, 15)):
            partitions, gpu_type = rng.choice([(("a",), ""), (("b",), ""), (("b",), "v100"), ((), "a100"), ((), "")])
            spec = JobSpec(f"j{made}", rng.choice([1, 1, 2, 4, 8, 16]), now, 1000.0,
                           partitions=partitions, gpu_type=gpu_type)
            jobs.append(JobState(spec=spec, index=made, queue_service_gpu_s=rng.choice([0.0, 5000.0])))
            made += 1
        for job in rng.sample(sorted(running.values(), key=lambda j: j.index), k=len(running) // 3):
            job.running, job.placement = False, ()  # ended (it leaves) or stopped
            del running[job.index]
            if rng.random() < 0.5:
                jobs.remove(job)
        free = {node.name: node.gpus_total for node in nodes}
        for job in running.values():
            for node, gpus in job.placement:
                free[node] -= gpus
        table = [Node(n.name, n.gpus_total, free[n.name], partitions=n.partitions, gpu_type=n.gpu_type) for n in nodes]
        snapshot = Snapshot(now_s=now, jobs=list(jobs), nodes=table, round_id=round_id, free_by_node=dict(free))
        thresholds = Inner.config.thresholds_gpu_s  # SlurmOrder's band without the plan's levels
        levels = {job.job_id: sum(1 for t in thresholds if job.queue_service_gpu_s >= t) for job in jobs}
        expected = _walk_as_written_first(snapshot, levels, limit_s, 8)
        plan = order.step(snapshot)
        got = [(a.job_id, a.placement) for a in plan.actions if a.kind == "start"]
        assert got == expected, (round_id, got, expected)
        by_id = {job.job_id: job for job in jobs}
        for job_id, placement in got:
            job = by_id[job_id]
            job.running, job.placement, job.run_start_s = True, placement, now
            job.first_start_s = job.first_start_s if job.first_start_s is not None else now
            running[job.index] = job

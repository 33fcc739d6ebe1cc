"""A running job no victim rule may preempt (no checkpoint contract, or
preempt_max_per_job spent) changes only its own queue when its service crosses a
threshold: the engine's plan says so (Plan.acts_until_s), planning again after the
crossing gives the same actions and the same bands, and the controller lets the queue
shown for it lag by up to admin_comment_refresh_s instead of planning every round of a
site where such runs cross every few seconds. The real controller, Slurm backend and
store against the scripted slurmctld of bench/scripted_slurm.py."""
import dataclasses
import math

import pytest

from bench.scripted_slurm import ScriptedSlurm, VirtualTime
from controller.core.engine import Engine, EngineConfig
from controller.core.levers.bands import site_factors
from controller.core.model import JobSpec, JobState, Node, Snapshot
from controller.core.policies.base import LEVEL_TOLERANCE_GPU_S
from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.state.store import Store
from slurm_plugin.backend import SlurmBackend

NOW = 10_000.0
THRESHOLDS = (3600.0, 36_000.0)


def running(name, gpus, served, node, *, level=0, preemptable=True, preemptions=0):
    return JobState(spec=JobSpec(name, gpus, 0.0, None, preemptable=preemptable), index=int(name[1:]),
                    attained_gpu_s=served, queue_service_gpu_s=served, running=True, placement=((node, gpus),),
                    run_start_s=0.0, first_start_s=0.0, queue_level=level, queue_entry=float(name[1:]),
                    preemptions=preemptions)


def waiting(name, gpus, served=0.0):
    return JobState(spec=JobSpec(name, gpus, 0.0, None), index=int(name[1:]), attained_gpu_s=served,
                    queue_service_gpu_s=served, running=False, queue_level=0, queue_entry=float(name[1:]))


def served_for(jobs, seconds):
    return [dataclasses.replace(j, attained_gpu_s=j.attained_gpu_s + j.spec.num_gpus * seconds,
                                queue_service_gpu_s=j.queue_service_gpu_s + j.spec.num_gpus * seconds)
            if j.running else j for j in jobs]


def plan_at(config, jobs, at):
    return Engine(config).step(Snapshot(at, jobs, [Node("n0", 2, 0), Node("n1", 2, 0)]))


def bands(plan):
    pending = {job_id for job_id in plan.order if job_id.startswith("w")}
    return site_factors(plan.order, plan.levels, pending, set(), len(THRESHOLDS) + 1, 1000)


@pytest.mark.parametrize("pin", ["no contract", "count spent"])
def test_a_pinned_runs_crossing_moves_its_queue_and_nothing_else(pin):
    config = EngineConfig(policy="dlas", thresholds_gpu_s=THRESHOLDS, preempt_max_per_job=1)
    pinned = dict(preemptable=False) if pin == "no contract" else dict(preemptions=1)
    jobs = [running("r1", 2, 1000.0, "n0", **pinned), running("r2", 2, 40_000.0, "n1", level=2, preemptable=False),
            waiting("w3", 2)]
    plan = plan_at(config, jobs, NOW)
    crossing = NOW + (THRESHOLDS[0] - LEVEL_TOLERANCE_GPU_S - 1000.0) / 2
    assert not plan.actions and math.isclose(plan.stands_until_s, crossing)
    assert plan.acts_until_s == math.inf  # r2 is in the last queue, w3 is never promoted (knob inf)
    after = plan_at(config, served_for(jobs, 1400.0), NOW + 1400.0)
    assert after.levels["r1"] == 1 and plan.levels["r1"] == 0  # the crossing moved r1's queue
    assert after.actions == plan.actions and bands(after) == bands(plan)  # and nothing Slurm sees


def test_a_preemptable_runs_crossing_ends_the_plans_actions():
    config = EngineConfig(policy="dlas", thresholds_gpu_s=THRESHOLDS)
    jobs = [running("r1", 2, 1000.0, "n0"), running("r2", 2, 40_000.0, "n1", level=2, preemptable=False),
            waiting("w3", 2)]
    plan = plan_at(config, jobs, NOW)
    crossing = NOW + (THRESHOLDS[0] - LEVEL_TOLERANCE_GPU_S - 1000.0) / 2
    assert math.isclose(plan.acts_until_s, crossing) and plan.acts_until_s == plan.stands_until_s
    after = plan_at(config, served_for(jobs, 1400.0), NOW + 1400.0)
    assert [(a.kind, a.job_id) for a in after.actions] == [("preempt", "r1"), ("start", "w3")]


def lines_over_time(tmp_path, refresh_s: float, preemption: str = "controller"):
    """Rounds every 10 s over 400 s on two 8-GPU nodes, both running jobs without
    --requeue (not preemptable) and one 8-GPU job waiting: (per round: planned or quiet,
    job 1's AdminComment), and the time job 1 crosses its first threshold (1,800 GPU-s)."""
    slurm = ScriptedSlurm(pending=0, running=0, nodes=2)
    slurm.submit(1, 8, requeue=False)
    slurm.submit(2, 8, requeue=False)
    slurm.schedule()
    slurm.submit(3, 8)
    clock = VirtualTime(float(slurm.now))
    store = Store(f"sqlite:///{tmp_path}/{refresh_s}-{preemption}.db")
    config = from_mapping({"mode": "enforce", "policy": "dlas", "queues_gpu_s": [1800.0, 18000.0],
                           "admin_comment_refresh_s": refresh_s, "full_observe_s": 3600.0, "preemption": preemption,
                           "usage_spool_dir": f"{tmp_path}/none", "slurm_rpc_per_s": 0.0})
    backend = SlurmBackend(runner=slurm, clock=clock)
    controller = Controller(config, backend, store, clock=clock)
    started = clock.now_s
    rounds = []
    try:
        for _ in range(40):
            clock.now_s += 10.0
            slurm.advance(int(clock.now_s))
            report = controller.run_round(controller.observe(backend.poll()))
            rounds.append((clock.now_s - started, not report.skipped_reason, slurm.jobs[1]["admin_comment"]))
    finally:
        store.close()
    return rounds, 1800.0 / 8


def test_the_controller_is_quiet_past_a_pinned_runs_crossing_and_shows_it_within_the_refresh(tmp_path):
    rounds, crossing = lines_over_time(tmp_path, 120.0)
    assert any("queue 1/3" in line for _, _, line in rounds)  # the line was written before the crossing
    planned_after = [t for t, planned, _ in rounds if planned and t > crossing]
    assert planned_after and crossing + 120.0 - 10.0 <= planned_after[0] <= crossing + 120.0 + 10.0
    quiet = [t for t, planned, _ in rounds if not planned and crossing < t < planned_after[0]]
    assert len(quiet) >= 10  # every round between the crossing and the lagged replan
    # the replan places both jobs in queue 2 and acts on nothing: it stands, the next round is quiet
    assert [planned for t, planned, _ in rounds if t == planned_after[0] + 10.0] == [False]
    shown = [t for t, _, line in rounds if "queue 2/3" in line]
    assert shown and shown[0] <= crossing + 120.0 + 10.0  # the new queue shown within the refresh


@pytest.mark.parametrize("refresh_s, preemption", [(0.0, "controller"), (120.0, "slurm")])
def test_without_a_lag_or_with_running_bands_the_crossing_is_planned_at_once(tmp_path, refresh_s, preemption):
    # refresh 0: a queue change is written at once; preemption: slurm: a running job's
    # band is its queue's, which Slurm's own preemption reads
    rounds, crossing = lines_over_time(tmp_path, refresh_s, preemption)
    planned_after = [t for t, planned, _ in rounds if planned and t > crossing]
    assert planned_after and planned_after[0] <= crossing + 10.0


def test_quiet_rounds_write_a_backlog_of_lines_once_each(tmp_path):
    """More first lines than admin_comment_max_per_round: the quiet rounds that follow
    the plan write the rest, each job's line once (a quiet pass looks only at the jobs
    the last pass left wanting a line, CommentBook.plan), none rewritten, none skipped."""
    slurm = ScriptedSlurm(pending=0, running=0, nodes=1)
    slurm.submit(1, 8, requeue=False)
    slurm.schedule()
    for job_id in range(2, 32):  # 30 jobs waiting behind it
        slurm.submit(job_id, 8)
    clock = VirtualTime(float(slurm.now))
    store = Store(f"sqlite:///{tmp_path}/backlog.db")
    config = from_mapping({"mode": "enforce", "policy": "dlas", "queues_gpu_s": [1800.0, 18000.0],
                           "admin_comment_max_per_round": 4, "full_observe_s": 3600.0,
                           "usage_spool_dir": f"{tmp_path}/none", "slurm_rpc_per_s": 0.0})
    backend = SlurmBackend(runner=slurm, clock=clock)
    controller = Controller(config, backend, store, clock=clock)
    quiet = 0
    try:
        for _ in range(12):
            clock.now_s += 10.0
            slurm.advance(int(clock.now_s))
            quiet += bool(controller.run_round(controller.observe(backend.poll())).skipped_reason)
    finally:
        store.close()
    assert quiet >= 6
    assert all("[tiresias: " in slurm.jobs[job_id]["admin_comment"] for job_id in range(1, 32))
    assert slurm.calls["scontrol update AdminComment"] == 31  # each line written once

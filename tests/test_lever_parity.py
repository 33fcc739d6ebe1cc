"""The simulator predicts every lever: one workload, run through the lever replay
(controller.replay.lever_replay) and through the Controller against the scripted
slurmctld (bench.scripted_slurm, with the real backend, parser and store), gives the
same actions (bands, pins, signals, requeues, releases) and the same starts, round by
round, with the same decision ids and causes."""
from __future__ import annotations

import dataclasses
import random

import pytest

from bench.scripted_slurm import ScriptedSlurm, VirtualTime
from controller.core.levers import action_row
from controller.core.model import JobSpec
from controller.replay import lever_replay
from controller.replay.cluster import SimConfig
from controller.replay.lever_replay import LeverSettings, replay_levers
from controller.service.config import from_mapping
from controller.service.daemon import Controller
from controller.service.store import Store
from slurm_plugin.backend import SlurmBackend

T0 = 1_000_020  # a multiple of the interval: the simulator's grid
INTERVAL = 60
NODES, GPUS_PER_NODE = 4, 4
# (job id, submitted at round, GPUs, rounds of work, checkpointable, skew)
WORKLOAD = [
    (1, 0, 4, 40, True, 0.0),
    (2, 0, 4, 36, True, 0.0),
    (3, 0, 4, 30, False, 0.0),  # --no-requeue: never a victim
    (4, 0, 2, 30, True, 0.0),
    (5, 0, 2, 25, True, 0.0),
    (6, 1, 2, 12, True, 0.0),  # waits for the first GPUs
    (7, 18, 4, 6, True, 0.9),  # consolidation-sensitive: pinned where the plan put it
    (8, 18, 1, 3, False, 0.0),
    (9, 19, 2, 4, True, 0.0),
    (10, 22, 1, 5, True, 0.0),
    (11, 24, 4, 8, True, 0.7),
    (12, 30, 2, 6, True, 0.0),
]
SETTINGS = {"mode": "enforce", "policy": "dlas", "queues_gpu_s": [3600.0], "interval_s": float(INTERVAL),
            "preempt_grace_s": 30.0, "preempt_min_runtime_s": 60.0, "requeue_settle_s": 0.0,
            "pin_expiry_s": 300.0, "placement": "consolidate", "pack_limit": 0.5, "admin_comment": False}


def simulated(workload=WORKLOAD, settings=SETTINGS) -> list[list[tuple]]:
    config = from_mapping(dict(settings, usage_spool_dir="/nonexistent"))
    specs = [JobSpec(str(job_id), gpus, float(T0 + at * INTERVAL), float(work * INTERVAL), skew=skew,
                     partition="batch", user="bob", preemptable=ckpt)
             for job_id, at, gpus, work, ckpt, skew in workload]
    sim = SimConfig(nodes=NODES, gpus_per_node=GPUS_PER_NODE, engine=config.engine_config(),
                    round_interval_s=float(INTERVAL), preempt_grace_s=config.preempt_grace_s)
    lever_settings = LeverSettings(config.site_factor_band, config.pin_expiry_s, config.requeue_settle_s,
                                     config.handoff_timeout_s, "USR1", True)
    out = replay_levers(sim, specs, lever_settings, start_s=float(T0))
    return [[action_row(a) for a in levers] + [("", "start", j, nodes, "") for j, nodes in starts]
            for levers, starts in zip(out.levers, out.starts)]


def controlled(rounds: int, tmp_path, workload=WORKLOAD, settings=SETTINGS) -> list[list[tuple]]:
    slurm = ScriptedSlurm(pending=0, running=0, nodes=NODES, gpus_per_node=GPUS_PER_NODE)
    clock = VirtualTime(float(T0))
    config = from_mapping(dict(settings, usage_spool_dir=str(tmp_path / "none")))
    out = []
    with Store(f"sqlite:///{tmp_path}/parity.db") as store:
        controller = Controller(config, SlurmBackend(runner=slurm), store, clock=clock)
        backend = controller.backend
        for k in range(rounds):
            now = T0 + k * INTERVAL
            clock.now_s = float(now)
            slurm.advance(now)
            for job_id, at, gpus, work, ckpt, skew in workload:
                if at == k:
                    slurm.submit(job_id, gpus, work_s=work * INTERVAL, requeue=ckpt,
                                 comment=f"tiresias:skew={skew}" if skew else "")
            observation = dataclasses.replace(backend.observe(), observed_at_s=float(now))
            report = controller.run_round(observation)
            starts = slurm.schedule()
            out.append([action_row(a) for a in report.levers]
                       + [("", "start", str(j), (node,), "") for j, node in starts])
    return out


def kinds(rounds: list[list[tuple]]) -> set[str]:
    return {row[1] for actions in rounds for row in actions}


def test_simulator_and_controller_pull_the_same_levers_in_the_same_rounds(tmp_path):
    sim = simulated()
    real = controlled(len(sim), tmp_path)
    # the workload exercises every lever the test is about
    assert {"band", "pin", "start", "signal", "requeue", "release"} <= kinds(sim)
    for round_id, (predicted, done) in enumerate(zip(sim, real), 1):
        assert predicted == done, f"round {round_id}"
    assert len(sim) == len(real)
    started = {row[2] for actions in sim for row in actions if row[1] == "start"}
    assert started == {str(job[0]) for job in WORKLOAD}


def seeded(seed: int, jobs: int) -> list[tuple]:
    """A seeded workload in WORKLOAD's shape: sizes 1-4, 70% checkpointable, one in
    five skewed (consolidation-sensitive), arrivals over the first 20 rounds."""
    rng = random.Random(seed)
    return [(j, rng.randint(0, 20), rng.choice([1, 1, 2, 2, 4]), rng.randint(2, 30), rng.random() < 0.7,
             0.8 if rng.random() < 0.2 else 0.0) for j in range(1, jobs + 1)]


# (seed, jobs): chosen so that together they preempt, requeue, release, pin and unpin,
# and one victim's work ends within its grace period (it ends, never requeued: 111)
# and one plan's preemptions wait on a failed handoff (237)
SEEDS = [(0, 14), (2, 14), (7, 14), (10, 14), (111, 24), (112, 24), (237, 30)]


@pytest.mark.parametrize("seed,jobs", SEEDS)
def test_seeded_workloads_give_the_same_actions(seed, jobs, tmp_path):
    workload = seeded(seed, jobs)
    sim = simulated(workload=workload)
    real = controlled(len(sim), tmp_path, workload=workload)
    for round_id, (predicted, done) in enumerate(zip(sim, real), 1):
        assert predicted == done, f"seed {seed}, round {round_id}"
    signals = {row[2] for actions in sim for row in actions if row[1] == "signal"}
    requeues = {row[2] for actions in sim for row in actions if row[1] == "requeue"}
    if seed == 111:
        assert signals - requeues, "a victim that ends in its grace period is not requeued"


def test_the_seeded_workloads_pull_every_lever():
    rows = [row for seed, jobs in SEEDS for actions in simulated(workload=seeded(seed, jobs)) for row in actions]
    assert {"band", "pin", "unpin", "start", "signal", "requeue", "release"} <= {row[1] for row in rows}


def test_the_comparison_sees_a_simulator_that_skips_its_bands(tmp_path, monkeypatch):
    """Without bands the simulated slurmctld starts by age alone: the starts differ."""
    real = controlled(40, tmp_path)
    monkeypatch.setattr(lever_replay.SimSlurm, "set_site_factors", lambda self, factors: None)
    sim = simulated()
    assert [r for r in sim[:40] if any(row[1] == "start" for row in r)] != \
        [r for r in real if any(row[1] == "start" for row in r)]


def test_a_simulator_without_the_handoff_rule_signals_a_victim_the_controller_keeps(tmp_path, monkeypatch):
    """Seed 237: the controller keeps job 30 running one round (the job it would be
    preempted for did not start after its last preemption); a simulator without the
    rule signals it at once."""
    workload = seeded(237, 30)
    real = controlled(len(simulated(workload=workload)), tmp_path, workload=workload)

    class NoRule(lever_replay.HandoffBook):
        def blocking(self, start_ids, now, leaving):
            return []

    monkeypatch.setattr(lever_replay, "HandoffBook", NoRule)
    sim = simulated(workload=workload)
    signals = lambda rounds: [row for actions in rounds for row in actions if row[1] == "signal"]  # noqa: E731
    assert ("r55.1.signal", "signal", "30", "USR1", "r55.1") in signals(sim)
    assert ("r55.1.signal", "signal", "30", "USR1", "r55.1") not in signals(real)


def test_a_pin_that_expires_is_cleared_in_both_citing_its_start(tmp_path):
    """A short pin expiry: a pinned job that still waits a round later is unpinned,
    citing the start that pinned it."""
    settings = dict(SETTINGS, pin_expiry_s=60.0)
    sim = simulated(settings=settings)
    real = controlled(len(sim), tmp_path, settings=settings)
    unpins = [row for actions in sim for row in actions if row[1] == "unpin"]
    pins = {row[2]: row[4] for actions in sim for row in actions if row[1] == "pin"}
    assert unpins and all(row[4] == pins[row[2]] for row in unpins)
    assert sim == real


def test_a_lever_on_a_job_in_the_wrong_state_fails_in_the_simulator_too():
    """SimSlurm refuses what slurmctld refuses: a pin on a running job, a signal to a
    pending one (the executor then reports the lever not applied)."""
    config = from_mapping(dict(SETTINGS, usage_spool_dir="/nonexistent"))
    sim = SimConfig(nodes=1, gpus_per_node=4, engine=config.engine_config(), round_interval_s=60.0)
    job = lever_replay.JobState(spec=JobSpec("1", 2, 0.0, 60.0), index=0)
    cluster = lever_replay.SimCluster(sim, [job], [lever_replay.RunState()], None)
    slurm = lever_replay.SimSlurm(cluster, [job])
    slurm.pending["1"] = job
    with pytest.raises(RuntimeError, match="not RUNNING"):
        slurm.signal("1", "USR1", True)
    assert slurm.schedule() == [("1", ("n0000",))]
    with pytest.raises(RuntimeError, match="not PENDING"):
        slurm.pin_nodes("1", ["n0000"])


def test_simulated_slurmctld_starts_by_site_factor_and_keeps_pins():
    """The higher SiteFactor starts first though younger; a pinned job waits for its
    node while another node has room; a requeued job waits for its release."""
    config = from_mapping(dict(SETTINGS, usage_spool_dir="/nonexistent"))
    sim = SimConfig(nodes=2, gpus_per_node=4, engine=config.engine_config(), round_interval_s=60.0)
    jobs = [lever_replay.JobState(spec=JobSpec(str(i), gpus, float(i), 600.0), index=i)
            for i, gpus in enumerate((4, 4, 2, 4))]
    cluster = lever_replay.SimCluster(sim, jobs, [lever_replay.RunState() for _ in jobs], None)
    slurm = lever_replay.SimSlurm(cluster, jobs)
    slurm.pending = {job.job_id: job for job in jobs}
    slurm.set_site_factors({"1": 200000, "2": 200000, "3": 100000})
    slurm.pin_nodes("2", ["n0000"])
    slurm.held.add("3")
    # 1 first (band, then older than 2); 2 pinned to n0000, which 1 took: waits although
    # n0001 is free; 0 (band 0) gets n0001; 3 is held
    assert slurm.schedule() == [("1", ("n0000",)), ("0", ("n0001",))]
    assert set(slurm.pending) == {"2", "3"}

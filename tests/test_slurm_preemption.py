"""The preemption contract on real Slurm (an isolated instance, jobs as alice and bob,
`tiresias run --mode enforce` as a real process):

- the three shipped example jobs (bash trapping B:USR1; Python under srun getting
  USR1 in its step; a Lightning-style job requeueing itself) are preempted for a
  short 12-GPU job, checkpoint, resume from their checkpoint and finish;
- a requeueable job that declared no signal and traps nothing is never signalled,
  never requeued, and finishes;
- a drained node with a job still on it causes no preemption.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.slurm_fixtures import (  # noqa: F401  (iso, run: pytest fixtures)
    all_finished, attained, file_text, instance_fixture, iso, run, sbatch_in, wait_for)

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]
# What the examples need in the submit directory (they run as alice/bob, who cannot
# read the checkout): the scripts, the checkpoint helpers.
EXAMPLE_FILES = ("examples/checkpoint_job.sbatch", "examples/srun_train.sbatch", "examples/lightning_style.sbatch",
                 "examples/train_loop.py", "examples/lightning_style.py", "prolog/checkpoint.sh",
                 "tiresias_checkpoint.py")

cluster = instance_fixture("tp")


def example_dir(instance, user: str) -> str:
    workdir = instance.workdir(user)
    for name in EXAMPLE_FILES:
        target = Path(workdir) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, target)
    subprocess.run(["chown", "-R", f"{user}:{user}", workdir], check=True)
    return workdir


def test_example_jobs_checkpoint_resume_and_finish_and_an_undeclared_job_is_never_touched(iso, run):
    run.start(preempt_grace_s=5.0)
    alice, bob = example_dir(iso, "alice"), example_dir(iso, "bob")
    common = "-N 1 -n 1 --gres=gpu:4 --open-mode=append"
    bash_job = sbatch_in(iso, "alice", alice, f"{common} -o bash-%j.out --export=ALL,STEPS=30 "
                                              "examples/checkpoint_job.sbatch")
    srun_job = sbatch_in(iso, "bob", bob, f"{common} -o srun-%j.out --export=ALL,STEPS=300,STEP_S=0.1 "
                                          "examples/srun_train.sbatch")
    self_job = sbatch_in(iso, "alice", alice, f"{common} -o self-%j.out --export=ALL,STEPS=300,STEP_S=0.1 "
                                              "examples/lightning_style.sbatch")
    # requeueable (JobRequeue=1), no --signal, no trap: USR1 would kill its shell
    plain_job = sbatch_in(iso, "bob", bob, f"{common} -o plain-%j.out --requeue --wrap "
                                           "'for i in $(seq 30); do sleep 1; done; echo finished'")
    examples = [bash_job, srun_job, self_job]
    everyone = [*examples, plain_job]
    wait_for(lambda: all(attained(run, j) > 40 for j in everyone), 60, "all four to pass the 40 GPU-s threshold")
    short_id, _ = iso.submit("bob", 12, 5, "short")
    wait_for(lambda: all_finished(iso, [*everyone, short_id]), 240, "every job to finish", interval_s=1,
             seen=lambda: {j: iso.squeue()[j]["job_state"] for j in [*everyone, short_id]})
    jobs = iso.squeue()
    states = {j: (jobs[j]["job_state"], jobs[j]["restart_cnt"]) for j in [*everyone, short_id]}
    assert all(state == "COMPLETED" for state, _ in states.values()), states
    for job_id in examples:
        assert jobs[job_id]["restart_cnt"] >= 1, states  # preempted for the short job
    assert jobs[plain_job]["restart_cnt"] == 0, states  # never requeued ...
    assert "finished" in file_text(Path(bob) / f"plain-{plain_job}.out")  # ... nor killed
    decisions = run.decisions()
    assert not [d for d in decisions if d["job_id"] == plain_job and d["kind"] in ("preempt", "requeue")]
    # the short job ran on the GPUs the three examples gave up. Its first run: past
    # 40 GPU-s it is in queue 2 behind them, may be preempted in turn, end in its grace
    # and be requeued (preempt_requeue_ended), so squeue's start_time can be a rerun's.
    first_start = run.record(short_id).first_start_s
    assert first_start is not None and first_start < min(jobs[j]["end_time"] for j in examples), (first_start, jobs)

    bash_out = file_text(Path(alice) / f"bash-{bash_job}.out")
    assert "tiresias checkpoint: signal received" in bash_out, bash_out
    resumed = [line for line in bash_out.splitlines() if "restart 1: starting at step" in line]
    assert resumed and not resumed[0].endswith("step 0"), bash_out
    assert "done at step 30" in bash_out, bash_out
    srun_out = file_text(Path(bob) / f"srun-{srun_job}.out")
    assert "checkpointed at step" in srun_out and "resumed at step" in srun_out, srun_out
    assert "done at step 300" in srun_out, srun_out
    self_out = file_text(Path(alice) / f"self-{self_job}.out")
    assert "requeueing job" in self_out and "resumed at step" in self_out, self_out
    assert "done at step 300" in self_out, self_out
    preempts = {d["job_id"]: d for d in decisions if d["kind"] == "preempt" and d["applied"]}
    assert "B:USR1@90 (#SBATCH --signal), requeue after 90s" in preempts[bash_job]["detail"]  # its own grace
    assert "signal USR1@90 (#SBATCH --signal)" in preempts[srun_job]["detail"]  # to the steps
    # the handoff: the short job started on the freed GPUs, logged with the delay
    handoffs = [d for d in decisions if d["kind"] == "handoff" and d["job_id"] == short_id]
    assert handoffs and handoffs[0]["applied"], handoffs
    print(f"handoff to {short_id}: {handoffs[0]['detail']}; restarts "
          f"{ {j: jobs[j]['restart_cnt'] for j in everyone} }")


def test_a_drained_node_with_a_job_on_it_causes_no_preemption(iso, run):
    run.start()
    small, _ = iso.submit("alice", 4, 40, "small")
    wait_for(lambda: iso.squeue()[small]["job_state"] == "RUNNING", 30, "the 4-GPU job to start")
    big, _ = iso.submit("bob", 12, 40, "big")
    wait_for(lambda: iso.squeue()[big]["job_state"] == "RUNNING", 30, "the 12-GPU job to start")
    wait_for(lambda: attained(run, small) > 40 and attained(run, big) > 40, 30, "both past the threshold")
    node = iso.squeue()[small]["nodes"]
    iso.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=tiresias-test"])
    try:
        time.sleep(8)  # several rounds (interval 1 s) with 12 GPUs available and 16 running
        jobs = iso.squeue()
        assert jobs[small]["job_state"] == jobs[big]["job_state"] == "RUNNING"
        assert jobs[small]["restart_cnt"] == jobs[big]["restart_cnt"] == 0
        assert not [d for d in run.decisions() if d["kind"] in ("preempt", "requeue")]
        assert run.preemption_rows() == []
    finally:
        iso.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)


def test_a_failed_signal_causes_no_requeue(iso, tmp_path):
    """Real Slurm; only `scancel` is made to fail (a stand-in for a refused signal)."""
    from controller.service.ops.config import from_mapping
    from controller.service.round.daemon import Controller
    from controller.service.state.store import Store
    from slurm_plugin.backend import SlurmBackend
    from slurm_plugin.commands import CommandResult, subprocess_runner

    def runner(argv, timeout_s, env):
        if argv[0] == "scancel":
            return CommandResult(1, "", "scancel: error: Kill job error on job id: Access/permission denied")
        return subprocess_runner(argv, timeout_s, env)

    backend = SlurmBackend(runner=runner, env={"SLURM_CONF": iso.conf})
    config = from_mapping({"mode": "enforce", "cluster": iso.name, "queues_gpu_s": [40.0], "preempt_grace_s": 2.0,
                           "preempt_min_runtime_s": 1.0, "preempt_signal_attempts": 2, "requeue_settle_s": 1.0,
                           "usage_spool_dir": str(tmp_path / "none")})
    with Store(f"sqlite:///{tmp_path}/t.db") as store:
        c = Controller(config, backend, store)
        long_id, long_dir = iso.submit("alice", 16, 25, "long")

        def ran_past_threshold():
            c.run_round()
            return long_id in c.records and c.records[long_id].attained_gpu_s > 40

        wait_for(ran_past_threshold, 40, "the long job to pass the threshold", interval_s=1)
        short_id, _ = iso.submit("bob", 4, 3, "short")
        for _ in range(8):  # well past the grace period and the attempts
            c.run_round()
            time.sleep(1)
        jobs = iso.squeue()
        assert jobs[long_id]["job_state"] == "RUNNING" and jobs[long_id]["restart_cnt"] == 0
        decisions = store.decisions(iso.name, job_id=long_id, limit=1000)
        assert not [d for d in decisions if d["kind"] == "requeue"]
        failed = [d["detail"] for d in decisions if d["kind"] == "preempt"]
        assert any("signal failed (1/2): not requeued" in d for d in failed), failed
        # the second failure gives up; from then on the plan keeps the job (non-preemptable)
        assert len(failed) == 2 and "gave up" in failed[0], failed
        assert "checkpoint signal failed 2 times" in c.contract.why_not(
            next(j for j in backend.observe().jobs if j.job_id == long_id))
        assert "got USR1" not in file_text(Path(long_dir) / f"{long_id}.out")

"""A job's own --signal on real Slurm (an isolated instance with the cli_filter plugin,
slurm_plugin/cli_filter.lua; `tiresias run --mode enforce` as a real process):

- a job that gives ``--signal=B:USR1@20`` only on the sbatch command line (its script
  has no #SBATCH --signal) is preempted with that signal, gets its own 20 s of grace
  (preempt_grace_s is 3), checkpoints, resumes from its checkpoint and finishes;
- a job that declares its signal through SBATCH_SIGNAL and exits 0 on it (a common
  SIGTERM habit) ends COMPLETED during its grace period, is requeued all the same,
  resumes from its checkpoint and finishes;
- the contract reads the signal sbatch uses: the command line's over the script's
  ``#SBATCH --signal`` (sbatch keeps the script's ``B:`` though), and 60 s for a spec
  without ``@T``.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from controller.service.ops.config import Config
from controller.service.round.contract import Contract
from slurm_plugin.backend import SlurmBackend
from tests.slurm_fixtures import (  # noqa: F401  (iso, run: pytest fixtures)
    all_finished, attained, instance_fixture, iso, output_of, run, sbatch_in, wait_for)

pytestmark = pytest.mark.slurm

# The harness's job without its #SBATCH --signal line; EXIT_ON_USR1=1 makes it save and
# exit 0 on the signal instead of running on until the requeue.
USR1_TRAP = """trap 'checkpoint; echo "got USR1 $(date +%s.%N) done=$done_s"' USR1"""
EXIT_TRAP = ("""trap 'checkpoint; echo "got USR1 $(date +%s.%N) done=$done_s"; """
             """[ -n "$EXIT_ON_USR1" ] && exit 0' USR1""")

cluster = instance_fixture("ts", env="TIRESIAS_TEST_INSTANCE_SIGNALS", keep=False,
                           extra_env={"TIRESIAS_INSTANCE_CLI_FILTER": "1"})


def workdir_without_declared_signal(iso, user: str) -> str:
    """A working directory with the harness's job, its #SBATCH --signal line removed."""
    workdir = iso.workdir(user)
    script = Path(workdir) / "job.sh"
    text = script.read_text()
    assert "#SBATCH --signal" in text and USR1_TRAP in text  # the harness's script, as expected
    lines = [line for line in text.splitlines() if not line.startswith("#SBATCH --signal")]
    script.write_text("\n".join(lines).replace(USR1_TRAP, EXIT_TRAP) + "\n")
    return workdir


def sbatch(iso, user: str, workdir: str, env: str, args: str) -> str:
    """8 GPUs on 2 nodes, the job's 60 s of work; ``env``: sbatch's own environment."""
    return sbatch_in(iso, user, workdir, f"-N 2 -n 2 --gres=gpu:4 --output=%j.out --open-mode=append --requeue "
                                         f"{args} ./job.sh 60", env=env)


def test_command_line_and_environment_signals_are_preempted_with_their_grace_and_resume(iso, run):
    run.start(preempt_grace_s=3.0)
    cli_dir, env_dir = workdir_without_declared_signal(iso, "alice"), workdir_without_declared_signal(iso, "bob")
    cli_job = sbatch(iso, "alice", cli_dir, "", "--signal=B:USR1@20")
    env_job = sbatch(iso, "bob", env_dir, "SBATCH_SIGNAL=B:USR1", "--export=ALL,EXIT_ON_USR1=1")
    jobs = iso.squeue()
    # the cli_filter wrote what sbatch was told into the comment the controller reads
    assert "tiresias:preemptable=B:USR1@20" in jobs[cli_job]["comment"], jobs[cli_job]["comment"]
    assert "tiresias:preemptable=B:USR1" in jobs[env_job]["comment"], jobs[env_job]["comment"]
    wait_for(lambda: all(attained(run, j) > 40 for j in (cli_job, env_job)), 60, "both past the threshold")
    short_id, _ = iso.submit("alice", 16, 5, "short")
    everyone = [cli_job, env_job, short_id]
    wait_for(lambda: all_finished(iso, everyone), 240, "every job to finish", interval_s=1,
             seen=lambda: {j: iso.squeue()[j]["job_state"] for j in everyone})
    jobs = iso.squeue()
    states = {j: (jobs[j]["job_state"], jobs[j]["restart_cnt"]) for j in everyone}
    assert all(state == "COMPLETED" for state, _ in states.values()), states
    # (Slurm 22.05 does not count a requeue of a COMPLETED job in restart_cnt: the
    # decisions and the job's own output below show it)
    assert jobs[cli_job]["restart_cnt"] >= 1, states
    decisions = run.decisions()
    preempts = {d["job_id"]: d for d in decisions if d["kind"] == "preempt" and d["applied"]}
    requeues = {d["job_id"]: d for d in decisions if d["kind"] == "requeue" and d["applied"]}
    assert "B:USR1@20" in preempts[cli_job]["detail"] and "requeue after 20s" in preempts[cli_job]["detail"]
    assert requeues[cli_job]["reason"] == "grace period of 20s over", requeues[cli_job]
    assert requeues[env_job]["reason"] == "ended during its grace period", requeues[env_job]
    for workdir, job_id in ((cli_dir, cli_job), (env_dir, env_job)):
        text = output_of(workdir, job_id)
        assert "got USR1" in text, text
        starts = [line for line in text.splitlines() if line.startswith("start ")]
        assert len(starts) >= 2 and not starts[1].endswith("resume=0"), text  # resumed from its checkpoint
        assert "work=60" in text, text
    print({j: (preempts[j]["detail"], requeues[j]["reason"]) for j in (cli_job, env_job)})


def test_the_contract_reads_the_signal_sbatch_uses(iso):
    """sbatch's order: its command line beats the script's ``#SBATCH --signal`` (the
    harness script declares ``B:USR1@3``), and a spec without ``@T`` means Slurm's
    60 s. The real backend and the contract read what Slurm will send."""
    overridden = sbatch(iso, "alice", iso.workdir("alice"), "", "--signal=USR2@60")
    default_lead = sbatch(iso, "bob", workdir_without_declared_signal(iso, "bob"), "", "--signal=USR1")
    wait_for(lambda: all(iso.squeue()[j]["job_state"] == "RUNNING" for j in (overridden, default_lead)), 60,
             "both jobs to run", seen=lambda: {j: iso.squeue()[j]["job_state"] for j in (overridden, default_lead)})
    backend = SlurmBackend(env=iso.env)
    contract = Contract(Config(), backend)
    observed = {job.job_id: job for job in backend.observe().jobs}
    declared = {j: contract.declared(observed[j]) for j in (overridden, default_lead)}
    seen = {j: (s.name, s.batch_only, s.lead_s, s.source) if s else None for j, s in declared.items()}
    recorded = {j: observed[j].comment for j in declared}  # sbatch's final --signal (cli_filter.lua)
    print(recorded, seen)
    assert seen[overridden][::2] == ("USR2", 60), (seen, recorded)
    assert seen[default_lead][::2] == ("USR1", 60) and not seen[default_lead][1], (seen, recorded)
    # Where the signal goes is sbatch's too: it ORs the script's B: into the command
    # line's signal (22.05 records B:USR2 here), and the contract follows the record.
    assert seen[overridden][1] == ("B:USR2" in recorded[overridden]), (seen, recorded)
    assert all(contract.why_not(observed[j]) == "" for j in declared), seen

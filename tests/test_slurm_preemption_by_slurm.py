"""``preemption: slurm`` end to end on real Slurm (issue 30): `tiresias run --mode enforce`
sets the bands, on running jobs too, and slurmctld preempts (preempt/qos, QOS tpreempt
with PreemptMode=requeue,within, GraceTime=10, SlurmctldParameters=preempt_send_user_signal;
containers/slurm-cluster.sh TIRESIAS_INSTANCE_SLURM_PREEMPT=1). The instance's
cli_filter.lua has PREEMPTABLE_QOS="tpreempt": a job whose sbatch options carry a
--signal (the harness job's #SBATCH line) and may be requeued runs in tpreempt; a
--no-requeue job stays in normal, which no QOS may preempt. The facts each step relies
on are measured one by one in tests/test_slurm_native_preemption.py.
"""
from __future__ import annotations

import os

import pytest

from tests.slurm_fixtures import attained, isolated_instance, iso, output_of, run, slurm_cluster, wait_for  # noqa: F401

pytestmark = pytest.mark.slurm

BAND = 100000  # bench.slurm_harness.write_config's site_factor_band; queues_gpu_s [40]: two queues


@pytest.fixture(scope="module")
def cluster(slurm_cluster):  # the default cluster's slurmdbd keeps the QOS rows
    yield from isolated_instance(f"ts{os.getpid()}", keep=False,
                                 extra_env={"TIRESIAS_INSTANCE_ACCOUNTING": "1", "TIRESIAS_INSTANCE_SLURM_PREEMPT": "1",
                                            "TIRESIAS_INSTANCE_CLI_FILTER": "1"})


def states(iso, ids) -> dict:
    jobs = iso.squeue()
    return {j: (jobs[j]["job_state"], jobs[j].get("qos"), jobs[j].get("restart_cnt"), jobs[j].get("priority"),
                jobs[j].get("state_reason")) for j in ids if j in jobs}


def running(iso, ids) -> bool:
    jobs = iso.squeue()
    return all(jobs[j]["job_state"] == "RUNNING" for j in ids)


def priority(job: dict) -> int:
    value = job.get("priority")
    return value.get("number", 0) if isinstance(value, dict) else int(value or 0)


def test_slurmctld_preempts_a_demoted_declared_job_for_a_queue_1_job_and_never_an_undeclared_one(iso, run):
    run.start(preemption="slurm", preempt_qos="tpreempt")
    # bob: one job that may not be requeued (normal QOS) and three declared ones (tpreempt)
    kept, _ = iso.submit("bob", 4, 600, "kept", extra=f"--no-requeue -w {iso.name}g1")
    declared = [iso.submit("bob", 4, 600, f"ckpt{k}", extra=f"-w {iso.name}g{k + 2}")[0] for k in range(3)]
    wait_for(lambda: running(iso, [kept] + declared), 30, "bob's jobs to start", seen=lambda: states(iso, [kept] + declared))
    jobs = iso.squeue()
    assert jobs[kept]["qos"] == "normal" and {jobs[j]["qos"] for j in declared} == {"tpreempt"}, \
        states(iso, [kept] + declared)  # cli_filter.lua's PREEMPTABLE_QOS
    # demoted to queue 2 of 2: their band follows them while they run (the top of queue 2's)
    wait_for(lambda: all(attained(run, j) > 40 for j in declared), 60, "bob's jobs to reach queue 2")
    # (the top of queue 2's band, 2 x BAND - 1, plus Slurm's small weighted factors)
    wait_for(lambda: all(2 * BAND - 1 <= priority(iso.squeue()[j]) < 2 * BAND - 1 + BAND // 2 for j in declared),
             30, "the running jobs' priority to drop to queue 2's band", seen=lambda: states(iso, declared))
    new, _ = iso.submit("alice", 4, 5, "new")
    wait_for(lambda: iso.squeue()[new]["job_state"] in ("RUNNING", "COMPLETED"), 90,
             "slurmctld to preempt a queue-2 job for alice's queue-1 job", interval_s=1,
             seen=lambda: (states(iso, [new, kept] + declared), run.log_text()[-2000:]))
    jobs = iso.squeue()
    yielded = [j for j in declared if int(jobs[j].get("restart_cnt") or 0) >= 1]
    assert len(yielded) == 1, states(iso, [new, kept] + declared)
    assert jobs[kept]["job_state"] == "RUNNING" and int(jobs[kept].get("restart_cnt") or 0) == 0
    # slurmctld sent the job's own signal (its #SBATCH --signal=B:USR1) before the requeue
    out = output_of(workdir_of(iso, yielded[0]), yielded[0])
    assert "got USR1" in out, out[-2000:]
    # the controller neither signalled nor requeued: it left the victim to slurmctld
    decisions = run.decisions()
    assert not [d for d in decisions if d["kind"] in ("signal", "requeue") and d["applied"]], decisions
    preempts = [d for d in decisions if d["kind"] == "preempt"]
    assert all(not d["applied"] and "left to slurmctld" in d["detail"] for d in preempts), preempts


def workdir_of(iso, job_id: str) -> str:
    """The working directory Slurm ran the job in."""
    return iso.show_jobs()[job_id]["WorkDir"]

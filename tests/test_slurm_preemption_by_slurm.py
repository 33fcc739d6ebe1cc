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
import time

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


def test_slurmctld_never_preempts_a_job_whose_lead_time_the_grace_would_cut_short(iso, run):
    """slurmctld sends the job's signal when it preempts and requeues it one GraceTime
    (10 s) later, whatever the job's @T. So a lead time longer than the grace keeps the
    job out of slurmctld's reach, two ways: cli_filter.lua leaves a job with
    --signal=B:USR1@30 in normal (PREEMPTABLE_QOS_GRACE_S = 10), and a job that asked for
    tpreempt itself with that lead is banded above every pending job by the controller
    (Contract.why_not_slurms), so no pending job has the strictly higher priority WITHIN
    needs. Two queue-1 jobs wait for four busy nodes: the one job whose lead (3 s) fits
    is preempted, and nothing else while the other waits on."""
    run.start(preemption="slurm", preempt_qos="tpreempt")
    long_lead = "--signal=B:USR1@30"  # the command line beats the script's #SBATCH --signal=B:USR1@3
    kept_out, _ = iso.submit("bob", 4, 600, "kept_out", extra=f"{long_lead} -w {iso.name}g1")
    asked, _ = iso.submit("bob", 4, 600, "asked", extra=f"{long_lead} --qos=tpreempt -w {iso.name}g2")
    undeclared, _ = iso.submit("bob", 4, 600, "undeclared", extra=f"--no-requeue -w {iso.name}g3")
    fits, fits_dir = iso.submit("bob", 4, 600, "fits", extra=f"-w {iso.name}g4")
    ours = [kept_out, asked, undeclared, fits]
    wait_for(lambda: running(iso, ours), 30, "bob's jobs to start", seen=lambda: states(iso, ours))
    jobs = iso.squeue()
    assert [jobs[j]["qos"] for j in ours] == ["normal", "tpreempt", "normal", "tpreempt"], states(iso, ours)
    wait_for(lambda: all(attained(run, j) > 40 for j in ours), 60, "bob's jobs to reach queue 2")
    kept_band = 4 * BAND - 1  # (K + 2) x BAND - 1, K = 2 queues: above every pending job
    wait_for(lambda: priority(iso.squeue()[asked]) >= kept_band and
             2 * BAND - 1 <= priority(iso.squeue()[fits]) < 2 * BAND - 1 + BAND // 2, 30,
             "the job with the long lead banded above every pending job, the other one at queue 2's top",
             seen=lambda: states(iso, ours))
    newcomers = [iso.submit("alice", 4, 60, f"new{k}")[0] for k in range(2)]
    wait_for(lambda: any(iso.squeue()[j]["job_state"] in ("RUNNING", "COMPLETED") for j in newcomers), 90,
             "slurmctld to preempt the job whose lead time fits", interval_s=1,
             seen=lambda: (states(iso, newcomers + ours), run.log_text()[-2000:]))
    time.sleep(25)  # the other queue-1 job waits on: slurmctld tries at every submit, end and pass
    jobs = iso.squeue()
    restarted = [j for j in ours if int(jobs[j].get("restart_cnt") or 0) >= 1]
    assert restarted == [fits], states(iso, newcomers + ours)
    assert [jobs[j]["job_state"] for j in (kept_out, asked, undeclared)] == ["RUNNING"] * 3
    assert sum(jobs[j]["job_state"] == "PENDING" for j in newcomers) == 1, states(iso, newcomers + ours)
    # the job that was preempted had its own signal, then at least its lead time, before the requeue
    out = output_of(fits_dir, fits)
    usr1 = [float(line.split()[2]) for line in out.splitlines() if line.startswith("got USR1")]
    term = [float(line.split()[2]) for line in out.splitlines() if line.startswith("got TERM")]
    assert usr1 and term and term[0] - usr1[0] >= 3, out[-2000:]
    assert not [d for d in run.decisions() if d["kind"] in ("signal", "requeue") and d["applied"]]


def test_slurmctld_preempts_nobody_for_jobs_it_could_not_start_on_what_that_frees(iso, run):
    """Every node keeps a 1-GPU job outside the QOS holding 6 of its 8 CPUs, beside a
    declared 3-GPU job. Three queue-1 jobs that no preemption could start wait: 3 CPUs
    (a victim frees only 1 of the 3 GPUs' node's CPUs: 2 are left), --exclusive (no node
    can be emptied), and a 2-node gang of whole nodes (likewise; backfill may reserve
    nodes for it, but reserving is not preempting). Nobody is preempted while they wait;
    a plain 3-GPU job then takes exactly one victim (control)."""
    run.start(preemption="slurm", preempt_qos="tpreempt")
    kept = [iso.submit("bob", 1, 600, f"cpu{k}", extra=f"--no-requeue -c 6 -w {iso.name}g{k + 1}")[0]
            for k in range(4)]
    wait_for(lambda: running(iso, kept), 30, "bob's 6-CPU jobs to start", seen=lambda: states(iso, kept))
    victims = [iso.submit("bob", 3, 600, f"gpu{k}")[0] for k in range(4)]
    wait_for(lambda: running(iso, victims), 30, "bob's 3-GPU jobs to start", seen=lambda: states(iso, victims))
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 60, "bob's 3-GPU jobs to reach queue 2")
    wait_for(lambda: all(2 * BAND - 1 <= priority(iso.squeue()[j]) < 2 * BAND - 1 + BAND // 2 for j in victims),
             30, "the 3-GPU jobs' priority to drop to queue 2's band", seen=lambda: states(iso, victims))
    waiting = [iso.submit("alice", 3, 5, "wide", extra="-c 3")[0],
               iso.submit("alice", 3, 5, "whole", extra="--exclusive")[0],
               iso.submit("alice", 8, 5, "gang")[0]]
    wait_for(lambda: all(run.record(j) is not None for j in waiting), 20, "the controller to see the waiting jobs")
    time.sleep(20)  # slurmctld's passes at each submit and every few seconds, and backfill's
    jobs = iso.squeue()
    assert [jobs[j]["job_state"] for j in waiting] == ["PENDING"] * 3, states(iso, waiting)
    assert {j: int(jobs[j].get("restart_cnt") or 0) for j in victims + kept} == {j: 0 for j in victims + kept}, \
        states(iso, victims + kept)
    iso.run(["scancel", *waiting])
    control, _ = iso.submit("alice", 3, 5, "control")
    wait_for(lambda: iso.squeue()[control]["job_state"] in ("RUNNING", "COMPLETED"), 90,
             "slurmctld to preempt one 3-GPU job for the control job", interval_s=1,
             seen=lambda: states(iso, [control] + victims))
    jobs = iso.squeue()
    assert sum(int(jobs[j].get("restart_cnt") or 0) >= 1 for j in victims) == 1, states(iso, victims)
    assert all(int(jobs[j].get("restart_cnt") or 0) == 0 for j in kept), states(iso, kept)

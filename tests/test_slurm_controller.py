"""The controller end to end: `tiresias run` as a real process against a real,
isolated Slurm instance (containers/slurm-cluster.sh with
TIRESIAS_CLUSTER_INSTANCE), jobs submitted as alice and bob.

The instance is a second cluster (own slurmctld, slurmd, ports and state), so the
timings here are not disturbed by other tests on the default cluster and nothing
here touches it. Jobs checkpoint every second of "work", log the checkpoint
signal, exit on TERM (requeue) and resume from the checkpoint on restart.
"""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from bench.slurm_harness import Instance
from tests.slurm_fixtures import (  # noqa: F401  (iso, run: pytest fixtures)
    all_finished, attained, instance_fixture, iso, output_of, run, wait_for)

pytestmark = pytest.mark.slurm

cluster = instance_fixture("tt")


# ------------------------------------------------------------------ (a) short jobs overtake a long one

def _long_then_shorts(instance: Instance, long_work_s: int = 30, shorts: int = 5, short_work_s: int = 6,
                      gap_s: float = 3.0) -> dict:
    """A 16-GPU job takes the whole cluster, then a stream of 2-GPU jobs arrives."""
    long_id, long_dir = instance.submit("alice", 16, long_work_s, "long")
    wait_for(lambda: instance.squeue()[long_id]["job_state"] == "RUNNING", 30, "the long job to start")
    time.sleep(4)  # it attains 16 x 4 GPU-s > the 40 GPU-s threshold: queue 2
    submitted: dict[str, float] = {}
    for k in range(shorts):
        job_id, _ = instance.submit("bob" if k % 2 else "alice", 2, short_work_s, f"short{k}")
        submitted[job_id] = time.time()
        time.sleep(gap_s)
    ids = [long_id, *submitted]
    wait_for(lambda: all_finished(instance, ids), 180, "every job to finish", interval_s=1)
    jobs = instance.squeue()
    jct = [jobs[j]["end_time"] - submitted[j] for j in submitted]
    return {"long": jobs[long_id], "long_out": output_of(long_dir, long_id), "shorts": [jobs[j] for j in submitted],
            "avg_jct_s": statistics.mean(jct), "jct_s": jct}


def test_short_jobs_finish_sooner_with_the_controller_and_the_long_job_still_finishes(iso, run):
    stock = _long_then_shorts(iso)
    iso.cancel_all()
    run.start()
    tiresias = _long_then_shorts(iso)
    print(f"short-job average JCT: stock {stock['avg_jct_s']:.1f} s {[round(x) for x in stock['jct_s']]}, "
          f"controller {tiresias['avg_jct_s']:.1f} s {[round(x) for x in tiresias['jct_s']]}")
    for result in (stock, tiresias):
        assert result["long"]["job_state"] == "COMPLETED"
        assert "work=30" in result["long_out"]
        assert all(j["job_state"] == "COMPLETED" for j in result["shorts"])
    assert stock["long"]["restart_cnt"] == 0
    assert tiresias["long"]["restart_cnt"] >= 1  # it was preempted for the short jobs
    assert tiresias["avg_jct_s"] < 0.6 * stock["avg_jct_s"]


# ------------------------------------------------------------------ (b) signal, checkpoint, requeue, resume

def test_preempted_job_gets_the_signal_before_the_requeue_and_resumes(iso, run):
    run.start()
    long_id, long_dir = iso.submit("alice", 16, 20, "long")
    wait_for(lambda: attained(run, long_id) > 40, 40, "the long job to pass the 40 GPU-s threshold")
    before = attained(run, long_id)
    short_id, _ = iso.submit("bob", 4, 3, "short")
    wait_for(lambda: run.preemption_rows(), 30, "a preemption to be recorded")
    wait_for(lambda: all_finished(iso, [long_id, short_id]), 120, "both jobs to finish", interval_s=1)
    jobs = iso.squeue()
    assert jobs[long_id]["job_state"] == jobs[short_id]["job_state"] == "COMPLETED"
    assert jobs[long_id]["restart_cnt"] == 1
    out = output_of(long_dir, long_id)
    lines = out.splitlines()
    first_usr1 = next(i for i, line in enumerate(lines) if line.startswith("got USR1"))
    restart = next(i for i, line in enumerate(lines) if line.startswith("start") and "restart=1" in line)
    assert first_usr1 < restart, out
    assert "resume=0" not in lines[restart], out  # it resumed from its checkpoint
    assert lines[-1].startswith("done") and "work=20" in lines[-1], out
    assert (Path(long_dir) / f"ckpt.{long_id}").read_text().strip() == "20"
    # the short job ran while the long one waited
    assert jobs[short_id]["end_time"] <= jobs[long_id]["start_time"] + 1
    wait_for(lambda: (run.record(long_id) or None) and run.record(long_id).state == "DONE", 20,
             "the controller to see the long job finish")
    final = run.record(long_id)
    assert final.attained_gpu_s > before
    assert final.attained_gpu_s >= 16 * 20 * 0.9  # all 20 s of work at 16 GPUs, across both runs
    assert final.preemptions == 1 and final.restart_count == 1
    kinds = [d["kind"] for d in run.decisions(long_id)]
    assert "preempt" in kinds and "requeue" in kinds


# ------------------------------------------------------------------ (c) kill -9 mid-preemption

def test_controller_killed_mid_preemption_loses_nothing_and_requeues_once(iso, run):
    proc = run.start(preempt_grace_s=8.0)
    long_id, long_dir = iso.submit("alice", 16, 25, "long")
    wait_for(lambda: attained(run, long_id) > 40, 40, "the long job to pass the threshold")
    short_id, _ = iso.submit("bob", 4, 4, "short")
    wait_for(lambda: any(r["outcome"] is None for r in run.preemption_rows()), 30, "a preemption in flight")
    time.sleep(1.0)
    before = attained(run, long_id)
    proc.kill9()
    time.sleep(3)
    assert iso.squeue()[long_id]["job_state"] == "RUNNING"  # signalled, not yet requeued
    run.start(preempt_grace_s=8.0)
    ids = [long_id, short_id]
    wait_for(lambda: all_finished(iso, ids), 150, "both jobs to finish", interval_s=1)
    jobs = iso.squeue()
    assert all(jobs[j]["job_state"] == "COMPLETED" for j in ids), {j: jobs[j]["job_state"] for j in ids}
    assert "work=25" in output_of(long_dir, long_id)
    wait_for(lambda: run.record(long_id) and run.record(long_id).state == "DONE", 20, "the store to close the job")
    assert attained(run, long_id) >= before
    rows = run.preemption_rows()
    for job_id in ids:
        requeues = [r for r in rows if r["job_id"] == job_id and r["outcome"] == "requeued"]
        assert jobs[job_id]["restart_cnt"] <= len(requeues), (job_id, rows)
    requeue_calls = [d for d in run.decisions(long_id) if d["kind"] == "requeue" and d["applied"]]
    assert len(requeue_calls) == jobs[long_id]["restart_cnt"] == 1


# ------------------------------------------------------------------ (d) slurmctld outage

def test_controller_survives_a_slurmctld_outage(iso, run):
    proc = run.start()
    a_id, _ = iso.submit("alice", 8, 55, "a")
    b_id, _ = iso.submit("bob", 8, 55, "b")
    wait_for(lambda: all(iso.squeue()[j]["job_state"] == "RUNNING" for j in (a_id, b_id)), 30, "both to run")
    time.sleep(3)
    pid_file = Path(f"/run/slurmctld-{iso.name}.pid")
    ctld_pid = int(pid_file.read_text())
    os.kill(ctld_pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{ctld_pid}").exists(), 30, "slurmctld to exit")
    down_at = time.time()
    time.sleep(30)
    assert proc.alive()
    up_at = time.time()
    restarted = subprocess.run(["slurmctld"], env=iso.env, capture_output=True, text=True, timeout=30)
    assert restarted.returncode == 0, restarted.stderr
    wait_for(lambda: subprocess.run(["scontrol", "ping"], env=iso.env, capture_output=True, timeout=15)
             .returncode == 0, 60, "slurmctld to answer again")
    c_id, _ = iso.submit("alice", 2, 3, "after")
    ids = [a_id, b_id, c_id]
    wait_for(lambda: all_finished(iso, ids), 120, "every job to finish", interval_s=1)
    wait_for(lambda: "answers again" in run.log_text(), 30, "the controller to notice the recovery")
    assert proc.alive()
    log = run.log_text()
    assert log.count("cluster manager unavailable") == 1, log[-3000:]
    during = [d for d in run.decisions() if down_at + 1 < d["now_s"] < up_at and d["applied"]]
    assert during == []
    assert any(d["job_id"] == c_id for d in run.decisions())  # deciding again after the outage
    jobs = iso.squeue()
    assert all(jobs[j]["job_state"] == "COMPLETED" for j in ids), {j: jobs[j]["job_state"] for j in ids}
    assert attained(run, a_id) >= 8 * 50


# ------------------------------------------------------------------ (e) shadow mode

COMPARED = ("JobState", "Partition", "ReqNodeList", "ExcNodeList", "Requeue", "Restarts", "NodeList",
            "NumNodes", "TRES", "BatchFlag", "AdminComment")


def _slurm_view(instance: Instance) -> dict:
    jobs = instance.show_jobs()
    view = {j: {k: fields.get(k) for k in COMPARED} for j, fields in jobs.items()}
    sprio = instance.run(["sprio", "-h", "-o", "%.30i %.30S"], check=False).stdout
    for line in sprio.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in view:
            view[parts[0]]["SiteFactor"] = parts[1]
    return view


def test_shadow_mode_changes_nothing_in_slurm(iso, run):
    long_id, _ = iso.submit("alice", 16, 60, "long")
    wait_for(lambda: iso.squeue()[long_id]["job_state"] == "RUNNING", 30, "the long job to start")
    time.sleep(4)
    shorts = [iso.submit(user, 2, 5, "short")[0] for user in ("alice", "bob", "alice")]
    time.sleep(3)
    before = _slurm_view(iso)
    run.start(mode="shadow")
    wait_for(lambda: any("would" in (d["detail"] or "") for d in run.decisions()), 30, "shadow decisions")
    time.sleep(4)  # a few more rounds
    after = _slurm_view(iso)
    assert after == before
    details = [d["detail"] or "" for d in run.decisions()]
    assert any("would signal" in d for d in details)
    assert not any(d["applied"] for d in run.decisions())
    assert all(iso.squeue()[j]["job_state"] == "PENDING" for j in shorts)


# ------------------------------------------------------------------ (f) the job's own --exclude and -N

def test_a_jobs_own_exclude_and_node_count_shape_the_plan_and_its_pin(iso, run):
    """sbatch -N 2 --gres=gpu:2 --exclude=<node 1>, skew-sensitive (so the controller
    pins where it plans): the plan makes room, places it on two nodes other than node 1
    and pins exactly those; Slurm starts it there and it finishes. (Before, the plan put
    it on one node, node 1, and left it unpinned.)"""
    g1, g2, g3 = (f"{iso.name}g{i}" for i in (1, 2, 3))
    run.start()
    long_id, _ = iso.submit("bob", 16, 30, "long")
    wait_for(lambda: attained(run, long_id) > 40, 40, "the long job to pass the 40 GPU-s threshold")
    job_id, job_dir = iso.submit("alice", 4, 3, "own-nodes",  # the later -N/-n/--gres win
                                 extra=f"-N 2 -n 2 --gres=gpu:2 --exclude={g1} --comment=tiresias:skew=0.7")
    fields = iso.show_jobs()[job_id]
    assert fields["NumNodes"].startswith("2") and fields["ExcNodeList"] == g1, fields
    wait_for(lambda: iso.squeue()[job_id]["job_state"] != "PENDING", 60, "the job to start", interval_s=1)
    wait_for(lambda: all_finished(iso, [job_id]), 60, "the job to finish", interval_s=1)
    job = iso.squeue()[job_id]
    assert job["job_state"] == "COMPLETED" and job["nodes"] == f"{iso.name}g[2-3]", job
    starts = [d for d in run.decisions(job_id) if d["kind"] == "start"]
    details = [(d["reason"], d["detail"]) for d in starts]
    assert starts and all("not pinned" not in (d["detail"] or "") for d in starts), details
    assert any(f"pin_nodes({job_id}, ['{g2}', '{g3}'])" in (d["detail"] or "") for d in starts), details
    assert "done" in output_of(job_dir, job_id)

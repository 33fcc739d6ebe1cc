"""A cluster shaped like a site's, on real Slurm (issue 18, items 1 and 8): the
isolated instance TIRESIAS_INSTANCE_SITE=1 (containers/slurm-cluster.sh) has v100
nodes g[1-2], a100 nodes g[3-4], partitions batch (all) and urgent (g[3-4]) and
shards on g4; `tiresias run --mode enforce` runs as a real process, jobs as alice and bob.

bob's two v100 jobs (checkpointable) fall to queue 2; his two a100 jobs are outside
the contract (--no-requeue), so only v100 GPUs could be taken. alice's a100 job and
her job of partition urgent can use none of them: the old controller, which counted
16 interchangeable GPUs on one partition, signalled a v100 job for each. Neither may
cost bob a preemption now; alice's plain job (any type, batch) still does (control).
"""
from __future__ import annotations

import time

import pytest

from tests.slurm_fixtures import attained, instance_fixture, iso, run, wait_for  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.slurm

# The site-shaped isolated instance.
cluster = instance_fixture(name="site", extra_env={"TIRESIAS_INSTANCE_SITE": "1"})


def preempted(run) -> list[str]:
    return sorted(d["job_id"] for d in run.decisions() if d["kind"] in ("preempt", "requeue"))


def test_jobs_that_cannot_use_the_freed_gpus_preempt_nobody(iso, run):
    run.start(preempt_grace_s=3.0)
    v100 = [iso.submit("bob", 4, 600, f"v{k}", gpu_type="v100")[0] for k in range(2)]
    kept = [iso.submit("bob", 4, 600, f"a{k}", gpu_type="a100", extra="--no-requeue")[0] for k in range(2)]
    wait_for(lambda: all(attained(run, j) > 40 for j in v100 + kept), 60, "bob's jobs to reach queue 2")
    a100_job, _ = iso.submit("alice", 4, 5, "a100", gpu_type="a100")
    urgent_job, _ = iso.submit("alice", 4, 5, "urgent", extra="-p urgent")
    wait_for(lambda: all(run.record(j) is not None for j in (a100_job, urgent_job)), 20,
             "the controller to see alice's jobs")
    time.sleep(10)  # several rounds
    assert preempted(run) == [], run.decisions()
    assert {j: s["restart_cnt"] for j, s in iso.squeue().items() if j in v100} == {j: 0 for j in v100}
    # Control: a job of any type in batch may use a v100 job's GPUs: one yields.
    control, _ = iso.submit("alice", 4, 5, "control", extra="--time=10")
    wait_for(lambda: iso.squeue()[control]["job_state"] in ("RUNNING", "COMPLETED"), 60, "the control job to start")
    done = {d["job_id"] for d in run.decisions() if d["kind"] == "preempt" and d["applied"]}
    assert len(done) == 1 and done <= set(v100), run.decisions()


@pytest.mark.parametrize("order", ["a100-first", "a100-last"])
def test_a_job_of_a_partition_whose_only_nodes_run_queue_2_jobs_gets_its_victim_whatever_the_order(iso, run, order):
    """Issue 28's starvation: bob's four checkpointable jobs hold all 16 GPUs, all in
    queue 2; alice's queue-1 job of partition urgent (a100 nodes only) must make an
    a100 job yield within two rounds of Slurm calling it startable, whether the a100
    jobs are the higher (submitted first) or the lower priority ones of queue 2. The
    old controller picked victims in queue order, then dropped those off urgent's
    nodes: with the a100 jobs first, nobody yielded for ten minutes."""
    run.start(preempt_grace_s=3.0)
    kinds = ["a100", "v100"] if order == "a100-first" else ["v100", "a100"]
    bobs = {kind: [iso.submit("bob", 4, 600, f"{kind}{k}", gpu_type=kind)[0] for k in range(2)] for kind in kinds}
    ids = [j for kind in kinds for j in bobs[kind]]
    wait_for(lambda: all(iso.squeue()[j]["job_state"] == "RUNNING" for j in ids), 30, "bob's jobs to start")
    wait_for(lambda: all(attained(run, j) > 40 for j in ids), 60, "bob's jobs to reach queue 2")
    urgent, _ = iso.submit("alice", 4, 5, "urgent", extra="-p urgent")
    wait_for(lambda: iso.squeue()[urgent]["job_state"] in ("RUNNING", "COMPLETED"), 60,
             "alice's urgent job to start", seen=lambda: [(d["round_id"], d["kind"], d["reason"][:90])
                                                          for d in run.decisions(urgent)][-6:])
    mine = sorted(run.decisions(urgent), key=lambda d: d["round_id"])
    # the first round in which Slurm called it startable (not waiting on a reason of Slurm's)
    startable = min(d["round_id"] for d in mine if not (d["kind"] == "wait" and d["reason"].startswith("Slurm reason")))
    preempts = [d for d in run.decisions() if d["kind"] == "preempt" and d["applied"]]
    assert len(preempts) == 1 and preempts[0]["job_id"] in bobs["a100"], preempts  # one a100 job, never a v100 one
    assert f"than {urgent}" in preempts[0]["reason"], preempts[0]
    assert preempts[0]["round_id"] <= startable + 1, (startable, preempts[0]["round_id"], mine[:6])
    assert {j: s["restart_cnt"] for j, s in iso.squeue().items() if j in bobs["v100"]} == {j: 0 for j in bobs["v100"]}

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

"""Resources beyond GPUs on real Slurm (issue 28, item 2): a job Slurm cannot start on
what a preemption would free costs nobody a preemption; a plain job still does
(control). The isolated instance has 4 nodes of 4 GPUs and 8 CPUs (CR_Core:
CPUs are allocated, memory is not counted), so the CPU case runs on it as it is.

The --constraint case needs a node feature: every isolated instance gives its node
NAMEg1 alone ``Features=ib`` (containers/slurm-cluster.sh, node_lines). A --mem case needs memory as a consumable resource
(SelectTypeParameters=CR_Core_Memory): under CR_Core any --mem within RealMemory
fits every node and a larger one is refused at submit, so there is none here.
"""
from __future__ import annotations

import time

import pytest

from tests.slurm_fixtures import attained, instance_fixture, iso, run, wait_for  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.slurm

cluster = instance_fixture("tx")


def applied_preemptions(run) -> list[str]:
    return sorted(d["job_id"] for d in run.decisions() if d["kind"] == "preempt" and d["applied"])


def running(iso, job_ids) -> bool:
    jobs = iso.squeue()
    return all(jobs[j]["job_state"] == "RUNNING" for j in job_ids)


def preempts_nobody(iso, run, victims, waiting) -> None:
    """Several of the controller's rounds with the jobs ``waiting`` pending: no job was
    preempted and no victim restarted. Then they are cancelled."""
    wait_for(lambda: all(run.record(j) is not None for j in waiting), 20, "the controller to see the waiting jobs")
    time.sleep(10)  # several rounds
    assert applied_preemptions(run) == [], "\n".join(  # the decisions as explain tells them
        f"{d['decision_id']} {d['kind']} job {d['job_id']}: {d['reason']} ({d.get('detail')})"
        for d in reversed(run.decisions()))
    assert {j: s["restart_cnt"] for j, s in iso.squeue().items() if j in victims} == {j: 0 for j in victims}
    iso.run(["scancel", *waiting])


def control_preempts_one(iso, run, control, victims) -> list[str]:
    """The control job starts, for which exactly one of ``victims`` yielded."""
    wait_for(lambda: iso.squeue()[control]["job_state"] in ("RUNNING", "COMPLETED"), 60, "the control job to start",
             seen=lambda: run.decisions())
    done = applied_preemptions(run)
    assert len(done) == 1 and set(done) <= set(victims), run.decisions()
    return done


def test_a_job_whose_cpus_no_victim_frees_preempts_nobody(iso, run):
    run.start(preempt_grace_s=3.0)
    # Every node: a job outside the contract holding 1 GPU and 6 of its 8 CPUs (two never
    # fit one node), then a checkpointable 3-GPU job on its other GPUs (1 CPU).
    kept = [iso.submit("bob", 1, 600, f"cpu{k}", extra="--no-requeue -c 6")[0] for k in range(4)]
    wait_for(lambda: running(iso, kept), 30, "bob's 6-CPU jobs to start")
    victims = [iso.submit("bob", 3, 600, f"gpu{k}")[0] for k in range(4)]
    wait_for(lambda: running(iso, victims), 30, "bob's 3-GPU jobs to start")
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 60, "bob's 3-GPU jobs to reach queue 2")
    # 3 GPUs and 3 CPUs: a victim frees 3 GPUs but leaves 2 CPUs free on its node
    wide, _ = iso.submit("alice", 3, 5, "wide", extra="-c 3")
    preempts_nobody(iso, run, victims, [wide])
    # Control: 3 GPUs and one CPU fit where one 3-GPU job leaves: exactly one yields.
    control, _ = iso.submit("alice", 3, 5, "control", extra="--time=10")
    control_preempts_one(iso, run, control, victims)


def test_a_constraint_only_a_node_with_a_kept_job_has_preempts_nobody(iso, run):
    nodes = iso.run(["sinfo", "-h", "-N", "-o", "%N %f"]).stdout.split("\n")
    featured = sorted({line.split()[0] for line in nodes if line.strip() and "ib" in line.split()[1].split(",")})
    assert featured == [f"{iso.name}g1"], nodes  # containers/slurm-cluster.sh node_lines gives it ib
    run.start(preempt_grace_s=3.0)
    kept, _ = iso.submit("bob", 4, 600, "kept", extra=f"--no-requeue -w {iso.name}g1")
    victims = [iso.submit("bob", 4, 600, f"gpu{k}")[0] for k in range(3)]
    wait_for(lambda: running(iso, [kept] + victims), 30, "bob's jobs to start")
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 60, "bob's jobs to reach queue 2")
    ib, _ = iso.submit("alice", 4, 5, "ib", extra="--constraint=ib")
    preempts_nobody(iso, run, victims, [ib])
    control, _ = iso.submit("alice", 4, 5, "control", extra="--time=10")
    control_preempts_one(iso, run, control, victims)


def test_an_exclusive_job_where_every_node_keeps_a_job_preempts_nobody(iso, run):
    run.start(preempt_grace_s=3.0)
    # Every node: a 1-GPU job outside the contract, so no preemption can empty a node,
    # and a checkpointable 3-GPU job beside it.
    kept = [iso.submit("bob", 1, 600, f"kept{k}", extra=f"--no-requeue -w {iso.name}g{k + 1}")[0] for k in range(4)]
    wait_for(lambda: running(iso, kept), 30, "bob's kept jobs to start")
    victims = [iso.submit("bob", 3, 600, f"gpu{k}")[0] for k in range(4)]
    wait_for(lambda: running(iso, victims), 30, "bob's 3-GPU jobs to start")
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 60, "bob's 3-GPU jobs to reach queue 2")
    whole, _ = iso.submit("alice", 3, 5, "whole", extra="--exclusive")
    preempts_nobody(iso, run, victims, [whole])
    # Control: the same request without --exclusive fits where one 3-GPU job leaves.
    control, _ = iso.submit("alice", 3, 5, "control", extra="--time=10")
    control_preempts_one(iso, run, control, victims)

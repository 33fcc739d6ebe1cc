"""A partition's OverSubscribe=EXCLUSIVE and ``placement: count`` on a real slurmctld
(issue 35, items 4 and 5).

The site-shaped instance (TIRESIAS_INSTANCE_SITE=1: NAMEg[1-2] gpu:v100:4, NAMEg[3-4]
gpu:a100:4, partitions batch over all four and urgent over the a100 nodes) with urgent
made OverSubscribe=EXCLUSIVE: a job of urgent gets whole nodes. One whose nodes each
keep a job outside the contract costs no preemption (the brake never had to stop it);
one whose node a victim frees entirely gets exactly one and starts. With ``placement:
count`` the urgent newcomer's victim is an a100 job (the count alone picked the lowest
priority job, a v100 one, and another every round)."""
from __future__ import annotations

import time

import pytest

from tests.slurm_fixtures import attained, instance_fixture, iso, run, wait_for  # noqa: F401  (pytest fixtures)
from tests.test_slurm_resources import applied_preemptions, control_preempts_one, preempts_nobody, running

pytestmark = pytest.mark.slurm

cluster = instance_fixture("ox", extra_env={"TIRESIAS_INSTANCE_SITE": "1",
                                            "TIRESIAS_INSTANCE_CONF_EXTRA": "PartitionName=urgent OverSubscribe=EXCLUSIVE"})


def demoted(iso, run, nodes, user="bob"):
    """A checkpointable 4-GPU job of batch on each of ``nodes``, started in that order
    (the last one crosses into queue 2 last: the lowest priority), all in queue 2."""
    victims = []
    for node in nodes:
        job, _ = iso.submit(user, 4, 600, f"v{node}", extra=f"-p batch -w {iso.name}g{node}")
        wait_for(lambda: running(iso, [job]), 30, f"job on g{node} to start")
        victims.append(job)
        time.sleep(1)
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 90, "the jobs to reach queue 2")
    return victims


def node_of(iso, job_id) -> str:
    return iso.squeue()[job_id]["nodes"]


def test_partition_exclusive_job_whose_nodes_keep_a_job_preempts_nobody(iso, run):
    run.start(preempt_grace_s=3.0)
    # each a100 node: a 1-GPU job outside the contract and a checkpointable 3-GPU job beside
    # it; the v100 nodes full of jobs outside the contract (the control must preempt)
    kept = [iso.submit("bob", 1, 600, f"kept{k}", extra=f"-p batch --no-requeue -w {iso.name}g{k}")[0]
            for k in (3, 4)]
    kept += [iso.submit("bob", 4, 600, f"full{k}", extra=f"-p batch --no-requeue -w {iso.name}g{k}")[0]
             for k in (1, 2)]
    wait_for(lambda: running(iso, kept), 30, "bob's kept jobs to start")
    victims = [iso.submit("bob", 3, 600, f"gpu{k}", extra=f"-p batch -w {iso.name}g{k}")[0] for k in (3, 4)]
    wait_for(lambda: running(iso, victims), 30, "bob's 3-GPU jobs to start")
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 90, "bob's 3-GPU jobs to reach queue 2")
    whole, _ = iso.submit("alice", 3, 5, "whole", extra="-p urgent")  # whole nodes: its partition's rule
    wait_for(lambda: run.record(whole) is not None, 20, "the controller to see the urgent job")
    preempts_nobody(iso, run, victims, [whole])
    # control: the same request in batch (shares nodes) fits where one 3-GPU job leaves
    control, _ = iso.submit("alice", 3, 5, "control", extra="-p batch --time=10")
    control_preempts_one(iso, run, control, victims)


def test_partition_exclusive_job_gets_the_one_victim_that_empties_its_node(iso, run):
    run.start(preempt_grace_s=3.0)
    victims = demoted(iso, run, (3, 4, 1, 2))
    whole, _ = iso.submit("alice", 2, 5, "whole", extra="-p urgent --time=10")
    done = control_preempts_one(iso, run, whole, victims)
    assert node_of(iso, whole) in (f"{iso.name}g3", f"{iso.name}g4")
    assert done[0] in victims[:2]  # an a100 node's job: the only nodes urgent has
    time.sleep(5)
    assert applied_preemptions(run) == done


def test_count_placement_preempts_an_a100_job_for_the_a100_partition_job(iso, run):
    run.start(preempt_grace_s=3.0, placement="count")
    victims = demoted(iso, run, (3, 4, 1, 2))  # the a100 jobs first: a v100 job is the lowest priority
    newcomer, _ = iso.submit("alice", 4, 5, "a100", extra="-p urgent --time=10")
    wait_for(lambda: iso.squeue()[newcomer]["job_state"] in ("RUNNING", "COMPLETED"), 60,
             "the urgent job to start", seen=lambda: run.decisions())
    done = applied_preemptions(run)
    assert len(done) == 1 and done[0] in victims[:2], (done, run.decisions())
    # within two rounds of the first plan that named it
    decisions = run.decisions()
    first_round = min(d["round_id"] for d in decisions if d["job_id"] == newcomer)
    preempt = [d for d in decisions if d["kind"] == "preempt" and d["applied"]][0]
    assert preempt["round_id"] <= first_round + 1, (preempt, first_round)
    time.sleep(5)
    assert applied_preemptions(run) == done

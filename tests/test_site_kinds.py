"""Partitions, GPU types and reservations in the core: a plan starts a job only on
nodes it may use and preempts a victim only when the job it makes room for can use
that victim's GPUs (issue 18, items 1 and 5). On the old core every node was every
job's: each test below preempted across a partition, a type or a reservation."""

import pytest

from controller.core.engine import Engine, EngineConfig
from controller.core.model import JobSpec, JobState, Node, Snapshot, MIXED_TYPES
from controller.core.placement import Eligibility, node_fits

POLICIES = ["dlas", "las"]  # the MLFQ walk and the generic walk


def running(i, gpus, node, served=50_000.0, **spec):
    return JobState(spec=JobSpec(f"r{i}", gpus, 0.0, 1000.0, **spec), index=i, attained_gpu_s=served,
                    queue_service_gpu_s=served, first_start_s=0.0, run_start_s=0.0, running=True,
                    placement=((node, gpus),))


def pending(i, gpus, **spec):
    return JobState(spec=JobSpec(f"p{i}", gpus, 10.0, 1000.0, **spec), index=i)


def step(policy, jobs, nodes):
    return Engine(EngineConfig(policy=policy, thresholds_gpu_s=(3600.0,))).step(Snapshot(100.0, jobs, nodes))


def actions(plan):
    return sorted((a.kind, a.job_id) for a in plan.actions)


# two partitions on disjoint nodes, every GPU busy with a long-served job
PARTS = [Node("a1", 4, 0, partitions=("A",)), Node("b1", 4, 0, partitions=("B",))]
TYPES = [Node("v1", 4, 0, gpu_type="v100"), Node("x1", 4, 0, gpu_type="a100")]


@pytest.mark.parametrize("policy", POLICIES)
def test_job_of_partition_b_preempts_only_on_b_nodes(policy):
    jobs = [running(0, 4, "a1", partitions=("A",)), running(1, 4, "b1", partitions=("B",)),
            pending(2, 4, partitions=("B",))]
    plan = step(policy, jobs, PARTS)
    assert actions(plan) == [("preempt", "r1"), ("start", "p2")]
    assert plan.of_kind("start")[0].placement == (("b1", 4),)


@pytest.mark.parametrize("policy", POLICIES)
def test_job_of_partition_b_with_no_b_victim_preempts_nobody(policy):
    b_nodes = [Node("a1", 4, 0, partitions=("A",)), Node("b1", 4, 0, partitions=("B",))]
    jobs = [running(0, 4, "a1", partitions=("A",)), running(1, 4, "b1", partitions=("B",), served=10.0),
            pending(2, 4, partitions=("B",))]
    plan = step(policy, jobs, b_nodes)
    # r1 on B has less service than p2 would need to pass it? No: p2 (0 served) goes first,
    # and its only possible node is b1: r0 on A is never the victim
    assert ("preempt", "r0") not in actions(plan)


@pytest.mark.parametrize("policy", POLICIES)
def test_a100_job_never_preempts_a_v100_job(policy):
    jobs = [running(0, 4, "v1"), pending(1, 4, gpu_type="a100")]
    plan = step(policy, jobs, TYPES[:1] + [Node("x1", 4, 4, gpu_type="a100")])
    assert actions(plan) == [("start", "p1")]  # the free a100 node, no preemption
    jobs = [running(0, 4, "v1"), running(1, 4, "x1", served=10.0), pending(2, 4, gpu_type="a100")]
    plan = step(policy, jobs, TYPES)
    kinds = actions(plan)
    assert ("preempt", "r0") not in kinds


@pytest.mark.parametrize("policy", POLICIES)
def test_untyped_job_uses_any_type(policy):
    jobs = [running(0, 4, "v1"), pending(1, 4)]
    plan = step(policy, jobs, TYPES[:1] + [Node("x1", 4, 0, gpu_type="a100", available=False)])
    assert actions(plan) == [("preempt", "r0"), ("start", "p1")]


@pytest.mark.parametrize("policy", POLICIES)
def test_reserved_nodes_only_for_jobs_naming_the_reservation(policy):
    nodes = [Node("n1", 4, 4, reservation="maint"), Node("n2", 4, 0)]
    jobs = [running(0, 4, "n2"), pending(1, 4)]
    plan = step(policy, jobs, nodes)
    # the reserved node is free but not this job's: it never starts there
    assert all(a.placement != (("n1", 4),) for a in plan.of_kind("start"))
    plan = step(policy, [running(0, 4, "n2"), pending(1, 4, reservation="maint")], nodes)
    assert actions(plan) == [("start", "p1")]
    assert plan.of_kind("start")[0].placement == (("n1", 4),)


@pytest.mark.parametrize("policy", POLICIES)
def test_job_that_fits_nowhere_waits_and_says_why(policy):
    jobs = [running(0, 4, "v1"), pending(1, 2, gpu_type="h100")]
    plan = step(policy, jobs, TYPES)
    assert actions(plan) == []
    assert "--gres=gpu:h100:2" in plan.wait_reasons["p1"]
    assert "even when all are free" in plan.wait_reasons["p1"]


def test_node_fits_rules():
    mixed = Node("m", 8, 8, gpu_type=MIXED_TYPES, partitions=("A", "B"))
    assert node_fits(mixed, JobSpec("j", 1, 0.0, partitions=("B", "C")))
    assert not node_fits(mixed, JobSpec("j", 1, 0.0, partitions=("C",)))
    assert node_fits(mixed, JobSpec("j", 1, 0.0))  # any type
    assert not node_fits(mixed, JobSpec("j", 1, 0.0, gpu_type="a100"))  # which GPUs are a100 is not known
    mig = Node("g", 7, 7, gpu_type="1g.10gb")
    assert node_fits(mig, JobSpec("j", 1, 0.0, gpu_type="1g.10gb"))
    assert not node_fits(mig, JobSpec("j", 1, 0.0, gpu_type="3g.40gb"))
    assert Eligibility([Node("n", 4, 4)]).allowed(JobSpec("j", 1, 0.0, partitions=("X",))) is None

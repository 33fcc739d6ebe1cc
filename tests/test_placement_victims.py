"""Placement never changes who may be preempted (issue 35, item 4).

With ``placement: count`` the walk's cluster-wide count decides which pending jobs
start and in what order, but on a cluster of real nodes the victims for a newcomer
are chosen among the jobs on the nodes it may use, only a set that makes it fit, as
in spread. On the old core, count mode preempted whatever the count left out: on the
site shape (ab1-2 gpu:a100:4 in partitions gpu and a100, ab3-4 gpu:v100:4 in gpu) a
v100 job was requeued for an a100-partition job, which stayed pending, and the plan
named another victim every round. The replay's count on its one pseudo-node (no real
nodes) is unchanged."""
import dataclasses
import itertools

import pytest

from controller.core.engine import Engine, EngineConfig
from controller.core.model import JobSpec, JobState, Node, Snapshot
from controller.core.placement import COUNT_NODE
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)
from tests.test_victims import demoted_jobs, preempted, settle, site_nodes

ORDERS = list(itertools.permutations(["ab1", "ab2", "ab3", "ab4"]))


def demoted(order):
    """One preemptable 4-GPU job per node, queue 2, settled in ``order`` (the last one
    is the lowest priority), and a pending 4-GPU job of partition a100."""
    jobs = [JobState(spec=JobSpec(f"r{node}", 4, 0.0, 1e6, partitions=("gpu",)), index=k, running=True,
                     attained_gpu_s=5e4, queue_service_gpu_s=5e4, first_start_s=0.0, run_start_s=0.0,
                     placement=((node, 4),), queue_level=1, queue_entry=float(k))
            for k, node in enumerate(order)]
    jobs.append(JobState(spec=JobSpec("p", 4, 10.0, 1e6, partitions=("a100",)), index=9))
    return jobs


@pytest.mark.parametrize("policy", ["dlas", "las"])
@pytest.mark.parametrize("order", ORDERS, ids="-".join)
def test_count_mode_victim_is_on_a_node_the_newcomer_may_use(order, policy):
    plan = Engine(EngineConfig(policy=policy, placement="count")).step(Snapshot(100.0, demoted(order), site_nodes()))
    victims = [a.job_id for a in plan.of_kind("preempt")]
    assert len(victims) == 1 and victims[0] in ("rab1", "rab2"), victims
    if policy == "dlas":  # the a100 job settled last in queue 2 is the lowest priority there
        assert victims == [f"r{[node for node in order if node in ('ab1', 'ab2')][-1]}"]
    assert [a.job_id for a in plan.of_kind("start")] == ["p"]
    assert "on nodes it may use" in plan.of_kind("preempt")[0].reason


@pytest.mark.parametrize("policy", ["dlas", "las"])
def test_count_mode_no_victim_when_no_set_makes_it_fit(policy):
    # both a100 nodes run jobs outside the contract: preempting the v100 jobs would not
    # start the a100 job, so nobody is preempted for it
    jobs = demoted(("ab3", "ab4", "ab1", "ab2"))
    for job in jobs[2:4]:
        job.spec = dataclasses.replace(job.spec, preemptable=False)
    plan = Engine(EngineConfig(policy=policy, placement="count")).step(Snapshot(100.0, jobs, site_nodes()))
    assert not plan.of_kind("preempt")


def test_count_mode_a_newcomer_that_fits_on_free_gpus_preempts_nobody():
    # ab2 is free; the count leaves rab4 (lowest) out, but the a100 job fits on ab2 as it is
    nodes = site_nodes()
    nodes[1] = dataclasses.replace(nodes[1], gpus_free=4)
    jobs = [job for job in demoted(("ab3", "ab1", "ab4", "ab2")) if job.job_id != "rab2"]
    jobs.append(JobState(spec=JobSpec("q", 4, 11.0, 1e6), index=10))
    plan = Engine(EngineConfig(policy="dlas", placement="count")).step(Snapshot(100.0, jobs, nodes))
    starts = [a.job_id for a in plan.of_kind("start")]
    assert starts[0] == "p"
    # q (any node) fits only by preempting: the lowest-priority job, rab4, yields to q alone
    assert [a.job_id for a in plan.of_kind("preempt")] == ["rab4"]
    assert "lower priority than q, on nodes it may use" in plan.of_kind("preempt")[0].reason


def test_count_mode_on_the_pseudo_node_keeps_the_walks_count():
    # the replay's count mode: one node '*' holding every GPU; the walk's victims stand
    nodes = [Node(COUNT_NODE, 16, 0)]
    jobs = [JobState(spec=JobSpec(f"r{k}", 4, 0.0, 1e6), index=k, running=True, attained_gpu_s=5e4,
                     queue_service_gpu_s=5e4, first_start_s=0.0, run_start_s=0.0, placement=((COUNT_NODE, 4),),
                     queue_level=1, queue_entry=float(k)) for k in range(4)]
    jobs.append(JobState(spec=JobSpec("p", 8, 10.0, 1e6), index=9))
    plan = Engine(EngineConfig(policy="dlas", placement="count")).step(Snapshot(100.0, jobs, nodes))
    assert [a.job_id for a in plan.of_kind("preempt")] == ["r2", "r3"]
    assert [(a.job_id, a.placement) for a in plan.of_kind("start")] == [("p", ((COUNT_NODE, 8),))]


def test_count_mode_controller_preempts_an_a100_job_once_and_no_other(store):
    # the run: two a100-partition jobs first, then two v100 jobs, all demoted;
    # a 4-GPU job of partition a100 arrives
    backend = ScriptedBackend()
    backend.nodes = site_nodes(free=4)
    demoted_jobs(backend, ("ab1", "ab2", "ab3", "ab4"), partition_of=lambda node: "gpu")
    c = controller(store, backend, placement="count")
    settle(c, backend)
    backend.add("9", 4)
    backend.jobs["9"] = dataclasses.replace(backend.jobs["9"], partition="a100")
    backend.now += 10
    c.run_round()
    assert preempted(backend) == ["rab2"]
    for _ in range(3):  # its grace period: the victim's GPUs are job 9's, nobody else yields
        backend.now += 3
        c.run_round()
    assert preempted(backend) == ["rab2"]

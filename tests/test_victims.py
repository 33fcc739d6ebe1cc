"""Victims per usable node set, decided once in the core (issue 28, item 1).

A job the plan starts by preemption takes its victims from the running, preemptable
jobs of strictly lower priority on the nodes it may use (partitions, GPU type,
reservation, --nodelist/--exclude), lowest priority first, and only a set that makes
it fit; none: nobody is preempted for it, and explain says what holds its nodes.

On the old core the walk chose victims by a cluster-wide GPU count and only then
filtered them by the newcomer's nodes: every test below failed there (an a100 job
left waiting while an a100 node ran a queue-2 job; an urgent job starved unless the
queue-2 job on its node happened to be last; a reason that said "no allowed node set
has them free"; a victim preempted for a job that fitted on free GPUs)."""
import dataclasses
import itertools

import pytest

from controller.core.engine import Engine, EngineConfig
from controller.core.model import JobSpec, JobState, Node, Snapshot
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)

A100 = ("gpu", "a100")


def site_nodes(free=0):
    """The site's shape: ab1-2 (gpu:a100:4, partitions gpu and a100), ab3-4 (gpu:v100:4, gpu)."""
    return [Node("ab1", 4, free, partitions=A100, gpu_type="a100"),
            Node("ab2", 4, free, partitions=A100, gpu_type="a100"),
            Node("ab3", 4, free, partitions=("gpu",), gpu_type="v100"),
            Node("ab4", 4, free, partitions=("gpu",), gpu_type="v100")]


def preempted(backend):
    return [call[1] for call in backend.calls if call[0] == "signal"]


def demoted_jobs(backend, nodes_in_start_order, partition_of=lambda node: "gpu", gpus=4):
    """One long-running job per node, started in this order (so crossing into queue 2
    in this order: the last one is the lowest priority); job ids r<node>."""
    for k, node in enumerate(nodes_in_start_order):
        job_id = f"r{node}"
        start = backend.now - 5000 + 10 * k
        backend.add(job_id, gpus, state="RUNNING", start=start, nodes=((node, gpus),))
        backend.jobs[job_id] = dataclasses.replace(backend.jobs[job_id], partition=partition_of(node),
                                                   submit_time_s=start - 1)


def settle(c, backend):
    c.run_round()
    backend.now += 600
    c.run_round()  # every running job long past queue 1, places settled


# ------------------------------------------------------------- (1) a100 / v100

A100_ORDERS = [("ab1", "ab2", "ab3", "ab4"), ("ab3", "ab1", "ab4", "ab2"), ("ab2", "ab4", "ab1", "ab3"),
               ("ab3", "ab4", "ab1", "ab2")]


@pytest.mark.parametrize("order", A100_ORDERS, ids="-".join)
def test_a100_job_preempts_the_lowest_priority_a100_job_never_a_v100_one(store, order):
    backend = ScriptedBackend()
    backend.nodes = site_nodes(free=4)
    demoted_jobs(backend, order)
    c = controller(store, backend)
    settle(c, backend)
    backend.add("9", 4)
    backend.jobs["9"] = dataclasses.replace(backend.jobs["9"], partition="a100", gpu_type="a100")
    backend.now += 10
    report = c.run_round()
    lowest_a100 = [node for node in order if node in ("ab1", "ab2")][-1]
    assert preempted(backend) == [f"r{lowest_a100}"]
    assert [(a.job_id, a.placement) for a in report.plan.of_kind("start")] == [("9", ((lowest_a100, 4),))]
    assert "lower priority than 9, on nodes it may use" in report.plan.of_kind("preempt")[0].reason
    for _ in range(2):  # in the victim's grace period its GPUs are job 9's: nobody else is preempted
        backend.now += 3
        c.run_round()
    assert preempted(backend) == [f"r{lowest_a100}"]


@pytest.mark.parametrize("order", list(itertools.permutations(["ab1", "ab2", "ab3", "ab4"])), ids="-".join)
def test_engine_every_order_the_victim_is_on_an_a100_node(order):
    jobs = [JobState(spec=JobSpec(f"r{node}", 4, 0.0, 1e6, partitions=("gpu",)), index=k, running=True,
                     attained_gpu_s=5e4, queue_service_gpu_s=5e4, first_start_s=0.0, run_start_s=0.0,
                     placement=((node, 4),), queue_level=1, queue_entry=float(k))
            for k, node in enumerate(order)]
    jobs.append(JobState(spec=JobSpec("p", 4, 10.0, 1e6, partitions=("a100",), gpu_type="a100"), index=9))
    for policy in ("dlas", "las"):
        plan = Engine(EngineConfig(policy=policy)).step(Snapshot(100.0, list(jobs), site_nodes()))
        victims = [a.job_id for a in plan.of_kind("preempt")]
        if policy == "dlas":  # the MLFQ walk: the a100 job settled last in queue 2 is the lowest priority
            assert victims == [f"r{[node for node in order if node in ('ab1', 'ab2')][-1]}"]
        assert len(victims) == 1 and victims[0] in ("rab1", "rab2")
        assert [dict(a.placement) for a in plan.of_kind("start")] == [{victims[0][1:]: 4}]


# ------------------------------------------------------------- (2) urgent starvation

@pytest.mark.parametrize("order", list(itertools.permutations(["n1", "n2", "n3"])), ids="-".join)
def test_urgent_job_gets_its_victim_on_its_only_node_in_its_first_round(store, order):
    backend = ScriptedBackend()
    backend.nodes = [Node("n1", 4, 4, partitions=("batch",)), Node("n2", 4, 4, partitions=("batch",)),
                     Node("n3", 4, 4, partitions=("batch", "urgent"))]
    demoted_jobs(backend, order, partition_of=lambda node: "batch")
    c = controller(store, backend)
    settle(c, backend)
    backend.add("9", 4)
    backend.jobs["9"] = dataclasses.replace(backend.jobs["9"], partition="urgent")
    backend.now += 10
    report = c.run_round()  # its first round: startable by preempting the queue-2 job on n3
    assert preempted(backend) == ["rn3"]
    assert [(a.job_id, a.placement) for a in report.plan.of_kind("start")] == [("9", (("n3", 4),))]


# ------------------------------------------------------------- (3) no set frees enough

def test_no_set_of_victims_makes_it_fit_nobody_is_preempted_and_explain_says_why(store):
    backend = ScriptedBackend()
    backend.nodes = site_nodes(free=4)
    demoted_jobs(backend, ("ab3", "ab4", "ab2"))  # queue 2; rab2 outside the contract (not requeueable)
    backend.jobs["rab2"] = dataclasses.replace(backend.jobs["rab2"], requeueable=False)
    c = controller(store, backend)
    settle(c, backend)
    backend.add("7", 4, state="RUNNING", start=backend.now, nodes=(("ab1", 4),))  # queue 1, just started
    backend.jobs["7"] = dataclasses.replace(backend.jobs["7"], partition="a100")
    backend.add("9", 4)
    backend.jobs["9"] = dataclasses.replace(backend.jobs["9"], partition="a100", gpu_type="a100",
                                            submit_time_s=backend.now + 1)
    backend.now += 1
    report = c.run_round()
    assert preempted(backend) == [] and not report.plan.of_kind("start")
    plan, _ = c.preview()
    assert plan.wait_reasons["9"] == (
        "node constraints (--partition=a100 --gres=gpu:a100:4): waits for 4 GPUs on ab[1-2] (0 free):"
        " held by job 7 (queue 1, higher priority), job rab2 (queue 2, may not be preempted)")


def _job(i, gpus, node=None, served=0.0, level=None, entry=None, **spec):
    running = node is not None
    return JobState(spec=JobSpec(f"j{i}", gpus, float(i), 1e6, **spec), index=i, running=running,
                    attained_gpu_s=served, queue_service_gpu_s=served, first_start_s=0.0 if running else None,
                    run_start_s=0.0 if running else None, placement=((node, gpus),) if running else (),
                    queue_level=level, queue_entry=entry)


def test_lower_priority_jobs_that_would_not_make_it_fit_keep_running():
    # j3 (4 GPUs of partition a100) could preempt j1 (queue 2) on ab1, but j0 (queue 1)
    # keeps the other half of ab1 and ab2 is j2's (queue 1): no set makes it fit
    nodes = site_nodes()
    jobs = [_job(0, 2, "ab1", served=10.0, level=0, entry=0.0, partitions=A100),
            _job(1, 2, "ab1", served=5e4, level=1, entry=0.0, partitions=A100),
            _job(2, 4, "ab2", served=10.0, level=0, entry=1.0, partitions=A100),
            _job(4, 4, "ab3", served=5e4, level=1, entry=1.0, partitions=("gpu",)),
            _job(5, 4, "ab4", served=5e4, level=1, entry=2.0, partitions=("gpu",)),
            _job(3, 4, partitions=("a100",))]
    plan = Engine(EngineConfig(policy="dlas")).step(Snapshot(100.0, jobs, nodes))
    assert not plan.of_kind("preempt") and not plan.of_kind("start")
    reason = plan.wait_reasons["j3"]
    assert reason.startswith("node constraints (--partition=a100): waits for 4 GPUs on ab[1-2] (0 free): held by")
    assert "job j0 (queue 1, higher priority)" in reason and "job j2 (queue 1, higher priority)" in reason
    assert reason.endswith("preempting the lower-priority job(s) there (j1) would not make it fit")


# ------------------------------------------------------------- (4) fits on free GPUs

def fits_on_free_gpus_cluster():
    """ab1 free; ab2 half held by j1 (queue 1), half by j2 (queue 2); the v100 nodes
    held by queue-1 jobs. j5 (2 GPUs, a100) fits on ab1 as it is; j6 (4 GPUs, v100)
    has nothing it may take. The old walk counted j5 and j6 against the cluster,
    chose j2 as the victim and placed j5 on j2's GPUs (best fit), so j2 was preempted
    for a job that fitted on free GPUs."""
    nodes = [Node("ab1", 4, 4, partitions=A100, gpu_type="a100"),
             Node("ab2", 4, 0, partitions=A100, gpu_type="a100"),
             Node("ab3", 4, 0, partitions=("gpu",), gpu_type="v100"),
             Node("ab4", 4, 0, partitions=("gpu",), gpu_type="v100")]
    jobs = [_job(1, 2, "ab2", served=10.0, level=0, entry=0.0),
            _job(2, 2, "ab2", served=5e4, level=1, entry=0.0),
            _job(3, 4, "ab3", served=10.0, level=0, entry=1.0),
            _job(4, 4, "ab4", served=10.0, level=0, entry=2.0),
            _job(5, 2, partitions=("a100",)),
            _job(6, 4, gpu_type="v100")]
    return jobs, nodes


def test_a_job_that_fits_on_free_gpus_preempts_nobody():
    jobs, nodes = fits_on_free_gpus_cluster()
    plan = Engine(EngineConfig(policy="dlas")).step(Snapshot(100.0, jobs, nodes))
    assert not plan.of_kind("preempt")
    assert [(a.job_id, a.placement) for a in plan.of_kind("start")] == [("j5", (("ab1", 2),))]
    assert "held by job j3 (queue 1, higher priority), job j4 (queue 1, higher priority)" in plan.wait_reasons["j6"]


def test_a_job_that_fits_on_free_gpus_preempts_nobody_in_the_controller(store):
    backend = ScriptedBackend()
    backend.nodes = site_nodes(free=4)
    demoted_jobs(backend, ("ab2",), gpus=2)  # queue 2, half of ab2
    c = controller(store, backend)
    settle(c, backend)
    for job_id, node, gpus in (("1", "ab2", 2), ("3", "ab3", 4), ("4", "ab4", 4)):  # queue 1, just started
        backend.add(job_id, gpus, state="RUNNING", start=backend.now, nodes=((node, gpus),))
        backend.jobs[job_id] = dataclasses.replace(backend.jobs[job_id], partition="gpu")
    backend.add("5", 2)
    backend.jobs["5"] = dataclasses.replace(backend.jobs["5"], partition="a100")
    backend.add("6", 4)
    backend.jobs["6"] = dataclasses.replace(backend.jobs["6"], partition="gpu", gpu_type="v100")
    report = c.run_round()
    assert preempted(backend) == []
    assert [(a.job_id, a.placement) for a in report.plan.of_kind("start")] == [("5", (("ab1", 2),))]
    plan, _ = c.preview()
    assert plan.wait_reasons["6"] == ("node constraints (--partition=gpu --gres=gpu:v100:4): waits for 4 GPUs on"
                                      " ab[3-4] (0 free): held by job 3 (queue 1, higher priority), job 4"
                                      " (queue 1, higher priority)")


# ------------------------------------------------------------- the uniform case

def test_where_every_job_may_use_every_node_the_walks_victims_stand():
    # mixed gang sizes, one node set: the walk keeps j1 (2 GPUs) and preempts j2 (4),
    # though j3 (1 GPU) is lower still: the published walk, unchanged
    nodes = [Node("n1", 4, 0), Node("n2", 4, 0)]
    jobs = [_job(1, 2, "n1", served=5e4, level=1, entry=0.0),
            _job(2, 4, "n2", served=5e4, level=1, entry=1.0),
            _job(3, 1, "n1", served=5e4, level=1, entry=2.0),
            _job(4, 3)]
    plan = Engine(EngineConfig(policy="dlas")).step(Snapshot(100.0, jobs, nodes))
    assert [a.job_id for a in plan.of_kind("preempt")] == ["j2"]
    assert [(a.job_id, a.placement) for a in plan.of_kind("start")] == [("j4", (("n2", 3),))]


# ------------------------------------------------------------- a full partition's many newcomers

def test_newcomers_of_a_full_partition_wait_and_one_that_fits_still_starts():
    # ab1 is j0's, ab2 half j1's (both queue 1, higher priority); the walk's count takes
    # j5, j6 (4 GPUs of a100) and j7 (2) and gives the queue-2 v100 jobs' GPUs to them.
    # j5 is out of reach on ab[1-2] (2 free, nothing lower there): j6, as large and
    # after it, is out of reach too without a search (victims.choose_victims keeps
    # that per node set); j7, smaller, is still placed; nobody is preempted
    nodes = site_nodes()
    nodes[1] = dataclasses.replace(nodes[1], gpus_free=2)
    jobs = [_job(0, 4, "ab1", served=10.0, level=0, entry=0.0, partitions=A100),
            _job(1, 2, "ab2", served=10.0, level=0, entry=1.0, partitions=A100),
            _job(2, 4, "ab3", served=5e4, level=1, entry=0.0, partitions=("gpu",)),
            _job(3, 4, "ab4", served=5e4, level=1, entry=1.0, partitions=("gpu",)),
            _job(5, 4, partitions=("a100",)), _job(6, 4, partitions=("a100",)), _job(7, 2, partitions=("a100",))]
    engine = Engine(EngineConfig(policy="dlas"))
    for _ in range(2):  # the second round with the first round's node answers (same nodes)
        plan = engine.step(Snapshot(100.0, [dataclasses.replace(job) for job in jobs], nodes))
        assert not plan.of_kind("preempt")
        assert [(a.job_id, a.placement) for a in plan.of_kind("start")] == [("j7", (("ab2", 2),))]
        reason = plan.wait_reasons["j5"]
        assert reason.startswith("node constraints (--partition=a100): waits for 4 GPUs on ab[1-2] (2 free)")
        assert plan.wait_reasons["j6"] == reason
    # the nodes change (ab2 leaves partition a100): the answers follow
    nodes[1] = dataclasses.replace(nodes[1], partitions=("gpu",))
    plan = engine.step(Snapshot(100.0, [dataclasses.replace(job) for job in jobs], nodes))
    assert not plan.of_kind("start") and not plan.of_kind("preempt")
    assert plan.wait_reasons["j7"].startswith("node constraints (--partition=a100): waits for 2 GPUs on ab1 (0 free)")


# ------------------------------------------------------------- the walk's count and other partitions' jobs

def test_queue1_job_of_a_small_partition_gets_its_victim_behind_unplaceable_jobs_of_another():
    # partition big (b1, b2) is held by queue-1 jobs j0, j1 (higher priority); partition
    # small (s1) by the queue-2 job j2. Ten queue-1 jobs of big (j10..j19) rank ahead of
    # j30 of small: none can be placed (no free GPU, nothing lower on big). On the old
    # walk they used up its cluster-wide count (4 GPUs beyond the queue-1 running jobs)
    # and j30 waited behind j2 for as long as they waited; now the walk passes them
    # (controller.core.victims.OwnNodesReach) and j30 gets j2's GPUs in its first round
    nodes = [Node("b1", 4, 0, partitions=("big",)), Node("b2", 4, 0, partitions=("big",)),
             Node("s1", 4, 0, partitions=("small",))]
    jobs = [_job(0, 4, "b1", served=10.0, level=0, entry=0.0, partitions=("big",)),
            _job(1, 4, "b2", served=10.0, level=0, entry=1.0, partitions=("big",)),
            _job(2, 4, "s1", served=5e4, level=1, entry=0.0, partitions=("small",))]
    jobs += [_job(i, 1 + i % 2, partitions=("big",)) for i in range(10, 20)]
    jobs.append(_job(30, 4, partitions=("small",)))
    plan = Engine(EngineConfig(policy="dlas")).step(Snapshot(100.0, jobs, nodes))
    assert [a.job_id for a in plan.of_kind("preempt")] == ["j2"]
    assert "lower priority than j30, on nodes it may use" in plan.of_kind("preempt")[0].reason
    assert [(a.job_id, a.placement) for a in plan.of_kind("start")] == [("j30", (("s1", 4),))]
    # the passed jobs wait with the reason of a job no preemption could place
    assert plan.wait_reasons["j10"] == ("node constraints (--partition=big): waits for 1 GPUs on b[1-2] (0 free):"
                                        " held by job j0 (queue 1, higher priority), job j1 (queue 1, higher"
                                        " priority)")


def test_where_every_job_may_use_every_node_the_walk_passes_nobody():
    # the same shape on one partition: the count is every job's reach, and the walk takes
    # the first queue-1 jobs as before (j10, j11, j12 fill the count; nobody passed)
    nodes = [Node("n1", 4, 0), Node("n2", 4, 0), Node("n3", 4, 0)]
    jobs = [_job(0, 4, "n1", served=10.0, level=0, entry=0.0),
            _job(1, 4, "n2", served=10.0, level=0, entry=1.0),
            _job(2, 4, "n3", served=5e4, level=1, entry=0.0)]
    jobs += [_job(i, 1 + i % 2) for i in range(10, 20)]
    plan = Engine(EngineConfig(policy="dlas")).step(Snapshot(100.0, jobs, nodes))
    assert [a.job_id for a in plan.of_kind("preempt")] == ["j2"]
    assert [a.job_id for a in plan.of_kind("start")] == ["j10", "j11", "j12"]

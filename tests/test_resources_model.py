"""Every resource Slurm checks before it starts a job, in the plan's model (issue 28,
item 2): a pending job is a reason to preempt only where Slurm would start it on what
the preemption frees: its GPUs, CPUs and memory per node free once the victims there
leave, the node's features, and for --exclusive no other job left on the node. A
request the model cannot express (an OR constraint, a count the release or the
nodes do not report) is never a reason to preempt, and the wait reason says so.

The pending jobs are what the Slurm adapter makes of recorded job 4 of each release
with sbatch's fields set (--mem, --mem-per-cpu, --mem-per-gpu, -c, --constraint,
--exclusive); the controller is the real one, over the scripted backend of
tests/test_controller.py whose nodes report CPUs, memory and features as sinfo does.
The old plan (GPUs only) preempted in every "nobody" case below."""
import copy
import dataclasses
import json
from pathlib import Path

import pytest

from controller.core.model import ALL_MEMORY, Node
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult
from slurm_plugin.parse_jobs import parse_squeue_json
from slurm_plugin.parse_nodes import parse_sinfo_json
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"
VERSIONS = ["22.05", "24.11", "26.05"]


def recorded(version, name):
    return json.loads((FIXTURES / version / name).read_text())


def number(version, value):
    """A count as the release writes it (22.05 plain, 23.02+ a set/infinite/number object)."""
    return value if version == "22.05" else {"set": True, "infinite": False, "number": value}


def pending_record(version, gpus=1, **fields):
    """Recorded pending job 4 asking for ``gpus`` GPUs (--gres=gpu:N) and ``fields``."""
    record = copy.deepcopy(next(j for j in recorded(version, "squeue.json")["jobs"] if j["job_id"] == 4))
    record["tres_per_node"] = f"gres:gpu:{gpus}" if version == "22.05" else f"gres/gpu:{gpus}"
    record["tres_req_str"] = f"cpu=1,node=1,billing=1,gres/gpu={gpus}"
    record.update(fields)
    return record


def adapter_view(version, record, select="CR_Core"):
    """The ObservedJob the Slurm adapter makes of ``record`` (with the release's nodes,
    on a cluster of SelectTypeParameters ``select``)."""
    outputs = {"squeue": json.dumps({"jobs": [record]}), "sinfo": (FIXTURES / version / "sinfo.json").read_text(),
               "scontrol": f"SelectType              = select/cons_tres\nSelectTypeParameters    = {select}\n"}
    backend = SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, outputs.get(argv[0], ""), ""))
    backend.slurm_config()  # as the preflight reads it at start
    [job] = backend.observe().jobs
    return job


# ------------------------------------------------------------------ parsing, every release

@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_jobs_read_their_cpus_memory_features_and_sharing(version):
    jobs = {j.job_id: j for j in parse_squeue_json(recorded(version, "squeue.json"))}
    pending = jobs["4"]  # sbatch --gres=gpu:1, nothing else: one CPU, no memory asked, no constraint
    assert (pending.cpus, pending.min_cpus_per_node, pending.cpus_per_gpu) == (1, 1, 0)
    assert (pending.mem_per_node_mb, pending.mem_per_cpu_mb, pending.mem_per_gpu_mb) == (0, 0, 0)
    assert (pending.constraint.text, pending.constraint.features, pending.shared) == ("", (), "")
    assert jobs["10"].cpus == 4  # -N 4: a CPU on each
    running = jobs["5"]  # on gpu1: its CPU and the memory Slurm allocated (CR_Core: none)
    assert (running.allocated_nodes, running.cpus_by_node, running.mem_by_node_mb) == (["gpu1"], (1,), (0,))


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_nodes_read_cpus_memory_and_features(version):
    nodes = {n.name: n for n in parse_sinfo_json(recorded(version, "sinfo.json"))}
    assert {name: (n.cpus_total, n.cpus_alloc, n.mem_total_mb, n.mem_alloc_mb, n.features)
            for name, n in nodes.items()} == {
        "gpu1": (8, 1, 16000, 0, ()), "gpu2": (8, 2, 16000, 0, ()), "gpu3": (8, 0, 16000, 0, ()),
        "gpu4": (8, 1, 16000, 0, ())}


@pytest.mark.parametrize("version", VERSIONS)
def test_memory_requests_of_each_kind_are_read_per_node(version):
    gres_gpu = "gres:gpu:" if version == "22.05" else "gres/gpu:"
    unset = None if version == "22.05" else {"set": False, "infinite": False, "number": 0}
    per_node = adapter_view(version, pending_record(version, 2, memory_per_node=number(version, 20000)))
    per_cpu = adapter_view(version, pending_record(version, 2, memory_per_node=unset, cpus=number(version, 6),
                                                   minimum_cpus_per_node=number(version, 6),
                                                   memory_per_cpu=number(version, 3000)))
    per_gpu = adapter_view(version, pending_record(version, 2, memory_per_node=unset,
                                                   memory_per_tres=gres_gpu + "12000"))
    cpus_per_gpu = adapter_view(version, pending_record(version, 2, cpus_per_tres=gres_gpu + "5"))
    assert (per_node.mem_per_node_mb, per_node.cpus_per_node) == (20000, 1)
    assert (per_cpu.mem_per_node_mb, per_cpu.cpus_per_node) == (18000, 6)
    assert per_gpu.mem_per_node_mb == 24000  # 2 GPUs on its one node
    assert cpus_per_gpu.cpus_per_node == 10
    assert all(job.unmodelled == "" for job in (per_node, per_cpu, per_gpu, cpus_per_gpu))


@pytest.mark.parametrize("version, shared, exclusive, unmodelled", [
    ("22.05", "none", True, ""), ("22.05", None, False, ""), ("22.05", "user", False, "--exclusive=user"),
    ("24.11", ["none"], True, ""), ("24.11", [], False, ""), ("24.11", ["oversubscribe"], False, ""),
    ("26.05", ["mcs"], False, "--exclusive=mcs"), ("26.05", ["none"], True, ""),
])
def test_exclusive_is_read_from_shared(version, shared, exclusive, unmodelled):
    job = adapter_view(version, pending_record(version, 1, shared=shared))
    assert (job.exclusive, job.unmodelled) == (exclusive, unmodelled)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_field_the_release_lacks_is_unknown_never_zero(version):
    for field, says in (("memory_per_node", "its memory"), ("memory_per_tres", "its memory"),
                        ("cpus", "its CPUs"), ("features", "its --constraint"), ("shared", "its --exclusive")):
        record = pending_record(version, 1)
        del record[field]
        job = adapter_view(version, record)
        assert says in job.unmodelled, field


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_sinfo_group_of_several_nodes_splits_no_allocated_count(version):
    doc = recorded(version, "sinfo.json")
    group = copy.deepcopy(next(g for g in doc["sinfo"] if g["nodes"]["nodes"] == ["gpu2"]))
    group["nodes"]["nodes"] = ["gpu2", "gpu5"]
    group["features"] = {"total": "a100,ib", "active": "ib,a100"}
    nodes = {n.name: n for n in parse_sinfo_json({"sinfo": [group]})}
    # a total both nodes share is theirs; the 2 CPUs allocated in the group are not split by guess
    assert [(n.cpus_total, n.cpus_alloc, n.mem_total_mb, n.mem_alloc_mb, n.features)
            for n in nodes.values()] == [(8, None, 16000, 0, ("a100", "ib"))] * 2


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_a_grouped_nodes_free_cpus_and_memory_are_summed_from_its_jobs(version):
    """24.11's sinfo groups nodes and sums their allocated counts: each node's free CPUs
    and memory come from what the jobs on it hold (the real 24.11 and 26.05 runs
    preempted nobody when the grouped nodes' counts were left unknown)."""
    doc = recorded(version, "sinfo.json")
    group = copy.deepcopy(next(g for g in doc["sinfo"] if g["nodes"]["nodes"] == ["gpu2"]))
    group["nodes"]["nodes"] = ["gpu2", "gpu5"]
    running = copy.deepcopy(next(j for j in recorded(version, "squeue.json")["jobs"] if j["job_id"] == 5))
    allocation = running["job_resources"]["nodes"]["allocation"][0]
    allocation["name"], allocation["cpus"]["count"] = "gpu2", 6

    def nodes_seen(jobs):
        outputs = {"squeue": json.dumps({"jobs": jobs}), "sinfo": json.dumps({"sinfo": [group]})}
        backend = SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, outputs.get(argv[0], ""), ""))
        return {n.name: (n.cpus_free, n.mem_free_mb) for n in backend.observe().nodes}

    # CPUs: the group's 6 allocated are not split, the job's 6 on gpu2 are; memory: the
    # group reports none allocated (CR_Core counts no memory), which holds for both
    assert nodes_seen([running]) == {"gpu2": (2, 16000), "gpu5": (8, 16000)}
    del allocation["cpus"]["count"]  # a job that does not say its share: that node's count is unknown
    assert nodes_seen([running])["gpu2"][0] is None and nodes_seen([running])["gpu5"] == (8, 16000)


def test_22_05_node_features_and_counts():
    doc = recorded("22.05", "sinfo.json")
    node = copy.deepcopy(next(n for n in doc["nodes"] if n["name"] == "gpu1"))
    node.update(active_features="ib,a100", alloc_memory=12000)
    del node["real_memory"]
    [parsed] = parse_sinfo_json({"nodes": [node]})
    assert (parsed.features, parsed.mem_total_mb, parsed.mem_alloc_mb) == (("a100", "ib"), None, 12000)


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_running_job_holds_cpus_and_memory_per_node(version):
    record = copy.deepcopy(next(j for j in recorded(version, "squeue.json")["jobs"] if j["job_id"] == 5))
    allocation = record["job_resources"]["nodes"]["allocation"][0]
    allocation["cpus"]["count"], allocation["memory"]["allocated"] = 6, 24000
    assert adapter_view(version, record).held_by_node == (("gpu1", 6, 24000),)


# ------------------------------------------------------------------ the plan, through the controller

class SizedBackend(ScriptedBackend):
    """The scripted cluster with nodes that report CPUs, memory and features as sinfo
    does: each node's allocated CPUs and memory are what its running jobs hold plus
    ``other`` (jobs the plan never sees, a CPU-only one)."""

    def __init__(self, features=None, cpus=16, mem_mb=64000):  # mem_mb None: memory not reported
        super().__init__()
        features = features or {}
        self.nodes = [Node(f"gpu{i}", 4, 4, cpus_total=cpus, cpus_free=cpus, mem_total_mb=mem_mb,
                           mem_free_mb=mem_mb, features=features.get(f"gpu{i}", ())) for i in (1, 2)]
        self.other: dict[str, tuple[int, int]] = {}

    def observe(self):
        observation = super().observe()
        cpus, mem = {}, {}
        for job in self.jobs.values():
            if job.state == "RUNNING":
                for node, held_cpus, held_mb in job.held_by_node:
                    cpus[node], mem[node] = cpus.get(node, 0) + held_cpus, mem.get(node, 0) + held_mb
        for node, (held_cpus, held_mb) in self.other.items():
            cpus[node], mem[node] = cpus.get(node, 0) + held_cpus, mem.get(node, 0) + held_mb
        observation.nodes = [dataclasses.replace(
            n, cpus_free=n.cpus_total - cpus.get(n.name, 0),
            mem_free_mb=None if n.mem_total_mb is None else n.mem_total_mb - mem.get(n.name, 0))
            for n in observation.nodes]
        return observation

    def run(self, job_id, gpus, node, cpus=4, mem_mb=16000, preemptable=True):
        """A long-served job on ``node`` holding ``cpus`` CPUs and ``mem_mb`` MB there."""
        self.add(job_id, gpus, state="RUNNING", start=self.now - 5000, nodes=((node, gpus),),
                 requeueable=preemptable)
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], held_by_node=((node, cpus, mem_mb),))

    def submit(self, job_id, version, gpus, select="CR_Core", **fields):
        """A pending job as the Slurm adapter reads recorded job 4 asking for ``fields``."""
        seen = adapter_view(version, pending_record(version, gpus, **fields), select)
        self.add(job_id, seen.gpus)
        self.jobs[job_id] = dataclasses.replace(
            self.jobs[job_id], cpus_per_node=seen.cpus_per_node, mem_per_node_mb=seen.mem_per_node_mb,
            features=seen.features, exclusive=seen.exclusive, unmodelled=seen.unmodelled)


def signalled(backend):
    return sorted(call[1] for call in backend.calls if call[0] == "signal")


def settled(store, backend):
    """The controller after the running jobs' service took them past queue 1."""
    c = controller(store, backend)
    c.run_round()
    backend.now += 600
    c.run_round()
    return c


def rounds(c, backend, n=3):
    report = None
    for _ in range(n):
        backend.now += 10
        report = c.run_round()
    return report


def explained(c, job_id):
    """The wait reason ``tiresias explain`` shows (the controller's read-only round)."""
    plan, _ = c.preview()
    return plan.wait_reasons[job_id]


def two_full_nodes(store, other=None):
    """gpu1 and gpu2 each run one 4-GPU job holding 4 CPUs and 16,000 MB; ``other``:
    node -> (CPUs, MB) held by jobs without GPUs."""
    backend = SizedBackend()
    backend.run("1", 4, "gpu1")
    backend.run("2", 4, "gpu2")
    backend.other = dict(other or {})
    return backend, settled(store, backend)


@pytest.mark.parametrize("version", VERSIONS)
def test_memory_no_freed_node_holds_preempts_nobody(store, version):
    # 40,000 MB held by a CPU-only job on each node: a victim frees at most 24,000
    backend, c = two_full_nodes(store, {"gpu1": (1, 40000), "gpu2": (1, 40000)})
    backend.submit("9", version, 4, memory_per_node=number(version, 30000))
    report = rounds(c, backend)
    assert signalled(backend) == [] and not report.plan.of_kind("start")
    reason = explained(c, "9")
    assert reason.startswith("needs 1 CPU, 30000 MB of memory per node beside 4 GPUs") and "no job is preempted" in reason


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("short, victim", [("gpu1", "2"), ("gpu2", "1")])
def test_memory_that_fits_once_the_victim_leaves_preempts_it(store, version, short, victim):
    # only the other node's victim frees enough (``short`` keeps 40,000 MB of a CPU-only job)
    backend, c = two_full_nodes(store, {short: (1, 40000)})
    backend.submit("9", version, 4, memory_per_node=number(version, 30000))
    rounds(c, backend, 1)
    assert signalled(backend) == [victim]


def test_memory_per_cpu_and_per_gpu_are_multiplied_out(store):
    gpu1_short = {"gpu1": (1, 40000)}  # gpu1 frees 24,000 MB at most, gpu2 48,000
    backend, c = two_full_nodes(store, gpu1_short)
    # 4 GPUs x 10,000 MB: 40,000 per node fits only gpu2 (a GPU count alone would fit both)
    backend.submit("9", "24.11", 4, memory_per_node={"set": False, "infinite": False, "number": 0},
                   memory_per_tres="gres/gpu:10000")
    rounds(c, backend, 1)
    assert signalled(backend) == ["2"]
    backend, c = two_full_nodes(store, {"gpu1": (1, 40000), "gpu2": (1, 40000)})
    backend.submit("9", "22.05", 4, memory_per_cpu=3000, cpus=10, minimum_cpus_per_node=10)
    rounds(c, backend)
    assert signalled(backend) == []  # 30,000 MB on no freed node


@pytest.mark.parametrize("version", VERSIONS)
def test_cpus_no_freed_node_holds_preempt_nobody_and_those_that_fit_preempt(store, version):
    # 10 of 16 CPUs held by CPU-only jobs: a victim's leaving frees 6 at most
    backend, c = two_full_nodes(store, {"gpu1": (10, 0), "gpu2": (10, 0)})
    backend.submit("9", version, 4, cpus=number(version, 8), minimum_cpus_per_node=number(version, 8))
    report = rounds(c, backend)
    assert signalled(backend) == [] and explained(c, "9").startswith("needs 8 CPUs per node")
    backend.submit("9", version, 4, cpus=number(version, 6), minimum_cpus_per_node=number(version, 6))
    rounds(c, backend, 1)
    assert len(signalled(backend)) == 1


@pytest.mark.parametrize("featured, victim", [("gpu1", "1"), ("gpu2", "2")])
def test_constraint_preempts_only_on_a_node_with_the_features(store, featured, victim):
    backend = SizedBackend(features={featured: ("a100", "ib"), ({"gpu1", "gpu2"} - {featured}).pop(): ("a100",)})
    backend.run("1", 4, "gpu1")
    backend.run("2", 4, "gpu2")
    c = settled(store, backend)
    backend.submit("9", "24.11", 4, features="ib&a100")
    rounds(c, backend, 1)
    assert signalled(backend) == [victim]


def test_constraint_no_node_has_preempts_nobody(store):
    backend = SizedBackend(features={"gpu1": ("a100",), "gpu2": ("a100", "ib")})
    backend.run("1", 4, "gpu1")
    backend.run("2", 4, "gpu2")
    c = settled(store, backend)
    backend.submit("9", "26.05", 4, features="a100&nvlink")
    rounds(c, backend)
    assert signalled(backend) == []
    reason = explained(c, "9")
    assert "features" in reason and "no job is preempted for it" in reason


@pytest.mark.parametrize("version", VERSIONS)
def test_or_constraint_is_inexpressible_and_explained(store, version):
    backend = SizedBackend(features={"gpu1": ("a100",), "gpu2": ("v100",)})
    backend.run("1", 4, "gpu1")
    backend.run("2", 4, "gpu2")
    c = settled(store, backend)
    backend.submit("9", version, 4, features="a100|v100")
    report = rounds(c, backend)
    assert signalled(backend) == [] and "9" in report.plan.order
    assert report.plan.wait_reasons["9"] == (
        "asks for what the plan cannot express: --constraint=a100|v100 (an OR (|): which nodes satisfy it is"
        " Slurm's choice); Slurm may start it, no job is preempted for it")


def test_memory_asked_where_no_node_reports_memory_is_inexpressible(store):
    backend = SizedBackend(mem_mb=None)
    backend.run("1", 4, "gpu1")
    backend.run("2", 4, "gpu2")
    c = settled(store, backend)
    backend.submit("9", "24.11", 4, memory_per_node={"set": True, "infinite": False, "number": 1000})
    report = rounds(c, backend)
    assert signalled(backend) == []
    assert report.plan.wait_reasons["9"].startswith(
        "asks for what the plan cannot express: its memory, which no node reports")


def exclusive_shared(version):
    return "none" if version == "22.05" else ["none"]


@pytest.mark.parametrize("version", VERSIONS)
def test_exclusive_with_a_job_that_may_not_be_preempted_on_the_node_preempts_nobody(store, version):
    backend = SizedBackend()
    for node, low, kept in (("gpu1", "1", "3"), ("gpu2", "2", "4")):
        backend.run(low, 2, node)
        backend.run(kept, 1, node, preemptable=False)  # outside the preemption contract: stays
    c = settled(store, backend)
    # 3 GPUs: one node's free GPU and its low job's 2 (the free GPUs of both nodes are too few)
    backend.submit("9", version, 3, shared=exclusive_shared(version))
    rounds(c, backend)
    assert signalled(backend) == [] and explained(c, "9").startswith("needs 1 CPU, the whole node (--exclusive) per node")
    # control: the same job without --exclusive takes one low job's GPUs
    backend.submit("9", version, 3)
    rounds(c, backend, 1)
    assert len(signalled(backend)) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_exclusive_where_every_job_on_the_node_is_a_victim_preempts_them_all(store, version):
    backend = SizedBackend()
    backend.run("1", 2, "gpu1")
    backend.run("5", 1, "gpu1")  # its GPU is not needed (1 free + job 1's 2), its node is
    backend.run("2", 4, "gpu2", preemptable=False)
    c = settled(store, backend)
    backend.submit("9", version, 2, shared=exclusive_shared(version))
    rounds(c, backend, 1)
    assert signalled(backend) == ["1", "5"]


def test_plain_job_on_sized_nodes_preempts_as_before(store):
    # control for the cases above: nothing but GPUs asked, room everywhere
    backend, c = two_full_nodes(store)
    backend.submit("9", "24.11", 4)
    rounds(c, backend, 1)
    assert len(signalled(backend)) == 1


# ------------------------------------------------------------------ both walks of the core

@pytest.mark.parametrize("policy", ["dlas", "las"])  # the MLFQ walk and the generic walk
@pytest.mark.parametrize("mem_mb, victims", [(30000, []), (20000, ["r1"])])
def test_core_walks_preempt_only_where_the_memory_is_freed(policy, mem_mb, victims):
    from controller.core.engine import Engine, EngineConfig
    from controller.core.model import JobSpec, JobState, Snapshot
    # each node: 4 GPUs, 64,000 MB, of which a CPU-only job holds 40,000 and a 4-GPU job 16,000
    nodes = [Node(f"n{i}", 4, 0, cpus_total=16, cpus_free=8, mem_total_mb=64000, mem_free_mb=8000)
             for i in (1, 2)]
    jobs = [JobState(spec=JobSpec(f"r{i}", 4, 0.0, 1000.0, held_by_node=((f"n{i}", 4, 16000),)), index=i,
                     attained_gpu_s=50_000.0 + i, queue_service_gpu_s=50_000.0 + i, first_start_s=0.0,
                     run_start_s=0.0, running=True, placement=((f"n{i}", 4),)) for i in (1, 2)]
    # n2's victim would free its 16,000 MB too, but 8,000 more are held there by others
    nodes[1] = dataclasses.replace(nodes[1], mem_free_mb=0)
    jobs.append(JobState(spec=JobSpec("p", 4, 10.0, 1000.0, cpus_per_node=1, mem_per_node_mb=mem_mb), index=3))
    plan = Engine(EngineConfig(policy=policy, thresholds_gpu_s=(3600.0,))).step(Snapshot(100.0, jobs, nodes))
    assert sorted(a.job_id for a in plan.of_kind("preempt")) == victims
    assert [a.placement for a in plan.of_kind("start")] == ([(("n1", 4),)] if victims else [])


@pytest.mark.parametrize("version", VERSIONS)
def test_a_job_that_names_no_memory_asks_all_of_it_where_slurm_allocates_memory(version):
    record = pending_record(version, 1)  # recorded job 4: no --mem of any kind
    assert adapter_view(version, record, "CR_Core").mem_per_node_mb == 0  # memory not allocated: nothing asked
    assert adapter_view(version, record, "CR_Core_Memory").mem_per_node_mb == ALL_MEMORY  # --mem=0 or no default
    sized = pending_record(version, 1, memory_per_node=number(version, 2000))
    assert adapter_view(version, sized, "CR_Core_Memory").mem_per_node_mb == 2000


@pytest.mark.parametrize("version", VERSIONS)
def test_all_of_a_nodes_memory_preempts_only_where_the_victim_holds_all_that_is_held(store, version):
    # gpu1 also holds 1,000 MB of a CPU-only job no preemption frees; gpu2 only its victim's
    backend, c = two_full_nodes(store, {"gpu1": (1, 1000)})
    backend.submit("9", version, 4, select="CR_Core_Memory")
    rounds(c, backend)
    assert signalled(backend) == ["2"]


@pytest.mark.parametrize("version", VERSIONS)
def test_all_of_a_nodes_memory_preempts_nobody_when_every_node_keeps_some(store, version):
    backend, c = two_full_nodes(store, {"gpu1": (1, 1000), "gpu2": (1, 1000)})
    backend.submit("9", version, 4, select="CR_Core_Memory")
    rounds(c, backend)
    assert signalled(backend) == []
    assert "all of its memory" in explained(c, "9")


SHOW_JOB_2605 = ("JobId=4 JobName=wrap UserId=alice(1001) Priority=1 OverSubscribe=NO Exclusive=NODE Contiguous=0\n"
                 "JobId=5 JobName=wrap UserId=alice(1001) Priority=1 OverSubscribe=YES Exclusive=NO Contiguous=0\n")


def test_2605_reads_exclusive_from_scontrol_show_job_as_its_json_no_longer_says_it():
    """26.05's data_parser v0.0.45 dropped ``shared`` (an --exclusive job reads ``shared: []``,
    recorded on 26.05.5): the mode comes from `scontrol show job -o`, read once per new
    pending job; a job it does not list is unknown, never preempted for."""
    from slurm_plugin.parse_jobs import parse_show_job_sharing

    assert parse_show_job_sharing(SHOW_JOB_2605) == {"4": "exclusive", "5": "oversubscribe"}
    doc = recorded("26.05", "squeue.json")
    assert doc["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.45"
    record = pending_record("26.05", 1)
    calls = []

    def runner(argv, timeout_s, env):
        calls.append(argv)
        if argv[:3] == ["scontrol", "show", "job"]:
            return CommandResult(0, SHOW_JOB_2605 if record["job_id"] == 4 else "", "")
        text = {"squeue": json.dumps({"meta": doc["meta"], "jobs": [record]}),
                "sinfo": (FIXTURES / "26.05" / "sinfo.json").read_text()}.get(argv[0], "")
        return CommandResult(0, text, "")

    backend = SlurmBackend(runner=runner)
    [job] = backend.observe().jobs
    assert job.exclusive and not job.unmodelled
    backend.observe()
    assert sum(argv[:3] == ["scontrol", "show", "job"] for argv in calls) == 1  # known: not read again
    record["job_id"] = 6  # a job scontrol does not list: its mode unknown, never preempted for
    [job] = SlurmBackend(runner=runner).observe().jobs
    assert "--exclusive" in job.unmodelled

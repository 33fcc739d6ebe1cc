"""The plan never preempts for GPUs that are not free (issue 28, item 2, GPUs): a
node's GPUs in use are those held whole plus those with shards or MPS shares in use,
read from each release's recorded ``gres_used`` (22.05 ``gpu:3,mps:(null):1(IDX:0)``,
24.11 ``mps:(null):50(50/100,0/100,...)``, 26.05 ``mps:50(50/100,-/100,...)``) or from
modified copies of recorded node records; a job asking for GPUs of two types
(``--gres=gpu:a100:4,gpu:v100:4``) is read as what it is and is never a reason to
preempt. Every test failed on the old adapter (MPS in use counted no GPU, shards
max(whole, shard GPUs), the two-type request 8 a100)."""
import copy
import dataclasses
import json
from pathlib import Path

import pytest

from controller.cli import queue as cmd_queue
from controller.cli.main import main
from controller.core.engine import Engine, EngineConfig
from controller.core.model import MIXED_TYPES, JobSpec, JobState, Node, Snapshot
from slurm_plugin.arrays import SlurmObservedJob, plan_view
from controller.service.ops.config import from_mapping
from controller.service.round.sharing import shared_gpus
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult
from slurm_plugin.parse_jobs import parse_squeue_json
from slurm_plugin.parse_nodes import parse_sinfo_json
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"


def recorded(version, name):
    return json.loads((FIXTURES / version / name).read_text())


def recorded_node(version, name):
    """A copy of node ``name``'s record in the release's recorded sinfo.json (22.05: a
    ``nodes`` record; 24.11 and 26.05: its first ``sinfo`` group, alone)."""
    doc = recorded(version, "sinfo.json")
    if "nodes" in doc:
        return {"nodes": [copy.deepcopy(next(n for n in doc["nodes"] if n["name"] == name))]}
    return {"sinfo": [copy.deepcopy(next(g for g in doc["sinfo"] if g["nodes"]["nodes"] == [name]))]}


def with_gres(doc, total, used):
    """``doc`` (recorded_node) with its GRES strings replaced."""
    if "nodes" in doc:
        doc["nodes"][0].update(gres=total, gres_used=used)
    else:
        doc["sinfo"][0]["gres"] = {"total": total, "used": used}
    return doc


def one(doc):
    [node] = parse_sinfo_json(doc)
    return node


# ------------------------------------------------------------------ MPS and shards in use

@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_recorded_node_with_three_gpus_and_an_mps_job_has_none_free(version):
    # gpu2 runs job 7 (3 whole GPUs) and MPS job 6 (mps:50): the fourth GPU has MPS clients
    node = one(recorded_node(version, "gpu2"))
    assert (node.gpus_total, node.gpus_used, node.gpus_free) == (4, 4, 0)
    assert node.gpus_mps == 1  # in use only through MPS: still a GPU MPS jobs share


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_recorded_nodes_without_shared_use_are_unchanged(version):
    nodes = {n.name: n for n in parse_sinfo_json(recorded(version, "sinfo.json"))}
    assert {name: (n.gpus_used, n.gpus_mps) for name, n in nodes.items()} == {
        "gpu1": (2, 0), "gpu2": (4, 1), "gpu3": (0, 0), "gpu4": (1, 0)}


@pytest.mark.parametrize("version, total, used, busy", [
    # 22.05: whole GPUs a bare count, shards the GPUs they touch with their indices
    ("22.05", "gpu:4,shard:32", "gpu:2,shard:(null):1(IDX:0)", 3),
    ("22.05", "gpu:4,shard:32", "gpu:2,shard:(null):2(IDX:0-1)", 4),
    # 24.11: whole GPUs by index, shards in use per GPU
    ("24.11", "gpu:4,shard:32", "gpu:(null):2(IDX:2-3),shard:(null):8(8/8,0/8,0/8,0/8)", 3),
    ("24.11", "gpu:4,shard:32", "gpu:(null):1(IDX:3),shard:(null):3(1/8,1/8,1/8,0/8)", 4),
    # 26.05: no (null), '-' for a GPU held whole (not counted twice)
    ("26.05", "gpu:4,shard:32", "gpu:2(IDX:2-3),shard:8(8/8,0/8,-/8,-/8)", 3),
    ("26.05", "gpu:4,shard:32", "gpu:2(IDX:2-3),shard:0(0/8,0/8,-/8,-/8)", 2),
])
def test_whole_gpus_and_gpus_with_shards_in_use_sum(version, total, used, busy):
    node = one(with_gres(recorded_node(version, "gpu1"), total, used))
    assert (node.gpus_used, node.gpus_free, node.gpus_mps) == (busy, 4 - busy, 0)


def test_26_05_per_gpu_mps_string():
    # gpu4's record: job 8 holds GPU 0 whole ('-'); MPS clients on GPUs 1 and 2
    node = one(with_gres(recorded_node("26.05", "gpu4"), "gpu:4,mps:400",
                         "gpu:1(IDX:0),mps:80(-/100,50/100,30/100,0/100)"))
    assert (node.gpus_used, node.gpus_free, node.gpus_mps) == (3, 1, 2)
    # as recorded: the '-' of the whole GPU is no MPS use
    assert one(recorded_node("26.05", "gpu4")).gpus_used == 1


def test_mps_shares_without_per_gpu_detail_count_the_fewest_gpus_they_fit_on():
    # a node whose gres.conf gives MPS a Count but no File= prints only the shares
    node = one(with_gres(recorded_node("22.05", "gpu4"), "gpu:4,mps:400", "gpu:1,mps:150"))
    assert (node.gpus_used, node.gpus_mps) == (3, 2)  # 150 shares of 100 a GPU: at least 2 GPUs


def test_per_gpu_lists_of_a_node_of_two_types_are_summed():
    # per GPU type, positions are not the node's GPU indices: counted apart from the whole GPUs
    node = one(with_gres(recorded_node("24.11", "gpu1"), "gpu:a100:2,gpu:v100:2,shard:a100:16,shard:v100:16",
                         "gpu:a100:1(IDX:0),gpu:v100:0(IDX:N/A),shard:a100:4(4/8,0/8),shard:v100:0(0/8,0/8)"))
    assert node.gpus_used == 2


def _backend(version):
    outputs = {"squeue": (FIXTURES / version / "squeue.json").read_text(),
               "sinfo": (FIXTURES / version / "sinfo.json").read_text()}
    return SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, outputs.get(argv[0], ""), ""))


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_observed_node_has_no_free_gpu_and_its_mps_gpu_stays_shareable(version):
    observation = _backend(version).observe()
    nodes = {n.name: n for n in observation.nodes}
    assert (nodes["gpu2"].gpus_free, nodes["gpu2"].gpus_mps) == (0, 1)
    # the MPS pool: job 6 (bob, mps:50) still has its GPU on gpu2
    job6 = next(j for j in observation.jobs if j.job_id == "6")
    policy = from_mapping({"gpu_sharing": True}).colocation_policy()
    on_gpu2 = [g for g in shared_gpus(observation.nodes, [(job6, 50)], policy) if g.node == "gpu2"]
    assert [[t.job_id for t in g.tenants] for g in on_gpu2] == [["6"]]


# ------------------------------------------------------------------ several GPU types in one request

def two_type_record(version, field, spec, tres):
    """Recorded pending job 4 asking for ``spec`` in ``field`` instead of one GPU."""
    doc = recorded(version, "squeue.json")
    record = copy.deepcopy(next(j for j in doc["jobs"] if j["job_id"] == 4))
    for name in ("tres_per_node", "tres_per_job"):
        record[name] = ""
    record[field] = spec
    record["tres_req_str"] = tres
    return {"jobs": [record]}


@pytest.mark.parametrize("version, field, spec", [
    ("22.05", "tres_per_node", "gres:gpu:a100:4,gres:gpu:v100:4"),   # --gres=gpu:a100:4,gpu:v100:4
    ("24.11", "tres_per_node", "gres/gpu:a100:4,gres/gpu:v100:4"),
    ("26.05", "tres_per_job", "gres/gpu:v100:4,gres/gpu:a100:4"),    # --gpus=v100:4,a100:4
])
def test_two_type_request_reads_as_both_types(version, field, spec):
    tres = "cpu=1,mem=16000M,node=1,billing=1,gres/gpu=8,gres/gpu:a100=4,gres/gpu:v100=4"
    [job] = parse_squeue_json(two_type_record(version, field, spec, tres))
    assert (job.gpus, job.gpu_types, job.gpu_type) == (8, ("a100", "v100"), MIXED_TYPES)
    first = spec.split(",")[0]
    [single] = parse_squeue_json(two_type_record(version, field, first, "gres/gpu=4"))
    gpu_type = first.split(":")[-2]
    assert (single.gpus, single.gpu_types, single.gpu_type) == (4, (gpu_type,), gpu_type)


def typed_cluster():
    backend = ScriptedBackend()
    backend.nodes = [Node("gpu1", 4, 4, gpu_type="a100"), Node("gpu2", 4, 4, gpu_type="a100"),
                     Node("gpu3", 4, 4, gpu_type="v100"), Node("gpu4", 4, 4, gpu_type="v100")]
    for i in range(1, 5):  # long-served preemptable jobs on every GPU
        backend.add(str(i), 4, state="RUNNING", start=backend.now - 5000, nodes=((f"gpu{i}", 4),))
    return backend


def add_parsed(backend, job_id, record):
    """A pending job as the adapter reads ``record``: its GPU count and types."""
    [parsed] = parse_squeue_json(record)
    backend.add(job_id, parsed.gpus)
    backend.jobs[job_id] = dataclasses.replace(backend.jobs[job_id], gpu_type=parsed.gpu_type,
                                               gpu_types=parsed.gpu_types)


def signalled(backend):
    return sorted(call[1] for call in backend.calls if call[0] == "signal")


def test_two_type_job_is_never_a_reason_to_preempt(store):
    backend = typed_cluster()
    c = controller(store, backend)
    c.run_round()
    backend.now += 600
    c.run_round()  # all four long past queue 1
    tres = "cpu=1,node=1,billing=1,gres/gpu=8,gres/gpu:a100=4,gres/gpu:v100=4"
    add_parsed(backend, "9", two_type_record("24.11", "tres_per_node", "gres/gpu:a100:4,gres/gpu:v100:4", tres))
    for _ in range(3):
        backend.now += 10
        report = c.run_round()
        assert signalled(backend) == [] and not report.plan.of_kind("start")
    assert "9" in report.plan.order  # ordered and banded, only waiting
    assert report.plan.wait_reasons["9"].startswith("asks for GPUs of several types (a100, v100; 8 in all)")
    # control: the request as the old adapter read it (8 a100) took both a100 nodes' jobs
    add_parsed(backend, "9", two_type_record("24.11", "tres_per_node", "gres/gpu:a100:8", "gres/gpu=8"))
    backend.now += 10
    c.run_round()
    assert signalled(backend) == ["1", "2"]


def test_explain_says_a_two_type_job_is_not_planned(tmp_path, monkeypatch, capsys):
    url = f"sqlite:///{tmp_path}/t.db"
    config_file = tmp_path / "c.yaml"
    config_file.write_text(f"database_url: {url}\nmode: shadow\nqueues_gpu_s: [100.0]\npreempt_min_runtime_s: 0\n")
    backend = typed_cluster()
    tres = "cpu=1,node=1,billing=1,gres/gpu=8,gres/gpu:a100=4,gres/gpu:v100=4"
    add_parsed(backend, "9", two_type_record("22.05", "tres_per_node", "gres:gpu:a100:4,gres:gpu:v100:4", tres))
    monkeypatch.setattr(cmd_queue, "_backend_factory", lambda config: backend)
    assert main(["explain", "9", "--config", str(config_file)]) == 0
    out = capsys.readouterr().out
    assert "this round: wait: asks for GPUs of several types (a100, v100; 8 in all)" in out
    assert "no job is preempted for it" in out
    assert backend.calls == []


def test_het_job_of_components_of_two_types_is_a_gang_of_several_types():
    def part(job_id, offset, gpu_type):
        return SlurmObservedJob(job_id=job_id, user="alice", partition="batch", state="PENDING", reason="Priority",
                                gpus=4, het_job_id="20", het_offset=offset, gpu_type=gpu_type, gpu_types=(gpu_type,))

    [gang] = plan_view([part("20", 0, "v100"), part("21", 1, "a100")]).jobs
    assert (gang.gpus, gang.gpu_types, gang.gpu_type) == (8, ("a100", "v100"), MIXED_TYPES)
    [same] = plan_view([part("20", 0, "a100"), part("21", 1, "a100")]).jobs
    assert (same.gpus, same.gpu_types, same.gpu_type) == (8, ("a100",), "a100")


@pytest.mark.parametrize("policy", ["dlas", "las"])  # the MLFQ walk and the generic walk
def test_core_never_places_nor_preempts_for_a_job_of_several_types(policy):
    # nodes holding both types (MIXED_TYPES): the model cannot say which GPUs are which
    nodes = [Node("m1", 8, 0, gpu_type=MIXED_TYPES), Node("m2", 8, 0, gpu_type=MIXED_TYPES)]
    jobs = [JobState(spec=JobSpec(f"r{i}", 8, 0.0, 1000.0), index=i, attained_gpu_s=50_000.0,
                     queue_service_gpu_s=50_000.0, first_start_s=0.0, run_start_s=0.0, running=True,
                     placement=((f"m{i + 1}", 8),)) for i in range(2)]
    jobs.append(JobState(spec=JobSpec("p", 8, 10.0, 1000.0, gpu_type=MIXED_TYPES), index=2))
    plan = Engine(EngineConfig(policy=policy, thresholds_gpu_s=(3600.0,))).step(Snapshot(100.0, jobs, nodes))
    assert plan.actions == [] or all(a.kind == "promote" for a in plan.actions)

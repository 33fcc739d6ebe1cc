"""Slurm's picture of a site cluster as the adapter reads it (issue 18, items 1 and 5):
GPU types per node, GPUs used through shards, the GPU type and count a job asked
for in every request field, reservations. Recorded shapes (22.05 from the test
cluster: a node in an active reservation is flagged RESERVED, `scontrol show
reservation -o` one line each); every test failed on the old adapter."""

import json

from controller.core.model import MIXED_TYPES
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult
from slurm_plugin.parse_jobs import parse_squeue_json
from slurm_plugin.parse_nodes import parse_reservations, parse_sinfo_json

RESERVATION_LINE = (
    "ReservationName=maint StartTime=2026-12-03T07:08:08 EndTime=2026-12-03T07:13:08 Duration=00:05:00"
    " Nodes=gpu[3-4] NodeCnt=2 CoreCnt=8 Features=(null) PartitionName=(null) Flags=IGNORE_JOBS,SPEC_NODES"
    " TRES=cpu=8 Users=alice Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null)"
    " Watts=n/a MaxStartDelay=(null)")
LATER_LINE = RESERVATION_LINE.replace("maint", "later").replace("gpu[3-4]", "gpu1").replace(
    "State=ACTIVE", "State=INACTIVE")


def node(name, gres, used, flags=(), partitions=("batch",)):
    return {"name": name, "state": "idle", "state_flags": list(flags), "gres": gres, "gres_used": used,
            "partitions": list(partitions)}


def job(job_id, **fields):
    record = {"job_id": job_id, "job_state": "PENDING", "partition": "batch", "node_count": 1, "tasks": 1,
              "user_name": "alice", "state_reason": "Priority"}
    record.update(fields)
    return record


def test_node_gpu_types_and_mixed_nodes():
    nodes = {n.name: n for n in parse_sinfo_json({"nodes": [
        node("a", "gpu:a100:4(S:0)", "gpu:a100:1(IDX:0)"),
        node("v", "gpu:v100:4,mps:400", "gpu:v100:0(IDX:N/A)"),
        node("m", "gpu:a100:2,gpu:v100:2", "gpu:0"),
        node("g", "gpu:1g.10gb:7", "gpu:1g.10gb:3"),
        node("u", "gpu:4", "gpu:0")]})}
    assert {name: n.gpu_type for name, n in nodes.items()} == {
        "a": "a100", "v": "v100", "m": MIXED_TYPES, "g": "1g.10gb", "u": ""}
    assert nodes["a"].gpus_free == 3 and nodes["g"].gpus_free == 4


def test_gpus_used_through_shards_are_not_free():
    nodes = {n.name: n for n in parse_sinfo_json({"nodes": [
        node("s", "gpu:4,shard:32", "gpu:0,shard:8"),  # which GPUs: not said, so up to 4 (8 shards)
        node("t", "gpu:4,shard:32", "gpu:0,shard:10(8/8,2/8,0/8,0/8)"),  # per-GPU use: 2 GPUs
        node("f", "gpu:4,shard:32", "gpu:0,shard:0(0/8,0/8,0/8,0/8)")]})}
    assert nodes["s"].gpus_free == 0
    assert nodes["t"].gpus_free == 2
    assert nodes["f"].gpus_free == 4


def test_gpu_count_and_type_in_every_request_form():
    jobs = {j.job_id: j for j in parse_squeue_json({"jobs": [
        job(1, tres_per_node="gres:gpu:a100:2", node_count=2),   # --gres=gpu:a100:2 -N2
        job(2, tres_per_job="gres:gpu:v100:3"),                  # --gpus=v100:3
        job(3, tres_per_task="gres:gpu:1", tasks=4),             # --gpus-per-task=1 -n4
        # --gpus-per-socket=2 --sockets-per-node=2: pending, one socket's GPUs, never more than
        # Slurm allocates (2 in records of 23.11-25.11; tests/test_slurm_request_forms.py)
        job(4, tres_per_socket="gres/gpu:2", sockets_per_node=2),
        job(5, tres_per_socket="gres/gpu:2"),                    # --sockets-per-node unset: one
        job(6, tres_per_node="gres/gpu:4", partition="a,b", resv_name="maint")]})}
    assert {i: (j.gpus, j.gpu_type) for i, j in jobs.items()} == {
        "1": (4, "a100"), "2": (3, "v100"), "3": (4, ""), "4": (2, ""), "5": (2, ""), "6": (4, "")}
    assert [code for code, _ in jobs["4"].request_unmodelled] == ["per_socket"]
    assert jobs["6"].reservation == "maint" and jobs["6"].partitions == ["a", "b"]


def test_reservations_active_only():
    held = parse_reservations(RESERVATION_LINE + "\n" + LATER_LINE + "\n")
    assert held == {"gpu3": "maint", "gpu4": "maint"}
    assert parse_reservations("No reservations in the system\n") == {}


class Runner:
    def __init__(self, sinfo, squeue, reservations=RESERVATION_LINE):
        self.outputs = {"squeue": json.dumps(squeue), "sinfo": json.dumps(sinfo), "sprio": "",
                        "scontrol": reservations}
        self.calls = []

    def __call__(self, argv, timeout_s, env):
        self.calls.append(argv[0])
        return CommandResult(0, self.outputs[argv[0]], "")


def test_backend_reads_reservations_only_when_a_node_is_reserved():
    sinfo = {"nodes": [node(f"gpu{i}", "gpu:4", "gpu:0", partitions=("batch", "small") if i < 3 else ("batch",))
                       for i in (1, 2, 3, 4)]}
    squeue = {"jobs": [job(7, tres_per_node="gres:gpu:a100:1", site_factor=0)]}
    runner = Runner(sinfo, squeue)
    backend = SlurmBackend(runner=runner)
    observation = backend.observe()
    assert "scontrol" not in runner.calls  # no reserved node, no job naming one: nothing to read
    assert all(n.reservation == "" for n in observation.nodes)
    assert observation.nodes[0].partitions == ("batch", "small")
    assert observation.jobs[0].gpu_type == "a100"
    for n in sinfo["nodes"][2:]:
        n["state_flags"] = ["RESERVED"]
    runner.outputs["sinfo"] = json.dumps(sinfo)
    observation = backend.observe()
    assert {n.name: n.reservation for n in observation.nodes} == {
        "gpu1": "", "gpu2": "", "gpu3": "maint", "gpu4": "maint"}
    backend.observe()
    assert runner.calls.count("scontrol") == 1  # unchanged: read again only a minute later


def test_shard_use_as_22_05_reports_it():
    # recorded on the site-shaped instance: one job of --gres=shard:4 on g4
    [n] = parse_sinfo_json({"nodes": [node("g4", "gpu:a100:4,shard:a100:16",
                                           "gpu:a100:0(IDX:N/A),shard:a100:1(IDX:0)")]})
    assert (n.gpu_type, n.gpus_free) == ("a100", 3)

"""Parser tests on output recorded from real Slurm 22.05, 24.11 and 26.05 daemons: the
same workload on the test cluster, job ids 1-11, then array 12 (tests/fixtures/slurm/record.sh;
24.11/RECORDED, 26.05/RECORDED). 26.05 (data_parser v0.0.45) prints the documents 24.11
printed, with new keys the parser does not read and the value changes that the
*26_05* tests pin down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_plugin.grammar import SlurmParseError, expand_hostlist, gres_counts, parse_duration_s
from slurm_plugin.parse_history import parse_sacct_json
from slurm_plugin.parse_jobs import parse_scontrol_show_job, parse_squeue_json
from slurm_plugin.parse_nodes import parse_sinfo_json

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
GENERATIONS = ["22.05", "24.11", "26.05"]
# What depends on the moment and the release each recording was made on: times, the GPU
# indices Slurm picked, sacct's record order, where the requeued job ran again, gpu3
# drained (recorded so from 24.11 on), and the held job's max_nodes (24.11 and 26.05
# report its one task's node).
RECORDED = {
    "22.05": dict(submit5=1796060528.0, start5=1796060529.0, end1=1796060515.0, idx7="gpu:3(IDX:0-2)",
                  sacct_order=["4", "1", "2", "3", "4", "5", "6", "7", "8", "10"],
                  requeued_run=(1796060529.0, 1796060530.0), rerun_node="gpu2", drained=(), held_max_nodes=0),
    "24.11": dict(submit5=1796290767.0, start5=1796290768.0, end1=1796290767.0, idx7="gpu:3(IDX:1-3)",
                  sacct_order=["1", "2", "3", "4", "5", "6", "7", "8", "10", "4"],
                  requeued_run=(1796290768.0, 1796290769.0), rerun_node="gpu1", drained=("gpu3",),
                  held_max_nodes=1),
    "26.05": dict(submit5=1796486447.0, start5=1796486448.0, end1=1796486447.0, idx7="gpu:3(IDX:1-3)",
                  sacct_order=["1", "2", "3", "4", "5", "6", "7", "8", "10", "4"],
                  requeued_run=(1796486448.0, 1796486449.0), rerun_node="gpu1", drained=("gpu3",),
                  held_max_nodes=1),
}


def read(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


def by_id(jobs):
    return {j.job_id: j for j in jobs}


# ---------------------------------------------------------------- squeue

@pytest.mark.parametrize("version", GENERATIONS)
def test_squeue_all_jobs_parse(version):
    errors: list = []
    jobs = parse_squeue_json(read(version, "squeue.json"), errors)
    assert errors == []
    assert sorted(int(j.job_id) for j in jobs) == list(range(1, 12))


@pytest.mark.parametrize("version", GENERATIONS)
def test_squeue_running_gpu_job_with_comment(version):
    job = by_id(parse_squeue_json(read(version, "squeue.json")))["5"]
    assert job.name == "train-resnet"
    assert job.user == "alice"
    assert job.account == "research"
    assert job.partition == "batch"
    assert job.state == "RUNNING"
    assert job.gpus == 2 and job.mps == 0
    assert job.nodes == ["gpu1"] and job.node_count == 1
    assert job.comment == "tiresias: ckpt every 10m, lr=0.1"
    assert job.submit_time == RECORDED[version]["submit5"]
    assert job.start_time == RECORDED[version]["start5"]
    assert job.end_time is None  # running: Slurm's end_time is only the limit
    assert job.time_limit_s == 120 * 60
    assert job.requeue is True and job.batch is True
    assert job.restart_count == 0


@pytest.mark.parametrize("version", GENERATIONS)
def test_squeue_pending_multi_partition_gpu_job(version):
    job = by_id(parse_squeue_json(read(version, "squeue.json")))["10"]
    assert job.state == "PENDING"
    assert job.reason == "Resources"
    assert job.partition == "batch,urgent"
    assert job.partitions == ["batch", "urgent"]
    assert job.node_count == 4
    assert job.gpus == 16  # gres:gpu:4 per node x 4 nodes
    assert job.nodes == []
    assert job.start_time is None and job.end_time is None  # estimates dropped
    assert job.time_limit_s is None  # UNLIMITED


@pytest.mark.parametrize("version", GENERATIONS)
def test_squeue_node_constraints(version):
    """The job's own -N (node_count = min, max_nodes = max; 0 = no maximum), --nodelist
    and --exclude: what placement must honour."""
    jobs = by_id(parse_squeue_json(read(version, "squeue.json")))
    assert (jobs["10"].node_count, jobs["10"].max_nodes) == (4, 4)  # sbatch -N 4 --gres=gpu:4
    assert (jobs["11"].node_count, jobs["11"].max_nodes) == (1, RECORDED[version]["held_max_nodes"])
    assert (jobs["4"].node_count, jobs["4"].max_nodes) == (1, 0)  # no -N: any number of nodes
    assert jobs["8"].required_nodes == ["gpu4"] and jobs["8"].excluded_nodes == ["gpu3"]


def test_squeue_max_nodes_wrapped_and_bad():
    base = {"job_id": 9, "job_state": ["PENDING"], "user_name": "u", "nodes": "", "tres_per_node": "gres/gpu:2",
            "node_count": {"set": True, "infinite": False, "number": 2}}
    wrapped = dict(base, max_nodes={"set": True, "infinite": False, "number": 2})
    assert parse_squeue_json(json.dumps({"jobs": [wrapped]}))[0].max_nodes == 2
    unset = dict(base, max_nodes={"set": False, "infinite": False, "number": 0})
    assert parse_squeue_json(json.dumps({"jobs": [unset]}))[0].max_nodes == 0
    errors: list = []
    assert parse_squeue_json(json.dumps({"jobs": [dict(base, max_nodes=-3)]}), errors) == []
    assert "max_nodes" in str(errors[0])


def test_scontrol_num_nodes_range_is_min_and_max():
    jobs = by_id(parse_scontrol_show_job(read("22.05", "scontrol_show_job.txt")))
    assert (jobs["10"].node_count, jobs["10"].max_nodes) == (4, 4)  # NumNodes=4-4
    assert (jobs["11"].node_count, jobs["11"].max_nodes) == (1, 0)  # NumNodes=1


@pytest.mark.parametrize("version", GENERATIONS)
def test_squeue_requeued_job_is_pending_begin_time(version):
    job = by_id(parse_squeue_json(read(version, "squeue.json")))["4"]
    assert job.state == "PENDING"
    assert job.reason == "BeginTime"
    assert job.restart_count == 1
    assert job.gpus == 1
    assert job.state_flags == frozenset()  # squeue: just PENDING (sacct's old run carries REQUEUED)


@pytest.mark.parametrize("version", GENERATIONS)
def test_squeue_begin_time_tells_the_requeues_delay_from_a_begin_the_user_set(version):
    """A requeue sets submit_time to the requeue's time and eligible_time (the BeginTime)
    cred_expire + 1 s later (AuthInfo=cred_expire=10 on the test cluster); job 9's
    --begin=now+3600 is an hour after its submission."""
    from controller.service.acting.backend import ObservedJob
    from slurm_plugin.reasons import requeue_delay

    jobs = by_id(parse_squeue_json(read(version, "squeue.json")))
    requeued, begin = jobs["4"], jobs["9"]
    assert requeued.eligible_time - requeued.submit_time == 11
    assert begin.eligible_time - begin.submit_time == 3600
    for job, delay in ((requeued, True), (begin, False)):
        seen = ObservedJob(job_id=job.job_id, user=job.user, partition=job.partition, state="PENDING",
                           reason="BeginTime", gpus=job.gpus, restart_count=1, submit_time_s=job.submit_time,
                           eligible_time_s=job.eligible_time)  # job 9 as if it had been requeued: its own begin
        assert requeue_delay(seen) is delay, job.job_id


@pytest.mark.parametrize("version", GENERATIONS)
def test_squeue_gpu_sources_mps_per_job_pinned_held(version):
    jobs = by_id(parse_squeue_json(read(version, "squeue.json")))
    assert (jobs["6"].gpus, jobs["6"].mps) == (0, 50)          # --gres=mps:50
    assert (jobs["7"].gpus, jobs["7"].partition) == (3, "small")  # --gpus=3 (tres_per_job)
    assert jobs["8"].required_nodes == ["gpu4"] and jobs["8"].excluded_nodes == ["gpu3"]
    assert jobs["11"].reason == "JobHeldUser" and jobs["11"].priority == 0
    assert jobs["11"].time_limit_s == 600
    assert jobs["3"].state == "FAILED" and jobs["3"].gpus == 0
    assert jobs["9"].state == "CANCELLED"
    assert jobs["1"].state == "COMPLETED" and jobs["1"].end_time == RECORDED[version]["end1"]


def test_squeue_single_bad_record_is_skipped_not_fatal():
    doc = json.loads(read("22.05", "squeue.json"))
    doc["jobs"][4]["job_state"] = 42
    doc["jobs"][6]["tres_per_job"] = "gres:gpu:a100:lots"
    errors: list = []
    jobs = parse_squeue_json(json.dumps(doc), errors)
    assert len(jobs) == 9
    assert [(e.record_index, e.job_id) for e in errors] == [(4, "5"), (6, "7")]
    assert "job_state" in str(errors[0]) and "42" in str(errors[0])
    assert "lots" in str(errors[1])
    assert all("\n" not in str(e) for e in errors)


@pytest.mark.parametrize("text, fragment", [
    ("not json", "not JSON"),
    ("[]", "JSON object"),
    ('{"meta": {}}', "'jobs'"),
    ('{"jobs": {}}', "not a list"),
])
def test_squeue_malformed_document_raises(text, fragment):
    with pytest.raises(SlurmParseError, match=fragment):
        parse_squeue_json(text)


def test_parse_error_is_value_error():
    assert issubclass(SlurmParseError, ValueError)


# ---------------------------------------------------------------- sinfo

@pytest.mark.parametrize("version", GENERATIONS)
def test_sinfo_nodes(version):
    nodes = {n.name: n for n in parse_sinfo_json(read(version, "sinfo.json"))}
    assert sorted(nodes) == ["gpu1", "gpu2", "gpu3", "gpu4"]
    assert nodes["gpu1"].state == "mixed" and nodes["gpu1"].flags == frozenset()
    assert (nodes["gpu1"].gpus_total, nodes["gpu1"].gpus_used) == (4, 2)
    # 3 whole GPUs + one with MPS clients (tests/test_gpus_not_free.py)
    assert (nodes["gpu2"].gpus_used, nodes["gpu2"].gpus_free, nodes["gpu2"].gpus_mps) == (4, 0, 1)
    assert nodes["gpu3"].state == "idle" and nodes["gpu3"].gpus_used == 0
    assert nodes["gpu4"].gpus_used == 1
    assert nodes["gpu1"].partitions == ["batch", "urgent", "small"]
    assert nodes["gpu3"].partitions == ["batch", "urgent"]
    drained = RECORDED[version]["drained"]
    assert all(nodes[f"gpu{i}"].available is (f"gpu{i}" not in drained) for i in range(1, 5))


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_sinfo_grouped_drained_node_unavailable(version):
    """24.11's and 26.05's own `sinfo --json` (grouped by partition and state) of a
    drained idle node."""
    nodes = {n.name: n for n in parse_sinfo_json(read(version, "sinfo.json"))}
    gpu3 = nodes["gpu3"]
    assert gpu3.state == "idle" and gpu3.flags == {"DRAIN"}
    assert gpu3.available is False and gpu3.reason == "maintenance"
    assert (gpu3.gpus_total, gpu3.gpus_used) == (4, 0)  # used "gpu:(null):0(IDX:N/A),..." / "gpu:0(IDX:N/A),..."


def test_sinfo_26_05_gres_used_and_drain_user():
    """26.05's gres.used drops 24.11's "(null)" type and writes "-" in the MPS per-GPU
    list for a GPU a job holds whole; the drain's user moved from reason.user to
    reason_set_by_user. GPU counts and the reason read as on 24.11."""
    def grouped(version):
        return {(g["partition"]["name"], g["nodes"]["nodes"][0]): g
                for g in json.loads(read(version, "sinfo.json"))["sinfo"]}

    groups, old = grouped("26.05"), grouped("24.11")
    assert old[("batch", "gpu2")]["gres"]["used"] == "gpu:(null):3(IDX:1-3),mps:(null):50(50/100,0/100,0/100,0/100)"
    assert groups[("batch", "gpu2")]["gres"]["used"] == "gpu:3(IDX:1-3),mps:50(50/100,-/100,-/100,-/100)"
    assert groups[("batch", "gpu3")]["reason"] == {"description": "maintenance", "time": 1796486449}
    assert groups[("batch", "gpu3")]["reason_set_by_user"] == "root"
    nodes = {n.name: n for n in parse_sinfo_json(read("26.05", "sinfo.json"))}
    before = {n.name: n for n in parse_sinfo_json(read("24.11", "sinfo.json"))}
    for name in ("gpu1", "gpu2", "gpu3", "gpu4"):
        a, b = before[name], nodes[name]
        assert (a.state, a.flags, a.gpus_total, a.gpus_used, a.gpu_type, a.partitions, a.reason, a.available) == \
            (b.state, b.flags, b.gpus_total, b.gpus_used, b.gpu_type, b.partitions, b.reason, b.available), name


@pytest.mark.parametrize("state, flags, available", [
    ("down", [], False),
    ("idle", ["NOT_RESPONDING"], False),
    ("idle*", [], False),
    ("allocated", ["DRAIN"], False),
    (["MIXED", "COMPLETING"], [], True),
    (["IDLE", "FAIL"], [], False),
])
def test_sinfo_availability(state, flags, available):
    doc = {"nodes": [{"name": "n1", "state": state, "state_flags": flags,
                      "gres": "gpu:a100:8(S:0-1)", "gres_used": "gpu:a100:3(IDX:0-2)"}]}
    node = parse_sinfo_json(json.dumps(doc))[0]
    assert node.available is available
    assert (node.gpus_total, node.gpus_used) == (8, 3)


def test_sinfo_grouped_2311_shape():
    doc = {"sinfo": [
        {"node": {"state": ["IDLE"]}, "nodes": {"nodes": ["gpu[1-2]"]},
         "gres": {"total": "gpu:4", "used": "gpu:0"}, "partition": {"name": "batch"}},
        {"node": {"state": ["IDLE"]}, "nodes": {"nodes": ["gpu[1-2]"]},
         "gres": {"total": "gpu:4", "used": "gpu:0"}, "partition": {"name": "small"}},
    ]}
    nodes = parse_sinfo_json(json.dumps(doc))
    assert [n.name for n in nodes] == ["gpu1", "gpu2"]
    assert nodes[0].partitions == ["batch", "small"]


def test_sinfo_bad_node_skipped():
    doc = {"nodes": [{"name": "ok", "state": "idle", "gres": "gpu:4"},
                     {"name": "bad", "state": {"weird": 1}}]}
    errors: list = []
    nodes = parse_sinfo_json(json.dumps(doc), errors)
    assert [n.name for n in nodes] == ["ok"]
    assert errors[0].node == "bad" and "state" in str(errors[0])


# ---------------------------------------------------------------- sacct

@pytest.mark.parametrize("version", GENERATIONS)
def test_sacct_records(version):
    errors: list = []
    records = parse_sacct_json(read(version, "sacct.json"), errors)
    assert errors == []
    assert [r.job_id for r in records] == RECORDED[version]["sacct_order"]
    requeued, rerun = [r for r in records if r.job_id == "4"]
    assert requeued.state == "REQUEUED" and requeued.nodes == ["gpu1"]  # 24.11: ["PENDING", "REQUEUED"]

    assert (requeued.start_time, requeued.end_time) == RECORDED[version]["requeued_run"]
    assert rerun.state == "RUNNING" and rerun.nodes == [RECORDED[version]["rerun_node"]] and rerun.end_time is None
    assert requeued.gpus == rerun.gpus == 1
    # 22.05 sacct has no restart_cnt; 23.02+ does.
    assert rerun.restart_count == (0 if version == "22.05" else 1)
    jobs = by_id(r for r in records if r is not requeued)
    assert jobs["1"].user == "alice" and jobs["1"].gpus == 2 and jobs["1"].state == "COMPLETED"
    assert jobs["3"].state == "FAILED" and jobs["3"].user == "bob" and jobs["3"].gpus == 0
    assert (jobs["6"].gpus, jobs["6"].mps) == (0, 50)
    assert jobs["7"].gpus == 3 and jobs["7"].partition == "small"
    assert jobs["5"].time_limit_s == 7200 and jobs["5"].batch is True
    assert jobs["10"].state == "PENDING" and jobs["10"].gpus == 16  # from tres.requested
    assert jobs["10"].nodes == [] and jobs["10"].partition == "batch,urgent"
    assert jobs["1"].requeue is None


def test_sacct_26_05_user_and_account_only_at_the_top():
    """26.05 leaves association.user and association.account empty; the record's own
    user and account still name them."""
    doc = json.loads(read("26.05", "sacct.json"))
    assert {(r["association"]["user"], r["association"]["account"]) for r in doc["jobs"]} == {("", "")}
    jobs = by_id(parse_sacct_json(read("26.05", "sacct.json")))
    assert (jobs["1"].user, jobs["1"].account) == ("alice", "research")
    assert (jobs["3"].user, jobs["3"].account) == ("bob", "research")


def test_sacct_bad_record_skipped():
    doc = json.loads(read("22.05", "sacct.json"))
    doc["jobs"][1]["state"] = "COMPLETED"  # should be an object
    errors: list = []
    records = parse_sacct_json(json.dumps(doc), errors)
    assert len(records) == 9 and errors[0].job_id == "1"
    assert str(errors[0]).startswith("state:")


# ---------------------------------------------------------------- scontrol show job -o

def test_scontrol_show_job_matches_squeue(utc):
    errors: list = []
    jobs = by_id(parse_scontrol_show_job(read("22.05", "scontrol_show_job.txt"), errors))
    assert errors == []
    assert sorted(jobs, key=int) == [str(i) for i in range(1, 12)]
    squeue = by_id(parse_squeue_json(read("22.05", "squeue.json")))
    for job_id, job in jobs.items():
        other = squeue[job_id]
        for attr in ("name", "user", "partition", "state", "gpus", "mps", "nodes", "node_count",
                     "submit_time", "start_time", "end_time", "eligible_time", "restart_count", "requeue", "batch",
                     "comment", "required_nodes", "excluded_nodes", "time_limit_s", "priority", "max_nodes"):
            assert getattr(job, attr) == getattr(other, attr), (job_id, attr)


def test_scontrol_values_with_spaces(utc):
    jobs = by_id(parse_scontrol_show_job(read("22.05", "scontrol_show_job.txt")))
    assert jobs["5"].comment == "tiresias: ckpt every 10m, lr=0.1"
    assert jobs["10"].reason.startswith("Nodes_required_for_job")
    assert jobs["11"].reason == "JobHeldUser" and jobs["11"].time_limit_s == 600


def test_scontrol_free_text_with_key_like_words():
    line = ("JobId=77 JobName=my job UserId=bob(1002) Priority=5 JobState=PENDING Reason=Priority "
            "Requeue=0 Restarts=2 BatchFlag=1 TimeLimit=1-02:00:00 SubmitTime=Unknown NumNodes=2-4 "
            "Partition=a,b ReqNodeList=n[01-02] ExcNodeList=(null) NodeList= "
            "Command=/bin/train --Lr=3 --x y Comment=Note: Foo=bar baz StdOut=/tmp/o "
            "TRES=cpu=2,node=2,gres/gpu:a100=4 TresPerNode=gres/gpu:a100:2 SiteFactor=1000")
    job = parse_scontrol_show_job(line)[0]
    assert job.name == "my job"
    assert job.comment == "Note: Foo=bar baz"
    assert job.requeue is False and job.restart_count == 2
    assert job.time_limit_s == 26 * 3600
    assert job.node_count == 2 and job.gpus == 4  # 2 per node x 2 nodes
    assert job.required_nodes == ["n01", "n02"] and job.excluded_nodes == []
    assert job.site_factor == 1000 and job.submit_time is None


def test_scontrol_empty_and_bad():
    assert parse_scontrol_show_job("No jobs in the system\n") == []
    with pytest.raises(SlurmParseError, match="JobId"):
        parse_scontrol_show_job("garbage line\n")
    errors: list = []
    jobs = parse_scontrol_show_job("JobId=1 JobState=RUNNING NumNodes=1\nJobId=x JobState=RUNNING\n", errors)
    assert [j.job_id for j in jobs] == ["1"]
    assert "JobId" in str(errors[0]) and "'x'" in str(errors[0])


# ---------------------------------------------------------------- helpers

@pytest.mark.parametrize("text, expected", [
    ("gpu[1-3,5]", ["gpu1", "gpu2", "gpu3", "gpu5"]),
    ("gpu1", ["gpu1"]),
    ("n[08-11]", ["n08", "n09", "n10", "n11"]),
    ("a[1-2],b3,c[7]", ["a1", "a2", "b3", "c7"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("", []),
    ("(null)", []),
    ("None assigned", []),
    (None, []),
])
def test_expand_hostlist(text, expected):
    assert expand_hostlist(text) == expected


@pytest.mark.parametrize("text", ["gpu[1-99999999]", "a[1-1000]b[1-1000]", "x[1-60000],y[1-60000]",
                                  "n[0-" + "9" * 40 + "]"])
def test_expand_hostlist_refuses_huge_lists_before_expanding(text):
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(SlurmParseError, match=r"hostlist: [\d,]+ names in .* more than the limit of 100,000"):
            expand_hostlist(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # bytes: nothing was expanded


def test_expand_hostlist_limit_is_inclusive():
    assert len(expand_hostlist("n[1-100000]")) == 100_000
    assert expand_hostlist("n[1-3]", max_names=3) == ["n1", "n2", "n3"]
    with pytest.raises(SlurmParseError, match="limit of 2"):
        expand_hostlist("n[1-3]", max_names=2)


@pytest.mark.parametrize("text", ["gpu[1-3", "gpu1-3]", "gpu[a-b]", "gpu[5-2]"])
def test_expand_hostlist_malformed(text):
    with pytest.raises(SlurmParseError, match="hostlist"):
        expand_hostlist(text)


@pytest.mark.parametrize("spec, expected", [
    ("gres:gpu:2", {"gpu": 2}),
    ("gres/gpu:2", {"gpu": 2}),
    ("gres/gpu", {"gpu": 1}),
    ("gres:gpu:a100:2", {"gpu": 2}),
    ("gpu:2,mps:(null):0(IDX:N/A)", {"gpu": 2, "mps": 0}),
    ("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:3)", {"gpu": 3}),
    ("cpu=1,mem=16000M,node=1,billing=1,gres/gpu=3", {"gpu": 3}),
    ("cpu=1,gres/gpu=2,gres/gpu:a100=2", {"gpu": 2}),
    ("gres:mps:50", {"mps": 50}),
    ("gres:gpu:a100", {"gpu": 1}),
    ("", {}),
    ("(null)", {}),
])
def test_gres_counts(spec, expected):
    assert gres_counts(spec) == expected


@pytest.mark.parametrize("spec", ["gres:gpu:a100:lots", "gres/gpu=x", "gpu:2(IDX:0-1"])
def test_gres_counts_malformed(spec):
    with pytest.raises(SlurmParseError):
        gres_counts(spec, field_name="tres_per_node")


@pytest.mark.parametrize("text, seconds", [
    ("UNLIMITED", None), ("10", 600), ("10:30", 630), ("02:00:00", 7200),
    ("1-00:00:00", 86400), ("2-3", 2 * 86400 + 3 * 3600),
])
def test_parse_duration(text, seconds):
    assert parse_duration_s(text) == seconds


def test_24_11_numbers_unset_and_infinite():
    doc = {"jobs": [{"job_id": 9, "job_state": ["PENDING"], "node_count": {"set": True, "infinite": False, "number": 1},
                     "time_limit": {"set": False, "infinite": True, "number": 0},
                     "submit_time": {"set": True, "infinite": False, "number": 100},
                     "start_time": {"set": False, "infinite": False, "number": 0},
                     "tres_per_node": "gres/gpu:1", "user_name": "u", "nodes": ""}]}
    job = parse_squeue_json(json.dumps(doc))[0]
    assert job.time_limit_s is None and job.submit_time == 100.0 and job.start_time is None
    assert job.gpus == 1 and job.state == "PENDING"


def test_26_05_numbers_unset_and_infinite():
    """26.05 keeps 24.11's {"set", "infinite", "number"} numbers, recorded here. A job
    the main scheduler started without -t (STARTED_ON_SCHEDULE) has an infinite
    time_limit; one backfill started (job 1, job 4's second run) has 525600 minutes, as
    every started job of the 24.11 recording (all backfill started) has."""
    raw = {r["job_id"]: r for r in json.loads(read("26.05", "squeue.json"))["jobs"]}
    assert raw[2]["time_limit"] == {"set": False, "infinite": True, "number": 0}
    assert raw[1]["time_limit"] == {"set": True, "infinite": False, "number": 525600}
    assert raw[10]["start_time"] == {"set": True, "infinite": False, "number": 0}
    assert raw[5]["array_task_id"] == {"set": False, "infinite": False, "number": 0}
    jobs = by_id(parse_squeue_json(read("26.05", "squeue.json")))
    assert jobs["2"].time_limit_s is None and jobs["1"].time_limit_s == 525600 * 60
    assert jobs["10"].start_time is None and jobs["10"].submit_time == 1796486448.0
    assert jobs["5"].job_id == "5" and jobs["5"].array_job_id == "" and jobs["5"].het_job_id == ""
    requeued, rerun = [r for r in parse_sacct_json(read("26.05", "sacct.json")) if r.job_id == "4"]
    assert requeued.time_limit_s is None and rerun.time_limit_s == 525600 * 60


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_squeue_array_tasks_and_pending_record(version):
    """squeue_array.json: array 12 (--array=1-50%4 --gres=gpu:1) with tasks 1-4 running
    on gpu4 as jobs 13-16, and its pending record; jobs 1-11 beside it."""
    errors: list = []
    jobs = parse_squeue_json(read(version, "squeue_array.json"), errors)
    assert errors == []
    assert sorted(int(j.job_id) for j in jobs if not j.array_job_id) == list(range(1, 12))
    array = sorted((j for j in jobs if j.array_job_id == "12"), key=lambda j: j.job_id)
    assert [(j.job_id, j.state, j.nodes, j.gres_detail, j.gpus) for j in array[1:]] == [
        (f"12_{t}", "RUNNING", ["gpu4"], [f"gpu:1(IDX:{t - 1})"], 1) for t in range(1, 5)]
    pending = array[0]
    assert (pending.job_id, pending.state, pending.array_tasks, pending.array_max_tasks, pending.gpus) == \
        ("12", "PENDING", "5-50%4", 4, 1)
    assert all(j.array_max_tasks == 4 and j.array_tasks == "" for j in array[1:])


@pytest.mark.parametrize("version", GENERATIONS)
def test_squeue_allocated_nodes_and_gres_detail(version):
    """Both job_resources shapes (22.05 allocated_nodes[].nodename, 24.05+
    nodes.allocation[].name) give the same allocation list; the backend reads only it."""
    jobs = by_id(parse_squeue_json(read(version, "squeue.json")))
    assert jobs["5"].allocated_nodes == ["gpu1"] and jobs["5"].gres_detail == ["gpu:2(IDX:2-3)"]
    assert jobs["7"].allocated_nodes == ["gpu2"] and jobs["7"].gres_detail == [RECORDED[version]["idx7"]]
    assert jobs["4"].allocated_nodes == [] and jobs["4"].gres_detail == []  # pending: no job_resources


def test_squeue_allocation_order_is_slurms_not_the_hostlists():
    """gres_detail is aligned with the allocation, which need not be the sorted hostlist."""
    record = json.loads(read("24.11", "squeue.json"))["jobs"][4]
    record["nodes"] = "gpu[1-2]"
    record["gres_detail"] = ["gpu:1(IDX:0)", "gpu:3(IDX:0-2)"]
    record["job_resources"]["nodes"]["allocation"] = [{"name": "gpu2"}, {"name": "gpu1"}]
    (job,) = parse_squeue_json({"jobs": [record]})
    assert job.nodes == ["gpu1", "gpu2"] and job.allocated_nodes == ["gpu2", "gpu1"]
    old = dict(record, job_resources={"allocated_nodes": [{"nodename": "gpu2"}, {"nodename": "gpu1"}]})
    assert parse_squeue_json({"jobs": [old]})[0].allocated_nodes == ["gpu2", "gpu1"]
    unnamed = dict(record, job_resources={"nodes": {"allocation": [{"name": "gpu2"}, {"name": ""}]}},
                   gres_detail=[1, 2])
    (job,) = parse_squeue_json({"jobs": [unnamed]})
    assert job.allocated_nodes == [] and job.gres_detail == []


def test_a_job_being_torn_down_is_completing_on_both_releases():
    from slurm_plugin.records import split_state

    assert split_state("COMPLETING", "job_state") == ("COMPLETING", frozenset())  # 22.05
    assert split_state(["PENDING", "COMPLETING"], "job_state") == ("COMPLETING", frozenset({"PENDING"}))
    assert split_state(["RUNNING", "CONFIGURING"], "job_state") == ("RUNNING", frozenset({"CONFIGURING"}))


@pytest.mark.parametrize("version", GENERATIONS)
def test_empty_node_lists_are_one_shared_list_that_refuses_to_change(version):
    # (memory: most records have four or five empty lists; one object stands in for all)
    from slurm_plugin.parse_jobs import NO_NAMES
    jobs = parse_squeue_json(json.loads(read(version, "squeue.json")))
    pending = [job for job in jobs if job.state == "PENDING"]
    assert pending and all(job.nodes == [] and job.nodes is NO_NAMES for job in pending if not job.nodes)
    assert all(job.excluded_nodes is NO_NAMES for job in jobs if not job.excluded_nodes)
    running = [job for job in jobs if job.state == "RUNNING"]
    assert running and all(job.nodes and job.nodes is not NO_NAMES for job in running)
    with pytest.raises(TypeError):
        pending[0].excluded_nodes.append("gpu1")
    assert NO_NAMES == [] and NO_NAMES + ["gpu1"] == ["gpu1"]

"""slurm_plugin.record_cache: squeue/sinfo --json read round after round parse only the
records whose text changed, and give exactly what a whole parse gives (recorded 22.05,
24.11 and 26.05 output)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.service.acting.backend import BackendUnavailable
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult
from slurm_plugin.grammar import SlurmParseError
from slurm_plugin.parse_jobs import parse_squeue_json, parse_squeue_record
from slurm_plugin.parse_nodes import merge_sinfo_groups, parse_sinfo_group, parse_sinfo_json, parse_sinfo_record
from slurm_plugin.record_cache import RecordCache, split_records

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"
VERSIONS = ("22.05", "24.11", "26.05")


def _text(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


def _load(rest: str) -> dict:
    return json.loads(rest)


def _jobs_cache() -> RecordCache:
    return RecordCache("jobs", parse_squeue_record, "job_id")


@pytest.mark.parametrize("version", VERSIONS)
def test_cut_records_read_as_the_whole_document(version):
    text = _text(version, "squeue.json")
    rest, pieces = split_records(text, "jobs")
    assert len(pieces) == len(json.loads(text)["jobs"])
    assert json.loads(rest)["jobs"] == []
    errors: list = []
    assert _jobs_cache().read(text, _load, errors) == parse_squeue_json(text) and errors == []
    nodes = RecordCache("nodes", parse_sinfo_record, "name").read(_text(version, "sinfo.json"), _load, errors)
    if version == "22.05":
        assert nodes == parse_sinfo_json(_text(version, "sinfo.json")) and errors == []
    else:  # 24.11's and 26.05's `sinfo --json -N`: one "sinfo" entry per node and partition
        assert nodes is None and errors == []
        groups = RecordCache("sinfo", parse_sinfo_group, "nodes", id_marker='"nodes": [')
        entries = groups.read(_text(version, "sinfo.json"), _load, errors)
        assert len(entries) == len(json.loads(_text(version, "sinfo.json"))["sinfo"]) and errors == []
        merged = merge_sinfo_groups(entries)
        assert merged == parse_sinfo_json(_text(version, "sinfo.json"))
        assert any(len(node.partitions) > 1 for node in merged)  # a node in several partitions: its entries merged


@pytest.mark.parametrize("version", VERSIONS)
def test_only_a_changed_record_is_parsed_again(version):
    text = _text(version, "squeue.json")
    cache = _jobs_cache()
    first = cache.read(text, _load, [])
    assert cache.fresh == first
    # One record's reason changes (the text stays laid out as Slurm prints it).
    doc = json.loads(text)
    target = next(j for j in doc["jobs"] if j["state_reason"] == "BeginTime")
    at = text.index(f'"job_id": {json.dumps(target["job_id"], indent=2)}'.replace("\n", "\n      "))
    start, end = text.rindex("\n    {\n", 0, at), text.index("\n    }", at)  # that record's lines
    record = text[start:end]
    assert record.count('"state_reason": "BeginTime"') == 1
    changed = text[:start] + record.replace('"state_reason": "BeginTime"', '"state_reason": "Priority"') + text[end:]
    second = cache.read(changed, _load, [])
    assert [job.reason for job in cache.fresh] == ["Priority"]  # only the changed record parsed
    assert second == parse_squeue_json(changed)
    unchanged_ids = {j.job_id for j in first} - {str(target["job_id"]) if isinstance(target["job_id"], int)
                                                 else str(target["job_id"]["number"])}
    kept = {j.job_id: j for j in first}
    assert all(job is kept[job.job_id] for job in second if job.job_id in unchanged_ids)  # the same objects
    assert cache.read(changed, _load, []) == second and cache.fresh == []  # the same answer: one comparison


def test_compact_or_mis_cut_text_is_read_whole():
    text = _text("22.05", "squeue.json")
    cache = _jobs_cache()
    assert cache.read(json.dumps(json.loads(text)), _load, []) is None  # compact: not cut at all
    # A nested object whose closing line sits at the record indent: still valid JSON,
    # but the cut falls inside a record, whose braces then do not balance.
    nested_close = text.index("\n      },\n", text.index('"jobs": ['))
    odd = text[:nested_close] + "\n    },\n" + text[nested_close + len("\n      },\n"):]
    assert json.loads(odd) == json.loads(text)
    assert cache.read(odd, _load, []) is None
    sinfo = _text("22.05", "sinfo.json")
    runner_texts = {"squeue": odd, "sinfo": sinfo, "sprio": "", "scontrol": ""}  # scontrol: no partition lines
    backend = SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, runner_texts[argv[0]], ""))
    assert {j.job_id for j in backend.observe().jobs} == {j.job_id for j in parse_squeue_json(text)}


def test_a_bad_record_is_reported_at_every_read_with_its_index_and_id():
    doc = json.loads(_text("22.05", "squeue.json"))
    doc["jobs"][2]["job_state"] = 42
    text = json.dumps(doc, indent=2)
    cache = _jobs_cache()
    for _ in range(2):  # the second read is the same text: the error is reported again
        errors: list[SlurmParseError] = []
        jobs = cache.read(text, _load, errors)
        assert len(jobs) == len(doc["jobs"]) - 1
        assert len(errors) == 1 and errors[0].record_index == 2 and errors[0].job_id == str(doc["jobs"][2]["job_id"])
        assert "job_state" in str(errors[0])
    whole: list = []
    parse_squeue_json(text, errors=whole)
    assert [str(e) for e in whole] == [str(e) for e in errors]


def test_an_errors_entry_beside_the_records_is_an_outage():
    doc = json.loads(_text("22.05", "squeue.json"))
    doc["errors"] = [{"description": "Failed while looking for jobs", "error": "Unspecified error"}]
    texts = {"squeue": json.dumps(doc, indent=2), "sinfo": _text("22.05", "sinfo.json")}
    backend = SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, texts[argv[0]], ""))
    with pytest.raises(BackendUnavailable, match="Failed while looking for jobs"):
        backend.observe()


def test_backend_keeps_observed_jobs_of_unchanged_records_and_follows_site_factors():
    texts = {"squeue": _text("22.05", "squeue.json"), "sinfo": _text("22.05", "sinfo.json"),
             "sprio": "4 100\n10 -5\n11 0\n", "scontrol": ""}
    calls: list = []

    def runner(argv, timeout_s, env):
        calls.append(argv)
        return CommandResult(0, texts[argv[0]], "")

    backend = SlurmBackend(runner=runner)
    first = {j.job_id: j for j in backend.observe().jobs}
    second = {j.job_id: j for j in backend.observe().jobs}
    assert first.keys() == second.keys() and all(second[k] is first[k] for k in first)
    backend.set_site_factors({"4": 7})
    third = {j.job_id: j for j in backend.observe().jobs}
    assert third["4"].site_factor == 7 and third["4"] is not first["4"]
    assert all(third[k] is first[k] for k in first if k != "4")
    # The same answer as a backend that reads every record whole gives.
    fresh = {j.job_id: j for j in SlurmBackend(runner=runner).observe().jobs}
    assert {k: v for k, v in fresh.items() if k != "4"} == {k: v for k, v in third.items() if k != "4"}


@pytest.mark.parametrize("version", VERSIONS)
def test_records_removed_added_moved_or_changed_read_as_the_whole_document(version):
    """The read predicts each record from the last read's order and compares it in
    place: whatever moved, went or came, it gives what a whole read gives and parses
    only the records whose text is new."""
    doc = json.loads(_text(version, "squeue.json"))
    jobs = doc["jobs"]
    assert len(jobs) >= 4

    def text_of(records: list) -> str:
        return json.dumps({**doc, "jobs": records}, indent=2)

    changed = dict(jobs[1], state_reason="Dependency")
    added = dict(jobs[0], job_id=987654)
    for records, new_texts in (
            (jobs[1:], 0),  # the first gone
            (jobs[:2] + jobs[3:], 0),  # one in the middle gone
            (jobs[:-1], 0),  # the last gone
            ([jobs[0], added] + jobs[1:], 1),  # one new in the middle
            (jobs + [added], 1),  # one new at the end
            (list(reversed(jobs)), 0),  # all moved
            ([jobs[0], changed] + jobs[2:], 1),  # one changed
    ):
        cache = _jobs_cache()
        cache.read(text_of(jobs), _load, [])  # the last read: every record
        text = text_of(records)
        errors: list = []
        assert cache.read(text, _load, errors) == parse_squeue_json(text) and errors == []
        assert len(cache.fresh) == new_texts


@pytest.mark.parametrize("release", ["22.05", "26.05"])
def test_rounds_of_changes_read_as_whole_documents(release):
    """Round after round of what a cluster does (a job ends, jobs start, a job is
    submitted, an AdminComment is written, a SiteFactor changes nothing squeue shows),
    in 22.05's and 26.05's shape: the cached read gives exactly what a whole parse of
    the same text gives, parses exactly the records whose text changed, and keeps no
    record's text."""
    from bench.scripted_slurm import ScriptedSlurm  # (bench/ is the repository's, as tests/fakes)

    slurm = ScriptedSlurm(pending=30, running=8, nodes=4, release=release)
    cache = _jobs_cache()
    last: dict[str, object] = {}
    for round_no in range(8):
        if round_no:
            slurm.finish_one()
            slurm.schedule()
            slurm.submit(1000 + round_no, gpus=2)
            if round_no % 2:
                slurm(["scontrol", "update", f"JobId={30 + round_no}", "AdminComment=tiresias band 2"], 5, None)
            if round_no == 5:
                slurm.submit_array(2000, tasks=4, gpus=1, throttle=2)
        text = slurm._text("squeue")
        errors: list = []
        whole = parse_squeue_json(text)
        assert cache.read(text, _load, errors) == whole and errors == []
        # a record parsed again is one whose text is new (a new or changed record)
        assert {job.job_id for job in cache.fresh} == {job.job_id for job in whole if last.get(job.job_id) != job}
        last = {job.job_id: job for job in whole}
        # the same text again: nothing parsed
        assert cache.read(text, _load, []) == whole and cache.fresh == []
    kept = [value for entry in cache._order for value in entry[:3] if isinstance(value, str)]
    assert kept and max(map(len, kept)) < 40  # ids only


@pytest.mark.parametrize("release", ["22.05", "26.05"])
def test_kept_observed_jobs_equal_ones_made_again(release):
    """The backend keeps a record's ObservedJob while the record, its SiteFactor and (26.05)
    the --exclusive mode `scontrol show job` taught are the same: over rounds in which
    modes are learned a few at a time (MAX_SHOW_JOB_IDS), every kept one equals the one
    made again from what is known now, and on 26.05 a pending job's is kept."""
    from bench.scripted_slurm import ScriptedSlurm
    from slurm_plugin import exclusive_modes

    slurm = ScriptedSlurm(pending=40, running=6, nodes=4, release=release)
    for job_id, record in slurm.jobs.items():
        if job_id % 3 == 0:
            record["shared"] = "none"  # --exclusive: 22.05's JSON says so, 26.05's only scontrol show job
    backend = SlurmBackend(runner=slurm)
    kept_pending = 0
    for round_no in range(6):
        if round_no:
            slurm.finish_one()
            slurm.schedule()
            slurm.submit(1000 + round_no, gpus=1)
        before = dict(backend._observed)
        backend.observe()
        for job, site_factor, observed, _ in backend._observed.values():
            assert observed == backend._observed_job(job, site_factor)
            last = before.get(job.job_id)
            kept_pending += last is not None and last[2] is observed and job.state == "PENDING"
    assert kept_pending > 0
    if release == "26.05":
        assert len(backend._sharing) > exclusive_modes.MAX_SHOW_JOB_IDS  # learned over several rounds


def test_scripted_slurmctld_answers_the_same_jobs_in_both_shapes():
    """bench/scripted_slurm.py's 26.05 squeue --json reads as its 22.05 one (what a round
    of the benches sees differs only in shape), but for what 26.05 reports otherwise: a
    running job's memory per node, and no --exclusive (`scontrol show job -o ID` says it)."""
    from dataclasses import asdict

    from bench.scripted_slurm import ScriptedSlurm
    from slurm_plugin.parse_jobs import parse_show_job_sharing

    read = {}
    for release in ("22.05", "26.05"):
        slurm = ScriptedSlurm(pending=20, running=6, nodes=4, release=release)
        slurm.jobs[9]["shared"] = "none"
        slurm.submit_array(500, tasks=4, gpus=1, throttle=2)
        slurm.schedule()
        read[release] = [asdict(job) for job in parse_squeue_json(slurm._text("squeue"))]
        if release == "26.05":
            assert parse_show_job_sharing(slurm(["scontrol", "show", "job", "-o", "9"], 5, None).stdout) == {
                "9": "exclusive"}
            assert parse_show_job_sharing(slurm(["scontrol", "show", "job", "-o", "500"], 5, None).stdout) == {
                "500": ""}  # the array's pending record, under its ArrayJobId
    assert len(read["22.05"]) == len(read["26.05"]) > 26
    for old, new in zip(read["22.05"], read["26.05"]):
        assert {**old, "mem_by_node_mb": (), "shared": ""} == {**new, "mem_by_node_mb": (), "shared": ""}


def test_an_answer_not_in_utf8_is_read_with_its_bytes_replaced(tmp_path):
    """squeue writes a job name in another encoding (Latin-1 here) as its bytes are:
    the runner reads the answer with U+FFFD in their place, and observe() reads every
    job (decoding strictly raised in every round: no observation while the job was queued)."""
    from slurm_plugin.commands import subprocess_runner

    doc = json.loads(_text("22.05", "squeue.json"))
    doc["jobs"][1]["name"] = "caf\u00e9"
    answer = tmp_path / "squeue.json"
    answer.write_bytes(json.dumps(doc, indent=2, ensure_ascii=False).encode("latin-1"))
    read = subprocess_runner(["cat", str(answer)], 5, None)
    assert read.returncode == 0 and "caf\ufffd" in read.stdout
    texts = {"squeue": read.stdout, "sinfo": _text("22.05", "sinfo.json"), "sprio": "", "scontrol": ""}
    backend = SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, texts[argv[0]], ""))
    jobs = {j.job_id: j for j in backend.observe().jobs}
    assert jobs[str(doc["jobs"][1]["job_id"])].name == "caf\ufffd"
    assert jobs.keys() == {j.job_id for j in backend.observe().jobs} and len(jobs) > 2


def test_sinfo_entries_read_round_after_round_as_the_whole_document():
    """26.05's `sinfo --json -N` (one "sinfo" entry per node and partition, 4-5 KB each) as
    bench/scripted_slurm.py writes it: the nodes read as its 22.05 `nodes` list reads,
    and over rounds in which jobs start and end and a node drains, the backend's cached
    read gives what a whole parse gives, parsing only the entries whose text changed."""
    from bench.scripted_slurm import ScriptedSlurm

    shapes = {}
    for release in ("22.05", "26.05"):
        slurm = ScriptedSlurm(pending=30, running=8, nodes=6, release=release)
        slurm.node_partitions["n0003"] = "urgent"
        slurm.node_flags["n0004"] = ["DRAIN"]
        shapes[release] = parse_sinfo_json(slurm._text("sinfo"))
    assert shapes["26.05"] == shapes["22.05"] and len(shapes["26.05"]) == 6
    assert "sinfo" in json.loads(slurm._text("sinfo"))  # (the 26.05 one: entries, not "nodes")
    backend = SlurmBackend(runner=slurm)
    for round_no in range(5):
        if round_no:
            slurm.finish_one()
            slurm.schedule()
            slurm.node_flags["n0005"] = ["DRAIN"] if round_no % 2 else []
            slurm._texts.clear()
        before = slurm._text("sinfo")
        observed = {node.name: node for node in backend.observe().nodes}
        whole = {node.name: node for node in parse_sinfo_json(before)}
        assert observed.keys() == whole.keys()
        assert all((observed[n].gpus_free, observed[n].available, observed[n].partitions)
                   == (whole[n].gpus_total - whole[n].gpus_used, whole[n].available, tuple(whole[n].partitions))
                   for n in whole)
        changed = {n for n in whole if last.get(n) != whole[n]} if round_no else set(whole)
        assert {node.name for nodes in backend._sinfo_groups.fresh for node in nodes} == changed
        last = whole
    assert 0 < len(changed) < len(whole)  # the last round changed some entries, not all

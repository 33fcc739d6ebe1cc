"""Recorded rounds (tests/fixtures/slurm/*/rounds: consecutive `squeue --json` reads of a
real cluster where nothing was submitted or ended between them, record_rounds.sh) read
by a backend that reuses records (slurm_plugin.record_cache) and by one that parses
every read whole: every ObservedJob is the same, and a pending record whose only change
is the scheduler's stamps is not parsed again."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_plugin.backend import CommandResult, SlurmBackend
from slurm_plugin.parse import parse_squeue_json, parse_squeue_record
from slurm_plugin.record_cache import SQUEUE_MOVING_FIELDS, RecordCache

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"
VERSIONS = [v for v in ("22.05", "24.11", "26.05") if (FIXTURES / v / "rounds").is_dir()]


def _rounds(version: str) -> list[str]:
    folder = FIXTURES / version / "rounds"
    return [path.read_text() for path in sorted(folder.glob("squeue_round*.json"))]


class Slurm:
    """Answers the backend's reads from one recorded round at a time (`scontrol show job
    -o ID` from the recorded lines, sprio with no factors)."""

    def __init__(self, version: str):
        self.squeue = ""
        self.sinfo = (FIXTURES / version / "sinfo.json").read_text()
        shown = (FIXTURES / version / "rounds" / "scontrol_show_job.txt").read_text().splitlines()
        self.show = {line.split()[0].split("=", 1)[1]: line for line in shown if line.startswith("JobId=")}

    def __call__(self, argv, timeout_s, env):
        if argv[:2] == ["squeue", "--json"]:
            return CommandResult(0, self.squeue, "")
        if argv[:2] == ["sinfo", "--json"]:
            return CommandResult(0, self.sinfo, "")
        if argv[:3] == ["scontrol", "show", "job"]:
            job_id = argv[-1]
            line = self.show.get(job_id.split("_")[0])
            return CommandResult(0, line + "\n", "") if line else CommandResult(1, "", "Invalid job id specified")
        return CommandResult(0, "", "")


def _moving_changed(version: str) -> set[str]:
    """The ids of the records whose texts differ between the rounds only in the moving fields."""
    docs = [json.loads(text) for text in _rounds(version)]
    moved = set()
    for before, after in zip(docs, docs[1:]):
        old = {str(j["job_id"]): j for j in before["jobs"]}
        for job in after["jobs"]:
            was = old.get(str(job["job_id"]))
            if was is not None and was != job and all(
                    was.get(k) == job.get(k) for k in job.keys() | was.keys() if k not in SQUEUE_MOVING_FIELDS):
                moved.add(str(job["job_id"]))
    return moved


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_rounds_read_with_reuse_are_what_a_whole_read_gives(version):
    rounds = _rounds(version)
    assert len(rounds) >= 2
    slurm = Slurm(version)
    reusing = SlurmBackend(runner=slurm)
    for text in rounds:
        slurm.squeue = text
        kept = reusing.observe().jobs
        # a new backend each round: every record parsed, every mode asked
        whole = SlurmBackend(runner=slurm).observe().jobs
        assert kept == whole  # every field of every ObservedJob
        assert [job.job_id for job in kept] == [job.job_id for job in whole]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_pending_record_whose_only_change_is_the_schedulers_stamps_is_not_parsed_again(version):
    moved = _moving_changed(version)
    assert moved, f"{version}: the recorded rounds show no record whose stamps moved"
    cache = RecordCache("jobs", parse_squeue_record, "job_id", moving=SQUEUE_MOVING_FIELDS)
    first = None
    for text in _rounds(version):
        jobs = cache.read(text, json.loads, [])
        assert jobs is not None
        # the values equal a whole parse's, but for SlurmJob.priority (kept from the last
        # parse: nothing reads it) of a record whose stamps moved
        whole = parse_squeue_json(text)
        assert [j.job_id for j in jobs] == [j.job_id for j in whole]
        for job, fresh in zip(jobs, whole):
            assert job == fresh or job.job_id in moved and job.__class__(**{
                **{f: getattr(job, f) for f in job.__dataclass_fields__}, "priority": fresh.priority}) == fresh
        if first is not None:
            assert not {job.job_id for job in cache.fresh} & moved  # reused, not parsed again
        first = jobs


def test_a_changed_field_that_is_not_a_stamp_is_parsed_again():
    """Masking is by key: a change anywhere else in the record (here the reason, which
    the controller reads) is a new record, even beside moved stamps."""
    text = _rounds("26.05")[0] if "26.05" in VERSIONS else (FIXTURES / "26.05" / "squeue.json").read_text()
    cache = RecordCache("jobs", parse_squeue_record, "job_id", moving=SQUEUE_MOVING_FIELDS)
    doc = json.loads(text)
    cache.read(json.dumps(doc, indent=2), json.loads, [])  # (json.dumps lays numbers out as it does below)
    target = next(j for j in doc["jobs"] if j["job_state"] == ["PENDING"] and j["state_reason"] != "Dependency")
    target["state_reason"] = "Dependency"
    target["last_sched_evaluation"]["number"] += 60
    target["priority"]["number"] += 1
    changed = json.dumps(doc, indent=2)
    jobs = cache.read(changed, json.loads, [])
    assert [job.job_id for job in cache.fresh] == [str(target["job_id"])]
    assert next(j for j in jobs if j.job_id == str(target["job_id"])).reason == "Dependency"
    assert next(j for j in jobs if j.job_id == str(target["job_id"])).priority == target["priority"]["number"]


def test_26_05_mode_learned_after_the_record_is_taken_in_without_a_new_record():
    """26.05: a pending job's --exclusive is read apart (`scontrol show job`); when it is
    learned rounds after its record, the kept ObservedJob is rebuilt with it, while an
    unchanged record with a known mode keeps its ObservedJob."""
    version = "26.05"
    if version not in VERSIONS:
        pytest.skip("no recorded 26.05 rounds")
    slurm = Slurm(version)
    unanswered = dict(slurm.show)
    slurm.show = {}  # the first round: no mode read (a timed-out show job)
    backend = SlurmBackend(runner=slurm)
    texts = _rounds(version)
    slurm.squeue = texts[0]
    first = {j.job_id: j for j in backend.observe().jobs}
    excl = next(job_id for job_id, line in unanswered.items() if "Exclusive=NODE" in line)
    assert first[excl].unmodelled_reasons == ("unreported_request",) and not first[excl].exclusive
    slurm.show = unanswered
    slurm.squeue = texts[1]
    second = {j.job_id: j for j in backend.observe().jobs}
    assert second[excl].exclusive and "unreported_request" not in second[excl].unmodelled_reasons
    slurm.squeue = texts[-1]
    third = {j.job_id: j for j in backend.observe().jobs}
    # (array tasks are left out: plan_view gives their pending tasks new objects each round)
    pending = [job_id for job_id, job in third.items() if job.state == "PENDING" and "_" not in job_id]
    assert excl in pending and all(third[job_id] is second[job_id] for job_id in pending)  # same record and mode

"""A partition's OverSubscribe as the plan sees it (issue 35, item 5).

The recordings (tests/fixtures/slurm/<release>/oversubscribe/, RECORDED says how)
are of a real slurmctld of each release with partitions excl (OverSubscribe=EXCLUSIVE),
force (FORCE:2), yes (YES) and batch (NO), every node full and one pending job
``p-PARTITION[OPTIONS]`` per case. SlurmBackend answers them through a scripted
slurmctld: a job of an EXCLUSIVE partition asks whole nodes (as --exclusive), one of
a FORCE partition is unmodelled (``oversubscribe``), YES without --oversubscribe is NO,
and a job of an EXCLUSIVE and a shared partition is unmodelled (whether it gets whole
nodes is where Slurm starts it). Before the fix 22.05's --oversubscribe ('shared') and
FORCE read as an unknown --exclusive mode, 24.11 and 26.05 read FORCE as a plain job
(preempted for as if its cores were its own), and a job of excl,batch as plain (24.11,
26.05) or whole-node (22.05)."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult
from slurm_plugin.parse_nodes import parse_partition_sharing

ROOT = Path(__file__).parent / "fixtures" / "slurm"
RELEASES = sorted(p.parent.parent.name for p in ROOT.glob("*/oversubscribe/RECORDED"))


def recorded(release: str):
    here = ROOT / release / "oversubscribe"
    return {name: (here / name).read_text() for name in ("squeue.json", "sinfo.json", "show_partition.txt",
                                                          "show_job.txt")}


def scripted(texts: dict, sent: list):
    def run(argv, timeout_s, env):
        sent.append(list(argv))
        if argv[0] == "scontrol" and argv[1:3] == ["show", "partition"]:
            return CommandResult(0, texts["show_partition.txt"], "")
        if argv[0] == "scontrol" and argv[1:3] == ["show", "job"]:
            return CommandResult(0, texts["show_job.txt"], "")
        return CommandResult(0, {"squeue": texts["squeue.json"], "sinfo": texts["sinfo.json"]}.get(argv[0], ""), "")
    return run


def pending_by_name(release: str, sent: list | None = None) -> dict:
    backend = SlurmBackend(runner=scripted(recorded(release), [] if sent is None else sent))
    return {job.name: job for job in backend.observe().jobs if job.state == "PENDING"}


def test_every_release_is_recorded():
    assert RELEASES == ["22.05", "24.11", "26.05"]


@pytest.mark.parametrize("release", RELEASES)
def test_partition_lines_say_how_each_partition_shares(release):
    modes = parse_partition_sharing(recorded(release)["show_partition.txt"])
    # 26.05 prints EXCLUSIVE as OverSubscribe=NO Exclusive=NODE
    assert {name: modes[name] for name in ("batch", "excl", "force", "yes")} == {
        "batch": "NO", "excl": "EXCLUSIVE", "force": "FORCE", "yes": "YES"}


@pytest.mark.parametrize("release", RELEASES)
def test_a_job_of_an_exclusive_partition_asks_whole_nodes(release):
    job = pending_by_name(release)["p-excl"]
    assert job.exclusive and not job.unmodelled_reasons


@pytest.mark.parametrize("release", RELEASES)
def test_a_job_of_a_force_partition_is_unmodelled(release):
    job = pending_by_name(release)["p-force"]
    assert job.unmodelled_reasons == ("oversubscribe",)
    assert job.unmodelled == "partition force's OverSubscribe=FORCE (Slurm shares the cores it gives)"


@pytest.mark.parametrize("release", RELEASES)
def test_yes_without_oversubscribe_is_no_and_with_it_stays_modelled(release):
    jobs = pending_by_name(release)
    for name in ("p-yes", "p-yes--oversubscribe", "p-batch"):
        assert not jobs[name].exclusive and not jobs[name].unmodelled_reasons, (name, jobs[name].unmodelled)
    assert jobs["p-batch--exclusive"].exclusive and not jobs["p-batch--exclusive"].unmodelled_reasons


@pytest.mark.parametrize("release", RELEASES)
def test_a_job_of_an_exclusive_and_a_shared_partition_is_unmodelled(release):
    job = pending_by_name(release)["p-excl,batch"]
    assert job.unmodelled_reasons == ("exclusive",)
    assert "partitions excl (OverSubscribe=EXCLUSIVE) and batch (not)" in job.unmodelled


def test_one_partition_jobs_without_oversubscribe_never_read_the_partitions():
    # 22.05 and 24.11 write the first partition's EXCLUSIVE into the job's own record:
    # a cluster of such jobs costs no scontrol command
    texts = recorded("22.05")
    import json
    doc = json.loads(texts["squeue.json"])
    doc["jobs"] = [job for job in doc["jobs"] if job["name"] in ("fill1", "p-excl", "p-batch", "p-batch--exclusive")]
    texts["squeue.json"] = json.dumps(doc)
    sent: list = []
    SlurmBackend(runner=scripted(texts, sent)).observe()
    assert not [argv for argv in sent if argv[0] == "scontrol"]


def test_the_partitions_are_read_again_each_minute_only_while_a_pending_job_leaves_sharing_open():
    # p-excl,batch names two partitions: its record does not settle how it shares, so the
    # partitions' modes are read at first sight and again once a minute while it is
    # pending; once only jobs whose record settles it are left, never again
    import json
    from slurm_plugin.observe import PARTITIONS_EVERY_S
    texts = recorded("22.05")
    doc = json.loads(texts["squeue.json"])
    doc["jobs"] = [job for job in doc["jobs"] if job["name"] in ("fill1", "p-batch", "p-excl,batch")]
    with_open = json.dumps(doc)
    doc["jobs"] = [job for job in doc["jobs"] if job["name"] != "p-excl,batch"]
    settled = json.dumps(doc)
    sent: list = []
    now = [1000.0]
    backend = SlurmBackend(runner=scripted(dict(texts, **{"squeue.json": with_open}), sent), clock=lambda: now[0])

    def reads_at(at: float, squeue: str) -> int:
        now[0] = at
        texts["squeue.json"] = squeue
        backend.runner = scripted(texts, sent)
        before = len(sent)
        backend.observe()
        return sum(1 for argv in sent[before:] if argv[:3] == ["scontrol", "show", "partition"])

    assert reads_at(1000.0, with_open) == 1  # a partition pair never asked about
    assert reads_at(1000.0 + PARTITIONS_EVERY_S / 2, with_open) == 0  # within the minute
    assert reads_at(1001.0 + PARTITIONS_EVERY_S, with_open) == 1  # the minute is up, the job still pending
    assert reads_at(1002.0 + 3 * PARTITIONS_EVERY_S, settled) == 0  # it left: no pending job needs them

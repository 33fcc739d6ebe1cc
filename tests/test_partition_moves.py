"""Partition moves (controller.partitions.moves) and their wiring into the controller round;
usage-spool collection in the round. A scripted backend, a real SQLite store, a
virtual clock; the end-to-end check on real Slurm is tests/test_slurm_partition_moves.py."""
import dataclasses
import json
import logging
import math
from pathlib import Path

import pytest

from controller.core.model import Node
from controller.partitions.moves import (MoveSettings, PendingGpuJob, RunningGpuJob, allowed_after_observation,
                                   plan_moves, running_remaining_s, split_partitions)
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm" / "22.05"
LEFT_RIGHT = {"left": ["gpu1", "gpu2"], "right": ["gpu3", "gpu4"]}
NODES = [Node(f"gpu{i}", 4, 4) for i in range(1, 5)]
FULL_LEFT = RunningGpuJob("r", (("gpu1", 4), ("gpu2", 4)), ran_s=10.0)
SETTINGS = MoveSettings(duration_estimate_s=100.0)


def pending(job_id="p", gpus=4, allowed=("left", "right"), current=("left",), rank=0, **kw):
    return PendingGpuJob(job_id, gpus, tuple(allowed), tuple(current), rank, **kw)


# ------------------------------------------------------------------ the pure planner

def test_pending_job_moves_to_the_free_allowed_partition_with_both_starts_in_the_reason():
    plan = plan_moves(1000.0, LEFT_RIGHT, NODES, [pending()], [FULL_LEFT], SETTINGS)
    [move] = plan.moves
    assert (move.job_id, move.from_partition, move.to_partition) == ("p", "left", "right")
    assert move.start_there_s == 1000.0
    assert move.start_here_s == 1000.0 + running_remaining_s(10.0, 100.0) == 1090.0
    assert "predicted start in left now+90s, in right now+0s (90s earlier; mct" in move.reason


@pytest.mark.parametrize("job, why", [
    (pending(allowed=("left",)), None),  # nothing else allowed: not even a candidate
    (pending(frozen="pinned to nodes"), "pinned"),
])
def test_no_move_outside_the_allowed_set_or_when_frozen(job, why):
    plan = plan_moves(1000.0, LEFT_RIGHT, NODES, [job], [FULL_LEFT], SETTINGS)
    assert plan.moves == []
    assert (why is None and plan.kept == {}) or why in plan.kept["p"]


def test_allowed_partition_without_nodes_is_never_a_target():
    plan = plan_moves(1000.0, {"left": ["gpu1", "gpu2"]}, NODES, [pending()], [FULL_LEFT], SETTINGS)
    assert plan.moves == []


def test_gain_must_reach_the_margin():
    # The running job ran 90 of an estimated 100 s: predicted to need half the estimate more.
    nearly_done = RunningGpuJob("r", (("gpu1", 4), ("gpu2", 4)), ran_s=90.0)
    kept = plan_moves(1000.0, LEFT_RIGHT, NODES, [pending()], [nearly_done],
                      dataclasses.replace(SETTINGS, min_gain_s=60.0))
    assert kept.moves == [] and "gain below partition_move_min_gain_s 60s" in kept.kept["p"]
    moved = plan_moves(1000.0, LEFT_RIGHT, NODES, [pending()], [nearly_done],
                       dataclasses.replace(SETTINGS, min_gain_s=50.0))
    assert [m.to_partition for m in moved.moves] == ["right"]


def test_cooldown_holds_a_job_where_it_is():
    plan = plan_moves(1000.0, LEFT_RIGHT, NODES, [pending()], [FULL_LEFT],
                      dataclasses.replace(SETTINGS, cooldown_s=300.0), last_move_s={"p": 800.0})
    assert plan.moves == [] and "cooldown" in plan.kept["p"]
    later = plan_moves(1000.0, LEFT_RIGHT, NODES, [pending()], [FULL_LEFT],
                       dataclasses.replace(SETTINGS, cooldown_s=150.0), last_move_s={"p": 800.0})
    assert [m.job_id for m in later.moves] == ["p"]


def test_no_move_when_both_partitions_start_it_now():
    plan = plan_moves(1000.0, LEFT_RIGHT, NODES, [pending()], [], SETTINGS)
    assert plan.moves == [] and "keeps it in left" in plan.kept["p"]


def test_plan_order_decides_who_gets_the_free_partition():
    # right has room for one 8-GPU job; the first in plan order takes it, the second
    # would wait behind it there as long as in left: no gain, stays.
    jobs = [pending("a", gpus=8, rank=1), pending("b", gpus=8, rank=0)]
    plan = plan_moves(1000.0, LEFT_RIGHT, NODES, jobs, [FULL_LEFT], SETTINGS)
    assert [m.job_id for m in plan.moves] == ["b"]
    assert "a" in plan.kept


def test_job_in_several_partitions_is_left_to_slurm_and_planned_where_it_starts_first():
    # Already "left,right": Slurm takes the earliest of the two itself.
    plan = plan_moves(1000.0, LEFT_RIGHT, NODES, [pending(current=("left", "right"))], [FULL_LEFT], SETTINGS)
    assert plan.moves == [] and plan.kept == {}


def test_evo_allocator_moves_too():
    plan = plan_moves(1000.0, LEFT_RIGHT, NODES, [pending()], [FULL_LEFT],
                      dataclasses.replace(SETTINGS, allocator="evo"))
    assert [(m.job_id, m.to_partition) for m in plan.moves] == [("p", "right")]
    assert "evo" in plan.moves[0].reason


def test_job_too_big_for_where_it_is_moves_to_where_it_fits():
    big = {"left": ["gpu1"], "right": ["gpu2", "gpu3", "gpu4"]}
    plan = plan_moves(1000.0, big, NODES, [pending(gpus=8)], [], SETTINGS)
    [move] = plan.moves
    assert move.to_partition == "right" and math.isinf(move.start_here_s)
    assert "never starts there" in move.reason


def test_helpers():
    assert split_partitions("a,b,,a") == ("a", "b")
    assert allowed_after_observation("a,b", "a") is None  # narrower: what a move looks like
    assert allowed_after_observation("a,b", "b,c") == "b,c"  # someone else changed it
    assert allowed_after_observation("", "a") == "a"
    assert running_remaining_s(0, 100) == 100 and running_remaining_s(500, 100) == 50


# ------------------------------------------------------------------ in the controller round

class PartitionBackend(ScriptedBackend):
    """ScriptedBackend with two partitions (left: gpu1-2, right: gpu3-4); a move
    changes the job's partition field as Slurm would."""

    def __init__(self, members=LEFT_RIGHT):
        super().__init__()
        self.members = members

    def partition_nodes(self):
        return {name: list(nodes) for name, nodes in self.members.items()}

    def move_partition(self, job_id, partition):
        self.calls.append(("move_partition", job_id, partition))
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], partition=partition)

    def add_in(self, job_id, gpus, partition, state="PENDING", **kw):
        self.add(job_id, gpus, state, **kw)
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], partition=partition)


def mover(store, backend, **settings):
    return controller(store, backend, partition_moves=True, queues_gpu_s=[1e9], preempt_max_per_job=0,
                      partition_duration_estimate_s=100.0, **settings)


def _moves(store, job_id):
    return [d for d in store.decisions("default", job_id=job_id) if d["kind"] == "move"]


def test_round_moves_a_pending_job_within_its_allowed_set_and_logs_why(store):
    backend = PartitionBackend()
    backend.add_in("1", 8, "left", "RUNNING", start=990.0, nodes=[("gpu1", 4), ("gpu2", 4)])
    backend.add_in("2", 8, "left,right")  # the user allowed both
    c = mover(store, backend)
    c.run_round()  # first sight: allowed set left,right remembered
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], partition="left")  # e.g. an admin narrowed it
    backend.now += 1
    report = c.run_round()
    assert ("move_partition", "2", "right") in backend.calls
    assert c.records["2"].moves == 1
    assert c.records["2"].partition == "left,right"  # the allowed set is not what the job is in now
    [entry] = [e for e in report.applied if e["kind"] == "move"]
    assert entry["applied"] and entry["reason"].startswith("left -> right: predicted start in left now+")
    [logged] = _moves(store, "2")
    assert logged["applied"] and "in right now+0s" in logged["reason"]
    # moved once; later rounds keep it (it is where the plan wants it)
    backend.now += 1
    c.run_round()
    assert [call for call in backend.calls if call[0] == "move_partition"] == [("move_partition", "2", "right")]


def test_round_never_widens_what_the_user_allowed_nor_moves_running_jobs(store):
    backend = PartitionBackend()
    backend.add_in("1", 8, "left", "RUNNING", start=990.0, nodes=[("gpu1", 4), ("gpu2", 4)])
    backend.add_in("2", 4, "left")  # only left allowed, although right is empty
    c = mover(store, backend)
    for _ in range(3):
        c.run_round()
        backend.now += 5
    assert not [call for call in backend.calls if call[0] in ("move_partition", "partition_nodes")]
    assert _moves(store, "1") == _moves(store, "2") == []


def test_shadow_mode_logs_the_move_once_per_cooldown_and_changes_nothing(store):
    backend = PartitionBackend()
    backend.add_in("1", 8, "left", "RUNNING", start=990.0, nodes=[("gpu1", 4), ("gpu2", 4)])
    backend.add_in("2", 4, "left,right")
    c = mover(store, backend, mode="shadow", partition_move_cooldown_s=60)
    c.run_round()
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], partition="left")
    for _ in range(3):
        backend.now += 10
        c.run_round()
    assert not [call for call in backend.calls if call[0] == "move_partition"]
    [logged] = _moves(store, "2")
    assert not logged["applied"] and "would move_partition(2, 'right')" in logged["detail"]
    assert c.records["2"].moves == 0
    backend.now += 60
    c.run_round()
    assert len(_moves(store, "2")) == 2


def test_cooldown_survives_a_controller_restart(store):
    backend = PartitionBackend()
    backend.add_in("1", 8, "left", "RUNNING", start=990.0, nodes=[("gpu1", 4), ("gpu2", 4)])
    backend.add_in("2", 4, "left,right")
    c = mover(store, backend, partition_move_cooldown_s=600)
    c.run_round()
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], partition="left")
    c.run_round()
    assert backend.jobs["2"].partition == "right"
    # Slurm (or an admin) puts it back into left; a restarted controller must wait out the cooldown
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], partition="left")
    backend.now += 30
    restarted = mover(store, backend, partition_move_cooldown_s=600)
    restarted.run_round()
    assert len([call for call in backend.calls if call[0] == "move_partition"]) == 1
    backend.now += 600
    restarted.run_round()
    assert len([call for call in backend.calls if call[0] == "move_partition"]) == 2
    assert restarted.records["2"].moves == 2


def test_failed_move_is_logged_not_applied(store):
    class Refusing(PartitionBackend):
        def move_partition(self, job_id, partition):
            raise RuntimeError(f"move job {job_id}: Job is no longer pending execution")

    backend = Refusing()
    backend.add_in("1", 8, "left", "RUNNING", start=990.0, nodes=[("gpu1", 4), ("gpu2", 4)])
    backend.add_in("2", 4, "left,right")
    c = mover(store, backend)
    c.run_round()
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], partition="left")
    c.run_round()
    [logged] = _moves(store, "2")
    assert not logged["applied"] and "no longer pending" in logged["detail"]
    assert c.records["2"].moves == 0


def test_backend_without_a_partition_map_moves_nothing(store, caplog):
    class NoMap(PartitionBackend):
        def partition_nodes(self):
            return None

    backend = NoMap()
    backend.add_in("1", 8, "left", "RUNNING", start=990.0, nodes=[("gpu1", 4), ("gpu2", 4)])
    backend.add_in("2", 4, "left,right")
    c = mover(store, backend)
    c.run_round()
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], partition="left")
    with caplog.at_level(logging.WARNING):
        c.run_round()
        c.run_round()
    assert not [call for call in backend.calls if call[0] == "move_partition"]
    assert caplog.text.count("no partition map") == 1


def test_moves_are_off_by_default_and_counted_in_metrics(store):
    from controller.service.ops.metrics import Metrics

    backend = PartitionBackend()
    backend.add_in("1", 8, "left", "RUNNING", start=990.0, nodes=[("gpu1", 4), ("gpu2", 4)])
    backend.add_in("2", 4, "left,right")
    off = controller(store, backend, queues_gpu_s=[1e9])
    off.run_round()
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], partition="left")
    off.run_round()
    assert not [call for call in backend.calls if call[0] in ("move_partition", "partition_nodes")]
    metrics = Metrics(mode="enforce")
    on = mover(store, backend)
    on.metrics = metrics
    on.run_round()
    assert metrics.registry.get_sample_value("tiresias_partition_moves_total", {"mode": "enforce"}) == 1


def test_slurm_backend_partition_nodes_from_sinfo():
    from slurm_plugin.backend import SlurmBackend
    from slurm_plugin.commands import CommandResult

    sinfo = (FIXTURES / "sinfo.json").read_text()
    calls = []

    def run(argv, timeout_s, env):
        calls.append(argv[0])
        return CommandResult(0, sinfo, "")

    backend = SlurmBackend(runner=run)
    assert backend.partition_nodes() == {"batch": ["gpu1", "gpu2", "gpu3", "gpu4"],
                                         "urgent": ["gpu1", "gpu2", "gpu3", "gpu4"], "small": ["gpu1", "gpu2"]}
    assert calls == ["sinfo"]
    scoped = SlurmBackend(partitions=["small"], runner=run)
    assert scoped.partition_nodes() == {"small": ["gpu1", "gpu2"]}


def test_slurm_backend_partition_nodes_reuse_the_observation():
    from slurm_plugin.backend import SlurmBackend
    from slurm_plugin.commands import CommandResult

    outputs = {"squeue": (FIXTURES / "squeue.json").read_text(), "sinfo": (FIXTURES / "sinfo.json").read_text(),
               "sprio": "", "scontrol": ""}  # scontrol: `show partition -o` without partition lines
    calls = []

    def run(argv, timeout_s, env):
        calls.append(argv[0])
        return CommandResult(0, outputs[argv[0]], "")

    backend = SlurmBackend(runner=run)
    backend.observe()
    before = len(calls)
    assert backend.partition_nodes()["small"] == ["gpu1", "gpu2"]
    assert len(calls) == before  # no second sinfo


# ------------------------------------------------------------------ usage spool in the round

def _spool_line(record_id, **fields):
    return json.dumps({"record_id": record_id, "job_id": "7", "node": "gpu1", **fields}) + "\n"


def test_round_collects_the_usage_spool_at_most_every_usage_collect_s(store, tmp_path):
    spool = tmp_path / "usage"
    spool.mkdir()
    (spool / "usage-gpu1.jsonl").write_text(_spool_line("r1") + _spool_line("r2"))
    backend = ScriptedBackend()
    c = controller(store, backend, usage_spool_dir=str(spool), usage_collect_s=60)
    c.run_round()
    assert store.usage_record("r1") is not None and store.usage_record("r2") is not None
    assert not (spool / "usage-gpu1.jsonl").exists() and len(list((spool / "processed").iterdir())) == 1
    (spool / "usage-gpu2.jsonl").write_text(_spool_line("r3"))
    backend.now += 30
    c.run_round()
    assert store.usage_record("r3") is None  # not yet: collected every 60 s
    backend.now += 30
    c.run_round()
    assert store.usage_record("r3") is not None


def test_missing_spool_dir_is_ignored(store, tmp_path):
    c = controller(store, ScriptedBackend(), usage_spool_dir=str(tmp_path / "nowhere"))
    c.run_round()  # no error, nothing created
    assert not (tmp_path / "nowhere").exists()


def test_spool_errors_are_logged_once_and_never_end_the_round(store, tmp_path, caplog, monkeypatch):
    spool = tmp_path / "usage"
    spool.mkdir()
    (spool / "usage-gpu1.jsonl").write_text(_spool_line("r1"))
    backend = ScriptedBackend()
    c = controller(store, backend, usage_spool_dir=str(spool), usage_collect_s=1)

    def broken(record_id, fields):
        raise RuntimeError("database is locked")

    monkeypatch.setattr(store, "add_usage_record", broken)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            c.run_round()
            backend.now += 2
    assert caplog.text.count("not collected") == 1 and "database is locked" in caplog.text
    assert (spool / "usage-gpu1.jsonl").exists()  # left for the next collection
    monkeypatch.undo()
    c.run_round()
    assert store.usage_record("r1") is not None
    assert "collected again" in caplog.text

"""controller.service.round.partition_moves on its own: the round glue around the pure planner
(partition map from the backend, pinned jobs frozen, cooldown read back from the store)."""
import dataclasses
import math

from controller.core.plan import Plan
from controller.service.round.accounting import Accounts
from controller.service.ops.config import from_mapping
from controller.service.acting.executor import LeverExecutor
from controller.service.round.partition_moves import PartitionMover
from controller.service.ops.report import RoundReport
from tests.test_controller import ScriptedBackend, store  # noqa: F401  (fixture)
from tests.test_partition_moves import PartitionBackend


def mover(store, backend, **settings):
    config = from_mapping({"mode": "enforce", "partition_moves": True, "partition_duration_estimate_s": 100.0,
                           **settings})
    accounts = Accounts(store, "default")
    return PartitionMover(config, backend, store, LeverExecutor(backend, config.mode), accounts), accounts


def round_(mover_, accounts, backend, pinned=frozenset()):
    observation = backend.observe()
    observed = {j.job_id: j for j in observation.jobs}
    accounts.advance(observed, backend.now)
    plan = Plan(1, backend.now, order=sorted(observed))
    report = RoundReport(1, backend.now, plan)
    mover_.apply(plan, observed, observation.nodes, backend.now, report, pinned=set(pinned))
    return report


def busy_left_and_a_waiting_job(backend):
    backend.add_in("1", 8, "left", "RUNNING", start=990.0, nodes=[("gpu1", 4), ("gpu2", 4)])
    backend.add_in("2", 8, "left,right")
    return backend


def test_moves_a_waiting_job_to_the_free_partition_it_allowed(store):
    backend = busy_left_and_a_waiting_job(PartitionBackend())
    moves, accounts = mover(store, backend)
    round_(moves, accounts, backend)  # first sight: allowed left,right
    backend.add_in("2", 8, "left")  # narrowed since
    report = round_(moves, accounts, backend)
    assert ("move_partition", "2", "right") in backend.calls
    assert accounts.records["2"].moves == 1 and report.applied[0]["kind"] == "move"
    assert moves.last_move_s["2"] == backend.now


def test_a_pinned_job_is_never_moved(store):
    backend = busy_left_and_a_waiting_job(PartitionBackend())
    moves, accounts = mover(store, backend)
    round_(moves, accounts, backend)
    backend.add_in("2", 8, "left")
    round_(moves, accounts, backend, pinned={"2"})
    assert not [c for c in backend.calls if c[0] == "move_partition"]


def test_no_partition_map_no_moves_and_cooldown_read_from_the_store(store):
    plain = ScriptedBackend()  # no partition_nodes(): the round moves nothing
    plain.add("1", 8, "RUNNING", start=990.0, nodes=[("gpu1", 4), ("gpu2", 4)])
    plain.jobs["2"] = dataclasses.replace(plain.jobs.get("1"), job_id="2", state="PENDING", partition="left,right",
                                          gpus_by_node=())
    moves, accounts = mover(store, plain)
    assert moves.partition_nodes() is None
    round_(moves, accounts, plain)
    assert not [call for call in plain.calls if call[0] == "move_partition"]
    store.log_decisions("default", 1, 900.0, "enforce", [{"decision_id": "r1.m1", "job_id": "9", "kind": "move",
                                                          "reason": "x", "applied": True, "detail": ""}])
    moves._load_last_move("9")
    moves._load_last_move("10")
    assert moves.last_move_s == {"9": 900.0, "10": -math.inf}


class RefusingBackend(PartitionBackend):
    """Refuses the first ``refusals`` moves as slurmctld 24.11 does a job its scheduler
    holds at that moment ("Resource temporarily unavailable")."""

    def __init__(self, refusals):
        super().__init__()
        self.refusals = refusals

    def move_partition(self, job_id, partition):
        if self.refusals:
            self.refusals -= 1
            self.calls.append(("refused", job_id, partition))
            raise RuntimeError(f"scontrol update JobId={job_id} Partition={partition} failed (1): "
                               f"Resource temporarily unavailable for job {job_id}")
        super().move_partition(job_id, partition)


def test_a_refused_move_starts_no_cooldown_and_is_tried_again_after_a_doubling_backoff(store):
    backend = busy_left_and_a_waiting_job(RefusingBackend(refusals=2))
    moves, accounts = mover(store, backend, interval_s=5.0)
    round_(moves, accounts, backend)
    backend.add_in("2", 8, "left")
    report = round_(moves, accounts, backend)  # refused: not tried again for one interval
    assert report.applied[0]["kind"] == "move" and not report.applied[0]["applied"]
    assert "2" not in moves.last_move_s or moves.last_move_s["2"] == -math.inf
    backend.now += 4.0
    round_(moves, accounts, backend)
    assert [c[0] for c in backend.calls if c[1] == "2"] == ["refused"]
    backend.now += 1.0
    round_(moves, accounts, backend)  # refused again: the next try waits two intervals
    backend.now += 9.0
    round_(moves, accounts, backend)
    assert [c[0] for c in backend.calls if c[1] == "2"] == ["refused", "refused"]
    backend.now += 1.0
    round_(moves, accounts, backend)
    assert [c[0] for c in backend.calls if c[1] == "2"] == ["refused", "refused", "move_partition"]
    assert accounts.records["2"].moves == 1 and moves.last_move_s["2"] == backend.now and "2" not in moves.refused


def test_a_refused_move_in_the_log_starts_no_cooldown_after_a_restart(store):
    backend = PartitionBackend()
    moves, _ = mover(store, backend)
    store.log_decisions("default", 1, 900.0, "enforce", [
        {"decision_id": "r1.m1", "job_id": "9", "kind": "move", "reason": "x", "applied": False, "detail": "failed"}])
    moves._load_last_move("9")
    assert moves.last_move_s == {"9": -math.inf}


def test_a_move_refused_for_days_waits_the_cooldown_between_tries(store):
    moves, _ = mover(store, PartitionBackend(), interval_s=5.0, partition_move_cooldown_s=600.0)
    moves.refused["2"] = (5000, 0.0)  # refused at every try for about a month
    moves._refuse("2", 1000.0)
    assert moves.refused["2"] == (5001, 1600.0)

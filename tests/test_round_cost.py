"""What makes a round cheap without changing what it decides: pending jobs' clock-only
rows written an eighth a round (controller.service.round.accounting), a restart catching the
lag up; the heap frozen between rounds (controller.service.ops.heap); JobSpecs kept across
rounds only while nothing they hold changed (controller.service.round.daemon)."""
import dataclasses
import gc

import pytest

from controller.service.round.accounting import PENDING_CLOCKS_EVERY_ROUNDS
from controller.service.ops.heap import Heap
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)


def _pending_backend(count: int) -> ScriptedBackend:
    backend = ScriptedBackend()
    backend.jobs.clear()
    backend.add("0", 16, "RUNNING", start=1000.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    for i in range(1, count + 1):
        backend.add(str(i), 1)  # waits behind the full cluster
    return backend


def test_pending_clock_rows_lag_at_most_a_bounded_number_of_rounds_and_a_restart_catches_up(store):
    backend = _pending_backend(64)
    c = controller(store, backend)
    c.run_round()
    written_per_round = []
    for step in range(1, 2 * PENDING_CLOCKS_EVERY_ROUNDS + 1):
        backend.now = 1000.0 + 10 * step
        before = {j: r.last_observed_s for j, r in store.load_jobs("default").items()}
        c.run_round()
        after = store.load_jobs("default")
        written_per_round.append(sum(after[j].last_observed_s != before[j] for j in before if j != "0"))
        assert after["0"].last_observed_s == backend.now  # the running job: every round
        lag = [backend.now - after[j].last_observed_s for j in after if j != "0"]
        assert max(lag) <= 10 * (PENDING_CLOCKS_EVERY_ROUNDS - 1)  # no pending row older than the bound
    assert 0 < max(written_per_round) < 64  # a share each round, not every row
    assert sum(written_per_round) >= 64  # every row written at least once over two cycles
    # A restart (kill -9) rebuilds the same accounts from the lagging rows.
    backend.now += 10
    c.run_round()
    in_memory = {j: (r.waited_since_promotion_s, r.attained_gpu_s) for j, r in c.records.items()}
    c2 = controller(store, backend)
    c2.accounts.advance({j.job_id: j for j in backend.jobs.values()}, backend.now)
    for job_id, (waited, attained) in in_memory.items():
        assert c2.records[job_id].waited_since_promotion_s == pytest.approx(waited)
        assert c2.records[job_id].attained_gpu_s == pytest.approx(attained)


def test_a_pending_job_whose_facts_change_is_written_in_that_round(store):
    backend = _pending_backend(16)
    c = controller(store, backend)
    c.run_round()
    backend.now = 1010.0
    backend.jobs["0"] = dataclasses.replace(backend.jobs["0"], state="COMPLETED", end_time_s=1010.0)
    c.run_round()  # the plan starts pending jobs: their state and level are facts
    stored = store.load_jobs("default", include_finished=False)
    for job_id, record in c.records.items():
        if record.state == "DONE":
            continue
        row = stored[job_id]
        assert (row.level, row.queue_level, row.queue_entry, row.state) == \
               (record.level, record.queue_level, record.queue_entry, record.state)


def test_heap_is_frozen_after_a_round_and_collected_in_full_hourly():
    heap = Heap(full_every_s=3600.0)
    try:
        heap.after_round(0.0)
        assert gc.get_freeze_count() > 0 and heap.full_collections == 1
        heap.after_round(1800.0)
        assert heap.full_collections == 1  # not yet due
        heap.after_round(3600.0)
        assert heap.full_collections == 2 and gc.get_freeze_count() > 0  # collected, then frozen again
        assert gc.get_threshold()[0] >= 20_000
    finally:
        gc.unfreeze()


def test_a_kept_jobspec_follows_a_pin_and_a_changed_record(store):
    backend = _pending_backend(2)
    c = controller(store, backend)
    c.run_round()
    spec = c._specs["1"][2]
    backend.now = 1010.0
    c.run_round()
    assert c._specs["1"][2] is spec  # nothing it holds changed: the same object
    c.records["1"].skew = 0.5
    backend.now = 1020.0
    c.run_round()
    assert c._specs["1"][2] is not spec and c._specs["1"][2].skew == 0.5


def test_no_collection_inside_a_round_and_the_collector_back_on_after_one_that_failed():
    heap = Heap()
    collections = []
    gc.callbacks.append(lambda phase, info: collections.append(phase))
    try:
        with heap.round(0.0):
            assert not gc.isenabled()
            [[] for _ in range(200_000)]  # allocations that would trigger young collections
        assert gc.isenabled() and collections == []
        with pytest.raises(RuntimeError):
            with heap.round(1.0):
                raise RuntimeError("a bug in a round")
        assert gc.isenabled()
    finally:
        gc.callbacks.pop()
        gc.unfreeze()


def test_a_full_observation_runs_with_the_collector_off(store):
    """Controller.observe reads Slurm with the collector paused (what it parses lives
    into the round: Heap.paused), and leaves it as it was."""
    backend = _pending_backend(4)
    seen = []
    real = backend.observe
    backend.observe = lambda: seen.append(gc.isenabled()) or real()
    c = controller(store, backend)
    assert gc.isenabled()
    c.run_round(c.observe())
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        c.observe()
        assert seen == [False, False] and not gc.isenabled()  # left off, as it was
    finally:
        gc.enable()
        gc.unfreeze()

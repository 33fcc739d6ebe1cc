"""controller.service.round.accounting on its own: attained service advanced from observations,
kept in a real SQLite store across a process restart, ended jobs closed."""
import dataclasses

import pytest

from controller.service.round.accounting import Accounts

from controller.service.acting.backend import numeric_id
from controller.service.acting.backend import Observation
from tests.test_controller import ScriptedBackend, store  # noqa: F401  (fixture)


def observe(backend):
    observation = backend.observe()
    return {j.job_id: j for j in observation.jobs if j.gpus > 0}, observation


def test_running_job_accrues_gpu_seconds_and_pending_job_waits(store):
    backend = ScriptedBackend()
    backend.add("1", 2, "RUNNING", start=990.0, nodes=[("gpu1", 2)])
    backend.add("2", 4)
    accounts = Accounts(store, "default")
    accounts.advance(*observe(backend)[:1], backend.now)
    assert accounts.records["1"].attained_gpu_s == pytest.approx(20)  # 2 GPUs x 10 s since its start
    backend.now += 30
    accounts.advance(observe(backend)[0], backend.now)
    assert accounts.records["1"].attained_gpu_s == pytest.approx(80)
    assert accounts.records["1"].executed_s == pytest.approx(40)
    assert accounts.records["2"].attained_gpu_s == 0 and accounts.records["2"].waited_since_promotion_s == 30


def test_a_requeue_counts_only_the_new_run_and_marks_when_it_stopped(store):
    backend = ScriptedBackend()
    backend.add("1", 4, "RUNNING", start=1000.0, nodes=[("gpu1", 4)])
    accounts = Accounts(store, "default")
    accounts.advance(observe(backend)[0], 1000.0)
    backend.now = 1050.0
    backend.add("1", 4, "PENDING", restarts=1)  # requeued between the observations
    accounts.advance(observe(backend)[0], backend.now)
    assert accounts.stopped_at["1"] == 1050.0
    backend.now = 1100.0
    backend.add("1", 4, "RUNNING", start=1090.0, nodes=[("gpu1", 4)], restarts=1)
    accounts.advance(observe(backend)[0], backend.now)
    assert accounts.records["1"].attained_gpu_s == pytest.approx(40)  # only 1090..1100 was seen running
    assert "1" not in accounts.stopped_at


def test_accounts_survive_a_restart_through_the_store(store):
    backend = ScriptedBackend()
    backend.add("1", 1, "RUNNING", start=1000.0, nodes=[("gpu1", 1)])
    accounts = Accounts(store, "default")
    accounts.advance(observe(backend)[0], 1000.0)
    backend.now = 1060.0
    accounts.advance(observe(backend)[0], backend.now)
    accounts.save()
    again = Accounts(store, "default")
    backend.now = 1100.0
    again.advance(observe(backend)[0], backend.now)
    assert again.records["1"].attained_gpu_s == pytest.approx(100)


def test_ended_job_is_closed_and_becomes_a_sample_and_unparsed_records_are_not_gone(store):
    backend = ScriptedBackend()
    backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
    backend.add("2", 1)
    accounts = Accounts(store, "default")
    observed, observation = observe(backend)
    accounts.advance(observed, 1000.0)
    # job 2 missing from an observation that skipped a record: not taken as gone
    backend.now = 1010.0
    del backend.jobs["2"]
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="COMPLETED", end_time_s=1010.0)
    observed, observation = observe(backend)
    accounts.finish_gone(observed, Observation(observation.observed_at_s, observation.jobs, observation.nodes,
                                               skipped=["bad record"]), backend.now)
    assert accounts.records["1"].state == "DONE" and accounts.records["2"].state != "DONE"
    assert store.service_samples("default") == [pytest.approx(20)]
    accounts.finish_gone(observed, observation, backend.now)  # now trusted: job 2 left Slurm
    assert accounts.records["2"].end_state == "GONE"
    assert sorted(accounts.forget_finished()) == ["1", "2"] and accounts.records == {}


def test_promotion_resets_the_queue_clocks_not_the_attained_service(store):
    backend = ScriptedBackend()
    backend.add("1", 2, "RUNNING", start=900.0, nodes=[("gpu1", 2)])
    accounts = Accounts(store, "default")
    accounts.advance(observe(backend)[0], backend.now)
    accounts.promote("1")
    record = accounts.records["1"]
    assert record.queue_service_gpu_s == 0 and record.executed_since_promotion_s == 0
    assert record.attained_gpu_s == pytest.approx(200) and record.promotions == 1


def test_numeric_id_orders_by_number_then_array_task():
    assert sorted(["10", "9", "9_2", "9_10"], key=numeric_id) == ["9", "9_10", "9_2", "10"]


def test_what_save_writes_is_what_memory_holds_though_unchanged_jobs_are_not_read_again(store):
    """advance reads whole only the jobs whose ObservedJob changed, and save writes only
    those, the running ones and a share of the pending ones: after each round the
    store holds every record's facts as memory does, and a pending job's clocks at most
    PENDING_CLOCKS_EVERY_ROUNDS rounds behind (a running job's: none)."""
    from controller.service.round.accounting import PENDING_CLOCKS_EVERY_ROUNDS
    from controller.service.state.store import JOB_FIELDS
    clocks = {"attained_gpu_s", "queue_service_gpu_s", "executed_s", "executed_since_promotion_s",
              "waited_since_promotion_s", "last_observed_s"}
    backend = ScriptedBackend()
    for n in range(1, 41):
        if n % 4 == 0:
            backend.add(str(n), 1, "RUNNING", start=990.0, nodes=[(f"gpu{n}", 1)])
        else:
            backend.add(str(n), 2)
    accounts = Accounts(store, "default")
    for round_number in range(1, 41):
        backend.now = 1000.0 + 10 * round_number
        changed = str(round_number)  # one job a round starts (or, running, is requeued)
        if backend.jobs[changed].state == "PENDING":
            backend.add(changed, 2, "RUNNING", start=backend.now - 5, nodes=[("gpu0", 2)])
        else:
            backend.add(changed, 1, "PENDING", restarts=1)
        accounts.advance(observe(backend)[0], backend.now)
        accounts.save()
        stored = store.load_jobs("default", include_finished=False)
        assert stored.keys() == accounts.records.keys()
        for job_id, record in accounts.records.items():
            row = stored[job_id]
            for name in JOB_FIELDS:
                if name not in clocks or record.last_running:
                    assert getattr(row, name) == getattr(record, name), (round_number, job_id, name)
            assert backend.now - row.last_observed_s <= 10 * PENDING_CLOCKS_EVERY_ROUNDS
    assert accounts.records["1"].state == "RUNNING" and accounts.records["1"].attained_gpu_s == pytest.approx(
        2 * (5 + 390))  # started at 1005, observed running from 1010 to 1400


def test_the_jobs_that_ever_ran_are_known_across_a_requeue_a_reload_and_their_end(store):
    backend = ScriptedBackend()
    backend.add("1", 1, "RUNNING", start=990.0, nodes=[("gpu1", 1)])
    backend.add("2", 1)
    accounts = Accounts(store, "default")
    accounts.advance(observe(backend)[0], backend.now)
    assert accounts.started_once == {"1"}
    backend.now += 10
    backend.add("1", 1, "PENDING", restarts=1)  # requeued: pending, and ran before
    accounts.advance(observe(backend)[0], backend.now)
    accounts.save()
    assert Accounts(store, "default").started_once == {"1"}  # from the stored first start
    backend.now += 10
    del backend.jobs["1"]
    observed, observation = observe(backend)
    accounts.finish_gone(observed, observation, backend.now)
    accounts.forget_finished()
    assert accounts.started_once == set()


def test_reading_only_the_changed_jobs_keeps_the_records_a_read_of_every_job_keeps(tmp_path):
    """Issue 37: advance finds the jobs whose ObservedJob changed by identity and keeps the
    pending ones across calls; over rounds of starts, requeues, ends, transient states,
    new jobs and a forgotten record, its records equal those of accounts that read every
    job whole every round."""
    import random

    from controller.service.acting.backend import ObservedJob
    from controller.service.state.store import JOB_FIELDS, Store

    clocks = {"attained_gpu_s", "queue_service_gpu_s", "executed_s", "executed_since_promotion_s",
              "waited_since_promotion_s", "last_observed_s"}

    rng = random.Random(3)
    jobs: dict[str, ObservedJob] = {}

    def job(job_id, state, now, restarts=0):
        running = state == "RUNNING"
        return ObservedJob(job_id=job_id, user="alice", partition="batch", state=state, reason="Priority",
                           gpus=1 + int(job_id) % 3, gpus_by_node=((f"gpu{job_id}", 1 + int(job_id) % 3),) if running else (),
                           submit_time_s=900.0, start_time_s=now - rng.choice((0, 3)) if running else None,
                           restart_count=restarts)

    for n in range(30):
        jobs[str(n)] = job(str(n), "RUNNING" if n % 3 == 0 else "PENDING", 1000.0)
    stores = [Store(f"sqlite:///{tmp_path}/{name}.db") for name in ("changed", "every")]
    changed, every = (Accounts(s, "default") for s in stores)
    try:
        for round_number in range(1, 40):
            now = 1000.0 + 7 * round_number
            for job_id in rng.sample(sorted(jobs), 4):
                old = jobs[job_id]
                if rng.random() < 0.2:
                    del jobs[job_id]  # gone from squeue at once (purged)
                elif old.state == "PENDING":
                    jobs[job_id] = job(job_id, "RUNNING", now, old.restart_count)
                elif old.state == "RUNNING":
                    jobs[job_id] = job(job_id, rng.choice(("PENDING", "COMPLETING", "COMPLETED")), now,
                                       old.restart_count + 1)
                else:
                    del jobs[job_id]  # gone from squeue
            jobs[str(100 + round_number)] = job(str(100 + round_number), "PENDING", now)
            observed = dict(jobs)
            every.forget_reuse()
            for accounts in (changed, every):
                accounts.advance(observed, now)
                observation = Observation(now, list(observed.values()), [])
                with accounts.store.transaction():
                    accounts.finish_gone(observed, observation, now)
                    accounts.save()
                accounts.forget_finished()
            assert changed.records == every.records, round_number
            assert changed.stopped_at == every.stopped_at
            # what save wrote: every fact, and a running job's clocks (a pending job's lag)
            stored = changed.store.load_jobs("default", include_finished=False)
            assert stored.keys() == changed.records.keys()
            for job_id, record in changed.records.items():
                for name in JOB_FIELDS:
                    if name not in clocks:
                        assert getattr(stored[job_id], name) == getattr(record, name), (round_number, job_id, name)
    finally:
        for s in stores:
            s.close()

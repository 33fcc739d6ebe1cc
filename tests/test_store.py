"""controller.service.state.store against SQLite and a real PostgreSQL server (tests/pg_server.py)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from sqlalchemy import create_engine, text

from controller.core.model import InputError
from controller.core.plan import Preempt, Promote, Start
from controller.service.state.engine import metadata
from controller.service.state.store import SCHEMA_VERSION, JobRecord, PendingPreemption, Store, StoreBusy, StoreError
from tests.pg_server import postgres_url  # noqa: F401


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request, tmp_path):
    """A URL to an empty database of each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'tiresias.db'}"
    url = request.getfixturevalue("postgres_url")
    engine = create_engine(url)
    metadata.drop_all(engine)  # every test starts from an empty schema
    engine.dispose()
    return url


@pytest.fixture
def store(store_url):
    with Store(store_url, busy_timeout_s=1.0) as opened:
        yield opened


def job(job_id: str, **changes) -> JobRecord:
    values = dict(job_id=job_id, num_gpus=4, submit_time_s=1000.0, user="alice", partition="gpu")
    values.update(changes)
    return JobRecord(**values)


def test_jobs_round_trip(store):
    records = [
        job("1", first_start_s=1010.5, attained_gpu_s=400.0, queue_service_gpu_s=120.0, executed_s=100.0,
            executed_since_promotion_s=30.0, waited_since_promotion_s=7.5, last_observed_s=1110.0,
            last_running=True, restart_count=2, preemptions=1, promotions=1, moves=3, skew=0.7, level=1,
            state="RUNNING"),
        job("2", num_gpus=1),
    ]
    assert store.save_jobs("c1", records) == 2
    assert store.load_jobs("c1") == {"1": records[0], "2": records[1]}
    assert store.load_jobs("other") == {}


def test_upsert_replaces_values_and_keeps_other_rows(store):
    store.save_jobs("c1", [job("1", attained_gpu_s=10.0), job("2", attained_gpu_s=20.0)])
    store.save_jobs("c1", [job("1", attained_gpu_s=50.0, last_running=True, state="RUNNING")])
    store.save_jobs("c2", [job("1", attained_gpu_s=999.0)])  # same job id, other cluster
    loaded = store.load_jobs("c1")
    assert loaded["1"].attained_gpu_s == 50.0 and loaded["1"].state == "RUNNING" and loaded["1"].last_running
    assert loaded["2"].attained_gpu_s == 20.0
    assert store.load_jobs("c2")["1"].attained_gpu_s == 999.0


def test_save_jobs_is_one_transaction(store):
    store.save_jobs("c1", [job("1", attained_gpu_s=10.0)])
    broken = job("2")
    broken.num_gpus = None  # NOT NULL: the whole batch must be refused
    with pytest.raises(StoreError):
        store.save_jobs("c1", [job("1", attained_gpu_s=99.0), broken])
    assert store.load_jobs("c1") == {"1": job("1", attained_gpu_s=10.0)}


def test_save_jobs_writes_only_rows_that_changed(store):
    records = [job("1", attained_gpu_s=10.0), job("2"), job("3")]
    assert store.save_jobs("c1", records) == 3
    assert store.save_jobs("c1", records) == 0  # nothing changed: nothing written
    records[1].waited_since_promotion_s = 5.0
    assert store.save_jobs("c1", records) == 1
    assert store.save_jobs("c2", records) == 3  # per cluster
    with pytest.raises(RuntimeError):
        with store.transaction():
            records[0].attained_gpu_s = 20.0
            assert store.save_jobs("c1", records) == 1
            raise RuntimeError("the round failed after its save")
    assert store.load_jobs("c1")["1"].attained_gpu_s == 10.0  # rolled back: written again next time
    assert store.save_jobs("c1", records) == 1
    assert store.load_jobs("c1")["1"].attained_gpu_s == 20.0


def test_a_row_written_by_another_process_is_rewritten_after_a_load(store_url):
    with Store(store_url) as ours, Store(store_url) as theirs:
        mine = job("1", attained_gpu_s=10.0)
        ours.save_jobs("c1", [mine])
        theirs.save_jobs("c1", [job("1", attained_gpu_s=99.0)])
        assert ours.load_jobs("c1")["1"].attained_gpu_s == 99.0  # what the database holds now
        assert ours.save_jobs("c1", [mine]) == 1
        assert theirs.load_jobs("c1")["1"].attained_gpu_s == 10.0
        ours.mark_finished("c1", "1", finished_s=2000.0, end_state="COMPLETED", total_service_gpu_s=10.0)
        assert ours.save_jobs("c1", [mine]) == 1  # the close wrote the row: a later save writes it whole


def test_mark_finished(store):
    store.save_jobs("c1", [job("1", attained_gpu_s=10.0, last_running=True, state="RUNNING")])
    store.mark_finished("c1", "1", finished_s=2000.0, end_state="COMPLETED", total_service_gpu_s=4000.0)
    store.mark_finished("c1", "ghost", finished_s=2001.0, end_state="CANCELLED", total_service_gpu_s=0.0)
    loaded = store.load_jobs("c1")
    assert (loaded["1"].state, loaded["1"].end_state, loaded["1"].finished_s) == ("DONE", "COMPLETED", 2000.0)
    assert loaded["1"].attained_gpu_s == 4000.0 and not loaded["1"].last_running
    assert loaded["1"].num_gpus == 4 and loaded["1"].user == "alice"  # untouched
    assert loaded["ghost"].end_state == "CANCELLED"
    assert set(store.load_jobs("c1", include_finished=False)) == set()


def test_service_samples_idempotent(store):
    assert store.add_service_sample("c1", "1", 100.0, finished_s=10.0)
    assert not store.add_service_sample("c1", "1", 555.0, finished_s=11.0)
    assert store.add_service_sample("c1", "2", 200.0, finished_s=20.0)
    assert store.add_service_sample("c2", "1", 7.0, finished_s=20.0)
    assert store.service_samples("c1") == [100.0, 200.0]
    assert store.service_samples("c1", since_s=15.0) == [200.0]


def test_decision_log(store):
    store.log_decisions("c1", 1, 100.0, "shadow", [
        Start("r1-1", "10", (("n1", 2), ("n2", 2)), "highest priority"),
        Preempt("r1-2", "11", "lower queue"),
    ], applied=False)  # shadow: the executor says nothing was applied
    store.log_decisions("c1", 2, 160.0, "enforce", [
        Promote("r2-1", "11", "starved 2x"),
        {"decision_id": "r2-2", "job_id": "10", "kind": "preempt", "reason": "x", "applied": False,
         "detail": "sbatch refused"},
    ])
    newest = store.decisions("c1")
    assert [d["decision_id"] for d in newest] == ["r2-2", "r2-1", "r1-2", "r1-1"]
    assert [d["applied"] for d in newest] == [False, True, False, False]
    assert newest[0]["detail"] == "sbatch refused"
    assert newest[3]["detail"] == "placement n1:2,n2:2" and newest[3]["mode"] == "shadow"
    assert [d["decision_id"] for d in store.decisions("c1", job_id="11")] == ["r2-1", "r1-2"]
    assert len(store.decisions("c1", limit=1)) == 1
    assert store.decisions("c2") == []


def test_preemption_is_unique_while_open(store):
    assert store.begin_preemption("c1", "5", signalled_at_s=100.0, restart_count=0)
    assert not store.begin_preemption("c1", "5", signalled_at_s=130.0, restart_count=0)
    assert store.begin_preemption("c2", "5", signalled_at_s=100.0, restart_count=0)
    assert store.pending_preemptions("c1") == [PendingPreemption("5", 100.0, 0)]
    assert store.finish_preemption("c1", "5", "requeued")
    assert not store.finish_preemption("c1", "5", "requeued")
    assert store.pending_preemptions("c1") == []
    assert store.begin_preemption("c1", "5", signalled_at_s=500.0, restart_count=1)  # a later one is fine
    assert store.pending_preemptions("c1") == [PendingPreemption("5", 500.0, 1)]


def test_usage_records_idempotent(store):
    assert store.add_usage_record("node1:42:1", {"job_id": "42", "gpu_s": 12.5})
    assert not store.add_usage_record("node1:42:1", {"job_id": "42", "gpu_s": 99.0})
    assert store.usage_record("node1:42:1") == {"job_id": "42", "gpu_s": 12.5}
    assert store.usage_record("missing") is None


def test_round_ids_count_per_cluster(store):
    assert [store.next_round_id("c1") for _ in range(3)] == [1, 2, 3]
    assert store.next_round_id("c2") == 1


def test_restart_finds_everything(store_url):
    with Store(store_url) as first:
        first.save_jobs("c1", [job("1", attained_gpu_s=321.0)])
        first.add_service_sample("c1", "0", 50.0, finished_s=1.0)
        first.log_decisions("c1", first.next_round_id("c1"), 10.0, "enforce", [Preempt("d1", "1", "why")])
        first.begin_preemption("c1", "1", 10.0, 0)
        first.add_usage_record("r1", {"a": 1})
    with Store(store_url) as second:
        assert second.schema_version == SCHEMA_VERSION
        assert second.load_jobs("c1")["1"].attained_gpu_s == 321.0
        assert second.service_samples("c1") == [50.0]
        assert second.decisions("c1")[0]["decision_id"] == "d1"
        assert second.pending_preemptions("c1") == [PendingPreemption("1", 10.0, 0)]
        assert not second.begin_preemption("c1", "1", 20.0, 0)  # no double requeue after restart
        assert not second.add_usage_record("r1", {"a": 1})
        assert second.next_round_id("c1") == 2


def test_bad_urls_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="cannot parse"):
        Store("not a url")
    with pytest.raises(InputError, match="not supported"):
        Store("mysql://u@h/db")
    with pytest.raises(InputError):
        Store("postgresql+nosuchdriver://u@h/db")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot create directory"):
        Store(f"sqlite:///{blocker}/sub/t.db")


def test_newer_schema_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 't.db'}"
    Store(url).close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE schema_meta SET value = '99' WHERE key = 'schema_version'"))
    engine.dispose()
    with pytest.raises(StoreError, match="schema version 99"):
        Store(url)


def test_sqlite_uses_wal(tmp_path):
    path = tmp_path / "t.db"
    with Store(f"sqlite:///{path}") as store:
        with store.engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"


LOCK_HOLDER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""

PG_LOCK_HOLDER = r"""
import psycopg2, sys
conn = psycopg2.connect(sys.argv[1])
conn.cursor().execute("LOCK TABLE job_service IN ACCESS EXCLUSIVE MODE")
print("locked", flush=True)
sys.stdin.readline()
conn.rollback()
"""


def test_locked_database_raises_store_busy_and_keeps_data(store_url):
    """Another process holds the write lock: save_jobs fails fast with StoreBusy,
    nothing is half written, and it works again once the lock is gone."""
    with Store(store_url, busy_timeout_s=0.5) as store:
        store.save_jobs("c1", [job("1", attained_gpu_s=10.0), job("2", attained_gpu_s=20.0)])
        if store.is_sqlite:
            script, target = LOCK_HOLDER, store.url.database
        else:
            script, target = PG_LOCK_HOLDER, store.url.set(drivername="postgresql").render_as_string(
                hide_password=False)
        holder = subprocess.Popen([sys.executable, "-c", script, target], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "locked"
            started = time.monotonic()
            with pytest.raises(StoreBusy) as caught:
                store.save_jobs("c1", [job("1", attained_gpu_s=99.0), job("3")])
            assert time.monotonic() - started < 5.0
            message = str(caught.value)
            assert "\n" not in message and "locked" in message
            if store.is_sqlite:
                assert str(store.url.database) in message
                # WAL: reads still work while another process holds the write lock.
                assert store.load_jobs("c1")["1"].attained_gpu_s == 10.0
        finally:
            holder.stdin.write("\n")
            holder.stdin.flush()
            holder.wait(timeout=10)
            holder.stdin.close()
            holder.stdout.close()
        assert {k: v.attained_gpu_s for k, v in store.load_jobs("c1").items()} == {"1": 10.0, "2": 20.0}
        store.save_jobs("c1", [job("1", attained_gpu_s=99.0)])
        assert store.load_jobs("c1")["1"].attained_gpu_s == 99.0


def test_postgres_unavailable_fails_under_ci_and_skips_otherwise(monkeypatch):
    from tests import pg_server

    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no server"):
        pg_server._unavailable("no server")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="no server"):
        pg_server._unavailable("no server")


def test_usage_records_per_cluster_and_pruned(tmp_path):
    """Usage records are found by cluster (the record_id's first part, a name with
    LIKE's wildcards in it too) and retention deletes only the old ones of that cluster."""
    from controller.service.state.jobs import usage_records
    store = Store(f"sqlite:///{tmp_path}/u.db")
    for record_id in ("tc/1/gpu1/0", "tc/2/gpu1/0", "t_/3/gpu1/0", "other/1/gpu1/0"):
        store.add_usage_record(record_id, {"record_id": record_id})
    assert [r["record_id"] for r in store.usage_records("tc")] == ["tc/1/gpu1/0", "tc/2/gpu1/0"]
    assert [r["record_id"] for r in store.usage_records("t_")] == ["t_/3/gpu1/0"]
    with store._tx() as conn:  # noqa: SLF001 - age one record
        conn.execute(usage_records.update().where(usage_records.c.record_id == "tc/1/gpu1/0").values(added_s=0.0))
        conn.execute(usage_records.update().where(usage_records.c.record_id == "other/1/gpu1/0")
                     .values(added_s=0.0))
    assert store.prune_usage_records("tc", before_s=1000.0) == 1
    assert [r["record_id"] for r in store.usage_records("tc")] == ["tc/2/gpu1/0"]
    assert store.usage_record("other/1/gpu1/0") is not None


def test_a_schema_another_process_created_between_our_look_and_our_create_is_used(tmp_path, monkeypatch):
    """Two processes opening a new database at once (the controller and a test or a
    command): both find no schema, one creates it, the other's create then fails with
    "already exists". The second takes the schema the first made."""
    import controller.service.state.engine as engine_module
    from sqlalchemy import MetaData

    url = f"sqlite:///{tmp_path}/race.db"
    Store(url).close()  # the other process won the race
    real_version = Store._stored_version
    looks = []

    def no_schema_at_the_first_look(self):
        looks.append(1)
        return None if len(looks) == 1 else real_version(self)

    monkeypatch.setattr(Store, "_stored_version", no_schema_at_the_first_look)
    # its create as it runs after a look that found nothing: no second check
    monkeypatch.setattr(engine_module.metadata, "create_all",
                        lambda conn: MetaData.create_all(engine_module.metadata, conn, checkfirst=False))
    with Store(url) as store:
        assert store.found_version is None and store._stored_version() == SCHEMA_VERSION


def test_an_opener_that_lost_the_create_race_waits_for_the_version_row(tmp_path, monkeypatch):
    """The creator's tables are visible before its version row (SQLite commits each
    CREATE TABLE on its own): the opener whose create lost the race waits for the row
    instead of comparing None with a version (a TypeError in a command started beside
    a controller's first start)."""
    import controller.service.state.engine as engine_module
    from sqlalchemy import MetaData

    url = f"sqlite:///{tmp_path}/race.db"
    Store(url).close()
    real_version = Store._stored_version
    looks = []

    def row_visible_from_the_fourth_look(self):
        looks.append(1)
        return None if len(looks) < 4 else real_version(self)

    monkeypatch.setattr(Store, "_stored_version", row_visible_from_the_fourth_look)
    monkeypatch.setattr(engine_module.metadata, "create_all",
                        lambda conn: MetaData.create_all(engine_module.metadata, conn, checkfirst=False))
    with Store(url) as store:
        assert store.schema_version == SCHEMA_VERSION and len(looks) >= 4


def test_an_opener_whose_racing_creator_never_writes_a_version_gets_one_line(tmp_path, monkeypatch):
    import controller.service.state.engine as engine_module
    from sqlalchemy import MetaData

    url = f"sqlite:///{tmp_path}/race.db"
    Store(url).close()
    monkeypatch.setattr(Store, "_stored_version", lambda self: None)
    monkeypatch.setattr(engine_module.metadata, "create_all",
                        lambda conn: MetaData.create_all(engine_module.metadata, conn, checkfirst=False))
    with pytest.raises(StoreError, match="wrote no schema_version within 0.2 s"):
        Store(url, busy_timeout_s=0.2)

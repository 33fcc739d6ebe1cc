"""Crash consistency and the standby lease at the controller's boundary: a scripted
backend, a real SQLite store. The same on real Slurm (SIGKILL x 20, slurmctld restart,
database outage, two controllers on PostgreSQL) is tests/test_chaos_slurm.py."""
import dataclasses
import time

import pytest

from controller.service.round.daemon import Controller
from controller.service.acting.lease import Lease
from controller.service.state.store import Fence, LeaseLost, Store, StoreError
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)


def test_a_crash_between_closing_a_job_and_adding_its_sample_loses_neither(store, monkeypatch):
    backend = ScriptedBackend()
    backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
    c = controller(store, backend)
    c.run_round()
    backend.now = 1030.0
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="COMPLETED", end_time_s=1030.0)

    def crash(*_args, **_kw):
        raise StoreError("database t.db: disk I/O error")

    monkeypatch.setattr(store, "add_service_sample", crash)
    with pytest.raises(StoreError):
        c.run_round()
    assert store.load_jobs("default")["1"].finished_s is None  # the close was rolled back with the sample
    monkeypatch.undo()
    c2 = controller(store, backend)  # the restarted process
    c2.run_round()
    assert store.load_jobs("default")["1"].state == "DONE"
    assert store.service_samples("default") == [pytest.approx(60.0)]


def test_a_job_gone_while_the_controller_was_down_is_not_credited_the_downtime(store):
    backend = ScriptedBackend()
    backend.add("1", 4, "RUNNING", start=1000.0, nodes=[("gpu1", 4)])
    c = controller(store, backend, poll_s=2.0)
    c.run_round()
    backend.now = 1010.0
    c.run_round()  # 40 GPU-s
    del backend.jobs["1"]  # ended, and Slurm forgot it, during a 600 s outage
    backend.now = 1610.0
    controller(store, backend, poll_s=2.0).run_round()
    record = store.load_jobs("default")["1"]
    assert record.state == "DONE" and record.end_state == "GONE"
    assert record.attained_gpu_s == pytest.approx(40 + 4 * 2.0)  # at most one poll interval more


def test_a_failed_transaction_acts_on_nothing_and_the_next_round_catches_up(store, monkeypatch):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    c = controller(store, backend)
    c.run_round()
    backend.add("2", 4)
    backend.now = 1001.0
    real = store.next_round_id
    monkeypatch.setattr(store, "next_round_id", lambda cluster: (_ for _ in ()).throw(StoreError("db down")))
    with pytest.raises(StoreError):
        c.run_round()
    assert not [call for call in backend.calls if call[0] in ("signal", "requeue")]
    assert c._stale
    monkeypatch.setattr(store, "next_round_id", real)
    backend.now = 1002.0
    c.run_round()
    assert [call for call in backend.calls if call[0] == "signal"] == [("signal", "1", "USR1", True)]
    # job 1 ran 1,002 s: credited once, not twice for the round that failed
    assert store.load_jobs("default")["1"].attained_gpu_s == pytest.approx(16 * 1002)


def test_a_pin_survives_a_restart_and_is_cleared_after_its_expiry(store):
    backend = ScriptedBackend()
    backend.add("2", 8)
    c = controller(store, backend, pin_expiry_s=60)
    c.levers.pins["2"] = 1030.0
    store.set_pin("default", "2", 1030.0)
    c2 = controller(store, backend, pin_expiry_s=60)  # restarted: reads the pin
    assert c2.levers.pins == {"2": 1030.0}
    backend.now = 1031.0
    c2.run_round()
    assert ("pin_nodes", "2", []) in backend.calls
    assert store.load_pins("default") == {}


def test_lease_one_holder_epochs_and_a_deposed_leader_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path}/lease.db"
    clock = [0.0]
    with Store(url) as one, Store(url) as two:
        a = Lease(one, "c", ttl_s=0.5, holder="a", monotonic=lambda: clock[0])
        b = Lease(two, "c", ttl_s=0.5, holder="b", monotonic=lambda: clock[0])
        assert a.hold() and not b.hold()
        assert one.fence == Fence("c", "a", 1)
        one.next_round_id("c")  # the leader writes
        time.sleep(0.6)  # the lease runs out on the database's clock
        assert b.hold() and b.epoch == 2
        with pytest.raises(LeaseLost):
            one.next_round_id("c")  # the deposed leader's write is refused
        clock[0] = 10.0  # a's own clock also says its lease is over
        assert not a.valid()
        with pytest.raises(LeaseLost):
            a.guard()  # and it does not act
        assert not a.hold() and a.epoch is None
        b.release()
        assert a.hold() and a.epoch == 3


def test_standby_needs_postgresql(tmp_path):
    from controller.core.model import InputError
    from controller.service.ops.config import from_mapping

    with pytest.raises(InputError, match="standby"):
        from_mapping({"standby": True, "database_url": f"sqlite:///{tmp_path}/x.db"})
    config = from_mapping({"standby": True, "database_url": "postgresql+psycopg2://u@h/db", "interval_s": 4})
    assert config.lease_ttl() == 1.5 * (15 + 1)  # longer than a command may run (command_timeout_s 15) + 1 s
    config = from_mapping({"database_url": "postgresql+psycopg2://u@h/db", "interval_s": 4, "command_timeout_s": 2})
    assert config.lease_ttl() == 6.0 and config.fence_margin() == 3.0
    with pytest.raises(InputError, match="key 'lease_ttl_s' value 3 must exceed command_timeout_s"):
        from_mapping({"lease_ttl_s": 3, "command_timeout_s": 2})


def test_two_controllers_one_store_only_the_leaseholder_acts(tmp_path):
    from controller.service.ops.config import from_mapping

    url = f"sqlite:///{tmp_path}/pair.db"
    settings = {"mode": "enforce", "preempt_min_runtime_s": 0, "preempt_grace_s": 10, "queues_gpu_s": [100.0],
                "database_url": url, "lease_ttl_s": 1.2, "command_timeout_s": 0.1}
    config = from_mapping(settings)
    config = config.__class__(**{**config.__dict__, "standby": True})  # SQLite refused by config: lease here only
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    with Store(url) as s1, Store(url) as s2:
        first = Controller(config, backend, s1, clock=lambda: backend.now)
        second = Controller(config, backend, s2, clock=lambda: backend.now)
        assert first.lease.hold() and not second.lease.hold()
        first.run_round()
        with pytest.raises(StoreError, match="standing by"):
            second.run_round()
        backend.add("2", 4)
        backend.now = 1001.0
        first.run_round()
        signals = [c for c in backend.calls if c[0] == "signal"]
        assert signals == [("signal", "1", "USR1", True)]
        time.sleep(1.3)  # the leader stalls past its lease
        assert second.lease.hold()
        backend.now = 1012.0
        second.run_round()  # reloads from the store: the open preemption, not a second signal
        with pytest.raises(StoreError, match="standing by"):
            first.run_round()  # its own clock says the lease is over: it asks, and stands by
        # A leader that believes it still holds the lease (its clock missed the stall):
        first.lease.epoch, first.lease.valid_until = 1, float("inf")
        first.lease.hold = lambda: True
        first.store.fence = Fence("default", first.lease.holder, 1)
        with pytest.raises(LeaseLost):
            first.run_round()  # the database refuses it all the same
        assert [c for c in backend.calls if c[0] == "signal"] == signals
        assert [c for c in backend.calls if c[0] == "requeue"] == [("requeue", "1")]


def test_a_run_the_store_never_saw_is_credited_from_slurms_times(store, monkeypatch):
    """A job pending at the last saved round runs and ends while the store cannot be
    written: once it can, the job gets its whole run, from Slurm's start and end."""
    backend = ScriptedBackend()
    backend.add("1", 2)
    c = controller(store, backend)
    c.run_round()
    real = store.next_round_id
    monkeypatch.setattr(store, "next_round_id", lambda cluster: (_ for _ in ()).throw(StoreError("locked")))
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="RUNNING", start_time_s=1005.0,
                                            gpus_by_node=(("gpu1", 2),))
    backend.now = 1010.0
    with pytest.raises(StoreError):
        c.run_round()
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="COMPLETED", end_time_s=1040.0)
    backend.add("2", 4)  # submitted, run and ended while the store was locked: never seen active
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], state="COMPLETED", start_time_s=1020.0,
                                            end_time_s=1030.0)
    backend.now = 1060.0
    monkeypatch.setattr(store, "next_round_id", real)
    c.run_round()
    c.run_round()  # Slurm still lists both: nothing is closed twice
    records = store.load_jobs("default")
    assert records["1"].state == "DONE" and records["1"].attained_gpu_s == pytest.approx(2 * 35.0)
    assert records["2"].state == "DONE" and records["2"].attained_gpu_s == pytest.approx(4 * 10.0)
    assert sorted(store.service_samples("default")) == [pytest.approx(40.0), pytest.approx(70.0)]
    c2 = controller(store, backend)  # a restart does not close them again either
    c2.run_round()
    assert store.load_jobs("default")["2"].attained_gpu_s == pytest.approx(40.0)

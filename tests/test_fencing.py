"""One controller per cluster and store, always: on SQLite the second `tiresias run`
refuses (the flock on <db>.lock); with the lease, every Slurm command that acts is
checked against the lease epoch just before it runs, so a lease lost in the middle
of one `set_site_factors` call stops its next `scontrol` chunk."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.core.actions import SetBand
from controller.service.acting.executor import LeverExecutor
from controller.service.acting.lease import ControllerLock, Lease
from controller.service.state.store import LeaseLost, Store, StoreError
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult, MAX_IDS_PER_UPDATE
from tests.pg_server import postgres_url  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
HOLD = ("import sys, time; from controller.service.acting.lease import ControllerLock; "
        "ControllerLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)")


def test_a_second_controller_on_one_sqlite_store_refuses(tmp_path):
    db = tmp_path / "t.db"
    Store(f"sqlite:///{db}").close()
    (tmp_path / "tiresias.yaml").write_text("mode: observe\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert first.stdout.readline().strip() == "held"  # a controller runs on this store
        second = subprocess.run([sys.executable, "-m", "controller.cli.main", "run", "--once",
                                 "--database-url", f"sqlite:///{db}", "--config", str(tmp_path / "tiresias.yaml")],
                                capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 1, second.stderr
        assert len(lines) == 1 and f"another controller (pid {first.pid}) already runs on this store" in lines[0]
        with pytest.raises(StoreError, match="one controller per cluster and store"):
            ControllerLock(str(db)).acquire()
    finally:
        first.kill()
        first.wait()
    ControllerLock(str(db)).acquire().release()  # its death freed the lock: the next controller starts


class Runner:
    """The Slurm command runner, recording what it was asked and answering success
    (no job on the shared cluster is touched); ``after_first`` runs once, after the
    first scontrol."""

    def __init__(self, after_first):
        self.calls: list[list[str]] = []
        self.after_first = after_first

    def __call__(self, argv, timeout_s, env):
        self.calls.append(list(argv))
        if len(self.calls) == 1:
            self.after_first()
        return CommandResult(0, "", "")


def test_a_lease_lost_mid_set_site_factors_stops_the_next_scontrol_chunk(tmp_path):
    url = f"sqlite:///{tmp_path}/t.db"
    clock = [0.0]
    with Store(url) as mine, Store(url) as theirs:
        leader = Lease(mine, "c", ttl_s=30.0, holder="a", monotonic=lambda: clock[0], margin_s=16.0)
        standby = Lease(theirs, "c", ttl_s=30.0, holder="b", monotonic=lambda: clock[0], margin_s=16.0)
        assert leader.hold() and not standby.hold()

        def lease_lost():  # the leader stalls while the first chunk runs: the standby takes over
            theirs.release_lease("c", "a", leader.epoch)
            assert standby.hold()
            clock[0] += 15.0  # 15 s left of 30, under the 16 s a command may need

        runner = Runner(lease_lost)
        backend = SlurmBackend(runner=runner, command_timeout_s=15)
        backend.fence = leader.guard
        executor = LeverExecutor(backend, "enforce", guard=leader.guard)
        bands = [SetBand(f"r1.b{i}", str(100 + i), site_factor=5000) for i in range(MAX_IDS_PER_UPDATE + 5)]
        with pytest.raises(LeaseLost, match="not held"):
            executor.apply_bands(bands)
        assert len(runner.calls) == 1  # the first chunk only; the 5 ids left were never sent
        assert runner.calls[0][:2] == ["scontrol", "update"]
        assert mine.lease("c")["holder"] == "b"


def test_the_lease_margin_is_the_command_time_out_and_always_taken_on_postgresql():
    from controller.service.ops.config import from_mapping

    config = from_mapping({"database_url": "postgresql+psycopg2://u@h/db", "interval_s": 10})
    assert config.fence_margin() == 16.0 and config.lease_ttl() == 24.0 > config.command_timeout_s + 1
    with pytest.raises(ValueError, match="below its TTL"):
        Lease(Store("sqlite://"), "c", ttl_s=10.0, margin_s=16.0)


STALLS_IN_A_TRANSACTION = """
import sys, time
from controller.service.acting.lease import Lease
from controller.service.state.store import JobRecord, Store
stalled = float(sys.argv[2]) or None
store = Store(sys.argv[1], stalled_tx_s=stalled)
lease = Lease(store, "c", ttl_s=1.0, holder="a", margin_s=0.5)
assert lease.hold()
with store.transaction():  # fenced: holds the lease row's lock
    store.save_jobs("c", [JobRecord(job_id="1", num_gpus=1, submit_time_s=0.0, user="u", partition="p")])
    print("in the transaction", flush=True)
    time.sleep(60)  # as a SIGSTOP there: the session sits idle in its transaction
"""


@pytest.mark.postgres
@pytest.mark.parametrize("stalled_tx_s", [1.0, 0.0], ids=["session-ended", "no-timeout"])
def test_a_leader_stopped_inside_a_transaction_keeps_the_standby_out_only_until_its_lease_ends(
        postgres_url, stalled_tx_s):  # noqa: F811
    """The lease row lock a stalled leader's transaction holds ends with its session
    once it sat idle for the lease TTL; without that bound the standby stays out."""
    from sqlalchemy import create_engine

    from controller.service.state.engine import metadata
    engine = create_engine(postgres_url)
    metadata.drop_all(engine)
    engine.dispose()
    Store(postgres_url).close()  # the schema, before two processes race to create it
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    leader = subprocess.Popen([sys.executable, "-c", STALLS_IN_A_TRANSACTION, postgres_url, str(stalled_tx_s)],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert leader.stdout.readline().strip() == "in the transaction"
        with Store(postgres_url, busy_timeout_s=0.5) as theirs:
            standby = Lease(theirs, "c", ttl_s=1.0, holder="b", margin_s=0.5)
            started = time.monotonic()
            while time.monotonic() - started < 5.0 and not standby.hold():
                time.sleep(0.1)
            took_s = time.monotonic() - started
            if stalled_tx_s:
                assert standby.epoch == 2 and took_s < 3.0, took_s  # TTL 1 s + the 0.5 s lock wait at most
            else:
                assert standby.epoch is None  # blocked on the lock for as long as the leader stalls
    finally:
        leader.kill()
        leader.wait()

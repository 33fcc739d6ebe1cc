"""One controller per cluster and store, always: on SQLite the second `tiresias run`
refuses (the flock on <db>.lock); with the lease, every Slurm command that acts is
checked against the lease epoch just before it runs, so a lease lost in the middle
of one `set_site_factors` call stops its next `scontrol` chunk."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.core.actions import SetBand
from controller.service.executor import LeverExecutor
from controller.service.lease import ControllerLock, Lease
from controller.service.store import LeaseLost, Store, StoreError
from slurm_plugin.backend import MAX_IDS_PER_UPDATE, CommandResult, SlurmBackend

ROOT = Path(__file__).resolve().parents[1]
HOLD = ("import sys, time; from controller.service.lease import ControllerLock; "
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
    from controller.service.config import from_mapping

    config = from_mapping({"database_url": "postgresql+psycopg2://u@h/db", "interval_s": 10})
    assert config.fence_margin() == 16.0 and config.lease_ttl() == 24.0 > config.command_timeout_s + 1
    with pytest.raises(ValueError, match="below its TTL"):
        Lease(Store("sqlite://"), "c", ttl_s=10.0, margin_s=16.0)

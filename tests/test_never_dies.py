"""The controller never dies from data (issue 12, item 2): a round that fails on odd
data or a bug is logged in one line and the next round runs from the store; a
malformed Slurm record is logged once and skipped; `tiresias run --once` without
squeue logs one line, no traceback. Only a bad config (exit 2) or an unusable store
(exit 1) stops it, with one line."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time

from controller.service.acting.backend import Observation
from tests.conftest import ROOT
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401 - store is a fixture


def test_run_forever_survives_a_failing_round(store, caplog):  # noqa: F811
    backend = ScriptedBackend()
    backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
    c = controller(store, backend, poll_s=0.1, interval_s=0.1)
    real_step, calls = c.engine.step, []

    def step(snapshot):
        calls.append(snapshot.round_id if hasattr(snapshot, "round_id") else len(calls))
        if len(calls) <= 2:
            raise KeyError("gpu[1-99999999]")  # what a bug or an odd record could raise mid-round
        return real_step(snapshot)

    c.engine.step = step
    c.clock = time.time
    stop = threading.Event()
    thread = threading.Thread(target=c.run_forever, args=(stop,), daemon=True)
    with caplog.at_level(logging.ERROR, logger="tiresias.controller"):
        thread.start()
        deadline = time.monotonic() + 20
        while len(calls) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert len(calls) >= 4, "the loop stopped after the failing rounds"
    failures = [r for r in caplog.records if "round failed: KeyError" in r.getMessage()]
    assert len(failures) == 2
    assert all("\n" not in r.getMessage() for r in failures)
    assert failures[0].exc_info is not None and failures[1].exc_info is None  # traceback once per error
    assert store.next_round_id("default") >= 2  # later rounds committed their accounts


def test_malformed_records_are_logged_once_and_skipped(store, caplog):  # noqa: F811
    backend = ScriptedBackend()
    backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
    bad = "squeue job 7 (record 1): node_count: '-1' is not a count in 0..10000000"
    real_observe = backend.observe
    backend.observe = lambda: Observation(**{**real_observe().__dict__, "skipped": [bad]})
    c = controller(store, backend)
    with caplog.at_level(logging.WARNING, logger="tiresias.controller"):
        c.run_round()
        backend.now += 10
        c.run_round()
    assert [r.getMessage() for r in caplog.records].count(f"skipped record: {bad}") == 1
    assert "1" in c.records  # the good record was used


def _run_cli(tmp_path, *args, path=None):
    config = tmp_path / "t.yaml"
    config.write_text(f"database_url: sqlite:///{tmp_path}/t.db\nusage_spool_dir: {tmp_path}/spool\n")
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    return subprocess.run([sys.executable, "-m", "controller.cli.main", "run", "--config", str(config), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)


def test_run_once_without_squeue_logs_one_line(tmp_path):
    proc = _run_cli(tmp_path, "--once", path=str(tmp_path / "no-bin"))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "round not run: the cluster manager is unavailable: cannot run squeue" in proc.stderr


def test_unusable_store_is_one_line(tmp_path):
    (tmp_path / "t.db").write_bytes(b"this is not a database" * 100)
    proc = _run_cli(tmp_path, "--once")
    assert proc.returncode in (1, 2)
    assert "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if "ERROR" in line or "error:" in line]) == 1


def test_bad_config_is_exit_2_one_line(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("metrics_port: 70000\n")
    proc = subprocess.run([sys.executable, "-m", "controller.cli.main", "run", "--once", "--config", str(config)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "metrics_port" in proc.stderr and "70000" in proc.stderr

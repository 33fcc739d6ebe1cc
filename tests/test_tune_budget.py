"""`tiresias tune` a person can run: the budget cuts a long replay, progress comes from
inside replays, Ctrl-C prints the best so far, and a finite PROMOTEKNOB replays in the
incremental loop with the generic loop's results."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.cli import main as cli
from controller.core.engine import EngineConfig
from controller.replay.simulator import ReplayCut, SimConfig, Simulation
from controller.replay.traces import load_trace
from controller.replay import tuner
from controller.replay.tuner import DEFAULT_SETTING, tune

ROOT = Path(__file__).resolve().parent.parent
PHILLY200 = ROOT / "tests" / "fixtures" / "traces" / "philly_pollux_head200.csv"


@pytest.fixture(scope="module")
def philly200():
    return load_trace(str(PHILLY200))


def _replay(jobs, incremental, **engine):
    config = SimConfig(nodes=2, gpus_per_node=4, engine=EngineConfig(**engine), incremental=incremental,
                       drop_oversize=True)
    result = Simulation(config).run(jobs)
    return ([(o.job_id, o.start_s, o.end_s, o.preemptions, o.attained_gpu_s) for o in result.outcomes],
            result.preemptions, result.promotions, result.rounds)


@pytest.mark.parametrize("policy", ["dlas", "dgittins"])
@pytest.mark.parametrize("knob", [2.0, 4.0, 8.0, 16.0])
def test_finite_knob_incremental_loop_replays_as_the_generic_one(philly200, policy, knob):
    fast = _replay(philly200, True, policy=policy, promote_knob=knob)
    generic = _replay(philly200, False, policy=policy, promote_knob=knob)
    assert fast[2] > 0  # promotions happened, so the promotion path was walked
    assert fast == generic


def test_watch_cuts_a_replay(philly200):
    calls = []

    def watch(fraction):
        calls.append(fraction)
        if len(calls) == 3:
            raise ReplayCut("deadline")

    for incremental, knob in ((True, math.inf), (True, 8.0), (False, 8.0)):
        calls.clear()
        config = SimConfig(nodes=2, gpus_per_node=4, engine=EngineConfig(promote_knob=knob), incremental=incremental)
        with pytest.raises(ReplayCut):
            Simulation(config, watch=watch).run(philly200)
        assert len(calls) == 3 and all(0.0 <= f < 1.0 for f in calls)


def test_spent_budget_cuts_the_running_replay(philly200):
    result = tune(philly200, nodes=2, gpus_per_node=4, evaluations=8, budget_s=0.0, workers=1)
    assert result.best is None and result.default is None
    assert result.cut == [DEFAULT_SETTING]  # the first replay is cut, no later one starts
    assert result.stopped_by_budget and not result.interrupted
    # in worker processes: the round's replays are all cut, none ranked
    pooled = tune(philly200, nodes=2, gpus_per_node=4, evaluations=8, budget_s=0.0, workers=2)
    assert pooled.best is None and len(pooled.cut) == 8 and pooled.cut[0] == DEFAULT_SETTING
    assert pooled.stopped_by_budget


def test_progress_comes_from_inside_a_replay(philly200, monkeypatch):
    monkeypatch.setattr(tuner, "HEARTBEAT_S", 0.0)  # report at every check of the replay loop
    calls = []
    tune(philly200, nodes=2, gpus_per_node=4, evaluations=2, budget_s=600, workers=1,
         progress=lambda done, total, note: calls.append((done, total, note)))
    inside = [done for done, _, _ in calls if 0 < done < 1]  # during the first replay
    assert inside and inside == sorted(inside)
    assert calls[-1][:2] == (2, 2) and "lowest avg JCT so far" in calls[-1][2]


def test_cli_reports_cut_replays_and_preemptions(capsys, monkeypatch):
    monkeypatch.setenv("TIRESIAS_PROGRESS_INTERVAL_S", "0")
    code = cli.main(["tune", "--trace", str(PHILLY200), "--nodes", "2", "--gpus-per-node", "4",
                     "--evaluations", "3", "--workers", "1", "--budget-s", "600"])
    out = capsys.readouterr()
    assert code == 0
    header = next(line for line in out.out.splitlines() if line.startswith("rank"))
    assert header.split()[:8] == ["rank", "K", "queues_gpu_s", "knob", "avg", "JCT", "p95", "JCT"]
    assert "preempt" in header
    assert "tune: " in out.err  # progress lines on stderr
    code = cli.main(["tune", "--trace", str(PHILLY200), "--nodes", "2", "--gpus-per-node", "4",
                     "--evaluations", "3", "--workers", "1", "--budget-s", "0.001", "--json"])
    out = capsys.readouterr()
    assert code == 1 and "no replay finished" in out.err and "1 cut" in out.err


def _interrupt_after_first_progress(workers: int):
    env = {**os.environ, "TIRESIAS_PROGRESS_INTERVAL_S": "0", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", "tune", "--trace", str(PHILLY200), "--nodes", "2",
         "--gpus-per-node", "4", "--evaluations", "2000", "--budget-s", "300", "--workers", str(workers)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # as from a terminal: a run started in the background (nohup ... &, as CI may be)
        # hands its children SIGINT ignored, and Python then never raises KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        first = proc.stderr.readline()
        assert first.startswith("tune: "), first
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=10)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, took, out, err


@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_stops_fast_and_prints_the_best_so_far(workers):
    code, took, out, err = _interrupt_after_first_progress(workers)
    assert code == 130, err[-2000:]
    assert took < 2.0
    assert "note: interrupted after" in out
    assert "# ready to paste into /etc/tiresias/tiresias.yaml:" in out and "queues_gpu_s: [" in out
    assert "Traceback" not in err

"""`tiresias simulate --levers`: the lever replay's predictions as a user gets them
(a real subprocess), checked against the replay run in-process."""
import csv
import json
import subprocess
import sys
from pathlib import Path

from controller.core.engine import EngineConfig
from controller.replay.run_config import SimConfig
from controller.replay.lever_replay import LeverSettings, replay_levers
from controller.replay.synthetic import generate

ROOT = Path(__file__).resolve().parents[1]


def tiresias(*args):
    return subprocess.run([sys.executable, "-m", "controller.cli.main", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_levers_csv_lists_the_replays_actions_round_by_round(tmp_path):
    config = tmp_path / "tiresias.yaml"
    config.write_text("interval_s: 60\npreempt_grace_s: 30\nrequeue_settle_s: 0\npreempt_min_runtime_s: 60\n"
                      "pin_expiry_s: 120\n")
    out = tmp_path / "levers.csv"
    proc = tiresias("simulate", "--jobs", 40, "--nodes", 4, "--gpus-per-node", 4, "--policy", "dlas",
                    "--like-controller", config, "--levers", out, "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(out.open()))
    counts = json.loads(proc.stdout)["levers"]["actions"]
    assert {row["kind"] for row in rows} == set(counts) and len(rows) == sum(counts.values())
    # the same replay in-process: same actions in the same rounds
    jobs = generate(40, seed=1, total_gpus=16, gpus_per_node=4, load=1.2)
    sim = SimConfig(nodes=4, gpus_per_node=4, round_interval_s=60.0, preempt_grace_s=30.0,
                    engine=EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,), preempt_min_runtime_s=60.0))
    replay = replay_levers(sim, jobs, LeverSettings(pin_expiry_s=120.0, requeue_settle_s=0.0))
    expected = [(str(number), action.decision_id, action.kind, action.job_id)
                for number, actions in enumerate(replay.levers, 1) for action in actions]
    assert [(r["round"], r["decision_id"], r["kind"], r["job_id"]) for r in rows if r["kind"] != "start"] == expected
    assert {"band", "start"} <= set(counts)


def test_levers_needs_the_controllers_config_and_one_policy(tmp_path):
    proc = tiresias("simulate", "--jobs", 10, "--levers", tmp_path / "x.csv", "--quiet")
    assert proc.returncode == 2 and "levers" in proc.stderr and "--like-controller" in proc.stderr
    assert not (tmp_path / "x.csv").exists()

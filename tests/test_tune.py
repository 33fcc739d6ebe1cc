"""`tiresias tune`: deterministic search, pasteable YAML, never worse than the default."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from controller.cli import main as cli

from controller.service.ops import config
from controller.core.model import InputError, JobSpec
from controller.replay.traces import load_trace
from controller.replay.tuner import DEFAULT_SETTING, Setting, round_sig, threshold_grid, tune, yaml_block
from tests.conftest import TRACE60
YAML_MARKER = "# ready to paste into /etc/tiresias/tiresias.yaml:"




def _signature(result):
    return [(e.setting, round(e.avg_jct_s, 6), round(e.p95_jct_s, 6)) for e in result.ranked]


@pytest.fixture(scope="module")
def jobs60():
    return load_trace(TRACE60)


def test_search_is_deterministic_and_worker_independent(jobs60):
    common = dict(nodes=4, gpus_per_node=4, evaluations=12, seed=7, budget_s=600)
    one = tune(jobs60, workers=1, **common)
    again = tune(jobs60, workers=1, **common)
    parallel = tune(jobs60, workers=2, **common)
    assert one.evaluations == 12 and not one.stopped_by_budget
    assert _signature(one) == _signature(again) == _signature(parallel)
    assert len({e.setting for e in one.ranked}) == 12  # no setting replayed twice
    other_seed = tune(jobs60, workers=1, **{**common, "seed": 8})
    assert [e.setting for e in other_seed.ranked] != [e.setting for e in one.ranked]


def test_best_no_worse_than_default(jobs60):
    result = tune(jobs60, nodes=4, gpus_per_node=4, evaluations=16, seed=1, workers=1)
    assert result.default.setting == DEFAULT_SETTING
    assert result.best.avg_jct_s <= result.default.avg_jct_s
    for objective in ("p95", "mixed"):
        r = tune(jobs60, nodes=4, gpus_per_node=4, evaluations=8, seed=1, workers=1, objective=objective)
        assert r.best.p95_jct_s <= r.default.p95_jct_s or r.best.avg_jct_s <= r.default.avg_jct_s
    # Every candidate respects the search space.
    for e in result.ranked:
        t = e.setting.thresholds_gpu_s
        assert 2 <= e.setting.k <= 4 and list(t) == sorted(set(t))


def test_budget_is_a_safety_stop(jobs60):
    ticks = iter(range(0, 10_000, 1000))  # a fake clock: every reading is 1000 s later
    result = tune(jobs60, nodes=4, gpus_per_node=4, evaluations=40, seed=1, budget_s=60, workers=1,
                  clock=lambda: next(ticks))
    assert result.stopped_by_budget and result.evaluations == 8  # round 0 always runs


def test_threshold_grid_from_service_quantiles(jobs60):
    grid = threshold_grid(jobs60)
    assert grid == sorted(set(grid)) and 3600 in grid
    service = [j.num_gpus * j.duration_s for j in jobs60]
    assert grid[0] == round_sig(float(np.quantile(service, 0.05)))
    assert grid[-1] == max(3600, round_sig(float(np.quantile(service, 0.99))))
    assert all(g == round_sig(g) for g in grid)
    with pytest.raises(InputError, match="no job has a positive duration"):
        threshold_grid([JobSpec("1", 1, 0.0, 0.0)])


def test_yaml_block_loads_into_config():
    text = yaml_block(Setting((600.0, 7200.0), 4.0), "dgittins", "comment")
    loaded = yaml.safe_load(text)
    assert loaded == {"policy": "dgittins", "queues_gpu_s": [600, 7200], "promote_knob": 4}
    assert config.from_mapping(loaded).queues_gpu_s == (600.0, 7200.0)
    assert yaml.safe_load(yaml_block(DEFAULT_SETTING, "dlas"))["promote_knob"] == math.inf


def test_cli_prints_table_and_yaml(capsys):
    argv = ["tune", "--trace", str(TRACE60), "--nodes", "4", "--gpus-per-node", "4", "--evaluations", "12",
            "--seed", "3", "--workers", "1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert cli.main(argv) == 0
    again = capsys.readouterr().out
    strip_timing = lambda text: text.split("\n", 1)[1]  # the first line holds the elapsed seconds
    assert strip_timing(out) == strip_timing(again)
    assert "12 evaluations" in out.splitlines()[0]
    table = out.split(YAML_MARKER)[0]
    assert "rank" in table and "default" in table
    loaded = yaml.safe_load(out.split(YAML_MARKER)[1])
    assert set(loaded) == {"policy", "queues_gpu_s", "promote_knob"} and loaded["policy"] == "dlas"
    thresholds = loaded["queues_gpu_s"]
    assert all(b > a for a, b in zip(thresholds, thresholds[1:])) and 1 <= len(thresholds) <= 3
    config.from_mapping(loaded)  # the controller accepts it as is


def test_cli_json(capsys):
    assert cli.main(["tune", "--trace", str(TRACE60), "--nodes", "4", "--gpus-per-node", "4", "--evaluations", "8",
                     "--workers", "1", "--json", "--policy", "dgittins"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["evaluations"] == 8 and doc["policy"] == "dgittins"
    assert doc["best"]["avg_jct_s"] <= doc["default"]["avg_jct_s"]
    assert doc["default"]["queues_gpu_s"] == [3600.0] and doc["default"]["promote_knob"] is None
    assert yaml.safe_load(doc["yaml"])["policy"] == "dgittins"


@pytest.mark.parametrize("argv, expected", [
    (["--nodes", "4", "--gpus-per-node", "4"], "--trace"),
    (["--trace", str(TRACE60), "--nodes", "0", "--gpus-per-node", "4"], "--nodes"),
    (["--trace", str(TRACE60), "--nodes", "4", "--gpus-per-node", "4", "--policy", "fifo"], "--policy"),
    (["--trace", str(TRACE60), "--nodes", "4", "--gpus-per-node", "4", "--evaluations", "x"], "--evaluations"),
    (["--trace", str(TRACE60), "--nodes", "4", "--gpus-per-node", "4", "--budget-s", "-1"], "--budget-s"),
    (["--trace", str(TRACE60), "--nodes", "4", "--gpus-per-node", "4", "--objective", "max"], "--objective"),
])
def test_cli_usage_errors(argv, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["tune", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err


@pytest.mark.parametrize("argv, expected", [
    (["--trace", "/nonexistent.csv", "--nodes", "4", "--gpus-per-node", "4"], "/nonexistent.csv"),
    (["--trace", str(TRACE60), "--nodes", "1", "--gpus-per-node", "4", "--evaluations", "2"], "GPU"),
    (["--trace", str(TRACE60), "--nodes", "4", "--gpus-per-node", "4", "--max-k", "1"], "max-k value 1"),
    (["--trace", str(TRACE60), "--gpus-per-node", "4"], "--nodes"),
    (["--trace", str(TRACE60), "--nodes", "3", "--node-kinds", "2:batch", "--gpus-per-node", "4"],
     "nodes value 3 differs from the 2 nodes --node-kinds lists"),
])
def test_cli_bad_input(argv, expected, capsys):
    assert cli.main(["tune", *argv, "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("tiresias tune: error:") and expected in err


def test_tunes_block_pasted_above_the_shipped_yaml_is_refused_in_one_line_naming_the_key(tmp_path):
    """The shipped YAML lists every key, so tune's block pasted at its top repeats
    them: YAML alone would keep the file's later defaults and lose the tuning."""
    shipped = (Path(__file__).resolve().parent.parent / "packaging" / "tiresias.yaml").read_text()
    block = yaml_block(Setting(thresholds_gpu_s=(1000.0, 8000.0)), "dlas")
    assert block.splitlines()[0].startswith("policy: ")
    policy_line = 1 + len(block.splitlines()) + shipped.splitlines().index(
        next(line for line in shipped.splitlines() if line.startswith("policy:")))
    pasted = tmp_path / "tiresias.yaml"
    pasted.write_text(block + "\n" + shipped)
    with pytest.raises(InputError) as err:
        config.load(str(pasted))
    assert str(err.value) == f"{pasted}:{policy_line}: not valid YAML ('policy' twice, lines 1 and {policy_line})"
    # pasted in place of the file's own keys, the tuned values are what load gives
    kept = [line for line in shipped.splitlines() if line.split(":")[0] not in {"policy", "queues_gpu_s", "promote_knob"}]
    pasted.write_text(block + "\n" + "\n".join(kept) + "\n")
    assert config.load(str(pasted)).queues_gpu_s == (1000.0, 8000.0)


def test_tune_replays_the_node_kinds_it_is_given_as_simulate_does(tmp_path, capsys):
    """--node-kinds reaches every replay: tune's default equals simulate's on the same
    kinds, and differs from the untyped cluster of the same size (v100 jobs then wait
    for the one v100 node)."""
    trace = tmp_path / "typed.csv"
    rows = ["job_id,num_gpus,submit_time_s,duration_s,gpu_type"]
    rows += [f"{i},4,{10 * i},{600 + 30 * i},{'v100' if i % 2 else 'a100'}" for i in range(12)]
    trace.write_text("\n".join(rows) + "\n")
    kinds = "1:batch:v100,3:batch:a100"

    def tuned(*flags):
        assert cli.main(["tune", "--trace", str(trace), "--gpus-per-node", "4", "--evaluations", "2",
                         "--workers", "1", "--json", "--quiet", *flags]) == 0
        return json.loads(capsys.readouterr().out)["default"]["avg_jct_s"]

    with_kinds, untyped = tuned("--node-kinds", kinds), tuned("--nodes", "4")
    assert cli.main(["simulate", "--trace", str(trace), "--gpus-per-node", "4", "--node-kinds", kinds,
                     "--policy", "dlas", "--json"]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert with_kinds > untyped
    assert with_kinds == pytest.approx(simulated["summaries"][0]["avg_jct_s"])


def test_a_gain_within_the_noise_of_a_short_history_is_said_and_a_clear_one_is_not():
    from types import SimpleNamespace

    from controller.cli.tune import noise_note

    def jobs(n, spread):
        return [JobSpec(job_id=str(i), num_gpus=1, submit_time_s=0.0,
                        duration_s=1000.0 + (spread if i % 2 else -spread)) for i in range(n)]

    default, better = SimpleNamespace(avg_jct_s=1000.0), SimpleNamespace(avg_jct_s=963.0)  # 3.7% better
    note = noise_note(jobs(38, 900.0), better, default)
    assert note.startswith("warning: the best gain (+3.7% avg JCT) is within the noise of 38 jobs")
    assert noise_note(jobs(20000, 900.0), better, default) == ""  # +-1.3%: the gain is clear
    assert noise_note(jobs(38, 0.0), better, default) == ""  # jobs all alike: no noise to speak of

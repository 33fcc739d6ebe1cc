"""Issue 29 item 1: replay your own cluster, end to end.

A generated `sacct -P` history (tests/fixtures/replay/, with requeues, an array,
TIMEOUT, NODE_FAIL, GPU types, a suspended job and a job without GPU TRES) and the
recorded `sacct --json` of the test clusters (tests/fixtures/slurm/) are exported,
replayed, and read back with `acct`; the last test follows docs/simulate.md's "Replay
your own cluster" section command by command and compares what the doc shows.
"""
from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

import pytest

from controller.cli import main as cli
from controller.core.conditioned import keys_of
from controller.replay.traces import load_actuals, load_trace
from slurm_plugin.accounting import build_export, runs_from_output, runs_from_sacct_json
from slurm_plugin.history_shape import history_shape
from tests.conftest import ROOT
from tests.test_accounting import JSON_2205, JSON_2411, JSON_2605, _finished_json

FIXTURE = ROOT / "tests" / "fixtures" / "replay"
HISTORY = FIXTURE / "sacct_history.txt"
DOC = ROOT / "docs" / "simulate.md"
KINDS = "2:batch:a100,1:batch+debug:v100"

pytestmark = pytest.mark.usefixtures("utc")  # sacct text is local time; the history was written in UTC


def _export(tmp_path: Path, capsys, *extra: str) -> tuple[Path, str]:
    out = tmp_path / "mysite.csv"
    assert cli.main(["trace", "export", "--from-file", str(HISTORY), "--out", str(out), *extra]) == 0
    return out, capsys.readouterr().err


def test_the_shipped_history_is_what_its_generator_writes():
    spec = importlib.util.spec_from_file_location("make_sacct_history", FIXTURE / "make_sacct_history.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert HISTORY.read_text() == module.history()


def test_export_keeps_what_a_replay_needs(tmp_path, capsys):
    out, err = _export(tmp_path, capsys, "-S", "2026-11-01", "-E", "2026-11-30")
    jobs = {job.job_id: job for job in load_trace(out)}
    actuals = load_actuals(out)
    assert len(jobs) == 38 and "1030" not in jobs and "1020" not in jobs  # CPU-only; cancelled while pending
    # requeued: two runs merged, 20 + 40 minutes, its last run's node and start kept
    assert (jobs["1032"].duration_s, actuals["1032"]["requeues"], actuals["1032"]["node_list"]) == (3600.0, 1, "gpu1")
    assert actuals["1032"]["last_start_s"] - actuals["1032"]["actual_start_s"] == 30 * 60
    # suspended for 10 minutes: End - Start (25 min) is the duration, not Elapsed (15 min)
    assert jobs["1024"].duration_s == 1500.0
    assert "warning: 1 job(s) whose Elapsed disagrees with End - Start" in err and ": 1024" in err
    assert "warning: 1 jobs without whole GPUs" in err and "does not account gres/gpu" in err
    # the GPU type asked for (ReqTRES), else the one Slurm gave an untyped request (AllocTRES)
    assert (jobs["1003"].gpu_type, jobs["1004"].gpu_type, jobs["1001"].gpu_type) == ("a100", "a100", "v100")
    # the array's tasks are jobs of their own (raw ids), the two-node job keeps both nodes
    assert [jobs[i].job_name for i in ("1034", "1035", "1036")] == ["sweep-array"] * 3
    assert (jobs["1008"].num_gpus, actuals["1008"]["node_list"]) == (8, "gpu[1-2]")
    assert (actuals["1012"]["state"], actuals["1018"]["state"]) == ("TIMEOUT", "NODE_FAIL")
    # name, user, partition: dgittins conditions on user + name first; '|' in a name survives sacct -P
    assert keys_of(jobs["1014"])[0] == ("user+name", "carol", "sweep|lr=0.1")
    assert jobs["1005"].partition == "debug"


def test_the_history_shows_its_cluster(tmp_path, capsys):
    out, err = _export(tmp_path, capsys)
    shape = history_shape(load_trace(out), load_actuals(out))
    assert (shape.nodes, shape.gpus_per_node, shape.peak_gpus) == (["gpu1", "gpu2", "gpu3"], 4, 12)
    assert shape.node_kinds == [(2, ("batch",), "a100"), (1, ("batch", "debug"), "v100")]
    assert shape.suggested_flags() == f"--node-kinds {KINDS} --gpus-per-node 4"
    assert f"  replay it on: --node-kinds {KINDS} --gpus-per-node 4" in err.splitlines()
    assert shape.capacity_warning(12) is None
    warning = shape.capacity_warning(8)
    assert "up to 12 GPUs in use at once, more than the replay cluster's 8" in warning


def test_replay_on_the_suggested_cluster_and_on_a_smaller_one(tmp_path, capsys):
    out, _ = _export(tmp_path, capsys)
    assert cli.main(["simulate", "--trace", str(out), "--node-kinds", KINDS, "--gpus-per-node", "4",
                     "--policy", "dgittins", "--actual", "--json"]) == 0
    captured = capsys.readouterr()
    assert '"jobs": 38' in captured.out and "warning" not in captured.err
    assert cli.main(["simulate", "--trace", str(out), "--nodes", "2", "--gpus-per-node", "4", "--policy", "fifo"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "more than the replay cluster's 8" in warnings[0]
    assert "job start(s) went past it" in warnings[0] and "history: 38 GPU job(s)" in err


@pytest.mark.parametrize("path", [JSON_2205, JSON_2411, JSON_2605], ids=["22.05", "24.11", "26.05"])
def test_recorded_sacct_json_exports_and_replays(path, tmp_path, capsys):
    source = tmp_path / "sacct.json"
    source.write_text(_finished_json(path))
    out = tmp_path / "trace.csv"
    assert cli.main(["trace", "export", "--from-file", str(source), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    result = build_export(runs_from_sacct_json(source.read_text()))
    shape = history_shape(result.jobs, result.actuals)
    # the test cluster's GPU nodes as the recording names them, and the names the jobs had
    assert shape.nodes and all(name.startswith("gpu") for name in shape.nodes)
    assert f"  replay it on: {shape.suggested_flags()}" in err.splitlines()
    assert [job.job_name for job in load_trace(out)] == ["wrap", "quick", "requeue-me"]
    assert cli.main(["simulate", "--trace", str(out), "--nodes", str(len(shape.nodes)), "--gpus-per-node",
                     str(max(shape.gpus_per_node, 2)), "--policy", "dlas", "--actual", "--json"]) == 0
    assert '"jobs": 3' in capsys.readouterr().out


def test_a_history_whose_site_does_not_account_gpus(capsys):
    text = HISTORY.read_text().replace("gres/gpu", "gres/nic")  # no gres/gpu anywhere: what such a site records
    result = build_export(runs_from_output(text, "site.txt"), source="site.txt")
    assert not result.jobs
    (line,) = [w for w in result.warning_lines() if "without whole GPUs" in w]
    assert line.startswith(f"warning: {result.jobs_seen} jobs without whole GPUs")
    assert "none of the jobs has one" in line


def _doc_example() -> list[str]:
    """The doc's worked example: the fenced block right after its '(excerpt of: ...)' line."""
    text = DOC.read_text().split("## Replay your own cluster", 1)[1].split("\n## ", 1)[0]
    lines = text.split("\n")
    marker = next(n for n, line in enumerate(lines) if line.startswith("(excerpt of: `tiresias trace export`"))
    assert lines[marker + 1] == "```"
    end = lines.index("```", marker + 2)
    return lines[marker + 2:end]


def test_the_doc_section_runs_as_shown(tmp_path, monkeypatch, capsys):
    block = _doc_example()
    commands = [n for n, line in enumerate(block) if line.startswith("$ ")]
    assert [shlex.split(block[n][2:])[:2] for n in commands] == [
        ["tiresias", "trace"], ["tiresias", "simulate"], ["tiresias", "acct"]]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # the doc's paths are the repository's
    monkeypatch.setenv("TIRESIAS_PROGRESS_INTERVAL_S", "100000")  # no progress line on a slow machine
    for number, at in enumerate(commands):
        shown = block[at + 1:commands[number + 1] if number + 1 < len(commands) else len(block)]
        argv = shlex.split(block[at][2:])[1:]
        assert cli.main(argv) == 0, block[at]
        captured = capsys.readouterr()
        made = (captured.err + captured.out).rstrip("\n").split("\n")  # stderr first: the order a terminal shows
        assert [line.rstrip() for line in made] == [line.rstrip() for line in shown], block[at]


def test_one_history_exports_one_trace_with_its_gpu_types_whatever_columns_sacct_saved(tmp_path, capsys):
    """Users who asked for any GPU ran on a100 or v100 nodes: the trace keeps those types
    (and the node kinds the hint derives from them) with or without the ReqTRES column."""
    lines = HISTORY.read_text().splitlines()
    header = lines[0].split("|")
    from_end = len(header) - header.index("ReqTRES")  # counted from the end: a JobName may hold a '|'

    def dropped(line: str) -> str:
        fields = line.split("|")
        return "|".join(fields[:-from_end] + fields[len(fields) - from_end + 1:])

    without = tmp_path / "no_reqtres.txt"
    without.write_text("\n".join(dropped(line) for line in lines) + "\n")
    assert "ReqTRES" not in without.read_text() and "sweep|lr=0.1" in without.read_text()
    full, _ = _export(tmp_path, capsys)
    trimmed = tmp_path / "trimmed.csv"
    assert cli.main(["trace", "export", "--from-file", str(without), "--out", str(trimmed)]) == 0
    capsys.readouterr()
    assert full.read_bytes() == trimmed.read_bytes()
    types = {job.gpu_type for job in load_trace(full)}
    assert types == {"a100", "v100"}

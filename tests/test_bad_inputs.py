"""The bad inputs of issue 20 (item 6): each is one line on stderr naming the field
and the value, exit code 2, and nothing written. Before the fix three of them ended
in a traceback (simulate --out on a file or an unwritable place, a deeply nested
sacct JSON) and the others were accepted silently (an unknown state selected
nothing; all-zero weights learned from an objective that is always 0; a 1e-9 s
quantum replanned without end; a repeated policy overwrote its own output)."""
from __future__ import annotations

import os

import pytest

from controller.cli import main as cli
from tests.conftest import TRACE60

TINY_LEARN = ["--generations", "0", "--population", "2", "--instances", "1", "--validation", "1",
              "--partitions-max", "3", "--nodes-max", "12", "--quiet"]
SMALL_SIM = ["--trace", str(TRACE60), "--nodes", "2", "--gpus-per-node", "4", "--policy", "fifo", "--quiet"]


def tree(root) -> set[str]:
    """Every path under root (files and folders), relative."""
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files}


def bad_input(argv: list[str], capsys) -> str:
    """Run the command in-process; assert exit 2 and a single stderr line; return it."""
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse's errors exit from inside parse_args
        code = exit_.code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, (code, captured.err[-2000:])
    assert len(lines) == 1, captured.err[-2000:]
    assert "Traceback" not in captured.err
    return lines[0]


def deep_json(depth: int) -> str:
    return '{"jobs": [' + "[" * depth + "]" * depth + "]}"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_simulate_out_is_an_existing_file(workdir, capsys):
    (workdir / "results").write_text("mine\n")
    line = bad_input(["simulate", *SMALL_SIM, "--out", "results"], capsys)
    assert "--out 'results'" in line and "not a directory" in line
    assert (workdir / "results").read_text() == "mine\n" and tree(workdir) == {"results"}


def test_simulate_out_under_a_file(workdir, capsys):
    (workdir / "results").write_text("mine\n")
    line = bad_input(["simulate", *SMALL_SIM, "--out", "results/run1"], capsys)
    assert "--out 'results/run1'" in line and "is not a directory" in line
    assert tree(workdir) == {"results"}


def test_simulate_out_where_nothing_can_be_written(workdir, capsys):
    # /proc refuses every mkdir, root's included (the tests may run as root, which
    # passes any permission check); the error comes when the results are written.
    line = bad_input(["simulate", *SMALL_SIM, "--out", "/proc/tiresias-results"], capsys)
    assert "--out '/proc/tiresias-results'" in line and "cannot write" in line
    assert tree(workdir) == set()


def test_learn_out_is_a_directory(workdir, capsys):
    (workdir / "models").mkdir()
    line = bad_input(["learn", *TINY_LEARN, "--out", "models"], capsys)
    assert "--out 'models'" in line and "is a directory" in line
    assert tree(workdir) == {"models"}


@pytest.mark.parametrize("depth", [5_000, 200_000])
def test_deeply_nested_sacct_json(workdir, capsys, depth):
    (workdir / "sacct.json").write_text(deep_json(depth))
    line = bad_input(["trace", "export", "--from-file", "sacct.json", "--out", "t.csv"], capsys)
    assert "sacct.json" in line and "nested too deeply" in line
    assert tree(workdir) == {"sacct.json"}


def test_acct_unknown_state(workdir, capsys):
    url = f"sqlite:///{workdir / 'store.db'}"
    line = bad_input(["acct", "--database-url", url, "-s", "COMPLETED,EXPLODED"], capsys)
    assert "-s/--state value 'EXPLODED' is not a job state" in line
    assert tree(workdir) == set()  # no store created


def test_acct_known_states_and_aliases_still_work(workdir, capsys):
    url = f"sqlite:///{workdir / 'store.db'}"
    assert cli.main(["acct", "--database-url", url, "-s", "cd,PD,DONE,canceled,oom,GONE"]) == 0
    assert "no jobs recorded" in capsys.readouterr().out


def test_queue_unknown_state(capsys):
    line = bad_input(["queue", "-t", "EXPLODED"], capsys)
    assert "-t/--states value 'EXPLODED'" in line


@pytest.mark.parametrize("command", ["learn", "simulate-partitions"])
def test_all_zero_weights(workdir, capsys, command):
    extra = ["--out", "f.txt"] if command == "learn" else []
    line = bad_input([command, *TINY_LEARN, *extra, "--weights", "0,0.0,0"], capsys)
    assert "--weights" in line and "'0,0.0,0'" in line and "at least one weight must be > 0" in line
    assert tree(workdir) == set()


def test_one_nonzero_weight_is_enough(workdir, capsys):
    assert cli.main(["learn", *TINY_LEARN, "--out", "f.txt", "--weights", "0,0,1"]) == 0
    assert (workdir / "f.txt").read_text().strip()


def test_quantum_below_a_second(workdir, capsys):
    line = bad_input(["simulate", *SMALL_SIM, "--policy", "las", "--quantum-s", "1e-9"], capsys)
    assert "--quantum-s" in line and "'1e-9'" in line


def test_repeated_policy(workdir, capsys):
    line = bad_input(["simulate", *SMALL_SIM, "--policy", "dlas,fifo,dlas", "--out", "run"], capsys)
    assert "policy value 'dlas,fifo,dlas' names 'dlas' twice" in line
    assert tree(workdir) == set()


def test_learn_subset_larger_than_the_training_set(workdir, capsys):
    line = bad_input(["learn", *TINY_LEARN, "--subset", "9", "--out", "f.txt"], capsys)
    assert "--subset 9 is larger than the 1 training instances" in line
    assert tree(workdir) == set()

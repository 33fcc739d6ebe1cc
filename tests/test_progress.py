"""Progress of long commands: a bar with rate and ETA on a terminal (a real
pseudo-terminal), plain lines on a pipe, nothing with --quiet or --json.

The commands run as subprocesses of the installed entry point, exactly as a user
starts them; TIRESIAS_PROGRESS_INTERVAL_S=0 makes the bar appear at once and a
plain line follow every update, so that small (fast) inputs show progress.
"""
from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from controller.cli.progress import Progress, choose_mode
from tests.conftest import TRACE60 as _TRACE60

TRACE60 = str(_TRACE60)  # in the repo (tests/fixtures/traces): a fresh clone runs this
TIRESIAS = [sys.executable, "-m", "controller.cli.main"]

LEARN = ["learn", "--population", "24", "--generations", "4", "--instances", "2", "--validation", "1",
         "--subset", "1", "--partitions-max", "3", "--nodes-max", "12"]
TUNE = ["tune", "--trace", TRACE60, "--nodes", "4", "--gpus-per-node", "4", "--evaluations", "6", "--workers", "1"]
SIMULATE = ["simulate", "--jobs", "300", "--policy", "fifo,dlas"]
PARTITIONS = ["simulate-partitions", "--instances", "2", "--partitions-max", "3", "--nodes-max", "12",
              "--generations", "5", "--population", "6"]

# tqdm's bar: "label:  40%|####      | 12/30 [00:01<00:02, 8.50expr/s, ...]": count, elapsed<ETA, rate
BAR = r"{label}: +\d+%\|[^|]*\| *[\d.]+/[\d.]+ \[\d\d:\d\d<\d\d:\d\d, +[\d.]+(?:{unit}/s|s/{unit})"
LINE = r"^{label}: [\d,]+/[\d,]+ {unit}, \d+%, [\d,.]+ {unit}/s, (?:ETA|done in) \d+:\d\d"


def _env() -> dict:
    return dict(os.environ, TIRESIAS_PROGRESS_INTERVAL_S="0")


def run_on_pty(args: list[str], columns: int = 120) -> tuple[int, str, str]:
    """Run a command with stderr on a pseudo-terminal of ``columns`` columns.
    Returns (exit code, stdout, everything written to the terminal)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen(TIRESIAS + args, stdout=subprocess.PIPE, stderr=slave, env=_env())
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    stdout = proc.stdout.read().decode()
    proc.wait(timeout=120)
    return proc.returncode, stdout, seen.decode("utf-8", "replace")


def run_on_pipe(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(TIRESIAS + args, capture_output=True, text=True, env=_env(), timeout=120)


@pytest.mark.parametrize("args,label,unit", [
    (LEARN, "learn", "expr"),
    (TUNE, "tune", "replays"),
    (SIMULATE, "simulate", "jobs"),
    (PARTITIONS, "simulate-partitions", "allocations"),
], ids=["learn", "tune", "simulate", "simulate-partitions"])
def test_terminal_shows_a_bar_with_rate_and_eta(tmp_path, args, label, unit):
    if args is LEARN:
        args = args + ["--out", str(tmp_path / "prio.txt")]
    code, stdout, terminal = run_on_pty(args)
    assert code == 0, terminal
    assert re.search(BAR.format(label=re.escape(label), unit=unit), terminal), terminal[-2000:]
    assert "\r" in terminal  # redrawn in place, not one line per update
    assert "%|" not in stdout and "\r" not in stdout  # the result on stdout stays clean


def test_learn_bar_reaches_the_total_and_shows_the_scores(tmp_path):
    code, _, terminal = run_on_pty(LEARN + ["--out", str(tmp_path / "prio.txt")])
    assert code == 0
    assert re.search(r"\b120/120 \[", terminal), terminal[-1500:]  # (4 + 1) generations x 24 expressions
    assert re.search(r"generation 4: best [\d.]+, its validation [\d.]+", terminal)


@pytest.mark.parametrize("args,label,unit", [
    (LEARN, "learn", "expr"),
    (SIMULATE, "simulate", "jobs"),
    (TUNE, "tune", "replays"),
], ids=["learn", "simulate", "tune"])
def test_pipe_gets_plain_lines(tmp_path, args, label, unit):
    if args is LEARN:
        args = args + ["--out", str(tmp_path / "prio.txt")]
    proc = run_on_pipe(args)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith(label + ":")]
    assert len(lines) >= 2, proc.stderr
    assert all(re.match(LINE.format(label=re.escape(label), unit=unit), line) for line in lines), lines
    assert "done in" in lines[-1]
    assert "\r" not in proc.stderr and "|" not in proc.stderr  # no bar drawing in a log file


@pytest.mark.parametrize("args", [SIMULATE + ["--json"], SIMULATE + ["--quiet"], TUNE + ["--json"],
                                  TUNE + ["--quiet"], PARTITIONS + ["--json"], PARTITIONS + ["--quiet"], LEARN],
                         ids=["simulate-json", "simulate-quiet", "tune-json", "tune-quiet", "partitions-json",
                              "partitions-quiet", "learn-quiet"])
def test_json_and_quiet_show_no_progress(tmp_path, args):
    if args is LEARN:
        args = args + ["--out", str(tmp_path / "prio.txt"), "--quiet"]
    code, stdout, terminal = run_on_pty(args)
    assert code == 0, terminal
    assert terminal == "", terminal[-500:]
    if "--json" in args:
        json.loads(stdout)  # stdout is exactly one JSON document
    proc = run_on_pipe(args)
    assert proc.returncode == 0
    assert proc.stderr == "", proc.stderr[-500:]


def test_mode_choice():
    class Args:
        quiet = json = no_progress = False

    class Tty(io.StringIO):
        def isatty(self):
            return True

    args = Args()
    assert choose_mode(args, Tty()) == "bar"
    assert choose_mode(args, io.StringIO()) == "lines"
    for flag in ("quiet", "json", "no_progress"):
        flagged = Args()
        setattr(flagged, flag, True)
        assert choose_mode(flagged, Tty()) == "off"


def test_plain_lines_every_interval(monkeypatch):
    monkeypatch.setenv("TIRESIAS_PROGRESS_INTERVAL_S", "3600")
    out = io.StringIO()
    progress = Progress("tune", "replays", "lines", stream=out, total=10)
    for done in range(1, 11):
        progress(done)
    progress.close()
    assert out.getvalue() == ""  # a fast run within the interval writes nothing, not even a closing line
    monkeypatch.setenv("TIRESIAS_PROGRESS_INTERVAL_S", "0")
    out = io.StringIO()
    progress = Progress("sacct", "B", "lines", stream=out, byte_units=True)
    progress(3 * 2**20, None)
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("sacct: 3.0 MiB, ") and "elapsed" in lines[0]  # no total: no percentage, no ETA
    assert lines[-1].startswith("sacct: 3.0 MiB, ") and "done in" in lines[-1]

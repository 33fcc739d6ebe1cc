"""Issue 36: adding a lever takes at most 6 files. The product's files (controller/,
slurm_plugin/) that name the Nice lever (SetNice, set_nice, nice_last_queue) are counted;
the parity test's workload table (bench/lever_parity.py PULLS) names its setting as data,
one line, and is counted apart. Reading the job's own nice from Slurm (the port's
ObservedJob.nice and its parse) is a new field of the job, not of the lever: not counted."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = re.compile(r"SetNice|set_nice|nice_last_queue")


def naming(rooms: tuple[str, ...]) -> list[str]:
    return sorted(str(path.relative_to(ROOT)) for room in rooms for path in (ROOT / room).rglob("*.py")
                  if NAMES.search(path.read_text()))


def test_the_nice_lever_takes_at_most_six_files():
    files = naming(("controller", "slurm_plugin"))
    print(f"files naming the Nice lever: {len(files)}: {files}")
    assert len(files) <= 6, files


def test_the_parity_workloads_name_it_as_data_only():
    lines = [line for line in (ROOT / "bench" / "lever_parity.py").read_text().splitlines() if NAMES.search(line)]
    assert naming(("bench",)) == ["bench/lever_parity.py"] and len(lines) == 1, lines

"""Issue 36: adding a lever takes at most 6 files. The files of controller/, slurm_plugin/
and bench/ that name the Nice lever (SetNice, set_nice, nice_last_queue) are counted."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = re.compile(r"SetNice|set_nice|nice_last_queue")


def test_the_nice_lever_takes_at_most_six_files():
    files = sorted(str(path.relative_to(ROOT)) for room in ("controller", "slurm_plugin", "bench")
                   for path in (ROOT / room).rglob("*.py") if NAMES.search(path.read_text()))
    print(f"files naming the Nice lever: {len(files)}: {files}")
    assert len(files) <= 6, files

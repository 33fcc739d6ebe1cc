"""`tiresias tune --slurm-array` on the live test cluster: each round of the search
runs as one job array (sbatch --wait), and the ranking is exactly the local run's.
Both wall times are printed."""
from __future__ import annotations

import contextlib
import io
import json
import subprocess

import pytest

from controller.cli.main import main
from tests.conftest import TRACE60
from tests.slurm_fixtures import slurm_cluster  # noqa: F401  (pytest fixture)

pytestmark = pytest.mark.slurm

SEARCH = ["tune", "--trace", str(TRACE60), "--nodes", "4", "--gpus-per-node", "4", "--evaluations", "12",
          "--seed", "7", "--budget-s", "600", "--top", "12", "--json", "--quiet"]


def _tune(*extra: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*SEARCH, *extra]) == 0
    return json.loads(out.getvalue())


def test_slurm_array_tune_ranks_as_the_local_run(slurm_cluster, tmp_path):  # noqa: F811
    local = _tune("--workers", "2")
    on_slurm = _tune("--slurm-array", "--array-dir", str(tmp_path / "arrays"), "--sbatch-args", "-p batch -t 10")
    print(f"\ntune, 12 evaluations of the 60-job trace: local (2 processes) {local['wall_s']:.1f} s wall, "
          f"as Slurm job arrays {on_slurm['wall_s']:.1f} s wall ({len(on_slurm['slurm_arrays'])} arrays)")
    assert on_slurm["top"] == local["top"] and on_slurm["best"] == local["best"]
    assert on_slurm["yaml"] == local["yaml"]
    # 12 evaluations in rounds of 8: two arrays, and Slurm really ran them.
    assert len(on_slurm["slurm_arrays"]) == 2
    for array_id in on_slurm["slurm_arrays"]:
        states = subprocess.run(["sacct", "-n", "-X", "-P", "-j", array_id, "-o", "State"],
                                capture_output=True, text=True, timeout=30).stdout.split()
        assert states and set(states) == {"COMPLETED"}, (array_id, states)
    assert sorted(p.name for p in (tmp_path / "arrays").glob("*.result.json")) == sorted(
        [f"round-0-{i}.result.json" for i in range(8)] + [f"round-1-{i}.result.json" for i in range(4)])


def test_a_task_that_writes_nothing_is_one_clear_error(slurm_cluster, tmp_path, capsys, monkeypatch):  # noqa: F811
    # The trace is gone by the time the tasks run: every task fails, and the caller says which and where.
    from controller.cli.tune_array import ArrayEvaluator

    trace = tmp_path / "gone.csv"
    trace.write_text(TRACE60.read_text())
    args = [str(trace) if a == str(TRACE60) else a for a in SEARCH]
    submit = ArrayEvaluator.__call__

    def remove_the_trace_first(self, batch, base):
        trace.unlink(missing_ok=True)
        return submit(self, batch, base)

    monkeypatch.setattr(ArrayEvaluator, "__call__", remove_the_trace_first)
    code = main([*args, "--slurm-array", "--array-dir", str(tmp_path / "arrays"), "--sbatch-args", "-t 5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err and "--slurm-array: task 0 of array job" in err[-1] and "wrote no result" in err[-1], err

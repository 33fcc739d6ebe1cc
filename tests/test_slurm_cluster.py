"""End-to-end checks against the local Slurm test cluster (containers/slurm-cluster.sh)."""

from __future__ import annotations

import subprocess
import time

import pytest

from slurm_plugin.parse import parse_sacct_json, parse_squeue_json
from tests.slurm_fixtures import slurm_cluster, submit_as  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.slurm


def _squeue_json() -> str:
    return subprocess.run(["squeue", "--json"], capture_output=True, text=True, check=True, timeout=15).stdout


def _wait_for_state(job_id: str, wanted: set[str], timeout_s: float) -> "object":
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        jobs = {j.job_id: j for j in parse_squeue_json(_squeue_json())}
        seen = jobs.get(job_id)
        if seen is not None and seen.state in wanted:
            return seen
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not reach {sorted(wanted)} in {timeout_s} s; last seen {seen}")


def test_gpu_job_as_alice_runs_and_completes(submit_as):
    job_id = submit_as("alice", "--gres=gpu:2 -J e2e-gpu2 --wrap 'sleep 3'")

    running = _wait_for_state(job_id, {"RUNNING", "COMPLETED"}, timeout_s=60)
    assert running.user == "alice"
    assert running.gpus == 2
    assert running.mps == 0
    assert running.node_count == 1

    done = _wait_for_state(job_id, {"COMPLETED"}, timeout_s=60)
    assert done.gpus == 2 and done.user == "alice"
    assert len(done.nodes) == 1 and done.nodes[0].startswith("gpu")
    assert done.start_time is not None and done.end_time is not None
    assert done.end_time >= done.start_time

    # slurmdbd saw it too (accounting may trail the controller by a moment).
    deadline = time.monotonic() + 20
    while True:
        out = subprocess.run(["sacct", "--json", "-j", job_id], capture_output=True, text=True,
                             check=True, timeout=15).stdout
        records = [j for j in parse_sacct_json(out) if j.job_id == job_id]
        if records and records[-1].state == "COMPLETED" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert records and records[-1].state == "COMPLETED"
    assert records[-1].gpus == 2 and records[-1].user == "alice"

"""End-to-end checks against the local Slurm test cluster (containers/slurm-cluster.sh)."""

from __future__ import annotations

import subprocess

import pytest

from slurm_plugin.parse_history import parse_sacct_json
from slurm_plugin.parse_jobs import parse_squeue_json
from tests.slurm_fixtures import slurm_cluster, submit_as, wait_for  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.slurm


def _squeue_json() -> str:
    return subprocess.run(["squeue", "--json", "--states=all"], capture_output=True, text=True, check=True, timeout=15).stdout


def _squeue_job(job_id: str):
    return next((j for j in parse_squeue_json(_squeue_json()) if j.job_id == job_id), None)


def _wait_for_state(job_id: str, wanted: set[str], timeout_s: float) -> "object":
    def reached():
        job = _squeue_job(job_id)
        return job if job is not None and job.state in wanted else None

    return wait_for(reached, timeout_s, f"job {job_id} to reach {sorted(wanted)}", seen=lambda: _squeue_job(job_id))


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
    def sacct_records():
        out = subprocess.run(["sacct", "--json", "-j", job_id], capture_output=True, text=True,
                             check=True, timeout=15).stdout
        return [j for j in parse_sacct_json(out) if j.job_id == job_id]

    def completed():
        records = sacct_records()
        return records if records and records[-1].state == "COMPLETED" else None

    records = wait_for(completed, 20, f"sacct to list job {job_id} as COMPLETED", seen=sacct_records)
    assert records[-1].gpus == 2 and records[-1].user == "alice"

"""GPU sharing on the real default test cluster (Gres=gpu:4,mps:400 per node): one
controller round in enforce mode sets held MPS jobs' shares through
``scontrol update JobId=X TresPerNode=gres:mps:N``, read back from Slurm.

The cluster is shared with other tests, so the controller sees only this test's
jobs (a SlurmBackend whose observation is narrowed to them); the levers are real.
The jobs stay held and are cancelled at the end: nothing here starts a job.
"""
from __future__ import annotations

import json
import subprocess

import pytest

from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.state.store import Store
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import LeverFailed
from bench.slurm_harness import plain_squeue_records
from slurm_plugin.grammar import gres_counts
from tests.slurm_fixtures import slurm_cluster, submit_as  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slurm


class OnlyTheseJobs(SlurmBackend):
    """The real backend, observing only the given job ids (other tests share the cluster)."""

    def __init__(self, job_ids, **kwargs):
        super().__init__(**kwargs)
        self.job_ids = set(job_ids)

    def observe(self):
        observation = super().observe()
        observation.jobs = [j for j in observation.jobs if j.job_id in self.job_ids]
        return observation


def read_back(job_ids) -> dict[str, dict]:
    proc = subprocess.run(["squeue", "--json", "--states=all"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return {job_id: j for job_id, j in plain_squeue_records(proc.stdout).items() if job_id in job_ids}


def scancel(job_ids) -> None:
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, text=True, timeout=30)


def test_one_round_sets_the_tiers_of_pending_mps_jobs(submit_as, tmp_path):  # noqa: F811
    jobs: list[str] = []
    try:
        latency = submit_as("alice", "--gres=mps:50 --hold --comment=tiresias:class=latency -o /dev/null "
                                     "--wrap 'sleep 1'")
        jobs.append(latency)
        plain = submit_as("alice", "--gres=mps:50 --hold -o /dev/null --wrap 'sleep 1'")
        jobs.append(plain)
        odd = submit_as("alice", "--gres=mps:30 --hold -o /dev/null --wrap 'sleep 1'")  # 30 is not a tier
        jobs.append(odd)

        config = from_mapping({"mode": "enforce", "gpu_sharing": True, "preempt_max_per_job": 0,
                               "usage_spool_dir": str(tmp_path / "no-spool")})
        with Store(f"sqlite:///{tmp_path}/tiresias.db") as store:
            report = Controller(config, OnlyTheseJobs(jobs), store).run_round()
            logged = {job_id: [d for d in store.decisions("default", job_id=job_id) if d["kind"] == "share"]
                      for job_id in jobs}

        entries = {e["job_id"]: e for e in report.applied if e["kind"] == "share"}
        assert set(entries) == {latency, odd}, report.applied
        assert all(e["applied"] for e in entries.values()), entries
        assert "latency-critical" in entries[latency]["reason"]
        assert logged[latency] and logged[odd] and not logged[plain]

        seen = read_back(jobs)
        # TresPerNode=gres:mps:N rewrites both the request and the job's TRES (what it gets)
        expected = {latency: 75, plain: 50, odd: 25}
        for job_id, tier in expected.items():
            record = seen[job_id]
            assert record["job_state"] == "PENDING", record
            assert record["tres_per_node"] == f"gres:mps:{tier}", (job_id, record["tres_per_node"])
            assert gres_counts(record["tres_req_str"]).get("mps") == tier, (job_id, record["tres_req_str"])
    finally:
        scancel(jobs)


def test_set_mps_share_rejects_bad_values_and_unknown_jobs(submit_as):  # noqa: F811
    backend = SlurmBackend()
    for bad in (0, 101, -5, 2.5, True, "50"):
        with pytest.raises(ValueError):
            backend.set_mps_share("1", bad)
    with pytest.raises(ValueError):
        backend.set_mps_share("1;rm", 50)
    with pytest.raises(LeverFailed):
        backend.set_mps_share("999999999", 50)  # no such job


class OneGpuNode(OnlyTheseJobs):
    """As OnlyTheseJobs, and the controller sees one node with one GPU: the second
    user's job then has no GPU of its own to go to (mps_allow_multi_user false)."""

    def __init__(self, job_ids, node, **kwargs):
        super().__init__(job_ids, **kwargs)
        self.node = node

    def observe(self):
        from dataclasses import replace

        observation = super().observe()
        # one GPU, the pool MPS jobs share (gpus_mps counts bob's GPU on the real node: left out)
        observation.nodes = [replace(n, gpus_total=1, gpus_free=1, gpus_mps=0) for n in observation.nodes
                             if n.name == self.node]
        return observation


def _wait_for(job_id: str, state: str, timeout_s: float = 60.0) -> dict:
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        record = read_back({job_id})[job_id]
        if record["job_state"] == state or time.monotonic() > deadline:
            return record
        time.sleep(1)


def test_a_refused_colocation_is_held_off_the_gpu_and_restore_releases_it(submit_as, tmp_path):  # noqa: F811
    """bob's MPS job runs on gpu1; alice's, pinned there, would fit beside it (mps:400
    per node), but one user per GPU: the round holds it (scontrol hold), it stays
    PENDING past its begin time while bob's still runs, and restore releases it."""
    import time

    from controller.service.acting.restore import restore

    jobs: list[str] = []
    try:
        bob = submit_as("bob", "--gres=mps:25 -w gpu1 -o /dev/null --wrap 'sleep 120'")
        jobs.append(bob)
        assert _wait_for(bob, "RUNNING")["job_state"] == "RUNNING"
        alice = submit_as("alice", "--gres=mps:25 -w gpu1 --begin=now+15 -o /dev/null --wrap 'sleep 1'")
        jobs.append(alice)
        config = from_mapping({"mode": "enforce", "gpu_sharing": True, "preempt_max_per_job": 0,
                               "admin_comment": False, "usage_spool_dir": str(tmp_path / "no-spool")})
        with Store(f"sqlite:///{tmp_path}/tiresias.db") as store:
            backend = OneGpuNode(jobs, "gpu1")
            report = Controller(config, backend, store).run_round()
            holds = [e for e in report.applied if e["kind"] == "hold"]
            assert [(e["job_id"], e["applied"]) for e in holds] == [(alice, True)], report.applied
            time.sleep(20)  # past alice's begin time: Slurm would start her now
            record = read_back({alice})[alice]
            assert record["job_state"] == "PENDING" and record["state_reason"] == "JobHeldAdmin", record
            assert read_back({bob})[bob]["job_state"] == "RUNNING"
            lines = restore(backend, store, "default").lines()
            assert f"job {alice}: hold reset: released" in lines, lines
        assert read_back({alice})[alice]["state_reason"] != "JobHeldAdmin"
    finally:
        scancel(jobs)

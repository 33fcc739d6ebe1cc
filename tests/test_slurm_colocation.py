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

from controller.service.config import from_mapping
from controller.service.daemon import Controller
from controller.service.store import Store
from slurm_plugin.backend import LeverFailed, SlurmBackend
from slurm_plugin.parse import gres_counts
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
    proc = subprocess.run(["squeue", "--json"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return {str(j["job_id"]): j for j in json.loads(proc.stdout)["jobs"] if str(j["job_id"]) in job_ids}


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

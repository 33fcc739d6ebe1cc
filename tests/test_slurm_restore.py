"""The way back on a real Slurm: an enforcing controller sets SiteFactor bands, a
ReqNodeList pin and its AdminComment line on jobs alice and bob submitted; then

- `tiresias restore` (a real process) leaves none of them on any job, and
- a controller that starts in shadow after enforce (`tiresias run --mode shadow`, a
  real process) does the same by itself,

while a job's own --nodelist and the site's AdminComment text are kept. Read back
with `scontrol show job`, `sprio` and `squeue --json`. An isolated instance (own
slurmctld and slurmd), so that the enforcing controller touches no other test's jobs.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.slurm_harness import ROOT, ControllerProcess, write_config
from controller.service.config import from_mapping
from controller.service.daemon import Controller
from controller.service.store import Store
from slurm_plugin.backend import SlurmBackend
from tests.slurm_fixtures import isolated_instance, wait_for

pytestmark = pytest.mark.slurm

INSTANCE = os.environ.get("TIRESIAS_TEST_INSTANCE") or f"rs{os.getpid()}"
BAND = 100000  # site_factor_band: every band the controller sets is >= BAND; Slurm's own factors sum < 1,100


@pytest.fixture(scope="module")
def cluster():
    yield from isolated_instance(INSTANCE, keep=bool(os.environ.get("TIRESIAS_TEST_INSTANCE")))


@pytest.fixture
def jobs(cluster):
    """Three jobs: 'run' (alice, 4 GPUs) starts at once; 'pinned' (bob, 8 GPUs,
    skew-sensitive) and 'own' (alice, 4 GPUs, its own --nodelist and the site's
    AdminComment) wait for a begin time an hour away, so the controller plans them a
    start (a band, a pin for 'pinned') that Slurm does not carry out during the test."""
    cluster.cancel_all()
    node = f"{cluster.name}g4"
    run_id, _ = cluster.submit("alice", 4, 600, "run")
    pinned_id, _ = cluster.submit("bob", 8, 600, "pinned", extra="--begin=now+3600 --comment=tiresias:skew=0.9")
    own_id, _ = cluster.submit("alice", 4, 600, "own", extra=f"--begin=now+3600 --nodelist={node}")
    cluster.run(["scontrol", "update", f"JobId={own_id}", "AdminComment=site: billing=ml-team"])
    yield {"run": run_id, "pinned": pinned_id, "own": own_id, "node": node}
    cluster.cancel_all()


def config_data(cluster, tmp_path: Path, mode: str) -> dict:
    return {"mode": mode, "cluster": cluster.name, "database_url": f"sqlite:///{tmp_path}/t.db",
            "queues_gpu_s": [1e9], "preempt_min_runtime_s": 600, "interval_s": 1.0, "poll_s": 0.5}


def levers(cluster, job_ids) -> dict[str, dict]:
    """Per job: ReqNodeList and AdminComment (scontrol show job), SiteFactor (sprio:
    pending jobs) and the priority (squeue --json)."""
    shown = cluster.show_jobs()
    sprio = cluster.run(["sprio", "-h", "-o", "%.30i %.30S"]).stdout.split()
    site = dict(zip(sprio[::2], (int(v) for v in sprio[1::2])))
    priority = {job_id: record.get("priority") for job_id, record in cluster.squeue().items()}
    return {job_id: {"ReqNodeList": shown[job_id].get("ReqNodeList"), "state": shown[job_id].get("JobState"),
                     "AdminComment": _admin_comment(cluster, job_id), "SiteFactor": site.get(job_id),
                     "priority": priority.get(job_id)} for job_id in job_ids}


def _admin_comment(cluster, job_id: str) -> str:
    out = cluster.run(["scontrol", "show", "job", job_id]).stdout
    return next((line.strip()[len("AdminComment="):] for line in out.splitlines()
                 if line.strip().startswith("AdminComment=")), "")


def all_set(cluster, jobs) -> bool:
    """Every lever of the enforcing controller is on the jobs."""
    seen = levers(cluster, [jobs["run"], jobs["pinned"], jobs["own"]])
    pinned, own, run = seen[jobs["pinned"]], seen[jobs["own"]], seen[jobs["run"]]
    return (run["state"] == "RUNNING" and "[tiresias:" in run["AdminComment"]
            and (pinned["SiteFactor"] or 0) >= BAND and pinned["ReqNodeList"] not in (None, "(null)")
            and "[tiresias:" in pinned["AdminComment"]
            and (own["SiteFactor"] or 0) >= BAND and own["AdminComment"].startswith("site: billing=ml-team [tiresias:"))


def assert_nothing_left(cluster, jobs) -> None:
    seen = levers(cluster, [jobs["run"], jobs["pinned"], jobs["own"]])
    print({job_id: values for job_id, values in seen.items()})
    for job_id, values in seen.items():
        assert "[tiresias:" not in values["AdminComment"], (job_id, values)
        assert values["priority"] is not None and values["priority"] < BAND, (job_id, values)  # no band in it
    for name in ("pinned", "own"):
        assert seen[jobs[name]]["SiteFactor"] == 0, (name, seen[jobs[name]])
    assert seen[jobs["pinned"]]["ReqNodeList"] in (None, "(null)"), seen[jobs["pinned"]]
    assert seen[jobs["own"]]["ReqNodeList"] == jobs["node"]  # the job's own --nodelist
    assert seen[jobs["own"]]["AdminComment"] == "site: billing=ml-team"  # the site's text
    assert seen[jobs["run"]]["AdminComment"] == ""


def test_enforce_then_tiresias_restore_leaves_nothing(cluster, jobs, tmp_path):
    data = config_data(cluster, tmp_path, "enforce")
    backend = SlurmBackend(env={"SLURM_CONF": cluster.conf})
    with Store(data["database_url"]) as store:
        controller = Controller(from_mapping(data), backend, store)

        def round_then_set():
            controller.run_round()
            return all_set(cluster, jobs)

        wait_for(round_then_set, 60, "the controller's bands, pin and AdminComment lines",
                 seen=lambda: levers(cluster, [jobs["run"], jobs["pinned"], jobs["own"]]))
    config = write_config(tmp_path / "tiresias.yaml", data["database_url"], cluster.name, mode="shadow")
    command = [sys.executable, "-m", "controller.cli.main", "restore", "--config", str(config)]
    proc = subprocess.run(command, cwd=str(ROOT), env=cluster.env, capture_output=True, text=True, timeout=120)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert f"job {jobs['pinned']}: ReqNodeList reset: " in proc.stdout
    assert f"job {jobs['own']}: AdminComment reset: the controller's line removed, the site's text kept: " \
           "site: billing=ml-team" in out
    assert out[-1].startswith("restored: 2 SiteFactor, 1 ReqNodeList, 3 AdminComment;"), out[-1]
    assert_nothing_left(cluster, jobs)
    # idempotent: a second run finds nothing to change
    again = subprocess.run(command, cwd=str(ROOT), env=cluster.env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.splitlines()[-1].startswith(
        "restored: 0 SiteFactor, 0 ReqNodeList, 0 AdminComment;"), again.stdout
    assert_nothing_left(cluster, jobs)


def test_enforce_then_a_switch_to_shadow_leaves_nothing(cluster, jobs, tmp_path):
    data = config_data(cluster, tmp_path, "enforce")
    config = write_config(tmp_path / "tiresias.yaml", data["database_url"], cluster.name, mode="enforce",
                          queues_gpu_s=[1e9], preempt_min_runtime_s=600)
    log_path = tmp_path / "controller.log"
    enforcing = ControllerProcess(cluster, config, log_path, mode="enforce").start()
    try:
        wait_for(lambda: all_set(cluster, jobs), 90, "the controller's bands, pin and AdminComment lines",
                 seen=lambda: levers(cluster, [jobs["run"], jobs["pinned"], jobs["own"]]))
    finally:
        assert enforcing.stop() == 0, log_path.read_text()[-3000:]
    assert all_set(cluster, jobs)  # a plain stop leaves them (restore_on_stop is off)
    shadow = ControllerProcess(cluster, config, log_path, mode="shadow").start()
    try:
        wait_for(lambda: "restore: restored:" in log_path.read_text(), 90, "the restore at the shadow start",
                 seen=lambda: log_path.read_text()[-2000:])
        assert_nothing_left(cluster, jobs)
        with Store(data["database_url"]) as store:
            assert store.last_mode(cluster.name) == "shadow" and store.levers(cluster.name) == {}
    finally:
        assert shadow.stop() == 0, log_path.read_text()[-3000:]
    print("\n".join(line for line in log_path.read_text().splitlines() if "restore" in line))
    assert_nothing_left(cluster, jobs)  # shadow rounds set nothing again

"""The node hooks under a real slurmd: sbatch jobs as alice on the local test cluster
(containers/slurm-cluster.sh installs prolog/epilog/task_prolog to /etc/slurm/tiresias).

/etc/tiresias/node.conf is written for the duration of the module so that the hooks
use the recording stand-in for nvidia-cuda-mps-control (slurmd starts hooks with no
PATH, so the config file is the way in), then restored."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.slurm_fixtures import slurm_cluster, submit_as, wait_for  # noqa: F401

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakes" / "nvidia-cuda-mps-control"
NODE_CONF = Path("/etc/tiresias/node.conf")
RUN_DIR = "/run/tiresias-mps"
SPOOL_DIR = Path("/var/spool/tiresias/usage")
MARK = b"# written by tests/test_node_side_slurm.py"


@pytest.fixture(scope="module")
def fake_mps(slurm_cluster):  # noqa: F811
    workdir = Path(tempfile.mkdtemp(prefix="tiresias-fake-mps-"))
    os.chmod(workdir, 0o755)
    log = workdir / "calls.log"
    wrapper = workdir / "nvidia-cuda-mps-control"
    wrapper.write_text(f"#!/bin/sh\nTIRESIAS_FAKE_MPS_LOG={log} exec {FAKE} \"$@\"\n")
    wrapper.chmod(0o755)
    saved = NODE_CONF.read_bytes() if NODE_CONF.exists() else None
    if saved is not None and saved.startswith(MARK):
        saved = None  # left by a run of this module that was killed: its stand-in is gone
    NODE_CONF.parent.mkdir(parents=True, exist_ok=True)
    NODE_CONF.write_bytes(MARK + f"; restored after\nmps_control={wrapper}\n".encode())
    NODE_CONF.chmod(0o644)
    try:
        yield log
    finally:
        if saved is None:
            NODE_CONF.unlink()
        else:
            NODE_CONF.write_bytes(saved)
        shutil.rmtree(workdir, ignore_errors=True)


def _job_state(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                         timeout=15).stdout
    return next((f.split("=", 1)[1] for f in out.split() if f.startswith("JobState=")), "")


def wait_done(job_id: str, timeout_s: float = 90) -> str:
    def finished():
        state = _job_state(job_id)
        return state if state and state not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING") else None

    return wait_for(finished, timeout_s, f"job {job_id} to finish", seen=lambda: _job_state(job_id))


def _usage_record(job_id: str) -> dict | None:
    """The epilog's record of the job, in the node's spool file or, once a controller
    (any test's, on this host's default spool) has stored it, rotated into processed/."""
    recent = time.time() - 3600
    for path in [*SPOOL_DIR.glob("usage-*.jsonl"), *(SPOOL_DIR / "processed").glob("usage-*.jsonl")]:
        try:
            if path.parent.name == "processed" and path.stat().st_mtime < recent:
                continue
            text = path.read_text(errors="replace")
        except FileNotFoundError:  # rotated between the listing and this look: found there next time
            continue
        for line in text.splitlines():
            if f'/{job_id}/' in line:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("job_id") == job_id and record.get("cluster") == "testcluster":
                    return record
    return None


def wait_record(job_id: str, timeout_s: float = 30) -> dict:
    return wait_for(lambda: _usage_record(job_id), timeout_s, f"a usage record of job {job_id} in {SPOOL_DIR}", 0.3)


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def job_output(workdir_glob: str) -> str:
    outs = list(Path("/tmp").glob(workdir_glob))
    return outs[0].read_text() if outs else ""


def test_mps_job_starts_and_stops_the_daemon(fake_mps, submit_as):  # noqa: F811
    alice_uid = pwd.getpwnam("alice").pw_uid
    before = len(calls(fake_mps))
    job = submit_as("alice", "--gres=mps:25 -o out-%j.txt --wrap 'echo GPUS=$SLURM_JOB_GPUS "
                             "PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE PIPE=$CUDA_MPS_PIPE_DIRECTORY "
                             "LOGD=$CUDA_MPS_LOG_DIRECTORY MARK=$TIRESIAS_CHECKPOINT_MARKER; "
                             "touch $TIRESIAS_CHECKPOINT_MARKER; sleep 2'")
    assert wait_done(job) == "COMPLETED"
    record = wait_record(job)
    out = job_output(f"tiresias-alice-*/out-{job}.txt")
    fields = dict(item.split("=", 1) for item in out.split())
    gpu = int(fields["GPUS"])
    pipe, logdir = f"{RUN_DIR}/gpu{gpu}/pipe", f"{RUN_DIR}/gpu{gpu}/log"
    assert fields["PCT"] == "25" and fields["PIPE"] == pipe and fields["LOGD"] == logdir
    assert fields["MARK"] == f"{RUN_DIR}/jobs/{job}.d/checkpoint"
    def ours():
        return [c for c in calls(fake_mps)[before:] if c["env"]["CUDA_MPS_PIPE_DIRECTORY"] == pipe]

    # the epilog's own calls may come after the job's end and its usage record: waited for
    wait_for(lambda: len(ours()) >= 3, 30, "the epilog's MPS calls", seen=ours)
    ours = ours()
    # the SM quota set at the daemon for alice's server, and undone by the epilog
    assert [c["argv"] or c["stdin"] for c in ours] == [
        ["-d"], ["set_default_active_thread_percentage 25", f"start_server -uid {alice_uid}"],
        ["set_default_active_thread_percentage 100", "quit"]]
    assert all(c["env"] == {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": logdir,
                            "CUDA_VISIBLE_DEVICES": str(gpu)} for c in ours)
    wait_for(lambda: not os.path.exists(f"{RUN_DIR}/gpu{gpu}"), 10, "the last client's epilog to remove the GPU's dirs")
    assert record["record_id"] == f"testcluster/{job}/{record['node']}/0"
    assert record["mps_percent"] == 25 and record["mps_daemon"] == "stopped" and record["gpus"] == [gpu]
    assert record["exit_code"] == 0 and record["checkpoint_seen"] is True and record["uid"] == alice_uid


def test_gpu_job_makes_no_mps_calls(fake_mps, submit_as):  # noqa: F811
    before = len(calls(fake_mps))
    job = submit_as("alice", "--gres=gpu:1 -o out-%j.txt --wrap 'echo PIPE=${CUDA_MPS_PIPE_DIRECTORY:-none}; "
                             "exit 3'")
    wait_done(job)
    record = wait_record(job)
    assert calls(fake_mps)[before:] == []
    assert "PIPE=none" in job_output(f"tiresias-alice-*/out-{job}.txt")
    assert record["mps_percent"] is None and record["exit_code"] == 3 and record["checkpoint_seen"] is False

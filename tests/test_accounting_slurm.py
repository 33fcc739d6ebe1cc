"""`tiresias trace export` against the live Slurm test cluster (slurmdbd).

Submits four short GPU jobs as alice and bob, requeues one while it runs, waits
(bounded) until slurmdbd has recorded them, exports the window, and checks the
rows against what was submitted. Also checks that the `sacct -P` fallback parses
the same jobs to the same rows as `sacct --json`.
"""
from __future__ import annotations

import subprocess
import time

import pytest

from controller.cli import main as cli
from controller.service.ops.config import Config
from slurm_plugin.accounting import SACCT_TEXT_FIELDS, build_export, runs_from_sacct_json, runs_from_sacct_text
from controller.replay.traces import load_actuals, load_trace
from tests.slurm_fixtures import slurm_cluster, submit_as, wait_for  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.slurm

WAIT_S = 240  # the cluster is shared: other tests' jobs may hold the GPUs for a while


def _run(*args: str, timeout: float = 30) -> str:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _squeue_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                         timeout=30).stdout.strip()
    return out or "GONE"


def _sacct_rows(ids: list[str]) -> list[tuple[str, str]]:
    out = _run("sacct", "-X", "-D", "-n", "-P", "-j", ",".join(ids), "-o", "JobIDRaw,State")
    return [tuple(line.split("|")[:2]) for line in out.splitlines() if line.strip()]




def test_export_live_window(submit_as, tmp_path, capsys):  # noqa: F811
    window_start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    submitted = {  # job id -> (user, gpus)
        submit_as("alice", "-J acct-a1 --gres=gpu:1 --wrap 'sleep 5'"): ("alice", 1),
        submit_as("bob", "-J acct-b2 --gres=gpu:2 --wrap 'sleep 6'"): ("bob", 2),
        submit_as("alice", "-J acct-a3 --gres=gpu:3 --wrap 'sleep 5'"): ("alice", 3),
    }
    requeued = submit_as("bob", "-J acct-rq --requeue --gres=gpu:4 --wrap 'sleep 8'")
    submitted[requeued] = ("bob", 4)
    ids = list(submitted)
    try:
        wait_for(lambda: _squeue_state(requeued) == "RUNNING", WAIT_S, f"job {requeued} to run")
        time.sleep(1.5)  # let it run a little: the first run then has a non-zero elapsed time
        _run("scontrol", "requeue", requeued)
        wait_for(lambda: _squeue_state(requeued) == "PENDING", WAIT_S,
                 f"job {requeued} to be pending after the requeue")
        # As the controller does: a relaunch in the same second as the requeue meets
        # slurmd's revoked credential for the old run ("Job credential revoked") and fails.
        time.sleep(Config().requeue_settle_s)
        _run("scontrol", "update", f"JobId={requeued}", "StartTime=now")

        def all_recorded():
            rows = _sacct_rows(ids)
            final = {jid: state for jid, state in rows}  # sacct -D lists runs in order: last one wins
            runs = sum(1 for jid, _ in rows if jid == requeued)
            return all(final.get(j) == "COMPLETED" for j in ids) and runs == 2

        wait_for(all_recorded, WAIT_S, "slurmdbd to record the four jobs as COMPLETED", interval_s=1.0,
                 seen=lambda: _sacct_rows(ids))
    finally:
        for jid in ids:  # never leave our jobs behind on the shared cluster
            if _squeue_state(jid) not in ("GONE", "COMPLETED"):
                subprocess.run(["scancel", jid], timeout=30)

    out = tmp_path / "live.csv"
    window_end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 5))
    assert cli.main(["trace", "export", "--start", window_start, "--end", window_end, "--users", "alice,bob",
                     "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "sacct --json:" in err  # slurmdbd answers, so the JSON path was used
    jobs = {j.job_id: j for j in load_trace(out)}
    actuals = load_actuals(out)
    for jid, (user, gpus) in submitted.items():
        assert jid in jobs, f"job {jid} missing from the export; stderr: {err}"
        job = jobs[jid]
        assert (job.user, job.num_gpus) == (user, gpus)
        assert actuals[jid]["state"] == "COMPLETED"
        assert actuals[jid]["requeues"] == (1 if jid == requeued else 0)
        assert actuals[jid]["actual_start_s"] >= job.submit_time_s
        assert actuals[jid]["actual_end_s"] > actuals[jid]["actual_start_s"]
    # Run times: the sleeps, plus the requeued job's first (interrupted) run.
    assert 5 <= jobs[ids[0]].duration_s <= 8
    assert jobs[requeued].duration_s >= 8 + 1
    # Queueing of the requeued job counts from its first submission, not from the requeue.
    assert actuals[requeued]["actual_end_s"] - jobs[requeued].submit_time_s >= jobs[requeued].duration_s

    # The -P text fallback reads the same jobs to the same rows.
    window = ["-a", "-X", "-D", "-j", ",".join(ids)]
    from_json = build_export(runs_from_sacct_json(_run("sacct", "--json", *window)))
    from_text = build_export(runs_from_sacct_text(_run("sacct", "-P", "-o", ",".join(SACCT_TEXT_FIELDS), *window)))
    assert from_text.jobs == from_json.jobs
    assert from_text.actuals == from_json.actuals
    assert sorted(j.job_id for j in from_json.jobs) == sorted(ids)


def test_export_reports_sacct_progress_on_stderr(slurm_cluster, tmp_path):  # noqa: F811
    """While the real sacct runs, a pipe gets plain progress lines (bytes read, rate);
    --quiet gets none. Interval 0: every poll is reported, so a fast sacct shows too."""
    import os
    import re
    import sys

    env = dict(os.environ, TIRESIAS_PROGRESS_INTERVAL_S="0")
    command = [sys.executable, "-m", "controller.cli.main", "trace", "export", "--out", str(tmp_path / "t.csv"),
               "--start", "now-1days"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("sacct:")]
    assert lines and all(re.match(r"sacct: [\d,.]+ MiB, [\d,.]+ MiB/s, (elapsed|done in) \d+:\d\d", line)
                         for line in lines), proc.stderr
    assert "done in" in lines[-1]
    quiet = subprocess.run(command + ["--quiet"], capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    assert not any(line.startswith("sacct:") for line in quiet.stderr.splitlines()), quiet.stderr

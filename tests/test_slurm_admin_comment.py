"""The AdminComment line on a real Slurm: written by the controller (enforce mode),
read by the job's owner with `scontrol show job`, changed when the job is demoted,
the site's own AdminComment kept, and every write counted with the round's other
Slurm calls. An isolated instance (own slurmctld and slurmd), so that an enforcing
controller touches no other test's jobs.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import time

import pytest

from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.ops.metrics import Metrics
from controller.service.state.store import Store
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import subprocess_runner
from tests.slurm_fixtures import instance_fixture, wait_for

pytestmark = pytest.mark.slurm


cluster = instance_fixture("ac")


def admin_comment_as(user: str, conf: str, job_id: str) -> str:
    """AdminComment of a job as ``user`` sees it with `scontrol show job`."""
    command = f"SLURM_CONF={shlex.quote(conf)} scontrol show job {job_id}"
    out = subprocess.run(["su", user, "-c", command], capture_output=True, text=True, timeout=30, check=True).stdout
    match = re.search(r"AdminComment=(.*?)\s*$", out, re.MULTILINE)
    assert match, out
    return match.group(1)


def test_admin_comment_line_seen_by_owner_changes_on_demotion_and_keeps_site_text(cluster, tmp_path):
    cluster.cancel_all()
    commands: list[list[str]] = []

    def recording_runner(argv, timeout_s, env):
        commands.append(list(argv))
        return subprocess_runner(argv, timeout_s, env)

    backend = SlurmBackend(env={"SLURM_CONF": cluster.conf}, runner=recording_runner)
    config = from_mapping({"mode": "enforce", "cluster": cluster.name, "queues_gpu_s": [40.0],
                           "preempt_min_runtime_s": 600, "interval_s": 1.0, "poll_s": 0.5})
    metrics = Metrics(mode="enforce")
    job_id, _ = cluster.submit("alice", 4, 60, "ac")
    cluster.run(["scontrol", "update", f"JobId={job_id}", "AdminComment=site: billing=ml-team"])
    try:
        with Store(f"sqlite:///{tmp_path}/t.db") as store:
            controller = Controller(config, backend, store, metrics=metrics)

            def round_then(predicate):
                controller.run_round()
                return predicate()

            def line():
                return admin_comment_as("alice", cluster.conf, job_id)

            wait_for(lambda: round_then(lambda: "[tiresias: queue 1/2" in line()), 60,
                     "the queue-1 line in AdminComment", interval_s=0.5)
            first = line()
            assert first.startswith("site: billing=ml-team [tiresias: queue 1/2 · "), first
            assert re.search(r"· [\d,]+ GPU-s attained · position 1( · not preemptable)?\]$", first), first
            # 4 GPUs attain 40 GPU-s (the threshold) in 10 s of running: demoted to queue 2
            wait_for(lambda: round_then(lambda: "[tiresias: queue 2/2" in line()), 90,
                     "the queue-2 line after the demotion", interval_s=0.5)
            demoted = line()
            print(f"job {job_id} as alice: AdminComment={demoted}")
            assert demoted.startswith("site: billing=ml-team [tiresias: queue 2/2 · "), demoted
            # the site rewrites its comment: theirs is kept, ours comes back after it
            cluster.run(["scontrol", "update", f"JobId={job_id}", "AdminComment=site: billing=ml-team; audited"])
            wait_for(lambda: round_then(lambda: "[tiresias:" in line()), 30, "our line back", interval_s=0.5)
            assert line().startswith("site: billing=ml-team; audited [tiresias: queue 2/2 · "), line()
            # only on change: a few more rounds write nothing
            writes = [c for c in commands if any(a.startswith("AdminComment=") for a in c)]
            for _ in range(3):
                controller.run_round()
                time.sleep(0.3)
            assert [c for c in commands if any(a.startswith("AdminComment=") for a in c)] == writes
            assert 3 <= len(writes) <= 6, writes  # first line, demotion, after the site's rewrite (+ a position)
            # counted with the round's other Slurm calls: every command ran inside a round
            value = metrics.registry.get_sample_value
            assert value("tiresias_slurm_calls_per_round_sum", {"mode": "enforce"}) == len(commands)
            assert value("tiresias_slurm_calls_total", {"mode": "enforce", "command": "scontrol"}) == \
                sum(1 for c in commands if c[0] == "scontrol")
    finally:
        cluster.cancel_all()

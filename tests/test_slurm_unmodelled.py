"""Not modelled is never silent, on real Slurm (issue 35, items 2 and 10): with pending
jobs whose request the plan cannot express (an OR constraint, --exclusive=user) behind
a full cluster, `tiresias preflight` reports their share of the queue per reason and
says the controller is not reordering this site; a running controller says the same in
its log (once, not per round) and names no victim for them. The instance's partition
``small`` has PriorityTier=2 and shares nodes with ``batch``: preflight names both."""
from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.slurm_fixtures import instance_fixture, iso, run, wait_for  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parent.parent
NOT_REORDERING = "the controller is not reordering this site"

# (an OR of ib, the one feature an instance has (on g1): slurm-cluster.sh checks the extra
# items against an empty slurm.conf first, which refuses every NodeName item)
cluster = instance_fixture("um", extra_env={"TIRESIAS_INSTANCE_CONF_EXTRA": "PartitionName=small PriorityTier=2"})


def preflight(iso) -> str:
    proc = subprocess.run([sys.executable, "-m", "controller.cli.main", "preflight"], cwd=str(ROOT), env=iso.env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_unmodelled_jobs_are_counted_by_preflight_and_the_log(iso, run):
    full = [iso.submit("bob", 4, 600, f"full{k}")[0] for k in range(4)]
    wait_for(lambda: all(iso.squeue()[j]["job_state"] == "RUNNING" for j in full), 30, "bob's jobs to start")
    either, _ = iso.submit("alice", 4, 5, "either", extra="--constraint='ib|ib'")
    own, _ = iso.submit("alice", 4, 5, "own", extra="--exclusive=user")
    plain, _ = iso.submit("alice", 4, 5, "plain")
    # until slurmctld has looked at them (reason None) they wait on Slurm: not weighed
    wait_for(lambda: all(iso.squeue()[j]["state_reason"] in ("Priority", "Resources") for j in (either, own, plain)),
             60, "the scheduler to look at alice's jobs", seen=lambda: iso.squeue())
    out = preflight(iso)
    assert f"queue: 2 of 3 pending GPU jobs (67%) cannot cause a preemption (requests the plan does not model): " \
           f"{NOT_REORDERING}" in out, out
    assert f"warning: unmodelled constraint=1 of 3 pending GPU jobs" in out and f"e.g. job {either}: " in out, out
    assert f"warning: unmodelled exclusive=1 of 3 pending GPU jobs" in out and f"e.g. job {own}: --exclusive=user" \
        in out, out
    assert f"warning: PartitionName=batch,small PriorityTier=1,2 (sharing nodes {iso.name}g1,{iso.name}g2)" in out, out
    # a running controller (shadow: it acts on nothing) says it in its log, once however many rounds
    run.start(mode="shadow")
    wait_for(lambda: NOT_REORDERING in run.log_text(), 30, "the census WARNING", seen=lambda: run.log_text()[-2000:])
    time.sleep(5)  # several rounds
    lines = [line for line in run.log_text().splitlines() if "cannot cause a preemption" in line]
    assert len(lines) == 1 and "2 of 3 pending GPU jobs (67%)" in lines[0], lines
    assert f"job {either}: --constraint=ib|ib" in lines[0] and f"job {own}: --exclusive=user" in lines[0]
    # Shadow acts on nothing and decides afresh each round, so a later round may name
    # another of bob's four like jobs for the plain job (seen once, on 26.05 under the
    # load of three releases' tests: two victims over the run). What must hold: one victim
    # a round at most, each named for the plain job, none for the two unmodelled ones.
    preempts = [d for d in run.decisions() if d["kind"] == "preempt"]
    per_round = Counter(d["round_id"] for d in preempts)
    assert all(count <= 1 for count in per_round.values()), per_round
    for decision in preempts:
        assert plain in decision["reason"] and either not in decision["reason"] \
            and own not in decision["reason"], decision["reason"]

"""The way back on real Slurm (issue 17): after `tiresias run --mode enforce` has set
its levers, `tiresias restore` leaves no SiteFactor and no AdminComment line of the
controller on any job; a switch to shadow (the controller started again in shadow)
does the same by itself.

The cluster is held by a requeueable job that declares no signal (so it is never
preempted and the pending jobs stay pending with their levers set). Pins are set only
at a start the plan makes; restore's pin handling is unit-tested in
tests/test_restore.py, here the check is that no job has a node list the controller
wrote (none of these jobs asked for one).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.slurm_harness import Instance
from tests.slurm_fixtures import Run, attained, instance_fixture, iso, sbatch_in, wait_for  # noqa: F401  (iso)

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]
cluster = instance_fixture("tr")


def site_factors(iso: Instance) -> dict[str, int]:
    """SiteFactor of every pending, unheld job (sprio: 22.05's JSON has none)."""
    out = iso.run(["sprio", "-h", "-o", "%.30i %.30S"]).stdout
    return {parts[0]: int(parts[1]) for parts in (line.split() for line in out.splitlines()) if len(parts) == 2}


def controller_levers(iso: Instance, ids) -> dict[str, tuple]:
    """Each job's (SiteFactor, our AdminComment part, ReqNodeList) where any is set."""
    factors, jobs = site_factors(iso), iso.squeue()
    found = {}
    for job_id in ids:
        job = jobs[job_id]
        levers = (factors.get(job_id, 0), "[tiresias:" in (job.get("admin_comment") or ""),
                  job.get("required_nodes") or "")
        if levers != (0, False, ""):
            found[job_id] = levers
    return found


def set_levers(iso: Instance, run: Run) -> list[str]:
    """Enforce until SiteFactor bands and AdminComment lines are on alice's pending
    jobs; the controller is then stopped. The pending jobs' ids."""
    run.start()
    holder = sbatch_in(iso, "bob", iso.workdir("bob"), "-N 4 -n 4 --gres=gpu:4 --requeue --wrap 'sleep 300'")
    wait_for(lambda: attained(run, holder) > 40, 40, "bob's job to pass the threshold")
    pending = [iso.submit("alice", gpus, 5, f"p{gpus}")[0] for gpus in (4, 8)]
    wait_for(lambda: set(controller_levers(iso, pending)) == set(pending), 40,
             "SiteFactor and AdminComment on the pending jobs", seen=lambda: controller_levers(iso, pending))
    assert all(levers[0] != 0 and levers[1] for levers in controller_levers(iso, pending).values())
    run.stop_all()
    return pending


def test_restore_after_enforce_leaves_no_lever_of_the_controller(iso, tmp_path):
    run = Run(iso, tmp_path)
    try:
        pending = set_levers(iso, run)
        proc = subprocess.run([sys.executable, "-m", "controller.cli.main", "restore", "--config",
                               str(tmp_path / "tiresias.yaml")], cwd=str(ROOT), env=iso.env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert controller_levers(iso, pending) == {}, proc.stdout
        assert all(iso.squeue()[j]["job_state"] == "PENDING" for j in pending)  # restore starts nothing
    finally:
        run.stop_all()


def test_a_switch_to_shadow_after_enforce_leaves_no_lever_of_the_controller(iso, tmp_path):
    run = Run(iso, tmp_path)
    try:
        pending = set_levers(iso, run)
        run.start(mode="shadow")
        wait_for(lambda: controller_levers(iso, pending) == {}, 30, "the shadow start to reset every lever",
                 seen=lambda: controller_levers(iso, pending))
    finally:
        run.stop_all()

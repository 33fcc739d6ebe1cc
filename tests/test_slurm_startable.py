"""Startable means what Slurm says, on real Slurm (an isolated instance, `tiresias run
--mode enforce` as a real process, jobs as alice and bob):

bob's four checkpointable 4-GPU jobs fill the cluster and fall to queue 2; alice's
4-GPU jobs that Slurm will not start (held, dependent on a running job, begin in an
hour, bound to a reservation that starts later) are planned in queue 1 above them,
yet none of bob's jobs is signalled; a plain job of alice's (the control) still gets
one of bob's jobs preempted and runs. `tiresias explain` names Slurm's reason.
"""
from __future__ import annotations

import time

import pytest

from controller.cli.main import main
from tests.slurm_fixtures import attained, run, wait_for  # noqa: F401  (pytest fixtures)
from tests.test_slurm_controller import cluster  # noqa: F401  (pytest fixture)

pytestmark = pytest.mark.slurm

RESERVATION = "later"


@pytest.fixture
def iso(cluster):  # the shared instance fixture, plus the reservation this test makes
    cluster.cancel_all()
    yield cluster
    cluster.run(["scontrol", "delete", f"ReservationName={RESERVATION}"], check=False)
    cluster.cancel_all()


def reasons(instance, ids) -> dict[str, str]:
    jobs = instance.squeue()
    return {j: f"{jobs[j]['job_state']}/{jobs[j]['state_reason']}" for j in ids}


def test_jobs_slurm_would_not_start_preempt_nobody_and_a_plain_job_still_does(iso, run, capsys, monkeypatch):
    run.start(preempt_grace_s=3.0)
    bobs = [iso.submit("bob", 4, 600, f"bob{k}")[0] for k in range(4)]
    wait_for(lambda: all(attained(run, j) > 40 for j in bobs), 60, "bob's jobs to reach queue 2",
             seen=lambda: reasons(iso, bobs))
    # A reservation that starts in an hour on one node (IGNORE_JOBS: bob's jobs run there now).
    node = f"{iso.name}g4"
    iso.run(["scontrol", "create", f"ReservationName={RESERVATION}", "StartTime=now+1hour", "Duration=60",
             f"Nodes={node}", "Users=alice", "Flags=IGNORE_JOBS"])
    waiting = {
        "JobHeldUser": iso.submit("alice", 4, 5, "held", extra="--hold")[0],
        "Dependency": iso.submit("alice", 4, 5, "dependent", extra=f"--dependency=afterok:{bobs[0]}")[0],
        "BeginTime": iso.submit("alice", 4, 5, "later", extra="--begin=now+1hour")[0],
        "Reservation": iso.submit("alice", 4, 5, "reserved", extra=f"--reservation={RESERVATION}")[0],
    }
    wait_for(lambda: all(reasons(iso, [j])[j] == f"PENDING/{why}" for why, j in waiting.items()), 30,
             "Slurm to give the waiting jobs their reasons", seen=lambda: reasons(iso, waiting.values()))
    # The controller plans them (queue 1, above bob's jobs) for several rounds ...
    wait_for(lambda: all(run.record(j) is not None and run.record(j).last_observed_s for j in waiting.values()), 20,
             "the controller to see alice's jobs")
    time.sleep(10)
    # ... and preempts nobody for them.
    preempts = [(d["job_id"], d["reason"], d["detail"]) for d in run.decisions() if d["kind"] in ("preempt", "requeue")]
    assert preempts == [], "\n".join(map(str, preempts))
    assert {j: s["restart_cnt"] for j, s in iso.squeue().items() if j in bobs} == {j: 0 for j in bobs}
    for why, job_id in waiting.items():
        assert run.record(job_id).level == 0, why  # its band: queue 1
    monkeypatch.setenv("SLURM_CONF", iso.conf)
    capsys.readouterr()
    assert main(["explain", waiting["JobHeldUser"], "--config", str(run.tmp / "tiresias.yaml")]) == 0
    assert "this round: wait: Slurm reason JobHeldUser" in capsys.readouterr().out

    # Control: a plain job of alice's that Slurm would start makes one of bob's jobs yield.
    control, _ = iso.submit("alice", 4, 5, "control", extra="--time=10")
    wait_for(lambda: iso.squeue()[control]["job_state"] in ("RUNNING", "COMPLETED"), 60,
             "the control job to start", seen=lambda: reasons(iso, [control, *bobs]))
    preempted = {d["job_id"] for d in run.decisions() if d["kind"] == "preempt" and d["applied"]}
    assert len(preempted) == 1 and preempted <= set(bobs), run.decisions()
    # the waiting jobs still wait, on Slurm's reasons
    assert all(reasons(iso, [j])[j] == f"PENDING/{why}" for why, j in waiting.items()), reasons(iso, waiting.values())

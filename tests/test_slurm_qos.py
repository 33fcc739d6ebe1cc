"""Slurm's own limits on real Slurm (issue 18, item 2): an isolated instance with
accounting in the default cluster's slurmdbd and AccountingStorageEnforce=limits,qos
(TIRESIAS_INSTANCE_ACCOUNTING=1: QOS gpu4user, MaxTRESPerUser=gres/gpu=4), `tiresias
run --mode enforce` as a real process, jobs as alice and bob.

bob's three checkpointable 4-GPU jobs and alice's 4-GPU job in QOS gpu4user (outside
the contract: --no-requeue) fill the cluster and fall to queue 2. alice's second job in
gpu4user waits on QOSMaxGRESPerUser, her job of a reservation active now on the node of
her own job waits on that node: Slurm starts neither for any preemption, so neither
costs bob a preemption; her plain job (QOS normal) still does (control). Holds,
dependencies, --begin and a reservation that starts later: tests/test_slurm_startable.py.
"""
from __future__ import annotations

import os
import time

import pytest

from controller.cli.main import main
from tests.slurm_fixtures import isolated_instance, slurm_cluster, wait_for  # noqa: F401  (pytest fixture)
from tests.test_slurm_controller import attained, run  # noqa: F401  (pytest fixture)
from tests.test_slurm_startable import reasons

pytestmark = pytest.mark.slurm

RESERVATION = "busy"


@pytest.fixture(scope="module")
def cluster(slurm_cluster):  # the default cluster's slurmdbd keeps the accounts
    yield from isolated_instance("qos", keep=bool(os.environ.get("TIRESIAS_TEST_INSTANCE")),
                                 extra_env={"TIRESIAS_INSTANCE_ACCOUNTING": "1"})


@pytest.fixture
def iso(cluster):
    cluster.cancel_all()
    yield cluster
    cluster.run(["scancel", "-u", "alice"], check=False)  # Slurm keeps a reservation its jobs name
    wait_for(lambda: cluster.run(["scontrol", "delete", f"ReservationName={RESERVATION}"], check=False).returncode == 0
             or RESERVATION not in cluster.run(["scontrol", "show", "res"], check=False).stdout, 20,
             f"reservation {RESERVATION} to go")
    cluster.cancel_all()


def test_qos_limited_and_reservation_bound_jobs_preempt_nobody_and_a_plain_job_still_does(iso, run, capsys,
                                                                                          monkeypatch):
    run.start(preempt_grace_s=3.0)
    own, _ = iso.submit("alice", 4, 600, "own", extra="--qos=gpu4user --no-requeue")
    wait_for(lambda: iso.squeue()[own]["job_state"] == "RUNNING", 30, "alice's first job to start")
    bobs = [iso.submit("bob", 4, 600, f"bob{k}")[0] for k in range(3)]
    wait_for(lambda: all(attained(run, j) > 40 for j in [own, *bobs]), 60, "the running jobs to reach queue 2",
             seen=lambda: reasons(iso, [own, *bobs]))
    own_node = iso.squeue()[own]["nodes"]
    iso.run(["scontrol", "create", f"ReservationName={RESERVATION}", "StartTime=now", "Duration=60",
             f"Nodes={own_node}", "Users=alice", "Flags=IGNORE_JOBS"])
    limited, _ = iso.submit("alice", 4, 5, "limited", extra="--qos=gpu4user")
    reserved, _ = iso.submit("alice", 4, 5, "reserved", extra=f"--reservation={RESERVATION}")
    wait_for(lambda: reasons(iso, [limited])[limited] == "PENDING/QOSMaxGRESPerUser", 30,
             "Slurm to hold the QOS-limited job", seen=lambda: reasons(iso, [limited, reserved]))
    wait_for(lambda: all(run.record(j) is not None and run.record(j).last_observed_s for j in (limited, reserved)),
             20, "the controller to see alice's jobs")
    time.sleep(10)  # several rounds
    preempts = [(d["job_id"], d["reason"], d["detail"]) for d in run.decisions() if d["kind"] in ("preempt", "requeue")]
    assert preempts == [], "\n".join(map(str, preempts))
    assert {j: s["restart_cnt"] for j, s in iso.squeue().items() if j in bobs} == {j: 0 for j in bobs}
    # Slurm (22.05 and 24.11, tried) shows a pending job's reason as None from an update
    # of it (its SiteFactor band, its AdminComment line) until its next scheduling pass
    wait_for(lambda: reasons(iso, [limited])[limited] == "PENDING/QOSMaxGRESPerUser", 30,
             "Slurm to name the QOS limit again", seen=lambda: (reasons(iso, [limited, reserved]), [
                 (d["round_id"], d["kind"], d["detail"]) for d in run.decisions(limited) if d["kind"] != "wait"][:8]))
    assert iso.squeue()[reserved]["job_state"] == "PENDING"
    monkeypatch.setenv("SLURM_CONF", iso.conf)

    def explained() -> str:  # explain reads Slurm's reason live: None again after any update of the job
        capsys.readouterr()
        assert main(["explain", limited, "--config", str(run.tmp / "tiresias.yaml")]) == 0
        return capsys.readouterr().out

    said = [""]

    def explains_the_limit() -> bool:
        said[0] = explained()
        return "wait: Slurm reason QOSMaxGRESPerUser" in said[0]

    wait_for(explains_the_limit, 30, "explain to name the QOS limit", seen=lambda: said[0])

    # Control: a plain job of alice's (QOS normal, no limit) makes one of bob's jobs yield.
    control, _ = iso.submit("alice", 4, 5, "control", extra="--time=10")
    wait_for(lambda: iso.squeue()[control]["job_state"] in ("RUNNING", "COMPLETED"), 60,
             "the control job to start", seen=lambda: reasons(iso, [control, limited, reserved, *bobs]))
    preempted = {d["job_id"] for d in run.decisions() if d["kind"] == "preempt" and d["applied"]}
    assert len(preempted) == 1 and preempted <= set(bobs), run.decisions()
    wait_for(lambda: reasons(iso, [limited])[limited] == "PENDING/QOSMaxGRESPerUser", 30,
             "the QOS-limited job to wait on its limit still", seen=lambda: reasons(iso, [limited]))

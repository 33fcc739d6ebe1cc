"""Only a pending job Slurm would start can make another job yield (controller.service.round.startable),
and a handoff pending or failed is never followed by a second preemption, across restarts too.
Scripted backend (tests.test_controller), real SQLite store, virtual clock; the same on real
Slurm is tests/test_slurm_startable.py."""
import dataclasses
import pytest

from controller.service.acting.backend import ObservedJob
from controller.service.acting.backend import slurm_wait as controller_wait
from slurm_plugin.reasons import STARTABLE_REASONS, judged
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (pytest fixture)


def slurm_wait(job):
    """What the controller reads of ``job`` once the Slurm backend judged its reason."""
    return controller_wait(judged(job))


FULL = [(f"gpu{i}", 4) for i in range(1, 5)]
# Reasons from Slurm's list (https://slurm.schedmd.com/job_reason_codes.html) no preemption lifts.
WAITING_REASONS = ["None", "JobHeldUser", "JobHeldAdmin", "Dependency", "DependencyNeverSatisfied", "BeginTime",
                   "QOSMaxGRESPerUser", "AssocGrpGRES", "QOSGrpGRES", "MaxGRESPerAccount", "Reservation",
                   "Licenses", "JobArrayTaskLimit", "PartitionDown", "ReqNodeNotAvail", "AccountingPolicy",
                   "SomeReasonOfALaterRelease"]


def _bob_running_alice_waiting(store, reason, restarts=0, **settings):
    """Bob's checkpointable 16-GPU job ran long (queue 2); alice's 4-GPU job waits on ``reason``."""
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    c = controller(store, backend, **settings)
    c.run_round()
    backend.add("2", 4, reason=reason, restarts=restarts)
    return backend, c


@pytest.mark.parametrize("reason", WAITING_REASONS)
def test_a_job_slurm_would_not_start_preempts_nobody_but_keeps_its_band(store, reason):
    backend, c = _bob_running_alice_waiting(store, reason)
    report = c.run_round()
    assert not report.plan.of_kind("preempt") and not report.plan.of_kind("start")
    assert [call for call in backend.calls if call[0] in ("signal", "requeue")] == []
    assert report.plan.levels["2"] == 0 and report.plan.order[-1] == "2"  # queue 1, banded, after the planned
    assert report.plan.wait_reasons["2"].startswith(f"Slurm reason {reason}:")
    # None is not a wait of its own: the owner reads that Slurm has not looked at the job yet
    assert ("has not looked at it" in report.plan.wait_reasons["2"]) == (reason == "None")
    factors = [call[1] for call in backend.calls if call[0] == "set_site_factors"]
    if reason == "None":  # first seen unjudged: no update until Slurm's judgement (or the next round)
        assert not any("2" in f for f in factors)
        c.run_round()
        factors = [call[1] for call in backend.calls if call[0] == "set_site_factors"]
    assert any("2" in f for f in factors)  # its SiteFactor band is set, ready for when Slurm lifts the reason


@pytest.mark.parametrize("reason", ["Priority", "Resources", ""])
def test_control_a_job_slurm_would_start_still_preempts(store, reason):
    backend, c = _bob_running_alice_waiting(store, reason)
    report = c.run_round()
    assert [a.job_id for a in report.plan.of_kind("preempt")] == ["1"]
    assert ("signal", "1", "USR1", True) in backend.calls


def test_a_requeued_jobs_begin_time_is_the_controllers_to_lift(store):
    job = ObservedJob(job_id="7", user="a", partition="batch", state="PENDING", reason="BeginTime", gpus=1)
    assert slurm_wait(job) == "BeginTime"  # a --begin in the future
    job_requeued = dataclasses.replace(job, restart_count=1)
    assert slurm_wait(job_requeued) == ""
    assert STARTABLE_REASONS == {"", "Priority", "Resources"}  # "None": not looked at by Slurm yet


def test_a_begin_time_someone_set_after_the_requeue_is_not_the_requeues_delay(store):
    """A requeue sets the job's submit time to its own time and its BeginTime cred_expire
    + 1 s later (the recorded fixtures: 11 s); a BeginTime further out was set on
    purpose (`scontrol update StartTime=`) and the job cannot start before it."""
    job = ObservedJob(job_id="7", user="a", partition="batch", state="PENDING", reason="BeginTime", gpus=1,
                      restart_count=1, submit_time_s=5000.0)
    assert slurm_wait(dataclasses.replace(job, eligible_time_s=5011.0)) == ""  # the requeue's delay
    assert slurm_wait(dataclasses.replace(job, eligible_time_s=5000.0 + 121)) == ""  # Slurm's default delay
    assert slurm_wait(dataclasses.replace(job, eligible_time_s=5000.0 + 3600)) == "BeginTime"  # deliberate
    assert slurm_wait(job) == ""  # a backend that does not report it: the restart count decides


def test_a_requeued_job_held_by_a_deliberate_begin_time_preempts_nobody_and_keeps_it(store):
    backend, c = _bob_running_alice_waiting(store, "BeginTime", restarts=1)
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], eligible_time_s=backend.now + 7200)
    report = c.run_round()
    assert not report.plan.of_kind("preempt") and not report.plan.of_kind("start")
    assert [call for call in backend.calls if call[0] in ("signal", "requeue", "release_begin_time")] == []
    assert report.plan.wait_reasons["2"].startswith("Slurm reason BeginTime:")
    # control: the requeue's own delay is the controller's to lift, and the job is startable
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], eligible_time_s=backend.now + 11)
    backend.now += 1
    report = c.run_round()
    assert [a.job_id for a in report.plan.of_kind("preempt")] == ["1"]


def test_one_qos_limited_job_costs_no_preemption_in_three_hours(store):
    # The reproduction: a QOS-limited job caused 18 signal + requeue cycles of
    # another user's job in 3 simulated hours. Now: none.
    backend, c = _bob_running_alice_waiting(store, "QOSMaxGRESPerUser", preempt_min_runtime_s=60,
                                            handoff_timeout_s=120)
    for _ in range(3 * 3600 // 30):
        backend.now += 30
        c.run_round()
    assert [call for call in backend.calls if call[0] in ("signal", "requeue")] == []


def _preempted_for_job_2(store, **settings):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    c = controller(store, backend, handoff_timeout_s=300, **settings)
    c.run_round()
    backend.add("2", 4)
    c.run_round()  # job 1 signalled for job 2
    assert ("signal", "1", "USR1", True) in backend.calls and "2" in c.handoffs.watching
    return backend, c


def _requeued_and_taken_by_another(backend):
    """Job 1 was requeued; job 2 did not start; a job of someone else runs on the GPUs."""
    backend.add("1", 16, "PENDING", restarts=1)
    backend.add("9", 16, "RUNNING", start=backend.now - 100, nodes=FULL)


@pytest.mark.parametrize("restart", [False, True])
def test_a_pending_handoff_gets_no_second_preemption(store, restart):
    backend, c = _preempted_for_job_2(store)
    backend.now += 11
    c.run_round()  # grace over: job 1 requeued
    assert ("requeue", "1") in backend.calls
    _requeued_and_taken_by_another(backend)
    if restart:
        c = controller(store, backend, handoff_timeout_s=300)  # the watch is read back from the store
        assert "2" in c.handoffs.watching
    backend.now += 30  # inside the handoff time-out
    report = c.run_round()
    assert [a.job_id for a in report.plan.of_kind("preempt")] == ["9"]  # the plan would, for job 2
    [kept] = [e for e in report.applied if e["kind"] == "preempt"]
    assert not kept["applied"] and "handoff pending" in kept["detail"]
    assert [call for call in backend.calls if call[0] == "signal"] == [("signal", "1", "USR1", True)]


def test_a_failed_handoff_is_remembered_across_a_restart(store):
    backend, c = _preempted_for_job_2(store)
    backend.now += 11
    c.run_round()
    _requeued_and_taken_by_another(backend)
    backend.now += 300
    report = c.run_round()
    [failed] = [e for e in report.applied if e["kind"] == "handoff"]
    assert not failed["applied"] and "not started 300s" in failed["detail"]
    restarted = controller(store, backend, handoff_timeout_s=300)
    assert "2" in restarted.handoffs.braked and not restarted.handoffs.watching
    assert restarted.handoffs.braked["2"] == c.handoffs.braked["2"]  # what it waits on, read back whole
    backend.now += 60
    report = restarted.run_round()
    [kept] = [e for e in report.applied if e["kind"] == "preempt"]
    assert not kept["applied"] and "handoff failed" in kept["detail"]
    assert [call for call in backend.calls if call[0] == "signal"] == [("signal", "1", "USR1", True)]
    # no clock lifts it: ten time-outs later, nothing changed, nobody signalled
    backend.now += 10 * 300
    restarted.run_round()
    assert "2" in restarted.handoffs.braked and [c for c in backend.calls if c[0] == "signal"] == [
        ("signal", "1", "USR1", True)]
    # its request changes (a longer time limit): job 2 may get a preemption again
    import dataclasses
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], time_limit_s=7200.0)
    backend.now += 30
    restarted.run_round()
    assert "2" not in restarted.handoffs.braked and ("signal", "9", "USR1", True) in backend.calls
    assert store.load_handoffs("default") == [("2", backend.now, ("9",), None)]  # a new watch


def test_a_landed_handoff_is_cleared_from_the_store(store):
    backend, c = _preempted_for_job_2(store)
    assert [row[0] for row in store.load_handoffs("default")] == ["2"]
    backend.now += 11
    c.run_round()
    backend.add("1", 16, "PENDING", restarts=1)
    backend.add("2", 4, "RUNNING", start=backend.now, nodes=[("gpu1", 4)])
    backend.now += 2
    c.run_round()
    assert c.handoffs.landed == 1 and store.load_handoffs("default") == []


def test_the_none_its_own_band_update_causes_does_not_cost_a_startable_job_a_round(store):
    """Slurm shows reason None after any update of a pending job, the controller's band
    included, until its next pass. Alice's job was Priority (startable) when the
    controller set its band; bob's job becomes preemptable a round later (older than
    preempt_min_runtime_s), when Slurm shows None: alice's job still gets its victim
    that round. A None the controller did not
    cause (a fresh job, tested above) still waits."""
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    backend.now = 2.0  # bob has run 2 s: too young to yield
    c = controller(store, backend, preempt_min_runtime_s=5)
    backend.add("2", 4, reason="Priority")
    report = c.run_round()
    assert not report.plan.of_kind("preempt")
    assert any("2" in call[1] for call in backend.calls if call[0] == "set_site_factors")  # its band: an update
    backend.now = 10.0  # 10 s: old enough
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], reason="None")
    report = c.run_round()
    assert [a.job_id for a in report.plan.of_kind("preempt")] == ["1"]


def test_a_job_first_seen_unjudged_gets_no_update_until_slurm_judged_it(store):
    """26.05 judges a job a pass after its submission: first seen at None, the controller
    writes it no band (nor comment) that round, so the next round reads Slurm's own
    judgement (Priority) and preempts for it there, not a round later."""
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    backend.now = 10.0
    c = controller(store, backend)
    c.run_round()
    backend.add("2", 4, reason="None")
    report = c.run_round()
    assert not report.plan.of_kind("preempt")
    assert not any("2" in call[1] for call in backend.calls if call[0] in ("set_site_factors", "set_admin_comment"))
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], reason="Priority")  # Slurm's judgement
    report = c.run_round()
    assert [a.job_id for a in report.plan.of_kind("preempt")] == ["1"]
    assert any("2" in call[1] for call in backend.calls if call[0] == "set_site_factors")  # banded now


def test_the_jobs_that_arrive_with_an_unjudged_one_wait_for_their_band_with_it(store):
    """Seen on 26.05 (test_a_constraint_only_a_node_with_a_kept_job_has_preempts_nobody):
    three jobs arrived judged and one, submitted first, unjudged; the three got their band
    at once and the first none, so Slurm started a later one on the node the first needed,
    and a preemption took it back. Jobs first seen in the round of an unjudged one are
    banded together in the next round."""
    backend = ScriptedBackend()
    backend.now = 10.0
    c = controller(store, backend)
    c.run_round()
    backend.add("1", 4, reason="None")
    backend.add("2", 4, reason="Priority")
    backend.add("3", 4, reason="Priority")
    c.run_round()
    banded = {job for call in backend.calls if call[0] == "set_site_factors" for job in call[1]}
    assert banded == set()
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], reason="Priority")
    c.run_round()
    banded = {job for call in backend.calls if call[0] == "set_site_factors" for job in call[1]}
    assert banded == {"1", "2", "3"}

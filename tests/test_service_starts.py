"""controller.service.round.levers on its own: SiteFactor bands sent only on change, pins for
skew-sensitive jobs and their expiry, a requeued job's BeginTime released after settling."""
import dataclasses

import pytest

from controller.core.plan import Plan, Start
from controller.service.round.accounting import Accounts
from controller.service.ops.config import from_mapping
from controller.service.acting.executor import LeverExecutor
from controller.service.ops.report import RoundReport
from controller.service.round.levers import Levers
from tests.test_controller import ScriptedBackend, store  # noqa: F401  (fixture)


def starter(store, backend, **settings):
    config = from_mapping({"mode": "enforce", "queues_gpu_s": [100.0], **settings})
    accounts = Accounts(store, "default")
    return Levers(config, LeverExecutor(backend, config.mode), accounts), accounts


def round_(starts, accounts, backend, plan, requeueing=()):
    observed = {j.job_id: j for j in backend.observe().jobs}
    accounts.advance(observed, backend.now)
    report = RoundReport(plan.round_id, backend.now, plan)
    starts.apply(plan, observed, backend.now, report, requeueing=requeueing)
    return report


def test_bands_by_level_and_started_class_and_sent_only_when_they_change(store):
    backend = ScriptedBackend()
    for job_id in "123":
        backend.add(job_id, 4)
    starts, accounts = starter(store, backend)
    plan = Plan(1, backend.now, order=["2", "1", "3"], levels={"1": 0, "2": 0, "3": 1})
    round_(starts, accounts, backend, plan)
    accounts.records["3"].first_start_s = 900.0  # job 3 ran before (requeued), as advance() marks it
    accounts.started_once.add("3")
    [(lever, factors)] = backend.calls
    band = starts.config.site_factor_band
    assert factors == {"2": 2 * band, "1": 2 * band, "3": band}
    round_(starts, accounts, backend, Plan(2, backend.now, order=["1", "2", "3"], levels=plan.levels))
    assert backend.calls[1:] == [("set_site_factors", {"3": band + band // 2})]  # only the class change
    round_(starts, accounts, backend, Plan(3, backend.now, order=["3", "2", "1"], levels=plan.levels))
    assert len(backend.calls) == 2  # a new order inside a level: nothing sent


def test_continuous_policies_rank_every_pending_job(store):
    backend = ScriptedBackend()
    for job_id in "123":
        backend.add(job_id, 4)
    config = from_mapping({"mode": "enforce", "queues_gpu_s": [100.0]})
    accounts = Accounts(store, "default")
    starts = Levers(config, LeverExecutor(backend, config.mode), accounts, by_level=False)
    round_(starts, accounts, backend, Plan(1, backend.now, order=["2", "1", "3"], levels={"1": 0, "2": 0, "3": 0}))
    [(lever, factors)] = backend.calls
    band = config.site_factor_band
    assert factors == {"2": 2 * band + band - 1, "1": 2 * band + band - 2, "3": 2 * band + band - 3}


def test_sensitive_job_is_pinned_and_the_pin_expires(store):
    backend = ScriptedBackend()
    backend.add("1", 8, comment="tiresias:skew=0.9")
    starts, accounts = starter(store, backend, placement="consolidate", pin_expiry_s=60)
    start = Start("r1.s1", "1", (("gpu3", 4), ("gpu4", 4)), "fits")
    round_(starts, accounts, backend, Plan(1, backend.now, order=["1"], actions=[start]))
    assert ("pin_nodes", "1", ["gpu3", "gpu4"]) in backend.calls and "1" in starts.pins
    backend.now += 61
    round_(starts, accounts, backend, Plan(2, backend.now, order=["1"]))
    assert backend.calls[-1] == ("pin_nodes", "1", []) and starts.pins == {}


def test_a_job_that_ended_in_its_grace_keeps_its_pin_for_the_requeue(store):
    """Slurm keeps a requeued job's ReqNodeList: a pin forgotten when the job ended
    inside its grace period (requeued this round) would stay on it, unknown to the
    store, until the job ran again (the chaos test's "stale pin")."""
    backend = ScriptedBackend()
    backend.add("1", 8, comment="tiresias:skew=0.9")
    starts, accounts = starter(store, backend, placement="consolidate", pin_expiry_s=60)
    start = Start("r1.s1", "1", (("gpu3", 4), ("gpu4", 4)), "fits")
    round_(starts, accounts, backend, Plan(1, backend.now, order=["1"], actions=[start]))
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="COMPLETED")
    round_(starts, accounts, backend, Plan(2, backend.now), requeueing={"1"})
    assert "1" in starts.pins and "1" in store.load_pins(starts.config.cluster)
    round_(starts, accounts, backend, Plan(3, backend.now))  # ended for good: forgotten
    assert starts.pins == {} and store.load_pins(starts.config.cluster) == {}


def test_requeued_job_waits_for_the_settle_time_before_begin_time_is_released(store):
    backend = ScriptedBackend()
    backend.add("1", 4, reason="BeginTime", restarts=1)
    starts, accounts = starter(store, backend, requeue_settle_s=5)
    accounts.stopped_at["1"] = backend.now - 2
    start = Start("r1.s1", "1", (("gpu1", 4),), "fits")
    report = round_(starts, accounts, backend, Plan(1, backend.now, actions=[start]))
    assert "BeginTime kept 3s more" in report.applied[0]["detail"]
    assert not [c for c in backend.calls if c[0] == "release_begin_time"]
    backend.now += 3
    round_(starts, accounts, backend, Plan(2, backend.now, actions=[start]))
    assert ("release_begin_time", "1") in backend.calls


def test_a_begin_time_set_on_purpose_after_the_requeue_is_never_released(store):
    """`scontrol update StartTime=` after a requeue (an admin's, or the user's): the
    BeginTime is an hour after the requeue, not the requeue's delay of seconds."""
    backend = ScriptedBackend()
    backend.add("1", 4, reason="BeginTime", restarts=1)
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], eligible_time_s=backend.now + 3600)
    starts, accounts = starter(store, backend, requeue_settle_s=0)
    start = Start("r1.s1", "1", (("gpu1", 4),), "fits")
    round_(starts, accounts, backend, Plan(1, backend.now, actions=[start]))
    assert not [c for c in backend.calls if c[0] == "release_begin_time"]
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], eligible_time_s=backend.now + 11)  # the requeue's
    round_(starts, accounts, backend, Plan(2, backend.now, actions=[start]))
    assert ("release_begin_time", "1") in backend.calls


def test_a_start_is_a_decision_not_an_applied_lever(store):
    backend = ScriptedBackend()
    backend.add("1", 4)
    starts, accounts = starter(store, backend)
    report = round_(starts, accounts, backend, Plan(1, backend.now, actions=[Start("r1.s1", "1", (("gpu1", 4),), "fits")]))
    [logged] = report.applied
    assert not logged["applied"] and logged["detail"].startswith("decision: left to Slurm's scheduler")


@pytest.mark.parametrize("field, value, why", [("required_nodes", ("gpu1", "gpu2"), "--nodelist"),
                                               ("excluded_nodes", ("gpu3",), "--exclude of gpu3")])
def test_the_jobs_own_nodelist_and_exclude_are_never_overwritten(store, field, value, why):
    backend = ScriptedBackend()
    backend.add("1", 8, comment="tiresias:skew=0.9")
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], **{field: value})
    starts, accounts = starter(store, backend, placement="consolidate")
    start = Start("r1.s1", "1", (("gpu3", 4), ("gpu4", 4)), "fits")
    report = round_(starts, accounts, backend, Plan(1, backend.now, order=["1"], actions=[start]))
    assert not [c for c in backend.calls if c[0] == "pin_nodes"] and starts.pins == {}
    assert f"not pinned: the job's own {why} is kept" in report.applied[0]["detail"]


def test_settle_time_after_a_restart_counts_from_first_sight(store):
    backend = ScriptedBackend()
    backend.add("1", 4, reason="BeginTime", restarts=1)  # requeued while no controller watched
    starts, accounts = starter(store, backend, requeue_settle_s=5)
    start = Start("r1.s1", "1", (("gpu1", 4),), "fits")
    report = round_(starts, accounts, backend, Plan(1, backend.now, actions=[start]))
    assert accounts.stopped_at["1"] == backend.now and "BeginTime kept 5s more" in report.applied[0]["detail"]
    backend.now += 5
    round_(starts, accounts, backend, Plan(2, backend.now, actions=[start]))
    assert ("release_begin_time", "1") in backend.calls


def test_a_pin_or_its_clearing_that_failed_stays_known_and_is_cleared_later(store):
    """A lever that answered an error may still have been applied (slurmctld restarting):
    a failed pin keeps its store row, a failed clearing is tried again next round, so no
    ReqNodeList of the controller is left without a row (the chaos test's "stale pin")."""
    backend = ScriptedBackend()
    backend.add("1", 8, comment="tiresias:skew=0.9")
    starts, accounts = starter(store, backend, placement="consolidate", pin_expiry_s=60)

    def refused(job_id, nodes):
        backend.calls.append(("pin_nodes", job_id, nodes))
        raise RuntimeError("slurm_update error: Interrupted system call")
    backend.pin_nodes = refused
    start = Start("r1.s1", "1", (("gpu3", 4), ("gpu4", 4)), "fits")
    round_(starts, accounts, backend, Plan(1, backend.now, order=["1"], actions=[start]))
    assert "1" in starts.pins and "1" in store.load_pins(starts.config.cluster)
    backend.now += 61
    round_(starts, accounts, backend, Plan(2, backend.now, order=["1"]))  # expired, its clearing refused
    assert backend.calls[-1] == ("pin_nodes", "1", []) and "1" in store.load_pins(starts.config.cluster)
    del backend.pin_nodes
    backend.now += 1
    round_(starts, accounts, backend, Plan(3, backend.now, order=["1"]))
    assert backend.calls[-1] == ("pin_nodes", "1", []) and starts.pins == {}
    assert store.load_pins(starts.config.cluster) == {}

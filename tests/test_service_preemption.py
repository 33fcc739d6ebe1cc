"""controller.service.preemption on its own: the persisted signal -> grace -> requeue
state machine, driven with a real SQLite store and a scripted backend."""
from controller.core.plan import Plan, Preempt
from controller.service.accounting import Accounts
from controller.service.config import from_mapping
from controller.service.executor import LeverExecutor
from controller.service.preemption import Preemptions
from controller.service.report import RoundReport
from tests.test_controller import ScriptedBackend, store  # noqa: F401  (fixture)

FULL = [(f"gpu{i}", 4) for i in range(1, 5)]


def machine(store, backend, **settings):
    config = from_mapping({"mode": "enforce", "preempt_grace_s": 10, "preempt_min_runtime_s": 60, **settings})
    accounts = Accounts(store, "default")
    return Preemptions(config, store, LeverExecutor(backend, config.mode), accounts), accounts


def round_(machine_, accounts, backend, victims=()):
    observed = {j.job_id: j for j in backend.observe().jobs}
    accounts.advance(observed, backend.now)
    plan = Plan(1, backend.now, actions=[Preempt(f"r1.p{j}", j, "for a shorter job") for j in victims])
    report = RoundReport(1, backend.now, plan)
    machine_.begin(plan, observed, backend.now, report)
    machine_.advance(observed, backend.now, report)
    return report


def test_signal_then_requeue_after_grace_once_and_counted(store):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    preemptions, accounts = machine(store, backend)
    report = round_(preemptions, accounts, backend, victims=["1"])
    assert backend.calls == [("signal", "1", "USR1")] and preemptions.leaving() == {"1"}
    assert report.applied[0]["applied"] and "requeue after 10s" in report.applied[0]["detail"]
    backend.now += 9
    round_(preemptions, accounts, backend, victims=["1"])  # planned again: not signalled twice
    assert backend.calls == [("signal", "1", "USR1")]
    backend.now += 1
    report = round_(preemptions, accounts, backend)
    assert backend.calls[-1] == ("requeue", "1") and report.applied[-1]["kind"] == "requeue"
    assert accounts.records["1"].preemptions == 1 and accounts.stopped_at["1"] == backend.now
    assert preemptions.leaving() == set()


def test_requeue_done_by_a_dead_process_is_counted_by_the_next(store):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    first, accounts = machine(store, backend)
    round_(first, accounts, backend, victims=["1"])
    backend.add("1", 16, "PENDING", restarts=1)  # requeued; the controller died before recording it
    backend.now += 20
    second, accounts2 = machine(store, backend)
    round_(second, accounts2, backend)
    assert accounts2.records["1"].preemptions == 1 and second.leaving() == set()
    assert [c for c in backend.calls if c[0] == "requeue"] == []


def test_protected_jobs_are_kept_running_with_the_reason(store):
    backend = ScriptedBackend()
    backend.add("young", 4, "RUNNING", start=backend.now - 5, nodes=[("gpu1", 4)])
    backend.add("capped", 4, "RUNNING", start=0.0, nodes=[("gpu2", 4)])
    preemptions, accounts = machine(store, backend, preempt_max_per_job=0)
    report = round_(preemptions, accounts, backend, victims=["young", "capped"])
    details = {e["job_id"]: e["detail"] for e in report.applied}
    assert "preempt_min_runtime_s" in details["young"] and "preempt_max_per_job" in details["capped"]
    assert backend.calls == []


def test_shadow_mode_opens_nothing_and_calls_nothing(store):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    preemptions, accounts = machine(store, backend, mode="shadow")
    report = round_(preemptions, accounts, backend, victims=["1"])
    assert backend.calls == [] and preemptions.leaving() == set()
    assert "would signal USR1" in report.applied[0]["detail"]

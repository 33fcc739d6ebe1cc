"""controller.service.round.preemption on its own: the persisted signal -> grace -> requeue
state machine and the preemption contract (controller.service.round.contract), driven with
a real SQLite store and a scripted backend."""
import pytest

from controller.core.plan import Plan, Preempt
from controller.service.round.accounting import Accounts
from controller.service.ops.config import from_mapping
from controller.service.round.contract import Contract, parse_signal_spec, signal_from_script
from controller.service.acting.executor import LeverExecutor
from controller.service.round.preemption import Preemptions
from controller.service.ops.report import RoundReport
from tests.test_controller import ScriptedBackend, store  # noqa: F401  (fixture)

FULL = [(f"gpu{i}", 4) for i in range(1, 5)]


def machine(store, backend, **settings):
    config = from_mapping({"mode": "enforce", "preempt_grace_s": 10, "preempt_min_runtime_s": 60, **settings})
    accounts = Accounts(store, "default")
    contract = Contract(config, backend)
    return Preemptions(config, store, LeverExecutor(backend, config.mode), accounts, contract), accounts


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
    assert backend.calls == [("signal", "1", "USR1", True)] and preemptions.leaving() == {"1"}
    assert report.applied[0]["applied"] and "requeue after 10s" in report.applied[0]["detail"]
    backend.now += 9
    round_(preemptions, accounts, backend, victims=["1"])  # planned again: not signalled twice
    assert backend.calls == [("signal", "1", "USR1", True)]
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
    assert "would signal B:USR1@0 (--signal)" in report.applied[0]["detail"]


class FailingSignal(ScriptedBackend):
    """scancel refuses (e.g. the job's steps are gone): every signal raises."""

    def signal(self, job_id, name, batch_only):
        self.calls.append(("signal", job_id, name, batch_only))
        raise RuntimeError("scancel: error: Kill job error on job id 1: Invalid job id specified")


def test_a_failed_signal_never_leads_to_a_requeue_and_is_given_up_after_the_attempts(store):
    backend = FailingSignal()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    preemptions, accounts = machine(store, backend, preempt_signal_attempts=2)
    first = round_(preemptions, accounts, backend, victims=["1"])
    assert "signal failed (1/2): not requeued" in first.applied[0]["detail"] and not first.applied[0]["applied"]
    assert preemptions.leaving() == set()  # nothing opened: advance() has nothing to requeue
    backend.now += 100
    second = round_(preemptions, accounts, backend, victims=["1"])
    assert "gave up" in second.applied[0]["detail"]
    backend.now += 100
    third = round_(preemptions, accounts, backend, victims=["1"])
    assert "kept running: checkpoint signal failed 2 times" in third.applied[0]["detail"]
    assert [c[0] for c in backend.calls] == ["signal", "signal"]  # never a requeue, no third try


@pytest.mark.parametrize("signal, comment, requeueable, allowed, sent", [
    ("B:USR1@90", "", True, True, ("USR1", True)),
    ("USR2@60", "", True, True, ("USR2", False)),  # to the steps, not the batch shell
    ("SIGUSR1", "", True, True, ("USR1", False)),
    ("", "tiresias:preemptable", True, True, ("USR1", True)),
    ("", "x tiresias:preemptable=USR2 y", True, True, ("USR2", False)),
    ("", "run;tiresias:preemptable=b:sigusr2@60", True, True, ("USR2", True)),  # one hint grammar (core.hints)
    ("", "tiresias:preemptable=KILL", True, False, None),  # refused by job_submit.lua; never signalled
    ("", "tiresias:preemptable tiresias:skew=2", True, False, None),  # a bad hint: the comment opts nothing in
    ("", "", True, False, None),  # declared nothing: never signalled
    ("B:USR1@90", "", False, False, None),  # --no-requeue is respected
    ("KILL", "", True, False, None),  # cannot be trapped: no checkpoint possible
])
def test_contract_requeueable_and_declared(store, signal, comment, requeueable, allowed, sent):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL, signal=signal, comment=comment, requeueable=requeueable)
    preemptions, accounts = machine(store, backend)
    report = round_(preemptions, accounts, backend, victims=["1"])
    signals = [c[2:] for c in backend.calls if c[0] == "signal"]
    assert report.applied[0]["applied"] is allowed
    assert signals == ([sent] if sent else [])
    if not allowed:
        assert "kept running" in report.applied[0]["detail"]


def test_admin_may_widen_the_contract_to_requeue_undeclared_jobs_without_a_signal(store):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL, signal="")
    preemptions, accounts = machine(store, backend, preempt_undeclared=True)
    report = round_(preemptions, accounts, backend, victims=["1"])
    assert "requeue without a signal" in report.applied[0]["detail"]
    backend.now += 10
    round_(preemptions, accounts, backend)
    assert [c[0] for c in backend.calls] == ["batch_script", "requeue"]


def test_signal_spec_and_script_parsing():
    assert parse_signal_spec("B:USR1@90", "x")[0].batch_only
    assert parse_signal_spec("10@5", "x")[0].name == "USR1"
    assert "not [B:]SIG" in parse_signal_spec("USR1; rm -rf /", "x")[1]
    script = "#!/bin/bash\n#SBATCH -J a --signal=B:USR1@90\n\n# comment\n#SBATCH --signal USR2@30\necho\n#SBATCH --signal=HUP\n"
    assert signal_from_script(script) == "USR2@30"  # the last one before the first command
    assert signal_from_script("#!/bin/sh\nsrun x\n") == ""


def test_batch_script_is_read_once_per_running_job(store):
    class ScriptBackend(ScriptedBackend):
        def batch_script(self, job_id):
            self.calls.append(("batch_script", job_id))
            return "#!/bin/bash\n#SBATCH --signal=B:USR2@60\nsleep 100\n"

    backend = ScriptBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL, signal="")
    backend.add("2", 4, signal="")  # pending: not read
    config = from_mapping({"mode": "enforce"})
    contract = Contract(config, backend)
    for _ in range(3):
        for job in backend.observe().jobs:
            contract.why_not(job)
    assert backend.calls == [("batch_script", "1")]
    assert contract.declared(backend.jobs["1"]).describe() == "B:USR2@60 (#SBATCH --signal)"


class ScriptBackend(ScriptedBackend):
    """Every job's batch script is ``script`` (its #SBATCH lines); reads are recorded."""

    script = "#!/bin/bash\n#SBATCH --signal=B:USR1@30\nsleep 100\n"

    def batch_script(self, job_id):
        self.calls.append(("batch_script", job_id))
        return self.script


# (what Slurm reports as the job's --signal, its comment, its script's #SBATCH --signal)
# -> (signal, to the batch shell only, lead time in s, source, script read)
@pytest.mark.parametrize("signal, comment, script_signal, expected", [
    # sbatch --signal=USR2@60 over the script's #SBATCH --signal=B:USR1@30: cli_filter.lua
    # records sbatch's final value in the comment; the overridden #SBATCH line loses
    ("", "tiresias:preemptable=USR2@60", "B:USR1@30", ("USR2", False, 60, "--comment=tiresias:preemptable=", False)),
    # (sbatch reports a 60 s lead without @60, so that is what the filter writes)
    ("", "run tiresias:preemptable=USR2", "B:USR1@30", ("USR2", False, 60, "--comment=tiresias:preemptable=", False)),
    # SBATCH_SIGNAL=B:TERM@5 over the script's line, recorded the same way
    ("", "tiresias:preemptable=B:TERM@5", "USR1@90", ("TERM", True, 5, "--comment=tiresias:preemptable=", False)),
    # a release that reports the job's --signal: that is sbatch's final value too
    ("USR2", "", "B:USR1@30", ("USR2", False, 60, "--signal", False)),
    # nothing recorded outside the script: its #SBATCH line is the declaration
    ("", "", "B:USR1", ("USR1", True, 60, "#SBATCH --signal", True)),
    ("", "tiresias:skew=0.5", "B:USR1", ("USR1", True, 60, "#SBATCH --signal", True)),
    # the bare opt-in names no signal: the script's, before preempt_signal
    ("", "tiresias:preemptable", "USR2", ("USR2", False, 60, "#SBATCH --signal", True)),
])
def test_a_recorded_signal_beats_the_scripts_and_the_script_is_the_fallback(store, signal, comment, script_signal,
                                                                               expected):
    backend = ScriptBackend()
    backend.script = f"#!/bin/bash\n#SBATCH --signal={script_signal}\nsleep 100\n"
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL, signal=signal, comment=comment)
    declared = Contract(from_mapping({"mode": "enforce"}), backend).declared(backend.jobs["1"])
    name, batch_only, lead_s, source, read = expected
    assert (declared.name, declared.batch_only, declared.lead_s, declared.source) == (name, batch_only, lead_s, source)
    assert (("batch_script", "1") in backend.calls) is read


def test_the_command_line_signal_is_sent_and_its_lead_time_is_the_grace(store):
    """sbatch --signal=USR2@60 for a script with #SBATCH --signal=B:USR1@30: the preemption
    sends USR2 to the steps and waits 60 s, as Slurm would before the time limit."""
    backend = ScriptBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL, signal="", comment="tiresias:preemptable=USR2")
    preemptions, accounts = machine(store, backend)  # preempt_grace_s=10
    report = round_(preemptions, accounts, backend, victims=["1"])
    assert [c for c in backend.calls if c[0] == "signal"] == [("signal", "1", "USR2", False)]
    assert "signal USR2@60 (--comment=tiresias:preemptable=), requeue after 60s" in report.applied[0]["detail"]
    assert ("batch_script", "1") not in backend.calls


def test_with_the_read_budget_spent_only_a_recorded_signal_counts(store):
    """A job whose signal the comment records needs no script read; a bare opt-in waits
    for its script (which may declare another signal) instead of taking preempt_signal."""
    backend = ScriptBackend()
    backend.add("recorded", 4, "RUNNING", start=0.0, nodes=[("gpu1", 4)], signal="",
                comment="tiresias:preemptable=USR2@60")
    backend.add("bare", 4, "RUNNING", start=0.0, nodes=[("gpu2", 4)], signal="", comment="tiresias:preemptable")
    contract = Contract(from_mapping({"mode": "enforce"}), backend)
    contract.reads_per_round = 0
    contract.begin_round()
    recorded, bare = backend.jobs["recorded"], backend.jobs["bare"]
    assert contract.why_not(recorded) == "" and contract.declared_signals["recorded"].describe() == (
        "USR2@60 (--comment=tiresias:preemptable=)")
    assert contract.declared(bare) is None and "not read yet" in contract.why_not(bare)
    contract.reads_per_round = 1
    contract.begin_round()
    assert contract.declared(bare).describe() == "B:USR1@30 (#SBATCH --signal)"
    assert [c for c in backend.calls if c[0] == "batch_script"] == [("batch_script", "bare")]


def test_handoff_landed_is_logged_with_its_delay_and_a_failed_one_blocks_further_preemptions(store):
    from controller.service.round.handoff import Handoffs
    from tests.test_controller import controller as make_controller

    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    c = make_controller(store, backend, handoff_timeout_s=30, preempt_min_runtime_s=60)
    assert isinstance(c.handoffs, Handoffs)
    c.run_round()
    backend.add("2", 4)
    c.run_round()  # job 1 signalled for job 2
    assert ("signal", "1", "USR1", True) in backend.calls and "2" in c.handoffs.watching
    backend.now += 31  # job 1 requeued meanwhile, but job 2 still not running: another job took the GPUs
    backend.add("1", 16, "PENDING", restarts=1)
    backend.add("9", 16, "RUNNING", start=backend.now - 1, nodes=FULL)  # the intruder
    report = c.run_round()
    [failed] = [e for e in report.applied if e["kind"] == "handoff"]
    assert not failed["applied"] and "not started 30s after the victims' signal" in failed["detail"]
    assert c.handoffs.failed == 1 and "2" in c.handoffs.braked
    # the plan would preempt again for job 2 once the intruder ran preempt_min_runtime_s:
    # kept running, however long it runs
    for _ in range(3):
        backend.now += 600
        report = c.run_round()
        kept = [e for e in report.applied if e["kind"] == "preempt"]
        assert kept and all("handoff failed" in e["detail"] and not e["applied"] for e in kept)
    assert [call for call in backend.calls if call[0] == "signal" and call[1] == "9"] == []
    # the intruder, there when the handoff failed, leaves (another job takes its GPUs):
    # job 2 may cause one more preemption
    del backend.jobs["9"]
    backend.add("10", 16, "RUNNING", start=backend.now - 100, nodes=FULL)
    backend.now += 1
    c.run_round()
    assert ("signal", "10", "USR1", True) in backend.calls
    assert "2" not in c.handoffs.braked and "2" in c.handoffs.watching


def test_handoff_landed(store):
    from tests.test_controller import controller as make_controller

    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL)
    c = make_controller(store, backend)
    c.run_round()
    backend.add("2", 4)
    c.run_round()
    signalled = backend.now
    backend.now += 20
    backend.add("1", 16, "PENDING", restarts=1)
    backend.add("2", 4, "RUNNING", start=signalled + 15, nodes=[("gpu1", 4)])
    report = c.run_round()
    [landed] = [e for e in report.applied if e["kind"] == "handoff"]
    assert landed["applied"] and landed["detail"] == "started 15s after the victims' signal"
    assert c.handoffs.landed == 1 and c.handoffs.delays_s == [15.0]
    # what the A/B bench reads back from the decision log
    from controller.service.round.handoff import started_delay_s

    [logged] = [d for d in store.decisions("default", job_id="2") if d["kind"] == "handoff"]
    assert started_delay_s(logged["detail"]) == 15.0 and started_delay_s("not started 120s after") is None

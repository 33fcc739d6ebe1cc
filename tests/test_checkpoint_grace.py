"""A job's own grace (``--signal=...@T``), the requeue of a job that ended during its
grace period, and the cli_filter plugin that makes a command-line ``--signal`` visible.
Real SQLite store and the scripted backend (tests/test_controller.py); the Lua filter
runs in a real Lua interpreter (tests/test_job_submit_lua.py's fixture)."""
import dataclasses
import subprocess

from controller.core.checkpoint_signal import grace_s, parse_signal_spec
from tests.test_controller import ScriptedBackend, store  # noqa: F401  (fixture)
from tests.test_job_submit_lua import REPO_ROOT, lua  # noqa: F401  (fixture)
from tests.test_service_preemption import FULL, machine, round_

CLI_FILTER = REPO_ROOT / "slurm_plugin" / "cli_filter.lua"


def test_the_lead_time_is_kept_and_the_grace_is_the_larger_within_the_time_limit():
    signal, why = parse_signal_spec("B:USR1@600", "--signal")
    assert why == "" and signal.lead_s == 600 and signal.describe() == "B:USR1@600 (--signal)"
    assert parse_signal_spec("USR2@60", "--signal")[0].lead_s == 60
    assert grace_s(30.0, signal) == 600.0
    assert grace_s(900.0, signal) == 900.0  # the configured one when it is longer
    assert grace_s(30.0, parse_signal_spec("USR1@5", "x")[0]) == 30.0
    assert grace_s(30.0, None) == 30.0
    # signalled at 1000 s, the time limit ends the job at 1200 s: 200 s, not 600
    assert grace_s(30.0, signal, signalled_at_s=1000.0, ends_by_s=1200.0) == 200.0


def test_a_signal_without_at_t_has_slurms_default_lead_of_60_s():
    """sbatch gives --signal=USR1 a 60 s lead (and reports it back without @60, as
    cli_filter.lua sees it); an explicit @0 is 0 s, as sbatch takes it."""
    for spec in ("USR1", "B:USR1", "R:USR1", "SIGUSR1", "10", "b:usr1"):
        signal, why = parse_signal_spec(spec, "--signal")
        assert why == "" and signal.lead_s == 60, spec
    assert parse_signal_spec("B:USR1", "--signal")[0].describe() == "B:USR1@60 (--signal)"
    assert grace_s(30.0, parse_signal_spec("USR1", "x")[0]) == 60.0
    assert grace_s(90.0, parse_signal_spec("USR1", "x")[0]) == 90.0  # the configured one when longer
    assert parse_signal_spec("USR1@0", "x")[0].lead_s == 0
    assert grace_s(30.0, parse_signal_spec("USR1@0", "x")[0]) == 30.0


def test_a_comment_hint_without_at_t_gets_60_s_and_the_bare_opt_in_none():
    from controller.core.hints import parse_hints

    assert parse_hints("tiresias:preemptable=B:USR1").preempt_signal.lead_s == 60
    assert parse_hints("tiresias:preemptable=B:USR1@0").preempt_signal.lead_s == 0
    assert parse_hints("tiresias:preemptable").preempt_signal is None  # preempt_signal, preempt_grace_s


def preempted(store, signal, **settings):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL, signal=signal)
    preemptions, accounts = machine(store, backend, **settings)
    report = round_(preemptions, accounts, backend, victims=["1"])
    assert backend.calls == [("signal", "1", "USR1", True)]
    return backend, preemptions, accounts, report


def test_a_job_that_asked_for_600_s_gets_600_s(store):
    backend, preemptions, accounts, report = preempted(store, "B:USR1@600")  # preempt_grace_s=10
    assert "signal B:USR1@600 (--signal), requeue after 600s" in report.applied[0]["detail"]
    backend.now += 599
    round_(preemptions, accounts, backend)
    assert ("requeue", "1") not in backend.calls and preemptions.leaving() == {"1"}
    backend.now += 1
    report = round_(preemptions, accounts, backend)
    assert backend.calls[-1] == ("requeue", "1")
    assert [e["reason"] for e in report.applied if e["kind"] == "requeue"] == ["grace period of 600s over"]


def test_the_grace_never_outlasts_the_time_limit(store):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL, signal="B:USR1@600")
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], time_limit_s=200.0)
    preemptions, accounts = machine(store, backend)
    backend.now = 100.0  # signalled at 100 s; Slurm kills it at 200 s
    report = round_(preemptions, accounts, backend, victims=["1"])
    assert "requeue after 100s" in report.applied[0]["detail"]


def ended(backend, state):
    job = backend.jobs["1"]
    backend.jobs["1"] = dataclasses.replace(job, state=state, end_time_s=backend.now)


def test_a_job_that_exits_0_on_the_signal_is_requeued_all_the_same(store):
    backend, preemptions, accounts, _ = preempted(store, "B:USR1@60")
    backend.now += 20
    ended(backend, "COMPLETED")  # its handler saved and exited 0 (step 305 of 1200)
    report = round_(preemptions, accounts, backend)
    assert backend.calls[-1] == ("requeue", "1")
    [requeue] = [e for e in report.applied if e["kind"] == "requeue"]
    assert requeue["applied"] and requeue["reason"] == "ended during its grace period"
    assert requeue["cause_id"] == "r1.p1" and accounts.records["1"].preemptions == 1
    assert preemptions.leaving() == set()


def test_preempt_requeue_ended_off_closes_it_as_finished(store):
    backend, preemptions, accounts, _ = preempted(store, "B:USR1@60", preempt_requeue_ended=False)
    backend.now += 20
    ended(backend, "COMPLETED")
    round_(preemptions, accounts, backend)
    assert ("requeue", "1") not in backend.calls and preemptions.leaving() == set()


def test_a_job_that_ended_long_after_its_grace_is_not_requeued(store):
    backend, preemptions, accounts, _ = preempted(store, "B:USR1@60")
    job, signalled = backend.jobs["1"], backend.now
    backend.now += 500  # the controller was away; the job ended 400 s after the signal, past its 60 s
    backend.jobs["1"] = dataclasses.replace(job, state="COMPLETED", end_time_s=signalled + 400.0)
    round_(preemptions, accounts, backend)
    assert ("requeue", "1") not in backend.calls and preemptions.leaving() == set()


def test_the_handoff_time_out_waits_for_the_victims_own_grace(store):
    from tests.test_controller import controller as make_controller

    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL, signal="B:USR1@600")
    c = make_controller(store, backend, handoff_timeout_s=30)  # preempt_grace_s=10
    c.run_round()
    backend.add("2", 4)
    c.run_round()
    assert ("signal", "1", "USR1", True) in backend.calls and "2" in c.handoffs.watching
    backend.now += 31  # past handoff_timeout_s, but job 1 still has 569 s of its own grace
    report = c.run_round()
    assert [e for e in report.applied if e["kind"] == "handoff"] == [] and "2" in c.handoffs.watching
    backend.now += 600  # 30 s + (600 - 10) s of extra grace passed
    report = c.run_round()
    [failed] = [e for e in report.applied if e["kind"] == "handoff"]
    assert not failed["applied"]


LUA_CASES = r"""
dofile(arg[1])
slurm = slurm or { SUCCESS = 0 }
local function run(signal, comment)
	local options = { signal = signal, comment = comment }
	slurm_cli_pre_submit(options, 0)
	return tostring(options.comment)
end
print(run("B:USR1@600", nil))
print(run("USR1@90", "tiresias:skew=0.5"))
print(run("USR2", "tiresias:preemptable=B:TERM"))
print(run("0@0", nil))
print(run("0@0", "x"))
print(run("USR2", "tiresias:preemptable"))
print(run("B:USR1@90", "x,tiresias:preemptable;tiresias:skew=0.5"))
print(run("USR2", "xtiresias:preemptable"))
print(run("USR2", "tiresias:preemptable tiresias:preemptable"))
print(run("USR2", "tiresias:preemptablex"))
print(run("RB:USR1@5", nil))
print(run("15", nil))
print(run("KILL@30", nil))
print(run("B:TTIN", "x"))
print(run("34@10", "tiresias:preemptable"))
"""


def cli_filter_lines(lua, tmp_path, cases: str) -> list[str]:
    """What the Lua ``cases`` print with cli_filter.lua loaded (arg[1]) under a stub slurm table."""
    script = tmp_path / "cases.lua"
    script.write_text("slurm = { SUCCESS = 0 }\n" + cases)
    out = subprocess.run([lua, str(script), str(CLI_FILTER)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_cli_filter_records_the_signal_in_the_comment(lua, tmp_path):
    assert cli_filter_lines(lua, tmp_path, LUA_CASES) == [
        "tiresias:preemptable=B:USR1@600",
        "tiresias:skew=0.5 tiresias:preemptable=USR1@90",
        "tiresias:preemptable=B:TERM",  # the user's own hint is kept
        "nil",  # no --signal: no comment made up
        "x",
        # the bare opt-in names no signal: it gets sbatch's, which beats any #SBATCH line
        "tiresias:preemptable=USR2",
        "x,tiresias:preemptable=B:USR1@90;tiresias:skew=0.5",
        "xtiresias:preemptable tiresias:preemptable=USR2",  # no hint (the grammar's tokens)
        "tiresias:preemptable tiresias:preemptable",  # bad hints, kept: job_submit.lua refuses them
        "tiresias:preemptablex",
        "tiresias:preemptable=RB:USR1@5",
        "tiresias:preemptable=15",
        # a signal the hint grammar refuses is not written: job_submit.lua would refuse the job
        "nil",
        "x",
        "tiresias:preemptable",
    ]


QOS_CASES = r"""
dofile(arg[1])
local function qos(policy, options, grace_s)
  PREEMPTABLE_QOS = policy
  PREEMPTABLE_QOS_GRACE_S = grace_s or 600
  return tostring(tiresias_preemptable_qos(options))
end
print(qos(nil, { signal = "B:USR1@600", requeue = "unset", gres = "gpu:4" }))
print(qos("ckpt", { signal = "B:USR1@600", requeue = "unset", gres = "gpu:4" }))
print(qos("ckpt", { signal = "USR2", requeue = "requeue", gres = "gpu:4" }))
print(qos("ckpt", { signal = "0@0", requeue = "unset", gres = "gpu:4" }))
print(qos("ckpt", { signal = "B:USR1@600", requeue = "no-requeue", gres = "gpu:4" }))
print(qos("ckpt", { signal = "B:USR1@600", requeue = "unset", qos = "long", gres = "gpu:4" }))
print(qos("ckpt", { signal = "KILL@30", requeue = "unset", gres = "gpu:4" }))
print(qos("ckpt", { signal = "B:USR1@601", requeue = "unset", gres = "gpu:4" }))
print(qos("ckpt", { signal = "USR2", requeue = "unset", gres = "gpu:4" }, 59))
print(qos("ckpt", { signal = "USR2", requeue = "unset", gres = "gpu:4" }, 60))
print(qos("ckpt", { signal = "R:USR1@10", requeue = "unset", gres = "gpu:4" }, 10))
"""


def test_cli_filter_puts_only_declared_requeueable_jobs_whose_lead_fits_the_grace_in_the_preemptable_qos(lua, tmp_path):
    assert cli_filter_lines(lua, tmp_path, QOS_CASES) == [
        "nil",  # preemption: controller (no PREEMPTABLE_QOS): no job's QOS changes
        "ckpt",
        "ckpt",
        "nil",  # no --signal: slurmctld would have no checkpoint signal to send
        "nil",  # --no-requeue: never preempted
        "nil",  # the user's own QOS is kept
        "nil",  # a signal no job traps for a checkpoint
        "nil",  # a lead time longer than the QOS's GraceTime: slurmctld would requeue it too soon
        "nil",  # no @T is sbatch's 60 s
        "ckpt",
        "ckpt",  # a lead time equal to the grace fits
    ]


def test_a_job_requeued_after_ending_in_its_grace_keeps_its_record_and_gives_no_sample(store):
    """Its run that ended in grace is no finished job: the record (attained service, so
    its queue) goes on, and a cut-short run is no service sample. (The chaos test found
    such a job back in queue 1 with 0 GPU-s after its requeue.)"""
    from tests.test_controller import controller as make_controller

    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=FULL, signal="B:USR1@60")
    c = make_controller(store, backend)
    c.run_round()
    backend.now += 100.0
    backend.add("2", 4)
    c.run_round()
    assert ("signal", "1", "USR1", True) in backend.calls
    served = c.records["1"].attained_gpu_s
    assert served == 16 * backend.now  # running since 0
    backend.now += 20.0
    ended(backend, "COMPLETED")  # its handler checkpointed and exited 0, 20 s after the signal
    c.run_round()
    assert ("requeue", "1") in backend.calls
    record = c.records["1"]
    assert record.state != "DONE" and record.attained_gpu_s == served + 16 * 20.0  # credited up to its end
    assert store.service_samples(c.config.cluster) == []
    job = backend.jobs["1"]  # what Slurm shows after the requeue
    backend.jobs["1"] = dataclasses.replace(job, state="PENDING", restart_count=1, reason="BeginTime",
                                            start_time_s=None, end_time_s=None, nodes=())
    backend.now += 5.0
    c.run_round()
    assert c.records["1"].attained_gpu_s == served + 16 * 20.0 and c.records["1"].restart_count == 1
    assert store.load_jobs(c.config.cluster)["1"].attained_gpu_s == served + 16 * 20.0

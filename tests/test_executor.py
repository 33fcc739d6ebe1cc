"""controller.service.acting.executor: the typed action table, the read-only backend that is
observe and shadow, bounded shadow memory, and the causal decision ids the round
writes (a requeue cites its preemption, a handoff the preemptions that made room,
a pin's expiry the start that pinned the job), read back by ``explain --story``."""
import dataclasses
import logging
from pathlib import Path

import pytest

from controller.cli import queue as cmd_queue
from controller.cli.main import main
from controller.core import actions as A
from controller.core.levers.nice import SetNice
from controller.core.levers.table import LEVER_ACTIONS
from controller.core.model import InputError
from controller.service.acting.backend import Backend, BackendUnavailable
from controller.service.acting.executor import LEVERS, SHADOW_MEMORY, LeverExecutor, ReadOnlyBackend, ShadowMemory
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)

# One action of every lever type, and the backend call each must become.
EXAMPLES = [
    (A.SetBand("r1.b1", "7", 5000, reason="queue 1"), ("set_site_factors", {"7": 5000})),
    (A.PinNodes("r1.1.pin", "7", ("gpu1", "gpu2"), 99.0, reason="skew", cause_id="r1.1"), ("pin_nodes", "7", ["gpu1", "gpu2"])),
    (A.UnpinNodes("r2.u1", "7", reason="expired", cause_id="r1.1"), ("pin_nodes", "7", [])),
    (A.ReleaseBeginTime("r1.1.release", "7", reason="settled", cause_id="r1.1"), ("release_begin_time", "7")),
    (A.MovePartition("r1.m1", "7", "a", "b", reason="a -> b"), ("move_partition", "7", "b")),
    (A.SetMpsShare("r1.s1", "7", 25, reason="tier"), ("set_mps_share", "7", 25)),
    (A.HoldJob("r1.k1", "7", reason="no GPU admits it"), ("hold", "7")),
    (A.ReleaseHold("r2.kr1", "7", reason="a GPU admits it"), ("release_hold", "7")),
    (A.Signal("r1.2.signal", "7", "USR1", True, reason="checkpoint", cause_id="r1.2"), ("signal", "7", "USR1", True)),
    (A.Requeue("r2.q1", "7", reason="grace over", cause_id="r1.2"), ("requeue", "7")),
    (A.SetAdminComment("r1.c1", "7", "[tiresias: queue 1/2]"), ("set_admin_comment", "7", "[tiresias: queue 1/2]")),
    (SetNice("r1.n1", "7", 5000, reason="last queue"), ("set_nice", "7", 5000)),
]


def carry(executor, action):
    return executor.apply_bands([action]) if isinstance(action, A.SetBand) else executor.apply(action)


def test_every_lever_type_has_one_table_entry_naming_a_method_of_the_backend_port():
    assert {type(a) for a, _ in EXAMPLES} == set(LEVER_ACTIONS)
    assert set(LEVERS) == set(LEVER_ACTIONS) - {A.SetBand}  # SetBand: one batched call per round
    port = {name for name in dir(Backend) if not name.startswith("_")}
    assert {lever.name for lever in LEVERS.values()} <= port
    for action_type in LEVER_ACTIONS:  # each carries its id, reason and cause
        assert {"decision_id", "job_id", "reason", "cause_id"} <= {f.name for f in dataclasses.fields(action_type)}


@pytest.mark.parametrize("action, call", EXAMPLES, ids=[type(a).__name__ for a, _ in EXAMPLES])
def test_enforce_makes_exactly_the_tabled_backend_call(action, call):
    backend = ScriptedBackend()
    guarded = []
    executor = LeverExecutor(backend, "enforce", guard=lambda: guarded.append(1))
    result = carry(executor, action)
    assert backend.calls == [call] and guarded == [1]
    assert result.applied and not result.would and not result.failed


@pytest.mark.parametrize("mode", ["shadow", "observe"])
@pytest.mark.parametrize("action, call", EXAMPLES, ids=[type(a).__name__ for a, _ in EXAMPLES])
def test_read_only_modes_make_no_backend_call_but_say_what_they_would_do(mode, action, call):
    backend = ScriptedBackend()
    executor = LeverExecutor(backend, mode, guard=lambda: pytest.fail("the guard is for levers really pulled"))
    result = carry(executor, action)
    assert backend.calls == []
    assert result.would and not result.applied and not result.failed
    assert result.detail.startswith(f"{mode}: would {call[0]}(")
    assert executor.would == ([result.detail.split("would ", 1)[1]] if mode == "shadow" else [])
    assert executor.when_acting(lambda: pytest.fail("no bookkeeping without levers")) is None


def test_a_failing_lever_is_reported_and_an_unavailable_backend_stops_the_round():
    class Failing(ScriptedBackend):
        def requeue(self, job_id):
            raise RuntimeError("Job is not running")

        def signal(self, job_id, name, batch_only):
            raise BackendUnavailable("slurmctld down")

    executor = LeverExecutor(Failing(), "enforce")
    result = executor.apply(A.Requeue("r1.q1", "7", reason="grace over", cause_id="r1.2"))
    assert result.failed and result.detail == "failed: Job is not running"
    with pytest.raises(BackendUnavailable):
        executor.apply(A.Signal("r1.2.signal", "7", "USR1", True, reason="checkpoint"))
    with pytest.raises(InputError, match="mode: 'enforced' is not one of"):
        LeverExecutor(ScriptedBackend(), "enforced")


def test_the_read_only_backend_offers_every_lever_of_the_port():
    levers = {lever.name for lever in LEVERS.values()} | {"set_site_factors"}
    assert all(callable(getattr(ReadOnlyBackend, name, None)) for name in levers)


def busy_cluster(backend, pending=30):
    """16 GPUs held by a demoted 16-GPU job, and many 4-GPU jobs waiting: every
    shadow round would set bands, signal and requeue (nothing is ever applied)."""
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    for n in range(2, 2 + pending):
        backend.add(str(n), 4)


def test_shadow_memory_is_bounded_and_each_round_logs_counts_not_actions(store, caplog):
    backend = ScriptedBackend()
    busy_cluster(backend, pending=300)
    c = controller(store, backend, mode="shadow")
    caplog.set_level(logging.INFO, logger="tiresias.executor")
    for _ in range(80):
        backend.now += 30
        report = c.run_round()
    assert [call for call in backend.calls if call[0] != "batch_script"] == []  # shadow pulls no lever
    assert c.executor.memory.total > SHADOW_MEMORY  # it would have done more than it keeps
    assert len(c.executor.would) == SHADOW_MEMORY
    lines = [r.getMessage() for r in caplog.records if r.name == "tiresias.executor"]
    assert len(lines) == 80 and all(len(line) < 200 for line in lines)  # one short line a round
    assert "band x300" in lines[-1] and "signal x1" in lines[-1] and "requeue x1" in lines[-1], lines[-1]
    assert {a.kind for a in report.levers} == {"band", "signal", "requeue"}


def test_a_requeue_and_a_handoff_cite_the_preemption_and_ids_are_unique(store):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    c = controller(store, backend)
    c.run_round()
    backend.add("2", 4)
    preempted = c.run_round()
    [preempt] = [e for e in preempted.applied if e["kind"] == "preempt"]
    assert preempt["applied"] and preempt["job_id"] == "1"
    [signal] = [a for a in preempted.levers if isinstance(a, A.Signal)]
    assert signal.cause_id == preempt["decision_id"]
    backend.now += 11  # the grace period is over
    requeued = c.run_round()
    [requeue] = [e for e in requeued.applied if e["kind"] == "requeue"]
    assert requeue["cause_id"] == preempt["decision_id"] and requeue["applied"]
    # Slurm requeues job 1 and starts job 2 where it ran
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="PENDING", gpus_by_node=(), restart_count=1)
    backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], state="RUNNING", gpus_by_node=(("gpu1", 4),),
                                            start_time_s=backend.now)
    backend.now += 5
    handed_off = c.run_round()
    [handoff] = [e for e in handed_off.applied if e["kind"] == "handoff"]
    assert handoff["job_id"] == "2" and handoff["cause_id"] == preempt["decision_id"]
    logged = store.decisions("default", limit=1000)
    assert len({d["decision_id"] for d in logged}) == len(logged)  # unique across rounds and kinds
    assert {d["decision_id"]: d["cause_id"] for d in logged}[requeue["decision_id"]] == preempt["decision_id"]


def test_a_pin_expiry_cites_the_start_that_pinned_the_job_even_after_a_restart(store):
    backend = ScriptedBackend()
    backend.add("1", 8, comment="tiresias:skew=0.9")
    c = controller(store, backend, placement="consolidate", pin_expiry_s=60)
    first = c.run_round()
    [start] = [e for e in first.applied if e["kind"] == "start"]
    [pin] = [a for a in first.levers if isinstance(a, A.PinNodes)]
    assert pin.cause_id == start["decision_id"] and ("pin_nodes", "1", list(pin.nodes)) in backend.calls
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], required_nodes=pin.nodes)  # as Slurm shows it
    backend.now += 61  # Slurm never started it (someone else took the nodes): the pin expires
    restarted = controller(store, backend, placement="consolidate", pin_expiry_s=60)
    report = restarted.run_round()
    [unpin] = [e for e in report.applied if e["kind"] == "unpin"]
    assert unpin["cause_id"] == start["decision_id"] and unpin["applied"]
    assert ("pin_nodes", "1", []) in backend.calls


def preemption_story(tmp_path) -> tuple[Path, str]:
    """A store holding one preemption's chain: job 1 preempted for job 2, requeued after
    its 10 s grace, job 2 started in its place (the handoff). Returns the config file
    that reads it and the store URL."""
    from controller.service.state.store import Store

    url = f"sqlite:///{tmp_path}/t.db"
    config_file = tmp_path / "c.yaml"
    config_file.write_text(f"database_url: {url}\nmode: enforce\nqueues_gpu_s: [100.0]\n"
                           "preempt_min_runtime_s: 0\npreempt_grace_s: 10\n")
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    with Store(url) as s:
        c = controller(s, backend)
        c.run_round()
        backend.add("2", 4)
        c.run_round()  # preempts 1
        backend.now += 11
        c.run_round()  # its grace is over: requeued
        backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="PENDING", gpus_by_node=(), restart_count=1)
        backend.jobs["2"] = dataclasses.replace(backend.jobs["2"], state="RUNNING", gpus_by_node=(("gpu1", 4),),
                                                start_time_s=backend.now)
        backend.now += 5
        c.run_round()  # 2 runs: the handoff
    return config_file, url


def test_explain_story_prints_the_chain_oldest_first_with_ids_and_causes(tmp_path, monkeypatch, capsys):
    from controller.service.state.store import Store

    config_file, url = preemption_story(tmp_path)
    with Store(url) as s:
        preempt = next(d for d in s.decisions("default", job_id="1") if d["kind"] == "preempt")
        handoff = next(d for d in s.decisions("default", job_id="2") if d["kind"] == "handoff")
    preempt_id, round_id = preempt["decision_id"], preempt["round_id"]
    monkeypatch.setattr(cmd_queue, "_backend_factory", lambda config: pytest.fail("--story reads the store only"))
    assert main(["explain", "1", "--story", "--config", str(config_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "job 1: 2 decision(s), oldest first"
    assert out[1].split()[0] == preempt_id and " preempt " in out[1] and "applied: yields 16 GPUs" in out[1]
    assert out[2].strip().startswith(f"led to {handoff['decision_id']} (handoff of job 2, round {handoff['round_id']}")
    assert " requeue " in out[3] and "grace period of 10s over" in out[3]
    assert out[4].strip() == f"caused by {preempt_id} (preempt, round {round_id})"
    assert main(["explain", "2", "--story", "--config", str(config_file)]) == 0
    out = capsys.readouterr().out
    assert f"caused by {preempt_id} (preempt of job 1, round {round_id})" in out and " handoff " in out
    assert main(["explain", "99", "--story", "--config", str(config_file)]) == 1
    assert "no logged decisions about job 99" in capsys.readouterr().err


def test_the_port_declares_one_lever_method_per_table_row_and_its_optional_reads_explicitly():
    from controller.core.levers.table import LEVER_NAMES
    from controller.core.levers.target import LeverTarget
    from controller.service.acting.backend import OPTIONAL_READS, NotOffered

    assert LeverTarget.__abstractmethods__ == set(LEVER_NAMES) and set(LEVER_NAMES) <= set(dir(Backend))
    backend = ScriptedBackend()
    assert "poll" in OPTIONAL_READS and not backend.offers("poll") and backend.offers("batch_script")
    with pytest.raises(NotOffered, match="ScriptedBackend does not offer poll"):
        backend.poll()
    backend.poll = lambda: frozenset()  # a stand-in given the read offers it
    assert backend.offers("poll")
    with pytest.raises(ValueError, match="not an optional read"):
        backend.offers("observe")
    with pytest.raises(TypeError):  # a backend must carry out every lever
        type("NoLevers", (Backend,), {"observe": lambda self: None})()


def test_the_read_only_backend_remembers_each_lever_as_before():
    memory = ShadowMemory()
    target = ReadOnlyBackend(memory)
    target.set_site_factors({"1": 5, "2": 0})
    target.pin_nodes("7", ["gpu1"])
    target.signal("7", "USR1", True)
    target.requeue("7")
    target.set_admin_comment("7", "x")
    assert list(memory.recent) == ["set_site_factors(2 jobs)", "pin_nodes(7, ['gpu1'])", "signal(7, 'USR1', True)",
                                   "requeue(7)", "set_admin_comment(7, 'x')"]
    ReadOnlyBackend().hold("7")  # observe: remembers nothing


@pytest.mark.parametrize("mode", ["observe", "shadow", "enforce"])
def test_the_executor_answers_the_rounds_questions_by_its_mode(mode):
    executor = LeverExecutor(ScriptedBackend(), mode)
    acting = mode == "enforce"
    assert executor.needs_preflight is acting and executor.sends(A.SetBand) is acting
    assert executor.skips(A.SetAdminComment) is not acting and not executor.skips(A.Signal)
    assert executor.in_store().applied is (mode != "observe") and executor.makes_decisions is (mode != "observe")
    assert executor.is_ours({"mode": mode, "applied": True})
    assert executor.is_ours({"mode": mode, "applied": False}) is not acting  # refused in enforce; would elsewhere
    assert not executor.is_ours({"mode": "other", "applied": True})

"""Issue 28, item 3: no useless preemption. A job Slurm does not start on what its
preemption freed (a request the plan does not model: --constraint, --mem beyond a
node's, --exclusive) got the same victim preempted again and again (at 30 s, 1,380 s
and 2,730 s), braked only by the handoff time-out. Now its failed handoff brakes it
(controller.core.levers.handoffs.Brake) until something it depends on changes.

The controller runs against the scripted slurmctld (bench.scripted_slurm, with the
real backend, parser and store) on a virtual clock, one round a minute; slurmctld
"refuses" the job (it stays pending, reason Resources) and, as Slurm does, lets a
requeued job's BeginTime lapse by itself, so the victim runs again on its GPUs."""
from __future__ import annotations

import dataclasses

from bench.lever_parity import SETTINGS
from bench.scripted_slurm import ScriptedSlurm, VirtualTime
from controller.cli import queue as cmd_queue
from controller.cli.main import main
from controller.core.levers.handoffs import Brake, HandoffBook, Needs, needs_of
from controller.core.model import JobSpec, Node
from controller.core.plan import Plan, Preempt, Start
from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.ops.metrics import Metrics
from controller.service.state.store import Store
from slurm_plugin.backend import SlurmBackend

T0, INTERVAL = 1_000_020, 60
VICTIM, OTHER, REFUSED, LATER = 1, 2, 3, 4


class RefusingSlurm(ScriptedSlurm):
    """slurmctld that never starts the jobs in ``refused`` (pending, reason Resources,
    set by the test at submit), and whose requeue BeginTime lapses at its eligible
    time (Slurm's own, as `scontrol update StartTime=now` would end it)."""

    def __init__(self, refused: set[int]):
        super().__init__(pending=0, running=0, nodes=2, gpus_per_node=4, now=T0)
        self.refused = refused

    def schedule(self):
        for job_id, record in list(self.jobs.items()):
            if (record["job_state"] == "PENDING" and record["state_reason"] == "BeginTime"
                    and record["eligible_time"] <= self.now):
                self(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], 10, {})
        kept_out = {j: self.jobs.pop(j) for j in self.refused if self.jobs.get(j, {}).get("job_state") == "PENDING"}
        try:
            return super().schedule()
        finally:
            self.jobs.update(kept_out)


class Cluster:
    """Two 4-GPU nodes: job 1 (checkpointable, the victim) and job 2 (--no-requeue)
    run from round 0; job 3 arrives at round 20, when job 1 is in queue 2, and Slurm
    never starts it."""

    def __init__(self, tmp_path, other_work_rounds: int = 10_000):
        self.slurm = RefusingSlurm({REFUSED})
        self.clock = VirtualTime(float(T0))
        self.config = from_mapping(dict(SETTINGS, usage_spool_dir=str(tmp_path / "none"),
                                        database_url=f"sqlite:///{tmp_path}/t.db"))
        self.store = Store(self.config.database_url)
        self.metrics = Metrics(mode="enforce")
        self.controller = self.start()
        self.round = 0
        self.signals: list[tuple[int, str]] = []  # (round, job id)
        self.slurm.submit(VICTIM, 4, work_s=10**6)
        self.slurm.submit(OTHER, 4, work_s=other_work_rounds * INTERVAL, requeue=False)
        self.slurm.schedule()

    def start(self) -> Controller:
        return Controller(self.config, SlurmBackend(runner=self.slurm, clock=self.clock), self.store,
                          clock=self.clock, metrics=self.metrics)

    def run(self, rounds: int, submit: dict[int, tuple[int, int, bool]] = {}) -> None:
        """``rounds`` rounds; ``submit``: round -> (job id, GPUs, --requeue)."""
        for _ in range(rounds):
            now = T0 + self.round * INTERVAL
            self.clock.now_s = float(now)
            self.slurm.advance(now)
            if self.round in submit:
                job_id, gpus, requeue = submit[self.round]
                self.slurm.submit(job_id, gpus, work_s=10**6, requeue=requeue)
                if job_id in self.slurm.refused:
                    self.slurm.jobs[job_id]["state_reason"] = "Resources"
            backend = self.controller.backend
            report = self.controller.run_round(dataclasses.replace(backend.observe(), observed_at_s=float(now)))
            self.signals += [(self.round, a.job_id) for a in report.levers if a.kind == "signal"]
            self.slurm.schedule()
            self.round += 1

    def metric(self, name: str) -> float:
        return self.metrics.registry.get_sample_value(name, {"mode": "enforce"}) or 0.0


def test_a_job_slurm_refuses_costs_one_preemption_in_two_hours(tmp_path):
    cluster = Cluster(tmp_path)
    cluster.run(20 + 120, submit={20: (REFUSED, 4, True)})
    # one preemption (the old rule: another after every ten time-outs, 20 minutes)
    assert cluster.signals == [(20, str(VICTIM))]
    assert cluster.slurm.jobs[VICTIM]["job_state"] == "RUNNING"  # it ran again on its GPUs (restart 1)
    assert cluster.slurm.jobs[VICTIM]["restart_cnt"] == 1
    assert cluster.slurm.jobs[REFUSED]["job_state"] == "PENDING"
    handoffs = cluster.controller.handoffs
    assert list(handoffs.braked) == [str(REFUSED)] and handoffs.failed == 1
    # the plan still wants the victim's GPUs for job 3 every round: kept running, saying why
    decisions = cluster.store.decisions("default", job_id=str(VICTIM), limit=3)
    assert decisions[0]["kind"] == "preempt" and not decisions[0]["applied"]
    assert "3 did not start after the preemption of 1 (r21.1) made for it (handoff failed): no further " \
           "preemption for it until a job running on a node it may use ends" in decisions[0]["detail"]
    # counted: one failed handoff, one job braked now
    assert cluster.metric("tiresias_handoffs_failed_total") == 1
    assert cluster.metric("tiresias_handoff_braked_jobs") == 1
    # a restarted controller reads the brake back and signals nobody either
    cluster.controller = cluster.start()
    assert cluster.controller.handoffs.braked == handoffs.braked
    cluster.run(30)
    assert cluster.signals == [(20, str(VICTIM))]


def test_a_job_ending_on_its_nodes_lets_it_cause_one_more_preemption(tmp_path):
    """Job 2 ends at round 60 as job 4 (--no-requeue) arrives: something job 3 depends
    on changed, so it may cause one more preemption (the plan puts it on job 1's node
    and job 4 on job 2's, round 60), which fails as the first did and brakes it again."""
    cluster = Cluster(tmp_path, other_work_rounds=60)
    cluster.run(20 + 120, submit={20: (REFUSED, 4, True), 60: (LATER, 4, False)})
    assert cluster.signals == [(20, str(VICTIM)), (60, str(VICTIM))]
    assert cluster.controller.handoffs.failed == 2 and str(REFUSED) in cluster.controller.handoffs.braked
    assert cluster.metric("tiresias_handoffs_failed_total") == 2


def test_explain_says_why_no_preemption_is_made_for_it(tmp_path, monkeypatch, capsys):
    cluster = Cluster(tmp_path)
    cluster.run(30, submit={20: (REFUSED, 4, True)})
    config_file = tmp_path / "c.yaml"
    config_file.write_text(f"database_url: {cluster.config.database_url}\nmode: enforce\n")
    monkeypatch.setattr(cmd_queue, "_backend_factory", lambda config: SlurmBackend(runner=cluster.slurm,
                                                                                   clock=cluster.clock))
    assert main(["explain", str(REFUSED), "--config", str(config_file)]) == 0
    out = capsys.readouterr().out
    from controller.cli.reports import format_timestamp

    signalled = format_timestamp(T0 + 20 * INTERVAL)
    assert (f"preemption for it: a preemption for it at {signalled} freed GPUs Slurm did not start it on "
            "(handoff failed): no further preemption for it until a job running on a node it may use ends and "
            "frees what it needs, such a node comes up, or its request changes") in out
    # a running job or one without a failed handoff gets no such line
    assert main(["explain", str(VICTIM), "--config", str(config_file)]) == 0
    assert "preemption for it:" not in capsys.readouterr().out


# -- the rule itself (controller.core.levers.handoffs) -------------------------------------------------

NODES = [Node("a", 4, 0), Node("b", 4, 0), Node("c", 4, 4, available=False)]


def _needs(running, spec=JobSpec("3", 4, 0.0), nodes=NODES) -> Needs:
    return needs_of(spec, nodes, running)


def test_what_lifts_a_brake_and_what_does_not():
    spec = JobSpec("3", 4, 0.0)
    at_failure = _needs([("1", ("a",)), ("2", ("b",))])
    brake = Brake(100.0, 300.0, ("1",), ("r2.1",), at_failure)
    assert brake.what_changed(at_failure) == ""
    # the victim ran again, or left again: what it holds was freed once already
    assert brake.what_changed(_needs([("2", ("b",))])) == ""
    assert brake.what_changed(_needs([("1", ("a",)), ("2", ("b",)), ("5", ("a",))])) == ""  # a start takes only
    assert brake.what_changed(_needs([("1", ("a",)), ("2", ("b",))], nodes=NODES[:2])) == ""  # a node went away
    # another job there when it failed left; a node came up; its request changed
    assert brake.what_changed(_needs([("1", ("a",)), ("5", ("b",))])) == "job 2 left the nodes it may use"
    assert brake.what_changed(_needs([("1", ("a",)), ("2", ("b",))], nodes=NODES[:2] + [Node("c", 4, 4)])) == \
        "node c it may use came up or gained GPUs"
    longer = dataclasses.replace(spec, time_limit_s=7200.0)
    assert brake.what_changed(_needs([("1", ("a",)), ("2", ("b",))], spec=longer)) == "its request changed"
    assert brake.what_changed(needs_of(spec, NODES, [("1", ("a",)), ("2", ("b",))], extra=("new comment",))) == \
        "its request changed"
    # a node it may not use is not watched: a job there comes and goes freely
    typed = dataclasses.replace(spec, gpu_type="a100")
    nodes = [Node("a", 4, 0, gpu_type="a100"), Node("b", 4, 0, gpu_type="v100")]
    before = Brake(0.0, 0.0, ("1",), (), needs_of(typed, nodes, [("1", ("a",)), ("2", ("b",))]))
    assert before.what_changed(needs_of(typed, nodes, [("1", ("a",))])) == ""
    # the brake as the store keeps it
    assert Brake.from_json(brake.to_json(), 100.0, ("1",)) == brake


def test_a_brake_holds_only_the_victims_on_the_nodes_its_job_is_placed_on():
    book = HandoffBook()
    book.braked["3"] = Brake(0.0, 10.0, ("1",), ("r2.1",), _needs([("1", ("a",)), ("2", ("b",))]))
    plan = Plan(5, 20.0, actions=[Preempt("r5.1", "1", ""), Preempt("r5.2", "2", ""),
                                  Start("r5.3", "3", (("a", 4),), ""), Start("r5.4", "4", (("b", 4),), "")])
    nodes = {"1": ["a"], "2": ["b"]}
    kept = book.kept(plan, nodes.get, set())
    assert list(kept) == ["1"] and "3 did not start after the preemption of 1 (r2.1)" in kept["1"]
    # job 4, whose preemption went on, is watched; job 3, for which none was made, is not
    assert book.expect(["3", "4"], 20.0, ("2",), ("r5.2",)) == ["4"]
    # a job that starts or leaves takes its brake with it
    events = book.check({"3": "RUNNING", "4": "PENDING"}.get, 30.0, 120.0, lambda job_id: _needs([]))
    assert [(e.kind, e.job_id, e.detail) for e in events] == [("released", "3", "it started")]
    assert not book.braked


def test_a_failed_handoff_an_older_store_recorded_brakes_from_the_first_round(tmp_path):
    """Schema 5 kept a failed handoff as the time its block ended: read back as a brake
    whose needs the first round takes (nothing changed before it was read)."""
    from sqlalchemy import update

    from controller.service.state.lever_rows import handoffs as handoffs_table

    cluster = Cluster(tmp_path)
    cluster.run(20)  # job 1 in queue 2 by now
    cluster.slurm.submit(REFUSED, 4, work_s=10**6)
    cluster.slurm.jobs[REFUSED]["state_reason"] = "Resources"
    cluster.store.save_handoff("default", str(REFUSED), float(T0), [str(VICTIM)])
    with cluster.store.engine.begin() as conn:
        conn.execute(update(handoffs_table).values(blocked_until_s=float(T0 + 1200)))
    restarted = cluster.start()
    assert restarted.handoffs.braked[str(REFUSED)].needs is None
    cluster.controller = restarted
    cluster.run(60)
    assert cluster.signals == [] and restarted.handoffs.braked[str(REFUSED)].needs is not None

"""The Nice lever (controller.core.levers.nice): planned for a pending job in the last MLFQ
queue, undone when it is promoted or starts, recorded and undone by restore, told in the
decision log, and obeyed by the simulated slurmctld's start order."""
from __future__ import annotations

from dataclasses import dataclass

from controller.core.levers.bands import RpcBudget
from controller.core.levers.book import Done, LeverBook
from controller.core.levers.nice import SetNice
from controller.core.levers.planner import LeverPlanner
from controller.core.levers.view import LeverConfig, LeverView
from controller.core.plan import Plan, Start
from controller.service.acting.backend import ObservedJob
from controller.service.acting.restore import RecordingBackend, restore
from controller.service.ops.report import entry
from tests.test_controller import ScriptedBackend, store  # noqa: F401  (fixture)


@dataclass
class Job:
    job_id: str
    state: str = "PENDING"
    site_factor: int = 0
    band_id: str = ""
    lever_id: str = ""
    pinnable: bool = True
    required_nodes: tuple = ()
    excluded_nodes: tuple = ()
    qos: str = ""
    admin_comment: str = ""
    nice: int = 0

    def __post_init__(self):
        self.band_id = self.band_id or self.job_id
        self.lever_id = self.lever_id or self.job_id


@dataclass
class Out:
    applied: bool = True
    failed: bool = False
    detail: str = ""


CFG = LeverConfig(queue_count=2, thresholds_gpu_s=(3600.0,), settings={"nice_last_queue": 5000})


def plan_of(round_id, levels, starts=()):
    plan = Plan(round_id, 0.0, order=list(levels), levels=dict(levels))
    plan.actions.extend(Start(f"r{round_id}.{n}", job_id, (("gpu1", 1),), "fits")
                        for n, job_id in enumerate(starts, 1))
    return plan


def step(planner, book, plan, jobs):
    levers = planner.step(plan, LeverView(now=0.0, gpu=jobs), book)
    done = Done(by_id={lever.decision_id: Out() for lever in levers.one_by_one()})
    book.settle(levers, done)
    return levers.table_levers


def test_the_planner_nices_a_last_queue_job_and_undoes_it_on_promotion_and_start():
    planner, book = LeverPlanner(CFG), LeverBook(RpcBudget(0, 0))
    jobs = {"1": Job("1"), "2": Job("2"), "3": Job("3", nice=100)}  # 3: its user's own --nice
    nices = step(planner, book, plan_of(1, {"1": 1, "2": 0, "3": 1}), jobs)
    assert [(a.decision_id, a.job_id, a.nice) for a in nices] == [("r1.n1", "1", 5000)]
    assert "in the last queue" in nices[0].reason and "Nice=5000" in nices[0].reason
    assert step(planner, book, plan_of(2, {"1": 1, "2": 0}), jobs) == []  # booked: not sent again
    promoted = step(planner, book, plan_of(3, {"1": 0, "2": 0}), jobs)
    assert [(a.job_id, a.nice) for a in promoted] == [("1", 0)] and "promoted" in promoted[0].reason
    step(planner, book, plan_of(4, {"1": 1}), jobs)  # back in the last queue: niced again
    started = step(planner, book, plan_of(5, {"1": 1}, starts=("1",)), jobs)
    assert [(a.job_id, a.nice) for a in started] == [("1", 0)] and book.recorded["set_nice"] == {}


def test_off_by_default():
    planner, book = LeverPlanner(LeverConfig(queue_count=2)), LeverBook(RpcBudget(0, 0))
    assert step(planner, book, plan_of(1, {"1": 1}), {"1": Job("1")}) == []


def test_restore_sets_nice_back_to_0_for_what_the_recording_backend_recorded(store):  # noqa: F811
    backend = ScriptedBackend()
    backend.jobs["7"] = ObservedJob("7", "u", "gpu", "PENDING", "Priority", 1, site_factor=0)
    recording = RecordingBackend(backend, store, "default", clock=lambda: 100.0)
    recording.set_nice("7", 5000)
    recording.set_nice("8", 5000)
    recording.set_nice("8", 0)
    assert store.levers("default") == {"set_nice": {"7": "5000"}}
    backend.calls.clear()
    report = restore(backend, store, "default")
    assert [call for call in backend.calls if call[0] == "set_nice"] == [("set_nice", "7", 0)]
    assert any(line.startswith("job 7: Nice reset") for line in report.lines())
    assert store.levers("default") == {}
    assert restore(backend, store, "default").count("reset") == 0  # idempotent


def test_a_set_nice_is_a_decision_the_log_tells():
    action = SetNice("r3.n1", "7", 5000, reason="in the last queue: Nice=5000 keeps ...")
    row = entry(action, applied=True)
    assert row["kind"] == "nice" and row["decision_id"] == "r3.n1" and row["reason"].startswith("in the last queue")


def test_the_simulated_slurmctld_starts_a_niced_job_after_an_unniced_one_of_its_band():
    from controller.core.model import JobSpec
    from controller.replay import lever_replay
    from controller.replay.run_config import SimConfig

    sim = SimConfig(nodes=1, gpus_per_node=1, round_interval_s=60.0)
    jobs = [lever_replay.JobState(spec=JobSpec(str(i), 1, float(i), 600.0), index=i) for i in (0, 1)]
    cluster = lever_replay.SimCluster(sim, jobs, [lever_replay.RunState() for _ in jobs], None)
    slurm = lever_replay.SimSlurm(cluster, jobs)
    slurm.pending = {job.job_id: job for job in jobs}
    slurm.set_site_factors({"0": 100000, "1": 100000})
    slurm.set_nice("0", 5000)  # the older job, niced: the younger one of its band starts first
    assert [job_id for job_id, _ in slurm.schedule()] == ["1"]


def test_a_users_own_nice_is_read_from_every_release_shape():
    """The rule leaves a job with its user's own --nice alone, so Slurm must report it: 22.05's
    JSON writes null for 0 (seen on the test cluster: `sbatch --nice=100` gives 100, no
    --nice gives null), 24.11 and 26.05 write 0, scontrol writes Nice=."""
    import json
    from pathlib import Path

    from slurm_plugin.parse_jobs import parse_scontrol_show_job, parse_squeue_json

    fixtures = Path(__file__).resolve().parent / "fixtures" / "slurm"
    for release in ("22.05", "24.11", "26.05"):
        data = json.loads((fixtures / release / "squeue.json").read_text())
        record = data["jobs"][0]
        assert [job.nice for job in parse_squeue_json(data)][0] == 0, release  # null or 0
        record["nice"] = 100
        assert parse_squeue_json(data)[0].nice == 100, release
    shown = (fixtures / "22.05" / "oversubscribe" / "show_job.txt").read_text()
    assert "Nice=0 " in shown and {job.nice for job in parse_scontrol_show_job(shown)} == {0}
    assert {job.nice for job in parse_scontrol_show_job(shown.replace("Nice=0 ", "Nice=250 "))} == {250}

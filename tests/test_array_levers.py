"""Arrays stay arrays (issue 28, item 5): the controller, the Slurm backend and the
store against the scripted slurmctld of bench/scripted_slurm.py, which keeps a job
array as slurmctld does (one pending record for the tasks that never ran, a record of
its own for each task that starts) and splits a task off that record when an update
names it, as slurmctld's update_job_str does.

Workload: one 8-GPU node; jobs 1 (4 GPUs) and 2 (2 GPUs) run for 90 s; array 100 of
50 one-GPU tasks with %4 (``--array=0-49%4``, consolidation-sensitive: its comment says
skew 0.9) waits. Round 0 sees 2 GPUs free, round 2 (jobs 1 and 2 done) 8.
"""
from __future__ import annotations

import dataclasses

import pytest

from bench.scripted_slurm import ScriptedSlurm, VirtualTime
from controller.core.plan import Plan
from controller.service.round.accounting import Accounts
from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.acting.executor import LeverExecutor
from controller.service.round.partition_moves import PartitionMover
from controller.service.ops.report import RoundReport
from controller.service.acting.restore import restore
from controller.service.round.sharing import GpuSharing
from controller.service.round.levers import Levers
from controller.service.state.store import Store
from slurm_plugin.backend import SlurmBackend
from tests.test_colocation_controller import mps_job
from tests.test_controller import ScriptedBackend, store  # noqa: F401  (fixture)
from tests.test_partition_moves import PartitionBackend

T0, INTERVAL, ARRAY, THROTTLE = 1_000_020, 60, 100, 4
SETTINGS = {"mode": "enforce", "policy": "dlas", "queues_gpu_s": [3600.0], "interval_s": float(INTERVAL),
            "placement": "consolidate", "pack_limit": 0.5, "admin_comment": True}


@dataclasses.dataclass
class Round:
    commands: list[list[str]]  # the scontrol/scancel commands the round ran
    running: list[str]  # the array's tasks the round's observation saw running
    starts: list[str]  # the array's tasks the round's plan started
    records: dict[int, dict]  # the array's records in Slurm after the round (and Slurm's scheduling)


@pytest.fixture
def array_run(tmp_path):
    """(run(rounds) -> [Round], the scripted slurmctld, the controller)."""
    slurm = ScriptedSlurm(pending=0, running=0, nodes=1, gpus_per_node=8)
    slurm.submit(1, 4, work_s=90)
    slurm.submit(2, 2, work_s=90)
    slurm.schedule()
    slurm.submit_array(ARRAY, 50, 1, throttle=THROTTLE, work_s=10_000, comment="tiresias:skew=0.9")
    commands: list[list[str]] = []

    def runner(argv, timeout_s, env):
        if argv[0] in ("scontrol", "scancel") and argv[1] != "write":
            commands.append(list(argv))
        return slurm(argv, timeout_s, env)

    clock = VirtualTime(float(T0))
    store = Store(f"sqlite:///{tmp_path}/arrays.db")
    config = from_mapping(dict(SETTINGS, usage_spool_dir=str(tmp_path / "none")))
    controller = Controller(config, SlurmBackend(runner=runner, clock=clock), store, clock=clock)
    controller.commands = commands

    def run(rounds: int) -> list[Round]:
        out = []
        for k in range(rounds):
            now = T0 + k * INTERVAL
            clock.now_s = float(now)
            slurm.advance(now)
            observation = dataclasses.replace(controller.backend.observe(), observed_at_s=float(now))
            report = controller.run_round(observation)
            slurm.schedule()
            tasks = [j.job_id for j in observation.jobs if j.job_id.startswith(f"{ARRAY}_") and j.state == "RUNNING"]
            starts = [a.job_id for a in report.plan.of_kind("start") if a.job_id.startswith(f"{ARRAY}_")]
            out.append(Round(list(commands), tasks, starts, dict(slurm.records_of(ARRAY))))
            commands.clear()
        return out

    yield run, slurm, controller
    store.close()


def named_tasks(commands: list[list[str]]) -> list[str]:
    """The array task ids ("100_7") the commands name."""
    return [part for argv in commands for arg in argv
            for part in arg.partition("=")[2].split(",") + [arg] if part.startswith(f"{ARRAY}_")]


def test_the_pending_array_is_banded_by_one_update_of_its_own_id(array_run):
    run, slurm, _ = array_run
    first, *later = run(4)
    site_factors = [argv for argv in first.commands if argv[-1].startswith("SiteFactor=")]
    assert len(site_factors) == 1 and site_factors[0][2] == f"JobId={ARRAY}", first.commands
    for round_ in later:  # later rounds: the value stands, nothing is sent for the array again
        assert not [argv for argv in round_.commands if argv[-1].startswith("SiteFactor=")], round_.commands
    # the levers of the round named no task (its pins, AdminComment lines, bands); the
    # tasks that run are named later (their AdminComment), only once they have records
    assert named_tasks(first.commands) == []
    assert slurm.site_factors.get(ARRAY, 0) > 0


def test_the_plan_never_starts_more_tasks_than_the_throttle(array_run):
    run, _, _ = array_run
    rounds = run(4)
    for number, round_ in enumerate(rounds):
        assert len(round_.running) + len(round_.starts) <= THROTTLE, (number, round_.running, round_.starts)
    assert rounds[0].starts and rounds[2].starts  # it did start tasks: 2 GPUs free, then 8
    assert len(rounds[3].running) == THROTTLE


def test_no_task_is_split_off_the_arrays_record(array_run):
    run, slurm, controller = array_run
    rounds = run(4)
    assert slurm.splits == 0
    for round_ in rounds:
        split = [r["array_task_id"] for r in round_.records.values()
                 if r["job_state"] == "PENDING" and r["array_task_id"] is not None]
        assert split == []  # every pending task is in the one pending record
        assert len(round_.records) == 1 + sum(r["job_state"] == "RUNNING" for r in round_.records.values())
    # the skew-sensitive tasks were not pinned: a pin names the task
    details = [d["detail"] for d in controller.store.decisions(controller.config.cluster, limit=1000)
               if d["kind"] == "start"]
    assert details and all(f"not pinned: a pending task of array {ARRAY}" in d for d in details), details


def test_restore_undoes_the_arrays_site_factor(array_run):
    run, slurm, controller = array_run
    run(2)
    assert slurm.site_factors.get(ARRAY, 0) > 0
    report = restore(controller.backend, controller.store, controller.config.cluster)
    assert ["scontrol", "update", f"JobId={ARRAY}", "SiteFactor=0"] in controller.commands
    assert slurm.site_factors[ARRAY] == 0 and slurm.splits == 0
    assert any(c.job_id == str(ARRAY) and c.outcome == "reset" for c in report.changes), report.lines()
    assert str(ARRAY) not in controller.store.levers(controller.config.cluster).get("site_factor", {})


# -- the other lever paths, each on its own -------------------------------------------------

def in_record(backend, job_id, array_id="7", **fields):
    """Job ``job_id`` of ``backend`` made a pending task still in array ``array_id``'s record."""
    backend.jobs[job_id] = dataclasses.replace(backend.jobs[job_id], shared_band_id=array_id, **fields)


def test_the_tasks_in_a_record_share_the_arrays_band_and_a_requeued_task_keeps_its_own(store):
    backend = ScriptedBackend()
    for job_id in ("7_2", "7_5", "7_6", "9"):
        backend.add(job_id, 1)
    in_record(backend, "7_5")
    in_record(backend, "7_6")
    config = from_mapping({"mode": "enforce", "queues_gpu_s": [100.0], "placement": "consolidate"})
    accounts = Accounts(store, "default")
    starts = Levers(config, LeverExecutor(backend, config.mode), accounts)
    levels = {"7_2": 1, "7_5": 0, "7_6": 0, "9": 1}  # 7_2 was requeued after its service put it in queue 2

    def round_(round_id):
        observed = {j.job_id: j for j in backend.observe().jobs}
        accounts.advance(observed, backend.now)
        plan = Plan(round_id, backend.now, order=["7_5", "7_6", "9", "7_2"], levels=levels)
        starts.apply(plan, observed, backend.now, RoundReport(round_id, backend.now, plan))

    round_(1)
    band = config.site_factor_band
    assert backend.calls == [("set_site_factors", {"7": 2 * band, "9": band, "7_2": band})]
    levels.update({"7_5": 1, "7_6": 1})  # (the array's tasks' level changes)
    round_(2)
    # the array's value reaches its requeued task's record too in Slurm: its own value follows
    assert backend.calls[1:] == [("set_site_factors", {"7": band, "7_2": band})]


def test_a_task_in_its_arrays_record_is_never_moved(store):
    backend = PartitionBackend()
    backend.add_in("1", 8, "left", "RUNNING", start=990.0, nodes=[("gpu1", 4), ("gpu2", 4)])
    backend.add_in("7_3", 8, "left,right")
    in_record(backend, "7_3")
    backend.add_in("8", 8, "left,right")  # a plain job waiting as 7_3 waits: moved
    config = from_mapping({"mode": "enforce", "partition_moves": True, "partition_duration_estimate_s": 100.0})
    accounts = Accounts(store, "default")
    mover = PartitionMover(config, backend, store, LeverExecutor(backend, config.mode), accounts)
    for round_id in (1, 2):
        observation = backend.observe()
        observed = {j.job_id: j for j in observation.jobs}
        accounts.advance(observed, backend.now)
        plan = Plan(round_id, backend.now, order=sorted(observed))
        mover.apply(plan, observed, observation.nodes, backend.now, RoundReport(round_id, backend.now, plan))
        in_record(backend, "7_3", partition="left")  # their users narrowed them: a move is due
        if round_id == 1:
            backend.add_in("8", 8, "left")
    assert [c[1] for c in backend.calls if c[0] == "move_partition"] == ["8"]


def test_a_task_in_its_arrays_record_gets_no_mps_share_nor_hold():
    backend = ScriptedBackend()
    mps_job(backend, "7_3", 50, comment="tiresias:class=latency")
    in_record(backend, "7_3")
    mps_job(backend, "8", 50, comment="tiresias:class=latency")  # a plain job asking the same: its tier set
    config = from_mapping({"mode": "enforce", "gpu_sharing": True})
    sharing = GpuSharing(config, LeverExecutor(backend, config.mode))
    sharing.apply(backend.observe(), RoundReport(1, backend.now, None))
    assert [call[:2] for call in backend.calls] == [("set_mps_share", "8")]

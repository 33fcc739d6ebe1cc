"""Job arrays on real Slurm (an isolated instance, jobs as alice and bob, the
controller in this process over the real CLI backend):

- an array of 50 one-GPU tasks with %4 is planned as at most 4 tasks, all named
  ARRAYID_TASKID (never the bare ArrayJobId, which Slurm's levers apply to every task);
- a preemption of one task for bob's job never touches another task of the array;
- a ``0-19%2`` array keeps its throttle and its one pending record with the controller
  banding it (the band goes to the array id).

Run under the shared cluster's lock: ``flock /tmp/tiresias-slurm.lock pytest -m slurm
tests/test_slurm_arrays.py``.
"""
from __future__ import annotations

import time

import pytest

from tests.slurm_fixtures import instance_fixture, iso, wait_for  # noqa: F401  (iso: a pytest fixture)

pytestmark = pytest.mark.slurm

cluster = instance_fixture("ta")


@pytest.fixture
def controller(iso, tmp_path):
    from controller.service.ops.config import from_mapping
    from controller.service.round.daemon import Controller
    from controller.service.state.store import Store
    from slurm_plugin.backend import SlurmBackend

    backend = SlurmBackend(env={"SLURM_CONF": iso.conf})
    config = from_mapping({"mode": "enforce", "cluster": iso.name, "queues_gpu_s": [40.0], "preempt_grace_s": 3.0,
                           "preempt_min_runtime_s": 1.0, "requeue_settle_s": 1.0,
                           "usage_spool_dir": str(tmp_path / "none")})
    with Store(f"sqlite:///{tmp_path}/t.db") as store:
        c = Controller(config, backend, store)
        c.backend_under_test, c.store_under_test = backend, store
        yield c


def tasks(iso, array_id: str) -> dict[str, dict]:
    """The array's task records by ARRAYID_TASKID (the pending record as ARRAYID)."""
    out = {}
    for job in iso.squeue().values():
        if str(job.get("array_job_id")) == array_id:
            task = job.get("array_task_id")
            out[array_id if task is None else f"{array_id}_{task}"] = job
    return out


def test_a_throttled_array_of_50_is_planned_as_at_most_4_tasks(iso, controller):
    array_id, _ = iso.submit("alice", 1, 30, "arr", extra="--array=1-50%4")
    wait_for(lambda: sum(j["job_state"] == "RUNNING" for j in tasks(iso, array_id).values()) == 4, 30,
             "four tasks to run")
    for _ in range(4):
        controller.run_round()
        observation = controller.backend_under_test.observe()
        planned = [j for j in observation.jobs if j.job_id.split("_")[0] == array_id
                   and j.state in ("PENDING", "RUNNING")]
        assert 1 <= len(planned) <= 4, [j.job_id for j in planned]
        assert all("_" in j.job_id for j in planned), [j.job_id for j in planned]
        assert f"{array_id}_50" in observation.withheld  # a task not listed is not gone
        time.sleep(1)
    assert array_id not in controller.records  # never planned (nor given a lever) under the bare id
    ids = {d["job_id"] for d in controller.store_under_test.decisions(iso.name, limit=10000)}
    assert array_id not in ids


def test_a_preemption_of_one_task_never_touches_another(iso, controller):
    array_id, _ = iso.submit("alice", 4, 90, "arr", extra="--array=1-4")
    task_ids = [f"{array_id}_{t}" for t in range(1, 5)]

    def past_threshold():
        controller.run_round()
        return all(t in controller.records and controller.records[t].attained_gpu_s > 40 for t in task_ids)

    wait_for(past_threshold, 60, "the four 4-GPU tasks to pass the threshold", interval_s=1)
    short_id, _ = iso.submit("bob", 4, 3, "short")

    def short_started():
        controller.run_round()
        return iso.squeue()[short_id]["job_state"] in ("RUNNING", "COMPLETED")

    wait_for(short_started, 60, "bob's job to start on a preempted task's GPUs", interval_s=1,
             seen=lambda: {k: (j["job_state"], j["restart_cnt"]) for k, j in tasks(iso, array_id).items()})
    decisions = controller.store_under_test.decisions(iso.name, limit=10000)
    preempted = {d["job_id"] for d in decisions if d["kind"] in ("preempt", "requeue") and d["applied"]}
    assert preempted and preempted <= set(task_ids), preempted  # task ids only, never the bare array id
    assert len(preempted) == 1, preempted  # 4 GPUs were needed: one task
    now = tasks(iso, array_id)
    for task in set(task_ids) - preempted:
        assert now[task]["job_state"] == "RUNNING" and now[task]["restart_cnt"] == 0, (task, now[task])
    (victim,) = preempted
    assert now[victim]["restart_cnt"] == 1, now[victim]


def test_a_throttled_array_keeps_its_throttle_and_its_one_record_with_the_controller(iso, controller):
    """``--array=0-19%2`` while the controller bands it: never more than 2 tasks run at
    once, no pending task is split off into a record of its own (slurmctld holds what it
    would hold without the controller), and the pending tasks' band goes to the array id."""
    blocker, _ = iso.submit("bob", 16, 12, "blocker")  # the array waits with room in its throttle first
    wait_for(lambda: iso.squeue()[blocker]["job_state"] == "RUNNING", 30, "bob's blocker to run")
    array_id, _ = iso.submit("alice", 1, 2, "thr", extra="--array=0-19%2")
    backend = controller.backend_under_test
    updates: list[list[str]] = []  # every scontrol update the controller sends
    real_runner = backend.runner

    def recording(argv, *args, **kwargs):
        if argv[:2] == ["scontrol", "update"]:
            updates.append(list(argv))
        return real_runner(argv, *args, **kwargs)

    backend.runner = recording

    def banded():
        controller.run_round()
        pending = tasks(iso, array_id).get(array_id, {})
        return pending.get("priority", 0) >= controller.config.site_factor_band

    wait_for(banded, 20, "the waiting array's band", interval_s=0.5, seen=lambda: updates)
    most_running, split_off = 0, set()

    def all_done():
        controller.run_round()
        now = tasks(iso, array_id)
        nonlocal most_running
        most_running = max(most_running, sum(j["job_state"] == "RUNNING" for j in now.values()))
        # a pending record of a task of its own (the array's record keeps the array's job id,
        # and shows its task id once only one task is left in it)
        split_off.update(k for k, j in now.items() if str(j["job_id"]) != array_id and j["job_state"] == "PENDING")
        return len(now) == 20 and all(j["job_state"] == "COMPLETED" for j in now.values())

    wait_for(all_done, 180, "the 20 tasks to complete", interval_s=0.5,
             seen=lambda: {k: j["job_state"] for k, j in tasks(iso, array_id).items()})
    assert most_running <= 2, most_running
    assert not split_off, sorted(split_off)  # pending tasks stayed in the array's record
    named = [word for argv in updates for word in argv if word.startswith(f"JobId={array_id}")]
    # SiteFactor of pending tasks goes to the array id; a task's own id only once it runs
    assert f"JobId={array_id}" in named, updates
    print(f"most tasks running at once: {most_running}; updates naming the array: {named}")

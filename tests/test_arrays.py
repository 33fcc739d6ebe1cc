"""Arrays and het jobs in the plan (slurm_plugin.arrays), the per-job
withholding of "gone", and the recorded 22.05 array fixture through the real backend
(and the 24.11 and 26.05 ones, recorded by tests/fixtures/slurm/record.sh).

tests/fixtures/slurm/22.05/squeue_array.json was recorded on the test cluster with
``sbatch -p batch --gres=gpu:1 --array=1-50%4 --wrap "sleep 120"`` as alice (twice:
the first array cancelled, the second with four tasks running), then ``squeue --json``.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from controller.service.round.accounting import Accounts
from slurm_plugin.arrays import MAX_LISTED_TASKS, Withheld, plan_view, task_ranges
from controller.service.acting.backend import Observation, ObservedJob
from controller.service.state.store import Store
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult, LeverFailed

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm" / "22.05"


def job(job_id, state="PENDING", gpus=1, **kw):
    return ObservedJob(job_id=job_id, user="alice", partition="batch", state=state, reason="Priority",
                       gpus=gpus, **kw)


def test_a_throttled_array_is_planned_as_tasks_up_to_its_limit():
    records = [job("7_1", "RUNNING"), job("7_2", "RUNNING"), job("7", array_tasks="3-50%4", array_max_tasks=4)]
    view = plan_view(records)
    assert [j.job_id for j in view.jobs] == ["7_1", "7_2", "7_3", "7_4"]
    assert all(not j.array_tasks for j in view.jobs)  # no bare ArrayJobId left to send a lever to
    assert "7_5" in view.withheld and "7_50" in view.withheld and "7_51" not in view.withheld
    assert "7_3" not in view.withheld and "8" not in view.withheld


def test_a_full_throttle_lists_no_pending_task():
    records = [job(f"7_{t}", "RUNNING") for t in range(1, 5)] + [job("7", array_tasks="5-50%4")]
    assert [j.job_id for j in plan_view(records).jobs] == ["7_1", "7_2", "7_3", "7_4"]


def test_a_huge_array_lists_at_most_the_cap_and_withholds_the_rest():
    view = plan_view([job("412", array_tasks="412-9999")])
    assert len(view.jobs) == MAX_LISTED_TASKS and view.jobs[0].job_id == "412_412"
    assert view.jobs[-1].job_id == f"412_{412 + MAX_LISTED_TASKS - 1}"
    assert "412_9999" in view.withheld and f"412_{412 + MAX_LISTED_TASKS}" in view.withheld


def test_task_strings_with_steps_and_lists():
    ranges, limit = task_ranges("1,3,10-20:5%2")
    assert [t for r in ranges for t in r] == [1, 3, 10, 15, 20] and limit == 2
    for bad in ("1-", "a", "5-3", "1%x", "1-99999999"):
        with pytest.raises(ValueError, match="array_task_string"):
            task_ranges(bad)


def test_a_bad_task_string_withholds_that_array_only():
    view = plan_view([job("7", array_tasks="x-y"), job("9")])
    assert [j.job_id for j in view.jobs] == ["9"] and "array_task_string" in view.problems[0]
    assert "7_3" in view.withheld and "9" not in view.withheld


def test_a_het_job_is_one_gang_under_its_leader():
    records = [job("20", "RUNNING", gpus=1, het_job_id="20", het_offset=0, nodes=("gpu1",),
                   gpus_by_node=(("gpu1", 1),), min_nodes=1, max_nodes=1),
               job("21", "RUNNING", gpus=2, het_job_id="20", het_offset=1, nodes=("gpu2",),
                   gpus_by_node=(("gpu2", 2),), min_nodes=1, max_nodes=1),
               job("30")]
    view = plan_view(records)
    assert [j.job_id for j in view.jobs] == ["30", "20"]
    gang = view.jobs[1]
    assert gang.gpus == 3 and gang.nodes == ("gpu1", "gpu2") and dict(gang.gpus_by_node) == {"gpu1": 1, "gpu2": 2}
    assert gang.het_job_id == "20"  # nothing pins it (controller.service.round.levers)


def test_a_het_job_without_its_leader_is_not_planned_in_part():
    view = plan_view([job("21", het_job_id="20", het_offset=1)], Withheld(ids={"20"}))
    assert view.jobs == [] and "20" in view.withheld


def _backend(squeue_text: str) -> SlurmBackend:
    sinfo = (FIXTURES / "sinfo.json").read_text()
    outputs = {"squeue": squeue_text, "sinfo": sinfo, "sprio": ""}
    sent: list[list[str]] = []

    def run(argv, timeout_s, env):
        sent.append(list(argv))
        return CommandResult(0, outputs.get(argv[0], ""), "")

    backend = SlurmBackend(runner=run)
    backend.sent = sent
    return backend


def test_the_recorded_array_is_observed_as_four_running_tasks_and_no_pending_one():
    backend = _backend((FIXTURES / "squeue_array.json").read_text())
    observation = backend.observe()
    ids = {j.job_id: j.state for j in observation.jobs if j.job_id.startswith("240")}
    assert ids == {"240_1": "RUNNING", "240_2": "RUNNING", "240_3": "RUNNING", "240_4": "RUNNING"}
    assert "240_5" in observation.withheld and "240_1" not in observation.withheld
    # the cancelled array's records are its tasks too, never the bare ArrayJobId
    assert {j.job_id for j in observation.jobs if j.job_id.startswith("235")} >= {"235_1", "235_4"}


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_the_24_11_and_26_05_recorded_arrays_are_observed_alike(version):
    """squeue_array.json of 24.11 and 26.05 (record.sh: array 12, --array=1-50%4
    --gres=gpu:1, tasks 1-4 running) with the sinfo.json of the same release."""
    here = FIXTURES.parent / version
    outputs = {"squeue": (here / "squeue_array.json").read_text(), "sinfo": (here / "sinfo.json").read_text(),
               "sprio": ""}
    backend = SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, outputs.get(argv[0], ""), ""))
    observation = backend.observe()
    assert observation.skipped == []
    tasks = {j.job_id: (j.state, j.nodes, j.gpus) for j in observation.jobs if j.job_id.startswith("12")}
    assert tasks == {f"12_{t}": ("RUNNING", ("gpu4",), 1) for t in range(1, 5)}
    assert "12_5" in observation.withheld and "12_50" in observation.withheld and "12_1" not in observation.withheld


def test_only_a_site_factor_goes_to_a_pending_arrays_bare_id_and_no_lever_to_a_task_in_its_record():
    """Array 240 of the recorded fixture: tasks 1-4 run (records of their own), 5-50
    wait in the array's pending record. Any update naming "240_7" would split task 7
    off that record; the array's SiteFactor goes to 240, which Slurm applies to the
    record whole."""
    backend = _backend((FIXTURES / "squeue_array.json").read_text())
    backend.observe()
    for lever in (lambda: backend.requeue("240"), lambda: backend.signal("240", "USR1"),
                  lambda: backend.pin_nodes("240", ["gpu1"])):
        with pytest.raises(ValueError, match="job array"):
            lever()
    for lever in (lambda: backend.set_site_factors({"240_7": 5}), lambda: backend.pin_nodes("240_7", ["gpu1"]),
                  lambda: backend.move_partition("240_7", "batch"), lambda: backend.hold("240_7"),
                  lambda: backend.release_hold("240_7"), lambda: backend.release_begin_time("240_7"),
                  lambda: backend.set_admin_comment("240_7", "[tiresias: queue 1/2]"),
                  lambda: backend.set_mps_share("240_7", 50)):
        with pytest.raises(ValueError, match="still in job array 240's record"):
            lever()
    assert not any(argv[0] in ("scontrol", "scancel") for argv in backend.sent)
    backend.set_site_factors({"240": 5})
    assert backend.sent[-1] == ["scontrol", "update", "JobId=240", "SiteFactor=5"]
    backend.set_site_factors({"240_2": 5})  # Slurm set the array's value on its task records too
    assert [argv[0] for argv in backend.sent].count("scontrol") == 1
    backend.set_site_factors({"240_2": 6})  # a running task has its own record and its own levers
    assert backend.sent[-1] == ["scontrol", "update", "JobId=240_2", "SiteFactor=6"]


def test_an_array_update_that_only_ended_tasks_refused_is_applied():
    """scontrol answers an update of a whole array with one line per outcome and exit
    status 1 when some task had ended (slurmctld's update_job_str, 22.05-26.05)."""
    answers = {"squeue": (FIXTURES / "squeue_array.json").read_text(), "sinfo": (FIXTURES / "sinfo.json").read_text()}
    stderr = ["240_1-3: Job has already finished\n240_4-50: No error\n"]
    updates = []

    def run(argv, timeout_s, env):
        if argv[0] == "scontrol":
            updates.append(argv)
            return CommandResult(1, "", stderr[0])
        return CommandResult(0, answers.get(argv[0], ""), "")

    backend = SlurmBackend(runner=run)
    backend.observe()
    backend.set_site_factors({"240": 7})
    backend.set_site_factors({"240": 7})  # applied, so known now: not sent again
    assert updates == [["scontrol", "update", "JobId=240", "SiteFactor=7"]]
    stderr[0] = "240_1-3: Job has already finished\n"  # 23.02+ leaves the successes out
    backend.set_site_factors({"240": 8})
    stderr[0] = "240_1-3: Job has already finished\n240_4-50: Access/permission denied\n"
    with pytest.raises(LeverFailed, match="permission denied"):
        backend.set_site_factors({"240": 9})
    stderr[0] = "Invalid job id specified for job 240\n"
    with pytest.raises(LeverFailed):
        backend.set_site_factors({"240": 10})


def test_an_array_update_goes_first_and_its_requeued_task_gets_its_own_value_after():
    """Slurm sets an ArrayJobId's SiteFactor on every record of the array, a requeued
    task's (a pending record of its own) included: that task's value follows."""
    doc = json.loads((FIXTURES / "squeue_array.json").read_text())
    requeued = next(r for r in doc["jobs"] if r["job_id"] == 242)  # task 240_2, requeued
    requeued.update(job_state="PENDING", state_reason="Priority", restart_cnt=1)
    backend = _backend(json.dumps(doc))
    backend.observe()
    backend.set_site_factors({"240_2": 3})
    backend.set_site_factors({"240_2": 3, "240": 9})
    assert backend.sent[-2:] == [["scontrol", "update", "JobId=240", "SiteFactor=9"],
                                 ["scontrol", "update", "JobId=240_2", "SiteFactor=3"]]


def test_the_throttle_counts_the_running_tasks_and_the_pending_ones_with_records_of_their_own():
    # task 2 was requeued (a pending record of its own): 1 running + 1 pending leave room for 2
    records = [job("7_1", "RUNNING", array_max_tasks=4), job("7_2", array_max_tasks=4),
               job("7", array_tasks="3-50%4", array_max_tasks=4)]
    view = plan_view(records)
    assert [j.job_id for j in view.jobs] == ["7_1", "7_2", "7_3", "7_4"]
    assert [j.array_record for j in view.jobs] == ["", "", "7", "7"]  # only the tasks in the record
    # more pending task records than the throttle leaves room for: the rest are withheld
    records = [job("8_1", "RUNNING", array_max_tasks=2)] + [job(f"8_{t}", array_max_tasks=2) for t in (2, 3, 4)] \
        + [job("8", array_tasks="5-9%2", array_max_tasks=2)]
    view = plan_view(records)
    assert [j.job_id for j in view.jobs] == ["8_1", "8_2"]
    assert "8_3" in view.withheld and "8_4" in view.withheld and "8_5" in view.withheld


def test_a_bad_record_withholds_gone_only_for_its_own_job(tmp_path):
    doc = json.loads((FIXTURES / "squeue_array.json").read_text())
    bad = next(r for r in doc["jobs"] if r["job_id"] == 242)  # task 240_2
    bad["job_state"] = 42
    observation = _backend(json.dumps(doc)).observe()
    assert "240_2" in observation.withheld and "240_3" not in observation.withheld
    assert not observation.withheld.everything

    store = Store(f"sqlite:///{tmp_path}/s.db")
    accounts = Accounts(store, "default")
    before = [job("240_2", "RUNNING", start_time_s=900.0), job("240_3", "RUNNING", start_time_s=900.0),
              job("99", "RUNNING", start_time_s=900.0)]
    accounts.advance({j.job_id: j for j in before}, 1000.0)
    # 240_2's record is unreadable, 99 left Slurm: 99 is gone, 240_2 is not
    now = Observation(1010.0, [before[1]], [], skipped=["squeue job 240_2: job_state"], withheld=Withheld({"240_2"}))
    accounts.finish_gone({"240_3": before[1]}, now, 1010.0)
    assert accounts.records["99"].end_state == "GONE"
    assert accounts.records["240_2"].state != "DONE" and accounts.records["240_3"].state != "DONE"


def test_a_bad_record_without_an_id_still_withholds_everything():
    doc = json.loads((FIXTURES / "squeue_array.json").read_text())
    doc["jobs"][0]["job_id"] = "not a number"
    observation = _backend(json.dumps(doc)).observe()
    assert observation.withheld.everything


def test_a_bad_node_record_withholds_no_job():
    sinfo = json.loads((FIXTURES / "sinfo.json").read_text())
    sinfo["nodes"][0]["state"] = 42  # unreadable
    outputs = {"squeue": (FIXTURES / "squeue_array.json").read_text(), "sinfo": json.dumps(sinfo)}
    backend = SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, outputs.get(argv[0], ""), ""))
    observation = backend.observe()
    assert any(line.startswith("sinfo node") for line in observation.skipped), observation.skipped
    assert not observation.withholds("240_1") and not observation.withholds("99")


@pytest.mark.parametrize("field, value", [("job_state", 42), ("array_task_string", "5-x%4")])
def test_a_malformed_pending_array_record_withholds_its_tasks(tmp_path, field, value):
    """Issue 35: a pending array record that does not parse (its own fields, or its task
    string) withholds every task it holds from "gone": they were closed as GONE before."""
    doc = json.loads((FIXTURES / "squeue_array.json").read_text())
    record = next(r for r in doc["jobs"] if r.get("array_task_string") and r["array_job_id"] == 240)  # pending
    record[field] = value
    observation = _backend(json.dumps(doc)).observe()
    assert "240_5" in observation.withheld and "240_50" in observation.withheld
    assert "235_7" not in observation.withheld and "99" not in observation.withheld  # only its own tasks
    assert not observation.withheld.everything

    accounts = Accounts(Store(f"sqlite:///{tmp_path}/s.db"), "default")
    waiting = job("240_5", submit_time_s=900.0, array_record="240")
    accounts.advance({"240_5": waiting}, 1000.0)
    accounts.finish_gone({}, observation, 1010.0)
    assert accounts.records["240_5"].end_state is None and accounts.records["240_5"].state == "PENDING"


def het(offset, **kw):
    fields = {"het_job_id": "20", "het_offset": offset, "min_nodes": 1, "max_nodes": 1, **kw}
    return dataclasses.replace(job(str(20 + offset)), **fields)


@pytest.mark.parametrize("component, says", [
    (dict(features=("v100",)), "--constraint"),
    (dict(partition="a100"), "partition"),
    (dict(gpu_type="a100", gpu_types=("a100",)), "GPU type"),
    (dict(gpus=4), "GPUs per node"),
    (dict(gpus=4, min_nodes=2, max_nodes=2), "GPUs per node"),
])
def test_a_het_job_whose_components_differ_in_their_nodes_is_unmodelled(component, says):
    """Issue 35: the gang was planned under its leader's request alone, a component's
    --constraint, partition, GPU type or node count ignored (2 useless preemptions)."""
    [gang] = plan_view([het(0, gpus=1), het(1, **{"gpus": 1, **component})]).jobs
    assert gang.unmodelled_reasons == ("het",) and says in gang.unmodelled


def test_a_het_job_of_alike_components_is_one_modelled_gang_that_keeps_a_components_reasons():
    [gang] = plan_view([het(0, gpus=2, features=("a100",)), het(1, gpus=2, features=("a100",))]).jobs
    assert gang.gpus == 4 and gang.min_nodes == 2 and gang.unmodelled == "" and gang.features == ("a100",)
    [gang] = plan_view([het(0, gpus=2), het(1, gpus=2, unmodelled="its CPUs (not reported)",
                                            unmodelled_reasons=("cpus",))]).jobs
    assert gang.unmodelled_reasons == ("cpus",) and "het component 1: its CPUs" in gang.unmodelled

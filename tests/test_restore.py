"""`tiresias restore` and the way back from enforce, on the scripted backend: every
SiteFactor, pin and AdminComment line the controller set is recorded and reset; a job's
own --nodelist and the site's AdminComment text are kept; gone and running jobs are
handled; a second run changes nothing; a start in shadow after enforce restores by
itself, and restore_on_stop does on a clean stop."""
from __future__ import annotations

import dataclasses
import threading

import pytest

from controller.cli import queue as cmd_queue
from controller.cli.main import main
from controller.core.model import InputError
from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.acting.restore import ADMIN_COMMENT, PIN, SITE_FACTOR, restore
from controller.service.state.store import Store
from tests.test_controller import ScriptedBackend


class LeverBackend(ScriptedBackend):
    """The scripted cluster, with the levers restore undoes carried out on its jobs, as
    Slurm would show them at the next observation."""

    def __init__(self):
        super().__init__()
        self.stop_after_observations = None  # (count, event): stop run_forever
        self.observations = 0
        self.down_for = 0  # observations that fail (slurmctld down) before it answers again

    def observe(self):
        self.observations += 1
        if self.down_for:
            self.down_for -= 1
            self.down = self.down_for > 0
        if self.stop_after_observations and self.observations >= self.stop_after_observations[0]:
            self.stop_after_observations[1].set()
        return super().observe()

    def _update(self, job_id, **values):
        if job_id not in self.jobs:
            raise RuntimeError(f"job {job_id}: Invalid job id specified")
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], **values)

    def set_site_factors(self, factors):
        self.calls.append(("set_site_factors", dict(factors)))
        missing = [job_id for job_id in factors if job_id not in self.jobs]
        for job_id, value in factors.items():
            if job_id in self.jobs:
                self._update(job_id, site_factor=value)
        if missing:
            raise RuntimeError(f"job(s) {','.join(missing)}: Invalid job id specified")

    def pin_nodes(self, job_id, nodes):
        self.calls.append(("pin_nodes", job_id, list(nodes)))
        self._update(job_id, required_nodes=tuple(nodes))

    def set_admin_comment(self, job_id, text):
        self.calls.append(("set_admin_comment", job_id, text))
        self._update(job_id, admin_comment=text)

    def levers(self, job_id):
        job = self.jobs[job_id]
        return job.site_factor, job.required_nodes, job.admin_comment


def config(**settings):
    return from_mapping({"mode": "enforce", "preempt_min_runtime_s": 0, "queues_gpu_s": [100.0], "poll_s": 0.1,
                         **settings})


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path}/t.db") as s:
        yield s


def enforced_cluster(store):
    """Four jobs after one enforce round: 10 runs on gpu1, 11 (skew-sensitive) is pinned to
    gpu2+gpu3, 12 would start on gpu4, 13 waits for gpu1 by its own --nodelist and
    carries the site's AdminComment text."""
    backend = LeverBackend()
    backend.add("10", 4, "RUNNING", start=backend.now, nodes=[("gpu1", 4)])
    backend.add("11", 8, comment="tiresias:skew=0.7")
    backend.add("12", 4)
    backend.add("13", 4)
    backend._update("13", required_nodes=("gpu1",), admin_comment="site: billing=ml")
    controller = Controller(config(), backend, store, clock=lambda: backend.now)
    controller.run_round()
    return backend, controller


def test_enforce_sets_levers_the_store_records(store):
    backend, _ = enforced_cluster(store)
    site_factor, pin, comment = backend.levers("11")
    assert site_factor == 200000 and pin == ("gpu2", "gpu3") and "[tiresias: queue 1/2" in comment
    assert backend.levers("13")[1] == ("gpu1",) and backend.levers("13")[2].startswith("site: billing=ml [tiresias:")
    recorded = store.levers("default")
    assert set(recorded[SITE_FACTOR]) == {"11", "12", "13"}
    assert recorded[PIN] == {"11": "gpu2,gpu3"}  # not 13: its node list is its own
    assert set(recorded[ADMIN_COMMENT]) == {"10", "11", "12", "13"}


def test_restore_resets_every_lever_keeps_the_jobs_own_and_is_idempotent(store):
    backend, _ = enforced_cluster(store)
    del backend.jobs["12"]  # cancelled since
    backend.calls.clear()
    report = restore(backend, store, "default")
    assert backend.levers("11") == (0, (), "")
    assert backend.levers("13") == (0, ("gpu1",), "site: billing=ml")  # its own --nodelist and the site's text
    assert backend.levers("10")[2] == ""
    assert not [c for c in backend.calls if c[0] == "pin_nodes" and c[1] != "11"]
    lines = report.lines()
    assert "job 11: SiteFactor reset: 200000 -> 0" in lines
    assert "job 11: ReqNodeList reset: gpu2,gpu3 cleared" in lines
    assert "job 13: AdminComment reset: the controller's line removed, the site's text kept: site: billing=ml" in lines
    assert "job 12: SiteFactor gone: job no longer listed" in lines
    assert lines[-1] == ("restored: 2 SiteFactor, 1 ReqNodeList, 3 AdminComment; 0 already clear, 2 of jobs gone, "
                         "0 kept, 0 failed")
    assert store.levers("default") == {} and store.load_pins("default") == {}
    # a second run changes nothing in Slurm
    backend.calls.clear()
    again = restore(backend, store, "default")
    assert backend.calls in ([], [("set_site_factors", {})])
    assert again.count("reset") == 0


def test_a_pin_of_a_running_job_is_kept_until_it_waits_again(store):
    backend, _ = enforced_cluster(store)
    backend._update("11", state="RUNNING", gpus_by_node=(("gpu2", 4), ("gpu3", 4)))
    report = restore(backend, store, "default")
    assert "job 11: ReqNodeList kept: job is RUNNING: changing its ReqNodeList would resize it" in report.lines()
    assert not [c for c in backend.calls if c[0] == "pin_nodes" and not c[2]]
    assert store.levers("default")[PIN] == {"11": "gpu2,gpu3"}  # still recorded
    backend._update("11", state="PENDING", gpus_by_node=())  # requeued
    report = restore(backend, store, "default")
    assert backend.levers("11")[1] == () and report.count("reset", PIN) == 1 and PIN not in store.levers("default")


def test_a_node_list_changed_since_the_pin_is_not_the_controllers(store):
    backend, _ = enforced_cluster(store)
    backend._update("11", required_nodes=("gpu3", "gpu4"))  # an admin moved it
    report = restore(backend, store, "default")
    assert backend.levers("11")[1] == ("gpu3", "gpu4") and report.count("kept", PIN) == 1


def test_a_failed_lever_stays_recorded_and_is_retried(store):
    backend, _ = enforced_cluster(store)
    refuse = {"13"}
    original = backend.set_site_factors

    def flaky(factors):
        if refuse & set(factors):
            raise RuntimeError("scontrol: Access/permission denied")
        original(factors)

    backend.set_site_factors = flaky
    report = restore(backend, store, "default")
    assert report.count("failed", SITE_FACTOR) == 1 and report.count("reset", SITE_FACTOR) == 2
    assert set(store.levers("default")[SITE_FACTOR]) == {"13"}
    refuse.clear()
    assert restore(backend, store, "default").count("reset", SITE_FACTOR) == 1
    assert backend.levers("13")[0] == 0


def test_the_controller_clears_its_own_expired_pin_from_the_record(store):
    backend, controller = enforced_cluster(store)
    from controller.core.actions import UnpinNodes
    controller.executor.apply(UnpinNodes("r9.u1", "11", reason="pin expired"))  # what Levers does once the pin expired
    assert backend.levers("11")[1] == () and PIN not in store.levers("default")


class ScopedBackend(LeverBackend):
    """Observes only the jobs of ``partitions``, as the Slurm backend of a config that
    names partitions does; ``observe_jobs`` finds any job, as SlurmBackend's does."""

    def __init__(self, partitions):
        super().__init__()
        self.partitions = set(partitions)

    def observe(self):
        observation = super().observe()
        observation.jobs = [job for job in observation.jobs if job.partition in self.partitions]
        return observation

    def observe_jobs(self, job_ids):
        self.calls.append(("observe_jobs", list(job_ids)))
        return [self.jobs[job_id] for job_id in job_ids if job_id in self.jobs]


def test_restore_undoes_the_levers_of_jobs_outside_the_configured_partitions(store):
    """Job 12 was moved out of the partitions the controller observes (or the config's
    partitions changed) after it got its band: restore still undoes it, from the store's
    rows, and touches no job the controller set nothing on."""
    backend, _ = enforced_cluster(store)
    scoped = ScopedBackend(["batch"])
    scoped.jobs = backend.jobs
    scoped._update("12", partition="elsewhere")
    scoped.add("14", 4)
    scoped._update("14", partition="elsewhere", site_factor=7, admin_comment="site: other")  # never ours
    report = restore(scoped, store, "default")
    assert scoped.levers("12") == (0, (), "") and "job 12: SiteFactor reset: 200000 -> 0" in report.lines()
    assert scoped.levers("14") == (7, (), "site: other")
    assert [call for call in scoped.calls if call[0] == "observe_jobs"] == [("observe_jobs", ["12"])]
    assert store.levers("default") == {}


def test_slurm_backend_restore_reaches_a_job_outside_its_partitions(store):
    """The same through SlurmBackend on the recorded 22.05 output: observing partition
    small only, restore still resets the band it recorded on job 4 (partition batch)."""
    from pathlib import Path

    from slurm_plugin.backend import SlurmBackend
    from slurm_plugin.commands import CommandResult

    fixtures = Path(__file__).resolve().parent / "fixtures" / "slurm" / "22.05"
    outputs = {"squeue": (fixtures / "squeue.json").read_text(), "sinfo": (fixtures / "sinfo.json").read_text(),
               "sprio": ""}
    levers = []

    def runner(argv, timeout_s, env):
        if argv[0] == "scontrol":
            levers.append(argv)
            return CommandResult(0, "", "")
        return CommandResult(0, outputs[argv[0]], "")

    backend = SlurmBackend(partitions=["small"], runner=runner)
    assert "4" not in {job.job_id for job in backend.observe().jobs}
    assert [job.partition for job in backend.observe_jobs(["4", "99"])] == ["batch"]  # 99: not listed
    store.record_levers("default", SITE_FACTOR, {"4": "200000", "99": "100000"}, 1000.0)
    report = restore(backend, store, "default")
    assert levers == [["scontrol", "update", "JobId=4", "SiteFactor=0"]]
    assert report.count("reset", SITE_FACTOR) == 1 and "job 99: SiteFactor gone: job no longer listed" in report.lines()


def run_for(controller, backend, observations):
    stop = threading.Event()
    backend.stop_after_observations = (backend.observations + observations, stop)
    controller.run_forever(stop)


def test_a_start_in_shadow_after_enforce_restores(store):
    backend = LeverBackend()
    backend.add("11", 8, comment="tiresias:skew=0.7")
    backend.add("13", 4)
    enforcing = Controller(config(), backend, store, clock=lambda: backend.now)
    run_for(enforcing, backend, 2)
    assert store.last_mode("default") == "enforce"
    assert backend.levers("11")[0] and backend.levers("11")[1] and backend.levers("11")[2]
    shadow = Controller(config(mode="shadow"), backend, store, clock=lambda: backend.now)
    backend.calls.clear()
    run_for(shadow, backend, 3)
    for job_id in ("11", "13"):
        assert backend.levers(job_id) == (0, (), ""), job_id
    assert store.last_mode("default") == "shadow" and store.levers("default") == {}
    # the next start in shadow (or observe) restores nothing more: nothing is left
    def levers_called():  # the light change poll is a read, not a lever
        return [call for call in backend.calls if call[0] != "poll"]
    calls = len(levers_called())
    run_for(Controller(config(mode="observe"), backend, store, clock=lambda: backend.now), backend, 2)
    assert len(levers_called()) == calls


def test_the_switch_restore_waits_for_slurm_and_the_mode_is_recorded_after_it(store):
    backend = LeverBackend()
    backend.add("11", 8, comment="tiresias:skew=0.7")
    run_for(Controller(config(), backend, store, clock=lambda: backend.now), backend, 2)
    backend.down, backend.down_for = True, 3  # the shadow controller starts while slurmctld is down
    shadow = Controller(config(mode="shadow"), backend, store, clock=lambda: backend.now)
    run_for(shadow, backend, 2)
    assert store.last_mode("default") == "enforce" and backend.levers("11")[0] == 200000  # not yet
    run_for(shadow, backend, 3)
    assert store.last_mode("default") == "shadow" and backend.levers("11") == (0, (), "")


def test_restore_on_stop(store):
    backend = LeverBackend()
    backend.add("11", 8, comment="tiresias:skew=0.7")
    run_for(Controller(config(restore_on_stop=True), backend, store, clock=lambda: backend.now), backend, 2)
    assert backend.levers("11") == (0, (), "") and store.levers("default") == {}
    # without the key the bands stay (a restart in enforce carries on from them)
    run_for(Controller(config(), backend, store, clock=lambda: backend.now), backend, 2)
    assert backend.levers("11")[0] == 200000


def test_restore_on_stop_goes_on_when_the_stops_row_write_fails(store, caplog):
    """The stop writes the clock rows that lag (Accounts.save_all) before restoring:
    when that write fails (here the store refuses job rows from then on), it is logged
    and the levers are still restored."""
    backend = LeverBackend()
    backend.add("11", 8, comment="tiresias:skew=0.7")
    c = Controller(config(restore_on_stop=True), backend, store, clock=lambda: backend.now)
    write_at_stop = c.accounts.save_all

    def failing(cluster, records):
        raise RuntimeError("disk I/O error")

    def store_down_then_write():
        store.save_jobs = failing
        write_at_stop()
    c.accounts.save_all = store_down_then_write
    run_for(c, backend, 2)
    assert any("clock rows not written at stop" in r.getMessage() for r in caplog.records)
    assert backend.levers("11") == (0, (), "") and store.levers("default") == {}


def test_restore_on_stop_is_a_checked_bool():
    with pytest.raises(InputError, match="key 'restore_on_stop' value 'yes' is not a valid bool"):
        from_mapping({"restore_on_stop": "yes"})


def test_cli_restore_prints_each_change_and_the_totals(store, tmp_path, monkeypatch, capsys):
    backend, _ = enforced_cluster(store)
    store.record_mode("default", "shadow", backend.now)
    monkeypatch.setattr(cmd_queue, "_backend_factory", lambda config: backend)
    url = f"sqlite:///{tmp_path}/t.db"
    assert main(["restore", "--database-url", url, "--config", str(tmp_path / "none.yaml")]) == 2  # no such file
    assert main(["restore", "--database-url", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "job 11: ReqNodeList reset: gpu2,gpu3 cleared" in out
    assert out[-1].startswith("restored: 3 SiteFactor, 1 ReqNodeList, 4 AdminComment;")
    assert main(["restore", "--database-url", url]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("restored: 0 SiteFactor, 0 ReqNodeList, 0 AdminComment;")


def test_the_recording_backend_writes_the_rows_restore_reads_before_each_lever(store):
    from controller.service.acting.restore import HOLD, RecordingBackend

    backend = ScriptedBackend()
    recording = RecordingBackend(backend, store, "default", clock=lambda: 100.0)
    recording.set_site_factors({"1": 5, "2": 0})
    recording.pin_nodes("3", ["gpu1", "gpu2"])
    recording.hold("4")
    recording.set_admin_comment("5", "site text [tiresias: queue 1/2]")
    recording.set_admin_comment("6", "site text only")
    recording.signal("7", "USR1", True)
    assert store.levers("default") == {SITE_FACTOR: {"1": "5"}, PIN: {"3": "gpu1,gpu2"}, HOLD: {"4": "ours"},
                                       ADMIN_COMMENT: {"5": "ours"}}
    recording.pin_nodes("3", [])
    recording.release_hold("4")
    assert set(store.levers("default")) == {SITE_FACTOR, ADMIN_COMMENT}
    assert backend.calls == [("set_site_factors", {"1": 5, "2": 0}), ("pin_nodes", "3", ["gpu1", "gpu2"]),
                             ("hold", "4"), ("set_admin_comment", "5", "site text [tiresias: queue 1/2]"),
                             ("set_admin_comment", "6", "site text only"), ("signal", "7", "USR1", True),
                             ("pin_nodes", "3", []), ("release_hold", "4")]

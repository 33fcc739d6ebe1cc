"""The controller's clock against slurmctld's (issue 28, item 6): with the controller 2
minutes ahead, a job 10 s old was charged its 10 s plus the 120 s of skew per GPU
(2,080 GPU-s on 16 GPUs) and preempted although preempt_min_runtime_s protected it.
Now Slurm's job times are moved onto the controller's clock as each observation comes
in (controller.service.round.slurm_clock): measured from slurmctld's own time in the answer
(24.11+) or from jobs seen going from pending to running (22.05)."""
import dataclasses
import json
import logging
from pathlib import Path

import pytest

from controller.service.acting.backend import Observation, ObservedJob
from controller.service.round.slurm_clock import TOLERANCE_S, SlurmClock
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401 - store is a fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"
SKEW_S = 120.0


class SkewedSlurm(ScriptedBackend):
    """The scripted cluster on slurmctld's clock (``now``), observed by a controller whose
    clock reads ``now + ahead_s``; ``reports_clock``: the answer carries slurmctld's time
    (squeue --json's last_update, 24.11+), else not (22.05)."""

    def __init__(self, ahead_s: float, reports_clock: bool):
        super().__init__()
        self.ahead_s = ahead_s
        self.reports_clock = reports_clock

    def local_now(self) -> float:
        return self.now + self.ahead_s

    def observe(self):
        observation = super().observe()
        observation.observed_at_s = observation.answered_at_s = self.local_now()
        observation.slurm_now_s = self.now if self.reports_clock else None
        return observation


def skewed_controller(store, backend, **settings):  # noqa: F811
    c = controller(store, backend, preempt_min_runtime_s=60, **settings)
    c.clock = backend.local_now
    return c


def signals(backend) -> list[tuple]:
    return [call for call in backend.calls if call[0] in ("signal", "requeue")]


def test_a_job_10_s_old_is_charged_10_s_and_protected_with_the_controller_2_min_ahead(store, caplog):  # noqa: F811
    backend = SkewedSlurm(SKEW_S, reports_clock=True)
    backend.add("1", 16, "RUNNING", start=backend.now - 10.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    backend.add("2", 4)  # waits for job 1's GPUs; job 1 is past the 100 GPU-s threshold
    c = skewed_controller(store, backend)
    with caplog.at_level(logging.WARNING):
        report = c.run_round()
    assert c.records["1"].attained_gpu_s == pytest.approx(10.0 * 16, abs=16.0)  # not (10 + 120) x 16
    assert c.records["1"].first_start_s == pytest.approx(backend.local_now() - 10.0, abs=1.0)
    assert signals(backend) == [] and not report.plan.of_kind("preempt")  # ran 10 s < preempt_min_runtime_s 60
    for _ in range(4):  # 40 s more: 50 s old, still younger than 60 s (Slurm's whole seconds: +-1 s)
        backend.now += 10.0
        c.run_round()
    assert signals(backend) == []
    assert c.records["1"].attained_gpu_s == pytest.approx(50.0 * 16, abs=16.0)
    backend.now += 25.0
    c.run_round()
    assert [call[:2] for call in signals(backend)] == [("signal", "1")]  # 75 s old: preempted now
    clock_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("clock:")]
    assert clock_lines == ["clock: the controller's clock is 119 s ahead of slurmctld's: Slurm's job times are moved "
                           "onto the controller's clock (run times, service, protection); fix the clocks (NTP/chrony)"]


def test_a_controller_behind_slurmctld_charges_the_run_too(store):  # noqa: F811
    backend = SkewedSlurm(-SKEW_S, reports_clock=True)
    backend.add("1", 16, "RUNNING", start=backend.now - 10.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    c = skewed_controller(store, backend)
    c.run_round()
    assert c.records["1"].attained_gpu_s == pytest.approx(10.0 * 16, abs=16.0)  # not 0: a start "in the future"
    backend.now += 30.0
    c.run_round()
    assert c.records["1"].attained_gpu_s == pytest.approx(40.0 * 16, abs=16.0)


def test_on_22_05_the_offset_comes_from_jobs_seen_starting(store, caplog):  # noqa: F811
    """22.05's JSON carries no clock: a job the last round saw pending and this one sees
    running started in between, which bounds the offset; jobs first seen running after
    that are timed on the controller's clock too."""
    backend = SkewedSlurm(SKEW_S, reports_clock=False)
    nodes = [(f"gpu{i}", 4) for i in range(1, 3)]
    backend.add("1", 8)
    c = skewed_controller(store, backend, poll_s=5.0)
    c.run_round()
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="RUNNING", start_time_s=backend.now + 1.0,
                                            gpus_by_node=tuple(nodes))
    backend.now += 5.0
    with caplog.at_level(logging.WARNING):
        c.run_round()
    assert c.records["1"].attained_gpu_s <= 5.0 * 8  # at most the 5 s between the rounds, not 124 s
    assert c.slurm_clock.offset_s == pytest.approx(SKEW_S, abs=3.0)
    backend.add("3", 8, "RUNNING", start=backend.now - 2.0, nodes=[(f"gpu{i}", 4) for i in range(3, 5)])
    backend.add("4", 4)  # would preempt a job old enough
    backend.now += 5.0
    c.run_round()
    assert c.records["3"].attained_gpu_s == pytest.approx(7.0 * 8, abs=3.0 * 8)  # first seen running: 7 s old
    assert signals(backend) == []
    assert len([r for r in caplog.records if r.getMessage().startswith("clock:")]) == 1


def test_clocks_that_agree_within_the_tolerance_change_nothing(store):  # noqa: F811
    backend = SkewedSlurm(TOLERANCE_S - 1.0, reports_clock=True)
    backend.add("1", 2, "RUNNING", start=backend.now - 10.0, nodes=[("gpu1", 2)])
    c = skewed_controller(store, backend)
    observation = c.observe()
    assert c.slurm_clock.offset_s == 0.0 and observation.jobs[0] is backend.jobs["1"]  # the same objects


def observation(at_s, jobs, slurm_now_s=None):
    return Observation(observed_at_s=at_s, jobs=list(jobs), nodes=[], answered_at_s=at_s, slurm_now_s=slurm_now_s)


def job(job_id, state="RUNNING", start=None, submit=900.0):
    return ObservedJob(job_id=job_id, user="u", partition="p", state=state, reason="", gpus=1,
                       submit_time_s=submit, start_time_s=start)


def test_moved_jobs_keep_their_identity_while_unchanged_and_every_slurm_time_moves():
    clock = SlurmClock()
    running = dataclasses.replace(job("1", start=990.0), end_time_s=5000.0)
    first = clock.localize(observation(1120.0, [running], slurm_now_s=1000.0))
    moved = first.jobs[0]
    assert clock.offset_s == 119.0
    assert (moved.submit_time_s, moved.start_time_s, moved.end_time_s) == (1019.0, 1109.0, 5119.0)
    again = clock.localize(observation(1130.0, [running], slurm_now_s=1010.0))
    assert again.jobs[0] is moved  # the accounts read an unchanged job by identity
    assert clock.localize(observation(1131.0, [running]), fresh=False).jobs[0] is moved


def test_a_stepped_clock_drops_the_evidence_it_contradicts(caplog):
    clock = SlurmClock()
    with caplog.at_level(logging.WARNING):
        clock.localize(observation(1120.0, [], slurm_now_s=1000.0))
        assert clock.offset_s == 119.0
        clock.localize(observation(1200.0, [], slurm_now_s=1200.0))  # chrony stepped the controller's clock
        assert clock.offset_s == 0.0
        clock.localize(observation(1210.0, [], slurm_now_s=1210.0))
    assert [r.getMessage().split(":")[1].strip() for r in caplog.records] == [
        "the controller's clock is 119 s ahead of slurmctld's",
        "the controller's clock agrees with slurmctld's again (within 5 s)"]


def test_without_evidence_nothing_moves_and_the_last_evidence_stays():
    clock = SlurmClock()
    pending = job("7", state="PENDING")
    clock.localize(observation(1000.0, [pending]))
    assert clock.offset_s == 0.0  # no clock in the answer, no job seen starting: taken as agreeing
    clock.localize(observation(1010.0, [dataclasses.replace(pending, state="RUNNING", start_time_s=880.0)]))
    assert clock.offset_s == 119.0  # started after 1000 (controller) at 880 (Slurm): at least 119 s ahead
    clock.localize(observation(1010.0 + 7200.0, []))
    assert clock.offset_s == 119.0  # two hours without a start: still the best evidence there is


@pytest.mark.parametrize("version, slurm_now", [("22.05", None), ("24.11", 1796290770.0), ("26.05", 1796486450.0)])
def test_slurm_backend_reports_slurmctld_clock_when_the_json_has_it(version, slurm_now):
    texts = {"squeue": (FIXTURES / version / "squeue.json").read_text(),
             "sinfo": (FIXTURES / version / "sinfo.json").read_text(), "sprio": "", "scontrol": ""}
    backend = SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, texts[argv[0]], ""))
    first = backend.observe()
    assert first.slurm_now_s == slurm_now and first.answered_at_s >= first.observed_at_s
    assert backend.observe().slurm_now_s == slurm_now  # an unchanged answer is not read again, its time kept
    if slurm_now is not None:
        doc = json.loads(texts["squeue"])
        doc["last_update"] = {"set": True, "infinite": False, "number": int(slurm_now) + 9}
        texts["squeue"] = json.dumps(doc, indent=2)
        assert backend.observe().slurm_now_s == slurm_now + 9
        assert backend.repeat_observation().slurm_now_s is None  # a repeat is no new answer


def test_on_22_05_the_over_charge_of_a_job_first_seen_running_is_taken_back_once_measured(store):  # noqa: F811
    """Issue 35: 22.05 says slurmctld's time only through a job seen starting. A job 10 s
    old first seen running before that is charged the 120 s of skew too (1,560 GPU-s on
    12 GPUs, past the 1,000 GPU-s threshold); once a start measures the offset, its run
    start moves and the over-charge is taken back: it stays in queue 1, ahead of a
    newcomer that needs its GPUs, and is not preempted (it was, the charge never undone)."""
    backend = SkewedSlurm(SKEW_S, reports_clock=False)
    backend.add("1", 12, "RUNNING", start=backend.now - 10.0, nodes=[(f"gpu{i}", 4) for i in range(1, 4)])
    backend.add("5", 1)
    c = controller(store, backend, queues_gpu_s=[1000.0])  # no minimum run time: the service decides
    c.clock = backend.local_now
    c.run_round()
    assert c.records["1"].attained_gpu_s == pytest.approx(130.0 * 12, abs=12.0)  # not measurable yet
    backend.jobs["5"] = dataclasses.replace(backend.jobs["5"], state="RUNNING", start_time_s=backend.now + 2.0,
                                            gpus_by_node=(("gpu4", 1),))
    backend.now += 5.0
    backend.add("2", 4)  # needs job 1's GPUs (gpu4 has 3 free)
    report = c.run_round()
    assert c.slurm_clock.offset_s == pytest.approx(SKEW_S, abs=4.0)
    assert c.records["1"].attained_gpu_s == pytest.approx(15.0 * 12, abs=4.0 * 12)  # 10 s + 5 s, the skew taken back
    assert c.records["1"].first_start_s == pytest.approx(backend.local_now() - 15.0, abs=4.0)
    assert signals(backend) == [] and not report.plan.of_kind("preempt")
    backend.now += 5.0
    c.run_round()
    assert signals(backend) == []
    assert c.records["1"].attained_gpu_s == pytest.approx(20.0 * 12, abs=4.0 * 12)

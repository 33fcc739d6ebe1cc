"""A round whose light poll shows nothing changed reuses the last full observation
(Controller.observe, SlurmBackend.repeat_observation); a change the poll shows, a
lever whose effect the backend does not know, and full_observe_s read squeue --json
again. The real controller, Slurm backend and store against the scripted slurmctld
of bench/scripted_slurm.py, driven through Controller.run_forever on a virtual clock."""
import pytest

from bench.scripted_slurm import ScriptedSlurm, VirtualTime
from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.state.store import Store
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult, LeverFailed


@pytest.fixture
def loop(tmp_path):
    slurm = ScriptedSlurm(pending=20, running=4, nodes=10)
    clock = VirtualTime(float(slurm.now))
    store = Store(f"sqlite:///{tmp_path}/t.db")

    def make(**settings):
        config = from_mapping({"mode": "enforce", "policy": "dlas", "preempt_max_per_job": 0, "full_observe_s": 60.0,
                               "usage_spool_dir": f"{tmp_path}/none", "interval_s": 10.0, "poll_s": 2.0,
                               **settings})
        return Controller(config, SlurmBackend(runner=slurm, clock=clock), store, clock=clock)

    yield slurm, clock, make
    store.close()


def run_for(controller: Controller, clock: VirtualTime, seconds: float, every_s: float = 0.0, change=None):
    """Rounds run and the observations they acted on, over ``seconds`` of run_forever."""
    observations = []
    real_round = controller.run_round
    controller.run_round = lambda observation=None: observations.append(observation) or real_round(observation)
    try:
        controller.run_forever(clock.stop_after(seconds, every_s, change))
    finally:
        del controller.run_round
    return observations


def full_reads(slurm: ScriptedSlurm) -> int:
    return slurm.calls["squeue --json"]


def test_rounds_after_an_unchanged_poll_do_not_read_squeue_json(loop):
    slurm, clock, make = loop
    controller = make()
    rounds = run_for(controller, clock, 40.0)
    assert len(rounds) == 4  # the first, then one every interval_s
    assert full_reads(slurm) == 1 and slurm.calls["sinfo --json"] == 1
    # each reused observation is read at its own time, the jobs those of the full one
    assert all(later.observed_at_s >= earlier.observed_at_s for earlier, later in zip(rounds, rounds[1:]))
    assert [sorted(j.job_id for j in o.jobs) for o in rounds[1:]] == [sorted(j.job_id for j in rounds[0].jobs)] * 3


@pytest.mark.parametrize("change", ["start", "finish", "submit"])
def test_a_change_the_poll_shows_is_read_in_full(loop, change):
    slurm, clock, make = loop
    controller = make()
    run_for(controller, clock, 12.0)
    before = full_reads(slurm)
    job_id = {"start": slurm.start_one, "finish": slurm.finish_one,
              "submit": lambda: slurm.submit(999, 1) or 999}[change]()
    rounds = run_for(controller, clock, 3.0)
    assert len(rounds) == 1 and full_reads(slurm) == before + 1  # the next poll's round, in full
    jobs = {j.job_id: j.state for j in rounds[0].jobs}
    assert jobs.get(str(job_id)) == {"start": "RUNNING", "finish": None, "submit": "PENDING"}[change]


def test_a_pending_reason_that_changes_is_read_in_full(loop):
    """A fresh job's None becomes Resources with no change of state; a reused
    observation that kept None would never let it cause a preemption (the real
    preemption tests caught that)."""
    slurm, clock, make = loop
    controller = make()
    run_for(controller, clock, 12.0)
    before = full_reads(slurm)
    pending = next(j for j, r in slurm.jobs.items() if r["job_state"] == "PENDING")
    slurm.jobs[pending]["state_reason"] = "Resources"
    slurm._texts.clear()
    rounds = run_for(controller, clock, 3.0)
    assert len(rounds) == 1 and full_reads(slurm) == before + 1
    assert next(j.reason for j in rounds[0].jobs if j.job_id == str(pending)) == "Resources"


def test_a_drained_node_is_read_in_full_at_the_next_round(loop):
    slurm, clock, make = loop
    controller = make()
    run_for(controller, clock, 12.0)
    before = full_reads(slurm)
    slurm.node_flags["n0003"] = ["DRAIN"]
    slurm._texts.clear()
    rounds = run_for(controller, clock, 10.0)  # no job changed: the interval_s round
    assert len(rounds) == 1 and full_reads(slurm) == before + 1
    drained = next(n for n in rounds[0].nodes if n.name == "n0003")
    assert not drained.available, drained


def test_what_the_poll_cannot_see_is_read_within_full_observe_s(loop):
    slurm, clock, make = loop
    controller = make(full_observe_s=30.0)
    run_for(controller, clock, 1.0)
    slurm.jobs[10]["comment"] = "tiresias:skew=0.9"  # no state changes: the poll shows nothing
    slurm._texts.clear()
    rounds = run_for(controller, clock, 40.0)
    comments = [next(j.comment for j in o.jobs if j.job_id == "10") for o in rounds]
    assert comments[0] == "" and comments[-1] == "tiresias:skew=0.9"
    assert full_reads(slurm) == 2  # the first round's, and one within full_observe_s


def test_full_observe_s_0_reads_every_round(loop):
    slurm, clock, make = loop
    rounds = run_for(make(full_observe_s=0.0), clock, 40.0)
    assert full_reads(slurm) == len(rounds) == 4


def test_levers_the_backend_knows_are_laid_over_the_others_force_a_full_read():
    slurm = ScriptedSlurm(pending=6, running=2, nodes=2)
    backend = SlurmBackend(runner=slurm)
    assert backend.repeat_observation() is None  # nothing observed yet
    first = backend.observe()
    backend.set_site_factors({"3": 7})
    backend.set_admin_comment("4", "tiresias: queue 1")
    again = backend.repeat_observation()
    by_id = {j.job_id: j for j in again.jobs}
    assert (by_id["3"].site_factor, by_id["4"].admin_comment) == (7, "tiresias: queue 1")
    assert by_id == {j.job_id: j for j in backend.observe().jobs}  # what a full read shows
    untouched = {j.job_id: j for j in first.jobs}
    assert by_id["5"] is untouched["5"]  # the rest are the same objects (their JobSpecs are kept)
    backend.observe()
    backend.move_partition("5", "urgent")
    assert backend.repeat_observation() is None  # squeue --json must show where it went
    backend.observe()
    # Slurm refuses a lever (the job vanished meanwhile): what it changed is in doubt
    backend.runner = lambda argv, timeout_s, env: (CommandResult(1, "", "Invalid job id specified")
                                                   if argv[0] == "scontrol" else slurm(argv, timeout_s, env))
    with pytest.raises(LeverFailed):
        backend.set_admin_comment("6", "x")
    assert backend.repeat_observation() is None

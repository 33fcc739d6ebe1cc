"""controller.replay.slurm_preemption: slurmctld's own victims (preempt/qos) for a
replayed controller with ``preemption: slurm`` and Slurm starting the jobs. Each
workload is small enough that one rule decides what happens."""
import argparse

import pytest

from controller.core.engine import EngineConfig
from controller.core.model import InputError, JobSpec, JobState
from controller.replay.simulator import SimConfig, Simulation
from controller.replay.slurmctld import SlurmQos, choose_victims, may_preempt, slurm_fit

LONG = 1000.0
GRACE_S = 5.0


def replay(jobs, qos=SlurmQos(), threshold=10.0, **config):
    """Outcomes by job id, on one 4-GPU node unless ``config`` says otherwise; a job
    demotes to queue 2 after ``threshold`` GPU-seconds."""
    cfg = dict(nodes=1, gpus_per_node=4, slurm_starts=True, time_limit_s=3600.0, preempt_grace_s=GRACE_S,
               requeue_delay_s=1.0, grace_work_kept=True,
               engine=EngineConfig(policy="dlas", thresholds_gpu_s=(threshold,)))
    cfg.update(config)
    result = Simulation(SimConfig(**cfg), slurm_preemption=qos).run(jobs)
    return {o.job_id: o for o in result.outcomes}


def test_within_an_undeclared_pending_job_preempts_nobody():
    jobs = [JobSpec("old", 4, 0.0, LONG), JobSpec("undeclared", 4, 20.0, 10.0, preemptable=False)]
    got = replay(jobs)  # undeclared jobs' QOS lists no other: requeue,within only
    assert got["old"].preemptions == 0
    assert got["undeclared"].start_s == pytest.approx(LONG)


def test_with_tcrossprio_an_undeclared_job_preempts_a_declared_job_of_a_lower_queue():
    jobs = [JobSpec("old", 4, 0.0, LONG), JobSpec("undeclared", 4, 20.0, 10.0, preemptable=False)]
    got = replay(jobs, SlurmQos(undeclared="priority"))
    assert got["old"].preemptions == 1
    assert got["undeclared"].start_s == pytest.approx(20.0 + GRACE_S)


def test_preempt_exempt_time_keeps_a_young_victim():
    jobs = [JobSpec("old", 4, 0.0, LONG), JobSpec("undeclared", 4, 20.0, 10.0, preemptable=False)]
    engine = EngineConfig(policy="dlas", thresholds_gpu_s=(10.0,), preempt_min_runtime_s=30.0)  # PreemptExemptTime
    got = replay(jobs, SlurmQos(undeclared="priority"), engine=engine)
    assert got["old"].preemptions == 1
    assert got["undeclared"].start_s == pytest.approx(30.0 + GRACE_S)


def test_a_queue_1_declared_job_preempts_the_fewest_lower_priority_declared_jobs_it_needs():
    # both demoted to queue 2 on the one node; tried in Slurm's order (one node each, the
    # older first) both are taken before "new" fits, and the reorder pass keeps only "big"
    jobs = [JobSpec("small", 1, 0.0, LONG), JobSpec("big", 3, 0.0, LONG), JobSpec("new", 3, 20.0, 10.0)]
    got = replay(jobs)
    assert (got["small"].preemptions, got["big"].preemptions) == (0, 1)
    assert got["new"].start_s == pytest.approx(20.0 + GRACE_S)


def test_equal_priority_never_preempts():
    # no demotion: both stay in queue 1, so the running job's band is above the newcomer's
    jobs = [JobSpec("old", 4, 0.0, 100.0), JobSpec("new", 4, 5.0, 10.0)]
    got = replay(jobs, threshold=1e9)
    assert got["old"].preemptions == 0
    assert got["new"].start_s == pytest.approx(100.0)


def test_a_higher_queue_job_preempts_no_job_of_its_own_queue_even_when_it_could_use_its_gpus():
    # "young" has not demoted yet (queue 1), "old" has: only "old" may go
    jobs = [JobSpec("old", 2, 0.0, LONG), JobSpec("young", 2, 10.0, LONG), JobSpec("new", 2, 12.0, 10.0)]
    got = replay(jobs, threshold=15.0)
    assert (got["old"].preemptions, got["young"].preemptions) == (1, 0)


def test_a_waiting_job_that_cannot_preempt_keeps_the_jobs_after_it_from_preempting_on_its_nodes():
    # Slurm's order: "undeclared" (older) before "declared", both queue 1; the first may
    # preempt nobody, and its reservation of the node (by the time limits) holds the second
    jobs = [JobSpec("old", 4, 0.0, LONG), JobSpec("undeclared", 4, 15.0, 10.0, preemptable=False),
            JobSpec("declared", 4, 20.0, 10.0)]
    got = replay(jobs)
    assert got["old"].preemptions == 0
    assert got["declared"].start_s >= LONG


TWO_KINDS = dict(nodes=2, node_kinds=((1, ("batch",), "v100"), (1, ("batch", "urgent"), "a100")))


@pytest.mark.parametrize("gpus, preempted", [(4, 0), (2, 1)])
def test_no_preemption_when_the_freed_gpus_would_not_fit_the_jobs_partition_and_type(gpus, preempted):
    # the a100 node (the only urgent one) holds a demoted declared job and an undeclared
    # one; the v100 node a demoted declared job and 2 free GPUs, none of which an urgent job may use
    jobs = [JobSpec("v100", 2, 0.0, LONG, partitions=("batch",), gpu_type="v100"),
            JobSpec("a100", 2, 0.0, LONG, partitions=("urgent",), gpu_type="a100"),
            JobSpec("kept", 2, 0.0, LONG, partitions=("urgent",), gpu_type="a100", preemptable=False),
            JobSpec("urgent", gpus, 20.0, 10.0, partitions=("urgent",), gpu_type="a100")]
    got = replay(jobs, **TWO_KINDS)
    assert (got["a100"].preemptions, got["v100"].preemptions, got["kept"].preemptions) == (preempted, 0, 0)


def test_a_victim_that_finishes_its_work_within_the_grace_completes():
    jobs = [JobSpec("old", 4, 0.0, 22.0), JobSpec("new", 4, 20.0, 10.0)]
    got = replay(jobs)
    assert got["old"].preemptions == 0 and got["old"].end_s == pytest.approx(22.0)
    assert got["new"].start_s == pytest.approx(22.0)


def job(job_id, gpus, placement, index):
    state = JobState(spec=JobSpec(job_id, gpus, float(index), LONG), index=index)
    state.running, state.placement, state.run_start_s = bool(placement), placement, 0.0
    return state


def test_choose_victims_reorders_to_drop_a_victim_a_smaller_set_does_without():
    small, big = job("small", 1, (("n0", 1),), 0), job("big", 3, (("n0", 3),), 1)
    new = job("new", 3, (), 2)
    fit = lambda free: slurm_fit(new, free, {"n0"}, 4)  # noqa: E731
    victims, slots = choose_victims(fit, [small, big], {"n0": 0})
    assert [v.job_id for v in victims] == ["big"] and slots == (("n0", 3),)
    assert choose_victims(fit, [small], {"n0": 0}) is None  # one GPU freed: no fit


def test_who_may_preempt_whom():
    levels = {"d0": 0, "d1": 1, "u0": 0, "u1": 1}
    declared = {k: job(k, 1, (), i) for i, k in enumerate(("d0", "d1"))}
    undeclared = {k: JobState(spec=JobSpec(k, 1, 0.0, LONG, preemptable=False), index=9) for k in ("u0", "u1")}
    every = {**declared, **undeclared}

    def pairs(qos):
        return {(a, b) for a in every for b in every if a != b
                and may_preempt(every[a], every[b], lambda j: levels[j.job_id], qos)}

    assert pairs(SlurmQos()) == {("d0", "d1")}
    assert pairs(SlurmQos(undeclared="priority")) == {("d0", "d1"), ("u0", "d1")}
    assert pairs(SlurmQos(undeclared="any")) == {("d0", "d1"), ("u0", "d1"), ("u1", "d1"), ("u1", "d0"),
                                                  ("u0", "d0")}
    with pytest.raises(InputError):
        SlurmQos(undeclared="sometimes")


def test_slurm_preemption_needs_slurm_starts():
    with pytest.raises(InputError):
        Simulation(SimConfig(), slurm_preemption=SlurmQos())


@pytest.mark.parametrize("preemption, slurm_starts, model", [("slurm", True, True), ("slurm", False, False),
                                                             ("controller", True, False)])
def test_simulate_like_controller_uses_the_model_only_for_preemption_slurm_with_slurm_starts(
        tmp_path, preemption, slurm_starts, model):
    from controller.cli.simulate import slurm_preemption_of

    config = tmp_path / "c.yaml"
    config.write_text(f"preemption: {preemption}\npreempt_qos: tpreempt\n")
    args = argparse.Namespace(like_controller=str(config), slurm_starts=slurm_starts)
    assert (slurm_preemption_of(args) == SlurmQos()) is model

"""The simulator charges the controller's preempt_requeue_ended: a victim that ends inside
its grace period is requeued all the same and ends only when it runs again."""
from controller.core.engine import EngineConfig
from controller.core.model import JobSpec
from controller.replay.simulator import SimConfig, Simulation

# One 4-GPU node, dlas with one threshold of 3,600 GPU-s: A (4 GPUs, 2,010 s) runs from 0
# and is in queue 2 when B (4 GPUs, 100 s) arrives at 2,000 s and preempts it; A's work
# ends 10 s into its 30 s grace period.
JOBS = [JobSpec("A", 4, 0.0, 2010.0), JobSpec("B", 4, 2000.0, 100.0)]


def _run(**sim):
    engine = EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,))
    config = SimConfig(nodes=1, gpus_per_node=4, engine=engine, preempt_grace_s=30.0, grace_work_kept=True, **sim)
    result = Simulation(config).run(JOBS)
    return {o.job_id: (o.start_s, o.end_s, o.preemptions) for o in result.outcomes}, result.preemptions


def test_off_a_victim_that_ends_in_its_grace_simply_finishes():
    assert _run() == ({"A": (0.0, 2010.0, 0), "B": (2010.0, 2110.0, 0)}, 0)


def test_on_it_is_requeued_and_ends_when_it_runs_again():
    # A's GPUs are free when its work ends (2,010): B starts then; A, requeued with all
    # its work done, waits for B and ends at its restart, after the restart cost
    assert _run(requeue_ended_in_grace=True, preempt_resume_s=5.0) == (
        {"A": (0.0, 2115.0, 1), "B": (2010.0, 2110.0, 0)}, 1)


def test_on_the_requeue_delay_holds_it_back_too():
    assert _run(requeue_ended_in_grace=True, requeue_delay_s=200.0)[0]["A"] == (0.0, 2210.0, 1)


def test_on_with_the_controllers_round_interval():
    # the generic loop (rounds on a 1 s grid, as predict() runs the controller) agrees
    assert _run(requeue_ended_in_grace=True, round_interval_s=1.0) == (
        {"A": (0.0, 2110.0, 1), "B": (2010.0, 2110.0, 0)}, 1)

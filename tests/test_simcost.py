"""The simulator charges what the controller costs, with the controller's own protection rules."""
import pytest

from controller.core.engine import Engine, EngineConfig
from controller.core.model import InputError, JobSpec, JobState, Node, Snapshot
from controller.core.protection import protection


def _round(config: EngineConfig, jobs, now: float):
    nodes = [Node("n0", 4, 4 - sum(j.num_gpus for j in jobs if j.running))]
    return Engine(config).step(Snapshot(now_s=now, jobs=jobs, nodes=nodes))


def _running_long_job(**fields):
    """A 4-GPU job past the first threshold (queue 2), running since run_start_s."""
    job = JobState(JobSpec("old", 4, 0.0), index=0, attained_gpu_s=8000.0, queue_service_gpu_s=8000.0,
                   running=True, placement=(("n0", 4),), first_start_s=0.0, **fields)
    newcomer = JobState(JobSpec("new", 4, 1900.0), index=1)
    return job, newcomer


@pytest.mark.parametrize("policy", ["dlas", "las"])
def test_engine_preempts_an_unprotected_victim(policy):
    old, new = _running_long_job(run_start_s=0.0)
    plan = _round(EngineConfig(policy=policy, preempt_min_runtime_s=60.0, preempt_max_per_job=2), [old, new], 2000.0)
    assert [a.job_id for a in plan.of_kind("preempt")] == ["old"]
    assert [a.job_id for a in plan.of_kind("start")] == ["new"]


@pytest.mark.parametrize("policy", ["dlas", "las"])
def test_engine_never_plans_a_victim_that_ran_too_short(policy):
    old, new = _running_long_job(run_start_s=1990.0)  # ran 10 s of this run
    plan = _round(EngineConfig(policy=policy, preempt_min_runtime_s=60.0), [old, new], 2000.0)
    assert not plan.of_kind("preempt") and not plan.of_kind("start")
    assert "preempt_min_runtime_s" in protection(old, 2000.0, 60.0)


@pytest.mark.parametrize("policy", ["dlas", "las"])
def test_engine_never_plans_a_victim_preempted_too_often(policy):
    old, new = _running_long_job(run_start_s=0.0, preemptions=2)
    plan = _round(EngineConfig(policy=policy, preempt_max_per_job=2), [old, new], 2000.0)
    assert not plan.of_kind("preempt") and not plan.of_kind("start")
    # one fewer preemption so far: it may go
    old, new = _running_long_job(run_start_s=0.0, preemptions=1)
    plan = _round(EngineConfig(policy=policy, preempt_max_per_job=2), [old, new], 2000.0)
    assert [a.job_id for a in plan.of_kind("preempt")] == ["old"]


def test_engine_protection_settings_are_bounded():
    with pytest.raises(InputError, match="preempt_min_runtime_s value -1"):
        EngineConfig(preempt_min_runtime_s=-1.0)
    with pytest.raises(InputError, match="preempt_max_per_job value -1"):
        EngineConfig(preempt_max_per_job=-1)

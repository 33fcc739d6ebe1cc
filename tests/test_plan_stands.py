"""How long a plan stands (controller.core.plan_stands): each time-driven change the
engine's plan reports (a threshold crossed, a starvation promotion, a protection
that ends) is the first instant at which planning the same jobs again differs."""
import dataclasses
import math

from controller.core.engine import Engine, EngineConfig
from controller.core.model import JobSpec, JobState, Node, Snapshot
from controller.core.plan_stands import next_threshold_gpu_s
from controller.core.policies.base import LEVEL_TOLERANCE_GPU_S

NOW = 10_000.0


def job(name, gpus, *, served, running, level, waited=0.0, executed=0.0, run_start=None, node="n0"):
    """A settled job: its queue place is the one of the last round (no new position)."""
    return JobState(spec=JobSpec(name, gpus, 0.0, None), index=int(name[1:]), attained_gpu_s=served,
                    queue_service_gpu_s=served, running=running, placement=((node, gpus),) if running else (),
                    waited_since_promotion_s=waited, executed_since_promotion_s=executed,
                    run_start_s=run_start if running else None, first_start_s=run_start if running else None,
                    queue_level=level, queue_entry=float(int(name[1:])))


def step(config: EngineConfig, jobs, at: float, gpus_free: int = 0):
    return Engine(config).step(Snapshot(at, jobs, [Node("n0", 2, gpus_free)]))


def later(jobs, seconds: float):
    """The same jobs ``seconds`` on, only their clocks moved."""
    out = []
    for j in jobs:
        grow = j.spec.num_gpus * seconds if j.running else 0.0
        out.append(job(j.spec.job_id, j.spec.num_gpus, served=j.queue_service_gpu_s + grow, running=j.running,
                       level=j.queue_level, waited=j.waited_since_promotion_s + (0.0 if j.running else seconds),
                       executed=j.executed_since_promotion_s + (seconds if j.running else 0.0),
                       run_start=j.run_start_s))
    return out


def moved(jobs, seconds):
    """later(), keeping each job's contract, count and queue place."""
    return [dataclasses.replace(j, queue_service_gpu_s=m.queue_service_gpu_s, attained_gpu_s=m.attained_gpu_s,
                                executed_since_promotion_s=m.executed_since_promotion_s,
                                waited_since_promotion_s=m.waited_since_promotion_s)
            for j, m in zip(jobs, later(jobs, seconds))]


def kinds(plan):
    return [(a.kind, a.job_id) for a in plan.actions]


def test_a_running_job_crossing_its_threshold_ends_the_plan():
    config = EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,))
    jobs = [job("j1", 2, served=1000.0, running=True, level=0, run_start=0.0),
            job("j2", 2, served=0.0, running=False, level=0)]
    plan = step(config, jobs, NOW)
    assert not plan.actions
    assert math.isclose(plan.stands_until_s, NOW + (3600.0 - LEVEL_TOLERANCE_GPU_S - 1000.0) / 2)
    assert not step(config, later(jobs, 1299.0), NOW + 1299.0).actions  # still in queue 1: keeps its GPUs
    assert kinds(step(config, later(jobs, 1301.0), NOW + 1301.0)) == [("preempt", "j1"), ("start", "j2")]


def test_a_starvation_promotion_ends_the_plan():
    config = EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,), promote_knob=2.0)
    jobs = [job("j1", 2, served=50_000.0, running=True, level=1, run_start=0.0),
            job("j2", 2, served=5000.0, running=False, level=1, waited=50.0, executed=100.0)]
    plan = step(config, jobs, NOW)
    assert not plan.actions
    assert math.isclose(plan.stands_until_s, NOW + 150.0, abs_tol=1e-5)  # waited 200 = 2 x executed 100
    assert not step(config, later(jobs, 149.0), NOW + 149.0).actions
    assert ("promote", "j2") in kinds(step(config, later(jobs, 151.0), NOW + 151.0))


def test_the_end_of_a_protected_run_ends_the_plan():
    config = EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,), preempt_min_runtime_s=60.0)
    jobs = [job("j1", 2, served=50_000.0, running=True, level=1, run_start=NOW - 10.0),
            job("j2", 2, served=0.0, running=False, level=0)]
    plan = step(config, jobs, NOW)
    assert not plan.actions
    assert plan.stands_until_s == NOW + 50.0
    assert not step(config, later(jobs, 49.0), NOW + 49.0).actions
    assert kinds(step(config, later(jobs, 50.0), NOW + 50.0)) == [("preempt", "j1"), ("start", "j2")]


def test_the_end_of_a_run_protection_that_no_victim_rule_would_lift_does_not_end_the_plan():
    # j1 has no checkpoint contract and j3 was preempted preempt_max_per_job times: each
    # keeps its GPUs before and after its first 60 s, so the plan stands past them (to
    # j1's threshold crossing); planning again after their protection ended gives it again
    config = EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,), preempt_min_runtime_s=60.0,
                          preempt_max_per_job=1)

    def on_two_nodes(jobs, at):
        return Engine(config).step(Snapshot(at, jobs, [Node("n0", 2, 0), Node("n1", 2, 0)]))

    j1 = job("j1", 2, served=1000.0, running=True, level=0, run_start=NOW - 10.0)
    j2 = job("j2", 2, served=0.0, running=False, level=0)
    j3 = job("j3", 2, served=50_000.0, running=True, level=1, run_start=NOW - 20.0, node="n1")
    protected = [dataclasses.replace(j1, spec=dataclasses.replace(j1.spec, preemptable=False)), j2,
                 dataclasses.replace(j3, preemptions=1)]
    plan = on_two_nodes(protected, NOW)
    assert not plan.actions and not plan.positions
    crossing = NOW + (3600.0 - LEVEL_TOLERANCE_GPU_S - 1000.0) / 2
    assert math.isclose(plan.stands_until_s, crossing)  # not NOW + 40 / NOW + 50: their protections' ends
    for seconds in (41.0, 51.0, 600.0):  # past both ends: the same plan
        again = on_two_nodes(moved(protected, seconds), NOW + seconds)
        assert not again.actions and not again.positions and again.order == plan.order
    # with a contract and no count spent, j3's protection end is the plan's end: it is preempted then
    free = [j1, j2, j3]
    plan = on_two_nodes(free, NOW)
    assert plan.stands_until_s == NOW + 40.0
    assert not on_two_nodes(moved(free, 39.0), NOW + 39.0).actions
    assert kinds(on_two_nodes(moved(free, 40.0), NOW + 40.0)) == [("preempt", "j3"), ("start", "j2")]


def test_a_plan_that_only_places_jobs_in_their_queues_stands():
    # r1 crossed 3,600 GPU-s since the last plan (no contract: it keeps its GPUs) and w2
    # is new: the plan places both (positions) and acts on nothing; the round stores
    # those places, and planning the settled jobs again gives the same plan, no places
    config = EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0, 36_000.0))
    r1 = job("r1", 2, served=5000.0, running=True, level=0, run_start=0.0)
    r1 = dataclasses.replace(r1, spec=dataclasses.replace(r1.spec, preemptable=False))
    w2 = dataclasses.replace(job("w2", 2, served=0.0, running=False, level=0), queue_entry=None)
    plan = step(config, [r1, w2], NOW)
    assert not plan.actions and set(plan.positions) == {"r1", "w2"} and plan.levels["r1"] == 1
    assert math.isclose(plan.stands_until_s, NOW + (36_000.0 - LEVEL_TOLERANCE_GPU_S - 5000.0) / 2)
    settled = [dataclasses.replace(j, queue_level=plan.positions[j.spec.job_id][0],
                                   queue_entry=plan.positions[j.spec.job_id][1]) for j in (r1, w2)]
    for moved_on in (1.0, 600.0):
        again = step(config, moved(settled, moved_on), NOW + moved_on)
        assert not again.actions and not again.positions
        assert again.order == plan.order and again.levels == plan.levels


def test_a_plan_that_acts_or_drifts_does_not_stand():
    config = EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,))
    starts = step(config, [job("j2", 2, served=0.0, running=False, level=0)], NOW, gpus_free=2)
    assert kinds(starts) == [("start", "j2")] and starts.stands_until_s == NOW
    las = EngineConfig(policy="las", thresholds_gpu_s=(3600.0,))
    drifting = step(las, [job("j1", 2, served=10.0, running=True, level=0, run_start=0.0)], NOW)
    assert drifting.stands_until_s == -math.inf
    # every running job in the last queue, nothing waits to be promoted: it stands for good
    last = step(config, [job("j1", 2, served=50_000.0, running=True, level=1, run_start=0.0)], NOW)
    assert last.stands_until_s == math.inf


def test_a_running_job_is_next_judged_at_its_queue_threshold():
    thresholds = (3600.0, 36000.0)
    tol = LEVEL_TOLERANCE_GPU_S
    assert next_threshold_gpu_s(thresholds, 1000.0) == 3600.0 - tol
    assert next_threshold_gpu_s(thresholds, 3600.0) == 36000.0 - tol
    assert next_threshold_gpu_s(thresholds, 40_000.0) is None

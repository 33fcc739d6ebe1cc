"""The engine on hand-made snapshots: pure state -> plan, no simulator."""

import pytest

from controller.core.engine import Engine, EngineConfig
from controller.core.gittins import ServiceDistribution
from controller.core.model import InputError, JobSpec, JobState, Node, Snapshot
from controller.core.policies import POLICIES, PolicyContext


def job(i, gpus, *, served=0.0, running=False, first_start=None, submit=0.0, duration=100.0, skew=0.0,
        placement=(), waited=0.0, executed=0.0):
    state = JobState(spec=JobSpec(f"j{i}", gpus, submit, duration, skew=skew), index=i,
                     attained_gpu_s=served, queue_service_gpu_s=served, first_start_s=first_start,
                     running=running, placement=placement, waited_since_promotion_s=waited,
                     executed_since_promotion_s=executed)
    return state


def nodes(*free, total=4):
    return [Node(f"n{i}", total, f) for i, f in enumerate(free)]


def kinds(plan):
    return sorted((a.kind, a.job_id) for a in plan.actions)


def test_every_action_has_a_reason_and_decision_id():
    snap = Snapshot(0, [job(0, 2), job(1, 4)], nodes(4))
    plan = Engine(EngineConfig(policy="dlas")).step(snap)
    assert plan.actions
    assert all(a.reason and a.decision_id.startswith("r0.") for a in plan.actions)


def test_dlas_new_job_preempts_demoted_job():
    running = job(0, 4, served=5000, running=True, first_start=0, placement=(("n0", 4),))
    new = job(1, 4, submit=10)
    plan = Engine(EngineConfig(policy="dlas", thresholds_gpu_s=(3600,))).step(
        Snapshot(10, [running, new], nodes(0)))
    assert kinds(plan) == [("preempt", "j0"), ("start", "j1")]
    assert plan.levels == {"j0": 1, "j1": 0}


def test_non_preemptable_running_job_keeps_its_gpus_and_the_next_victim_yields():
    import dataclasses
    kept = job(0, 4, served=9000, running=True, first_start=0, placement=(("n0", 4),))
    kept.spec = dataclasses.replace(kept.spec, preemptable=False)
    victim = job(1, 4, served=5000, running=True, first_start=1, placement=(("n1", 4),))
    new = job(2, 4, submit=10)
    plan = Engine(EngineConfig(policy="dlas", thresholds_gpu_s=(3600,))).step(
        Snapshot(10, [kept, victim, new], nodes(0, 0)))
    # j0 is the lowest priority (most service) but cannot be preempted: j1 yields instead
    assert kinds(plan) == [("preempt", "j1"), ("start", "j2")]
    alone = Engine(EngineConfig(policy="dlas", thresholds_gpu_s=(3600,))).step(
        Snapshot(10, [kept, job(2, 4, submit=10)], nodes(0)))
    assert kinds(alone) == []  # nothing to preempt: the new job waits


def placed(state, level, entry):
    state.queue_level, state.queue_entry = level, entry
    return state


def test_dlas_no_preemption_inside_a_queue():
    """A waiting job placed ahead of a running one of its queue (the old 'FIFO by
    first start' rule would let it evict) waits: running jobs come first."""
    earlier = placed(job(0, 4, served=100, first_start=0), 0, 5.0)
    runner = placed(job(1, 4, served=200, running=True, first_start=6, placement=(("n0", 4),)), 0, 7.0)
    plan = Engine(EngineConfig(policy="dlas")).step(Snapshot(10, [earlier, runner], nodes(0)))
    assert plan.actions == []
    assert plan.order == ["j1", "j0"]
    assert plan.positions == {}  # nobody moved


def test_dlas_preempted_job_waits_at_head_of_its_queue():
    """Only a higher queue preempts; the preempted job goes ahead of its queue's
    waiting jobs, and the newcomer that started joins the tail of Q_1's running jobs."""
    runner = placed(job(0, 4, served=5000, running=True, first_start=0, placement=(("n0", 4),)), 1, 7.0)
    waiting = placed(job(1, 4, served=4000, first_start=1), 1, 3.0)
    new = job(2, 4, submit=10)
    plan = Engine(EngineConfig(policy="dlas", thresholds_gpu_s=(3600,))).step(
        Snapshot(10, [runner, waiting, new], nodes(0)))
    assert kinds(plan) == [("preempt", "j0"), ("start", "j2")]
    assert plan.positions["j2"] == (0, 8.0)  # the tail: above every entry in use
    level, entry = plan.positions["j0"]
    assert level == 1 and entry < 3.0
    assert "j1" not in plan.positions


def test_dlas_demoted_job_joins_the_tail_behind_waiting_jobs():
    """A running job that crossed hi_1 enters Q_2 at its tail, behind the jobs
    already waiting there: one of them that fits takes its GPUs."""
    demoted = placed(job(0, 4, served=3700, running=True, first_start=0, placement=(("n0", 4),)), 0, 1.0)
    waiting = placed(job(1, 4, served=3600, first_start=1), 1, 2.0)
    plan = Engine(EngineConfig(policy="dlas", thresholds_gpu_s=(3600,))).step(
        Snapshot(100, [demoted, waiting], nodes(0)))
    assert plan.order == ["j1", "j0"]
    assert kinds(plan) == [("preempt", "j0"), ("start", "j1")]
    assert plan.positions == {"j1": (1, 3.0), "j0": (1, 4.0)}  # both join tails (running, waiting)


def test_entered_jobs_by_entering_time():
    """Arrivals by submit time; a job demoted while running at its crossing time."""
    late = job(0, 1, submit=50)
    early = job(1, 1, submit=20)
    # 4 GPUs since it crossed 3600 GPU-s 100 GPU-s ago: it entered Q_2 at t = 75
    demoted = placed(job(2, 4, served=3700, running=True, first_start=0, placement=(("n0", 4),)), 0, 0.0)
    # a waiting job whose place is in another queue enters at the round's time
    moved_while_waiting = placed(job(3, 1, served=3650, first_start=0), 0, 0.5)
    plan = Engine(EngineConfig(policy="dlas", thresholds_gpu_s=(3600,))).step(
        Snapshot(100, [late, early, moved_while_waiting, demoted], nodes(0)))
    assert plan.order == ["j1", "j0", "j2", "j3"]


def test_skipping_keeps_gpus_busy():
    snap = Snapshot(0, [job(0, 8), job(1, 2), job(2, 2)], nodes(4))
    plan = Engine(EngineConfig(policy="fifo-skip")).step(snap)
    assert kinds(plan) == [("start", "j1"), ("start", "j2")]
    assert "needs 8 GPUs" in plan.wait_reasons["j0"]


def test_strict_fifo_blocks_head_of_line():
    snap = Snapshot(0, [job(0, 8), job(1, 2)], nodes(4))
    plan = Engine(EngineConfig(policy="fifo")).step(snap)
    assert plan.actions == []
    assert "head-of-line job j0" in plan.wait_reasons["j1"]


def test_fifo_never_preempts():
    running = job(1, 4, running=True, first_start=1, submit=1, placement=(("n0", 4),))
    older = job(0, 4, submit=0)
    plan = Engine(EngineConfig(policy="fifo-skip")).step(Snapshot(2, [running, older], nodes(0)))
    assert plan.actions == []


def test_starvation_promotion():
    starving = placed(job(0, 4, served=5000, waited=1000, executed=400, first_start=5), 1, 1.0)
    runner = placed(job(1, 4, served=4000, running=True, first_start=1, placement=(("n0", 4),)), 1, 2.0)
    config = EngineConfig(policy="dlas", promote_knob=2)
    plan = Engine(config).step(Snapshot(3000, [starving, runner], nodes(0)))
    assert kinds(plan) == [("preempt", "j1"), ("promote", "j0"), ("start", "j0")]
    assert "PROMOTEKNOB 2" in plan.of_kind("promote")[0].reason
    # below the knob: no promotion
    starving.waited_since_promotion_s = 700
    assert Engine(config).step(Snapshot(3000, [starving, runner], nodes(0))).actions == []


def test_consolidation_waits_and_backfills():
    sensitive = job(0, 8, skew=0.7)
    small = job(1, 2)
    # 8 GPUs free, but spread over 3 nodes: the sensitive job waits, the small one runs
    snap = Snapshot(0, [sensitive, small], [Node("a", 4, 4), Node("b", 4, 2), Node("c", 4, 2)])
    plan = Engine(EngineConfig(policy="dlas", placement="consolidate")).step(snap)
    assert kinds(plan) == [("start", "j1")]
    assert "waiting for consolidation" in plan.wait_reasons["j0"]
    spread = Engine(EngineConfig(policy="dlas", placement="spread")).step(snap)
    assert ("start", "j0") in kinds(spread)


def test_dgittins_orders_by_index_in_first_queue():
    service = ServiceDistribution([10, 10, 10, 1000])
    near_done = job(0, 1, served=9, first_start=0)  # likely to finish within the quantum
    fresh = job(1, 1, served=0, first_start=1)
    plan = Engine(EngineConfig(policy="dgittins", thresholds_gpu_s=(100,))).step(
        Snapshot(5, [fresh, near_done], nodes(1), service=service))
    assert plan.order == ["j0", "j1"]
    assert kinds(plan) == [("start", "j0")]


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_respects_capacity(name):
    jobs = [job(i, g, served=i * 10.0) for i, g in enumerate([3, 1, 2, 4, 1])]
    plan = Engine(EngineConfig(policy=name, placement="spread")).step(Snapshot(0, jobs, nodes(4, 2)))
    started = sum(next(j.num_gpus for j in jobs if j.job_id == a.job_id) for a in plan.of_kind("start"))
    assert 0 < started <= 6
    for a in plan.of_kind("start"):
        assert sum(g for _, g in a.placement) == next(j.num_gpus for j in jobs if j.job_id == a.job_id)


@pytest.mark.parametrize("kwargs, field", [
    ({"policy": "nope"}, "policy 'nope'"),
    ({"thresholds_gpu_s": (10, 5)}, "threshold 5"),
    ({"thresholds_gpu_s": ()}, "at least one threshold"),
    ({"placement": "random"}, "placement 'random'"),
    ({"promote_knob": 0}, "promote_knob"),
    ({"pack_limit": 2}, "pack_limit"),
])
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(InputError, match=field):
        EngineConfig(**kwargs)


def test_perfect_knowledge_needs_duration():
    unknown = JobState(spec=JobSpec("x", 1, 0, None), index=0)
    with pytest.raises(InputError, match="duration unknown"):
        Engine(EngineConfig(policy="srtf")).step(Snapshot(0, [unknown, job(1, 1)], nodes(0)))


@pytest.mark.parametrize("name", ["dlas", "dgittins"])
def test_bulk_order_equals_per_job_sort_keys(name):
    """The numpy lexsort of dlas/dgittins orders exactly as their sort keys do."""
    import random

    from controller.core.policies import get_policy

    rng = random.Random(7)
    service = ServiceDistribution([rng.lognormvariate(5, 2) for _ in range(300)])
    jobs = []
    for i in range(400):
        started = rng.random() < 0.5
        served = rng.choice([0.0, 10.0, 99.0, 100.0, rng.expovariate(1 / 300)]) if started else 0.0
        jobs.append(job(i, rng.choice([1, 2, 4]), served=served, submit=float(rng.randint(0, 50)),
                        first_start=float(rng.randint(0, 60)) if started else None))
    policy = get_policy(name)
    ctx = PolicyContext(now_s=100, thresholds_gpu_s=(100.0, 1000.0), service=service)
    bulk = [j.job_id for _, j in policy.ordered(jobs, ctx)]
    policy.prepare(jobs, ctx)
    one_by_one = [j.job_id for j in sorted(jobs, key=lambda j: policy.sort_key(j, ctx))]
    assert bulk == one_by_one


def test_dgittins_quantum_is_hi_past_the_jobs_own_service():
    """Delta = hi_1: a job at 90 of hi_1 = 100 is judged on (90, 190], where all its
    likely ends lie; a quantum ending at hi_1 (the old rule) held no sample: index 0."""
    service = ServiceDistribution([50] * 5 + [150] * 5)
    almost = job(0, 1, served=90, first_start=0, submit=0)
    fresh = job(1, 1, served=0, submit=0)
    plan = Engine(EngineConfig(policy="dgittins", thresholds_gpu_s=(100,))).step(
        Snapshot(5, [fresh, almost], nodes(1), service=service))
    assert plan.order == ["j0", "j1"]
    assert plan.keys["j0"] == pytest.approx(1 / 60)


@pytest.mark.parametrize("ended, expected", [(299, ["j0", "j1"]), (300, ["j1", "j0"])])
def test_dgittins_is_dlas_until_300_jobs_ended(ended, expected):
    """A learned distribution orders nothing before 300 samples (its index is noise)."""
    service = ServiceDistribution([10] * (ended - 1) + [1000], learned=True)
    early = job(0, 1, served=50, first_start=0, submit=0)  # its index: 0 (no sample in (50, 150])
    late = job(1, 1, served=0, submit=1)
    plan = Engine(EngineConfig(policy="dgittins", thresholds_gpu_s=(100,))).step(
        Snapshot(5, [late, early], nodes(1), service=service))
    assert plan.order == expected


def test_dgittins_keeps_a_running_job_in_its_queue_whatever_its_index():
    """hi_1 = 100: the running job (served 55, no sample in (55, 155]: index 0) keeps
    its GPUs against a waiting job of its queue with a higher index; it is judged
    again only when it enters the next queue (the spec's rung, a second judgement
    inside the queue, cost preemptions: controller/core/policies/dgittins.py)."""
    service = ServiceDistribution([10] * 5 + [1000] * 5)
    runner = job(0, 1, served=55, running=True, first_start=0, placement=(("n0", 1),))
    runner.run_start_s, runner.queue_level, runner.queue_entry = 0.0, 0, 0.0
    waiter = job(1, 1, submit=1)
    waiter.queue_level, waiter.queue_entry = 0, 1.0
    plan = Engine(EngineConfig(policy="dgittins", thresholds_gpu_s=(100,))).step(
        Snapshot(55, [runner, waiter], [Node("n0", 1, 0)], service=service))
    assert kinds(plan) == []
    # entering queue 2 it is judged at hi_1 against queue 2's waiting jobs, by G(a, inf)
    runner = job(0, 1, served=101, running=True, first_start=0, placement=(("n0", 1),))
    runner.run_start_s, runner.queue_level, runner.queue_entry = 0.0, 0, 0.0
    waiter = job(1, 1, served=200, submit=1)  # expects 800 more; the runner's index is 0.5 / 900
    waiter.queue_level, waiter.queue_entry = 1, 1.0
    plan = Engine(EngineConfig(policy="dgittins", thresholds_gpu_s=(100,))).step(
        Snapshot(101, [runner, waiter], [Node("n0", 1, 0)], service=service))
    assert kinds(plan) == [("preempt", "j0"), ("start", "j1")]

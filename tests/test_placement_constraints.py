"""A job's own --nodelist / --exclude / -N: the model validates them, placement honours
them, and the engine (MLFQ walk, generic walk, count mode) never plans past them."""

import pytest

from controller.core.engine import Engine, EngineConfig
from controller.core.model import InputError, JobSpec, JobState, Node, Snapshot
from controller.core.placement import FreeGpus, describe_constraints, place_constrained


def spec(gpus, **constraints):
    return JobSpec("j", gpus, 0.0, **constraints)


def placed(gpus, free, consolidate=False, max_per_node=4, **constraints):
    return place_constrained(gpus, free, spec(gpus, **constraints), consolidate=consolidate,
                             max_gpus_per_node=max_per_node)


# ---------------------------------------------------------------- the model

def test_defaults_leave_every_existing_job_unconstrained():
    plain = JobSpec("1", 2, 0.0, 10.0, 0.1, 1, "p", "u", "m")  # positional, as the trace readers build it
    assert not plain.constrained
    assert (plain.required_nodes, plain.excluded_nodes, plain.min_nodes, plain.max_nodes) == ((), (), None, None)
    assert JobSpec("2", 2, 0.0, excluded_nodes=["a"]).constrained
    assert JobSpec("2", 2, 0.0, excluded_nodes=["a"]).excluded_nodes == ("a",)


@pytest.mark.parametrize("constraints, needle", [
    ({"min_nodes": 0}, "min_nodes value 0"),
    ({"max_nodes": -1}, "max_nodes value -1"),
    ({"min_nodes": 1.5}, "min_nodes value 1.5"),
    ({"min_nodes": 3, "max_nodes": 2}, "max_nodes value 2 is below min_nodes 3"),
    ({"required_nodes": "gpu1"}, "required_nodes value 'gpu1'"),
    ({"excluded_nodes": ["gpu1", ""]}, "excluded_nodes value"),
    ({"required_nodes": ["gpu1"], "excluded_nodes": ["gpu1"]}, "gpu1 is both required"),
    ({"required_nodes": ["a", "b", "c"], "max_nodes": 2}, "max_nodes value 2 is below the 3 required"),
])
def test_bad_constraints_name_the_field_and_value(constraints, needle):
    with pytest.raises(InputError, match="job j: ") as err:
        spec(4, **constraints)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_constraints_read_as_sbatch_options():
    assert describe_constraints(spec(8, required_nodes=["a"], excluded_nodes=["c", "d"], min_nodes=2,
                                     max_nodes=2)) == "--nodelist=a --exclude=c,d -N 2"
    assert describe_constraints(spec(8, min_nodes=2)) == "-N 2-"
    assert describe_constraints(spec(8, max_nodes=3)) == "-N 1-3"


# ---------------------------------------------------------------- placement

FREE = {"a": 4, "b": 4, "c": 2, "d": 1}


def test_excluded_nodes_are_never_used():
    assert placed(2, FREE) == (("c", 2),)  # best fit without constraints
    assert placed(2, FREE, excluded_nodes=["c"]) == (("a", 2),)
    assert placed(8, FREE, excluded_nodes=["a"]) is None  # 7 GPUs left on b, c, d
    slots = placed(6, FREE, excluded_nodes=["b"])
    assert "b" not in dict(slots) and sum(g for _, g in slots) == 6


def test_every_required_node_is_in_the_set():
    assert placed(2, FREE, required_nodes=["b"]) == (("b", 2),)  # not c, the best fit
    assert placed(5, FREE, required_nodes=["b"]) == (("b", 4), ("d", 1))  # b first, then others
    slots = placed(2, FREE, required_nodes=["a", "d"])  # both, one GPU each at least
    assert dict(slots) == {"a": 1, "d": 1}
    assert placed(2, {**FREE, "d": 0}, required_nodes=["d"]) is None  # required node full
    assert placed(2, FREE, required_nodes=["gone"]) is None  # down or unknown node


def test_exact_node_count_splits_the_gang_evenly():
    assert placed(4, FREE, min_nodes=2, max_nodes=2) == (("a", 2), ("c", 2))  # best fit for 2 each
    assert placed(8, FREE, min_nodes=2, max_nodes=2) == (("a", 4), ("b", 4))
    assert placed(8, {"a": 4, "b": 3, "c": 4}, min_nodes=2, max_nodes=2) == (("a", 4), ("c", 4))
    assert placed(8, {"a": 8, "b": 3}, min_nodes=2, max_nodes=2) is None  # 5+3 is not Slurm's layout
    assert placed(3, {"a": 1, "b": 1, "c": 2}, min_nodes=2, max_nodes=2) == (("a", 1), ("c", 2))
    assert placed(1, FREE, min_nodes=2, max_nodes=2) is None  # more nodes than GPUs
    assert placed(4, {"a": 4, "b": 4}, min_nodes=3, max_nodes=3) is None  # only two nodes
    # -N 1: a job that fits nowhere on one node waits, even with 4 GPUs free over two
    assert placed(4, {"a": 2, "b": 2}, min_nodes=1, max_nodes=1) is None
    assert placed(4, {"a": 2, "b": 2}) == (("a", 2), ("b", 2))


def test_a_minimum_of_two_nodes_or_more_is_placed_as_exactly_that_many():
    # sbatch --gres=gpu:2 --nodelist=a,b: Slurm sets min nodes 2, counts 4 GPUs, needs 2 on each
    assert placed(4, {"a": 3, "b": 2}, required_nodes=["a", "b"], min_nodes=2) == (("a", 2), ("b", 2))
    assert placed(4, {"a": 3, "b": 1, "c": 4}, required_nodes=["a", "b"], min_nodes=2) is None
    # -N 2-3 --gres=gpu:1: 2 GPUs counted at the minimum, one per node
    assert placed(2, FREE, min_nodes=2, max_nodes=3) == (("c", 1), ("d", 1))
    slots = placed(4, FREE, min_nodes=3)  # -N 3-
    assert len(slots) == 3 and sum(g for _, g in slots) == 4


def test_a_one_node_minimum_stays_within_max_nodes():
    slots = placed(6, {"a": 2, "b": 2, "c": 4}, max_nodes=2)  # fragments first would take 3 nodes
    assert slots == (("a", 2), ("c", 4))
    assert placed(6, {"a": 2, "b": 2, "c": 2}, max_nodes=2) is None


def test_consolidated_gang_with_its_own_nodes():
    # a sensitive 8-GPU job needs 2 nodes; its own -N 3 wins over consolidation
    slots = placed(8, {"a": 4, "b": 4, "c": 4}, consolidate=True, min_nodes=3)
    assert len(slots) == 3
    # without -N it may not spread past 2 nodes
    assert placed(8, {"a": 4, "b": 2, "c": 2}, consolidate=True, excluded_nodes=["d"]) is None


def test_free_gpus_index_places_constrained_jobs_on_what_is_left():
    free = FreeGpus({"a": 4, "b": 4})
    free.take("a", 3)
    assert free.place_constrained(spec(2, excluded_nodes=["b"]), consolidate=False, max_gpus_per_node=4) is None
    assert free.place_constrained(spec(2, required_nodes=["b"]), consolidate=False,
                                  max_gpus_per_node=4) == (("b", 2),)


# ---------------------------------------------------------------- the engine

def job(i, gpus, *, served=0.0, running=False, placement=(), submit=0.0, **constraints):
    return JobState(spec=JobSpec(f"j{i}", gpus, submit, 100.0, **constraints), index=i, attained_gpu_s=served,
                    queue_service_gpu_s=served, running=running, placement=placement,
                    first_start_s=0.0 if running else None)


def cluster(**free):
    return [Node(name, 4, gpus) for name, gpus in free.items()]


def starts(plan):
    return {a.job_id: dict(a.placement) for a in plan.of_kind("start")}


@pytest.mark.parametrize("policy", ["dlas", "las", "fifo-skip"])
def test_engine_never_starts_a_job_on_an_excluded_node(policy):
    # only n0 has room; the job excludes it: it waits, and the reason says why
    snap = Snapshot(0, [job(0, 4, running=True, placement=(("n1", 4),)), job(1, 2, excluded_nodes=["n0"])],
                    cluster(n0=4, n1=0))
    plan = Engine(EngineConfig(policy=policy, thresholds_gpu_s=(1e9,))).step(snap)
    assert "j1" not in starts(plan)
    assert plan.wait_reasons["j1"] == ("node constraints (--exclude=n0): waits for 2 GPUs on n1 (0 free):"
                                       " held by job j0 (queue 1, higher priority)")


@pytest.mark.parametrize("policy", ["dlas", "las"])
def test_engine_spreads_a_minus_n_2_job_over_two_nodes(policy):
    snap = Snapshot(0, [job(0, 4, min_nodes=2, max_nodes=2)], cluster(n0=4, n1=4))
    plan = Engine(EngineConfig(policy=policy)).step(snap)
    assert starts(plan) == {"j0": {"n0": 2, "n1": 2}}  # one node would hold it; -N 2 says two


def test_a_waiting_constrained_job_leaves_the_free_gpus_to_later_jobs():
    # j1 (--nodelist=n1) is next in the walk but n1 is held by j0, which keeps it (same
    # queue, running first): j1 waits and j2, which the walk skipped, backfills n0
    snap = Snapshot(0, [job(0, 4, running=True, placement=(("n1", 4),)), job(1, 2, required_nodes=["n1"]),
                        job(2, 4, submit=5.0)], cluster(n0=4, n1=0))
    plan = Engine(EngineConfig(policy="dlas", thresholds_gpu_s=(1e9,))).step(snap)
    assert starts(plan) == {"j2": {"n0": 4}} and not plan.of_kind("preempt")
    assert plan.wait_reasons["j1"] == ("node constraints (--nodelist=n1): waits for 2 GPUs on n1 (0 free):"
                                       " held by job j0 (queue 1, higher priority)")


def test_a_constrained_job_gets_the_node_its_victim_frees():
    # j0 has left queue 1: j1 (--nodelist=n1) preempts it and goes where it was
    snap = Snapshot(0, [job(0, 4, served=1e4, running=True, placement=(("n1", 4),)),
                        job(1, 2, required_nodes=["n1"]), job(2, 4, submit=5.0)], cluster(n0=4, n1=0))
    plan = Engine(EngineConfig(policy="dlas", thresholds_gpu_s=(100.0,))).step(snap)
    assert [a.job_id for a in plan.of_kind("preempt")] == ["j0"]
    assert starts(plan) == {"j1": {"n1": 2}, "j2": {"n0": 4}}


def test_a_job_that_can_never_fit_says_so():
    snap = Snapshot(0, [job(0, 8, min_nodes=1, max_nodes=1)], cluster(n0=4, n1=4))
    plan = Engine(EngineConfig(policy="dlas")).step(snap)
    assert not plan.of_kind("start")
    assert plan.wait_reasons["j0"] == ("node constraints (-N 1): 8 GPUs cannot fit on the available nodes"
                                       " even when all are free")


def test_count_mode_ignores_names_but_never_plans_a_job_that_cannot_fit():
    config = EngineConfig(policy="dlas", placement="count")
    drained = [Node("n0", 4, 4), Node("n1", 4, 4, available=False)]
    fits = Snapshot(0, [job(0, 2, excluded_nodes=["n1"])], drained)
    assert starts(Engine(config).step(fits)) == {"j0": {"*": 2}}
    never = Snapshot(0, [job(0, 2, required_nodes=["n1"]), job(1, 2)], drained)
    plan = Engine(config).step(never)
    assert starts(plan) == {"j1": {"*": 2}}
    assert "cannot fit" in plan.wait_reasons["j0"]


def test_unconstrained_plans_are_unchanged():
    jobs = [job(0, 2), job(1, 4, submit=1.0), job(2, 1, submit=2.0)]
    plan = Engine(EngineConfig(policy="dlas")).step(Snapshot(0, jobs, cluster(n0=4, n1=3)))
    assert starts(plan) == {"j0": {"n1": 2}, "j1": {"n0": 4}, "j2": {"n1": 1}}


def test_no_victim_is_preempted_for_a_gang_that_cannot_be_placed():
    # j4 (4 GPUs, --nodelist=n0 -N 1) is selected by the walk, which counts GPUs only:
    # the demoted j0 (n0) and j1 (n1) would be its victims. But n0 keeps j2 (queue 1),
    # so j4 cannot be placed even with both gone: nobody is preempted for it (before,
    # both were, and their GPUs went to nobody).
    snap = Snapshot(0, [job(0, 2, served=1e4, running=True, placement=(("n0", 2),)),
                        job(1, 2, served=1e4, running=True, placement=(("n1", 2),)),
                        job(2, 2, running=True, placement=(("n0", 2),)),
                        job(3, 2, running=True, placement=(("n1", 2),)),
                        job(4, 4, submit=1.0, required_nodes=["n0"], min_nodes=1, max_nodes=1)],
                    cluster(n0=0, n1=0))
    plan = Engine(EngineConfig(policy="dlas", thresholds_gpu_s=(100.0,))).step(snap)
    assert not plan.of_kind("preempt") and not starts(plan)
    assert "node constraints (--nodelist=n0 -N 1)" in plan.wait_reasons["j4"]


def test_only_the_victim_whose_gpus_the_newcomer_uses_is_preempted():
    # j3 (4 GPUs, -N 1) fits only on n1 once the demoted j1 leaves; j0, demoted too,
    # holds GPUs on n0 that j3 does not use: it keeps running (a victim is preempted
    # only when a placed newcomer uses its GPUs).
    snap = Snapshot(0, [job(0, 2, served=1e4, running=True, placement=(("n0", 2),)),
                        job(1, 2, served=2e4, running=True, placement=(("n1", 2),)),
                        job(2, 2, running=True, placement=(("n0", 2),)),
                        job(3, 4, submit=1.0, min_nodes=1, max_nodes=1)], cluster(n0=0, n1=2))
    plan = Engine(EngineConfig(policy="dlas", thresholds_gpu_s=(100.0,))).step(snap)
    assert [a.job_id for a in plan.of_kind("preempt")] == ["j1"]
    assert starts(plan) == {"j3": {"n1": 4}}

"""The simulator's two audits of the victim rule (issue 28): preemptions that started
nobody (controller.replay.cluster.SimCluster.judge_handoffs) and jobs that waited
behind a usable victim for more than two rounds (SimCluster.audit_waits).

Each is counted on a small replay built to produce it, and not counted on the same
replay changed so that the preemption pays off or the victim may not be preempted."""
import pytest

from controller.core.engine import EngineConfig
from controller.core.model import JobSpec, JobState
from controller.core.plan import Plan, Preempt, Start
from controller.replay.cluster import RunState, SimCluster
from controller.replay.run_config import SimConfig
from controller.replay.lever_replay import LeverSettings, replay_levers
from controller.replay.results import handoff_line, summarize
from controller.replay.simulator import Simulation

DLAS = EngineConfig(policy="dlas", thresholds_gpu_s=(1000.0,))


def grace_replay(d_duration_s: float, incremental: bool):
    """Two nodes of 4 GPUs, grace period 400 s. D (1 GPU, queue 1) runs on n0000; A
    (4 GPUs) runs on n0001 and is in queue 2 by t=300, when B (4 GPUs) arrives: B fits
    only on A's node, so A is preempted for it. If D ends within A's grace period, the
    next round places B on n0000 (now free) and B starts there: A's GPUs went to
    nobody waiting for them, and A was preempted for nothing."""
    config = SimConfig(nodes=2, gpus_per_node=4, engine=DLAS, preempt_grace_s=400.0, incremental=incremental)
    specs = [JobSpec("D", 1, 0.0, d_duration_s), JobSpec("A", 4, 1.0, 5000.0), JobSpec("B", 4, 300.0, 100.0)]
    return Simulation(config).run(specs)


@pytest.mark.parametrize("incremental", [True, False], ids=["mlfq-loop", "generic-loop"])
def test_a_preemption_whose_beneficiary_starts_elsewhere_started_nobody(incremental):
    result = grace_replay(d_duration_s=500.0, incremental=incremental)  # D ends at 500, A leaves at 700
    starts = {o.job_id: o.start_s for o in result.outcomes}
    assert starts["B"] == 500.0  # on D's node, before A's grace period was over
    assert result.preemptions == 1
    assert result.useless_preemptions == 1
    assert result.useless_examples == [("A", ("B",), 300.0)]


@pytest.mark.parametrize("incremental", [True, False], ids=["mlfq-loop", "generic-loop"])
def test_a_preemption_whose_beneficiary_takes_the_freed_gpus_is_not_counted(incremental):
    result = grace_replay(d_duration_s=2000.0, incremental=incremental)  # D still runs when A leaves
    starts = {o.job_id: o.start_s for o in result.outcomes}
    assert starts["B"] == 700.0  # on A's GPUs, once its grace period was over
    assert result.preemptions == 1
    assert result.useless_preemptions == 0


def test_a_preemption_without_grace_hands_over_at_once_and_counts_nothing():
    config = SimConfig(nodes=1, gpus_per_node=4, engine=DLAS)
    result = Simulation(config).run([JobSpec("A", 4, 0.0, 5000.0), JobSpec("B", 4, 2000.0, 100.0)])
    assert (result.preemptions, result.useless_preemptions) == (1, 0)


def test_a_victim_that_ends_in_its_grace_period_is_no_preemption_and_not_judged():
    config = SimConfig(nodes=1, gpus_per_node=4, engine=DLAS, preempt_grace_s=400.0, grace_work_kept=True)
    result = Simulation(config).run([JobSpec("A", 4, 0.0, 400.0), JobSpec("B", 4, 300.0, 100.0)])
    assert (result.preemptions, result.useless_preemptions) == (0, 0)


def test_the_lever_replay_judges_its_preemptions_too():
    config = SimConfig(nodes=1, gpus_per_node=4, engine=DLAS, round_interval_s=10.0, preempt_grace_s=30.0)
    replay = replay_levers(config, [JobSpec("A", 4, 0.0, 5000.0), JobSpec("B", 4, 2000.0, 100.0)],
                           LeverSettings(requeue_settle_s=0.0))
    assert replay.preemptions == 1
    assert replay.useless_preemptions == 0  # Slurm's scheduler started B on A's node
    assert replay.waited_behind_victim == 0


# --------------------------------------------------- waiting behind a usable victim

def audited_cluster(victim_preemptable: bool = True):
    """Two 4-GPU nodes of partitions p and q. V (queue 2, 4 GPUs) runs on n0000 (p);
    H (queue 1, 4 GPUs) on n0001 (q). J (2 GPUs, partition p) waits; in the walk order
    given, J comes before V: V's preemption would place J."""
    config = SimConfig(nodes=2, gpus_per_node=4, engine=DLAS, node_kinds=((1, ("p",), ""), (1, ("q",), "")))
    specs = [JobSpec("H", 4, 0.0, 9000.0, partitions=("q",)),
             JobSpec("V", 4, 0.0, 9000.0, partitions=("p",), preemptable=victim_preemptable),
             JobSpec("J", 2, 10.0, 100.0, partitions=("p",))]
    jobs = [JobState(spec=spec, index=i) for i, spec in enumerate(specs)]
    cluster = SimCluster(config, jobs, [RunState() for _ in jobs], None)
    cluster.start(jobs[0], (("n0001", 4),), 0.0)
    cluster.start(jobs[1], (("n0000", 4),), 0.0)
    order = [jobs[0], jobs[2], jobs[1]]  # H (queue 1), J (queue 1, waiting), V (queue 2)
    return cluster, order


def test_a_job_behind_a_usable_victim_counts_after_the_third_round_in_a_row():
    cluster, order = audited_cluster()
    for number in (1, 2):
        cluster.audit_waits(lambda: order, 100.0 * number)
        assert cluster.waited_behind == {}  # two rounds: not yet
    cluster.audit_waits(lambda: order, 300.0)
    assert cluster.waited_behind == {2: (3, 100.0)}  # J, three rounds from t=100
    result = cluster.result("dlas", 3, 0, [], 0, [])
    assert result.waited_behind_victim == 1
    assert result.behind_examples == [("J", 3, 100.0)]


def test_a_round_not_behind_a_victim_restarts_the_count():
    cluster, order = audited_cluster()
    cluster.audit_waits(lambda: order, 100.0)
    cluster.audit_waits(lambda: order, 200.0)
    cluster.audit_waits(lambda: [order[0], order[2], order[1]], 300.0)  # V above J: not a victim for it
    cluster.audit_waits(lambda: order, 400.0)
    cluster.audit_waits(lambda: order, 500.0)
    assert cluster.waited_behind == {}


def test_a_victim_the_rule_keeps_is_no_usable_victim():
    cluster, order = audited_cluster(victim_preemptable=False)
    for number in range(1, 6):
        cluster.audit_waits(lambda: order, 100.0 * number)
    assert cluster.waited_behind == {}


def test_a_job_on_other_nodes_is_not_behind_the_victim():
    """H (queue 1) on q's node is the only other job: J, of partition p, may not use
    it, and V, on J's node, is above J: nothing J could have had."""
    cluster, order = audited_cluster()
    for number in range(1, 6):
        cluster.audit_waits(lambda: [order[2], order[1], order[0]], 100.0 * number)  # V, J, H
    assert cluster.waited_behind == {}


@pytest.mark.parametrize("promised", [True, False])
def test_a_job_a_preemption_was_made_for_is_not_asked_while_its_victim_leaves(promised):
    """H is preempted for J (a plan the audit takes as given: J placed on H's node);
    while H holds its GPUs through its grace period, J waits for them, not behind V."""
    cluster, order = audited_cluster()
    h, j, v = order
    if promised:
        cluster.expect(Plan(round_id=1, now_s=50.0, actions=[Preempt("r1.1", "H", "yields"),
                                                             Start("r1.2", "J", (("n0001", 2),), "queue 1")]))
    cluster.signal_now(h, 50.0)  # keeps its GPUs: J's start waits for them
    for number in range(1, 6):
        cluster.audit_waits(lambda: order, 100.0 * number)
    assert cluster.waited_behind == ({} if promised else {j.index: (5, 100.0)})


@pytest.mark.parametrize("incremental", [True, False], ids=["mlfq-loop", "generic-loop"])
def test_a_queue_one_job_that_preempts_at_once_never_waited_behind_a_victim(incremental):
    config = SimConfig(nodes=2, gpus_per_node=4, engine=DLAS, incremental=incremental,
                       node_kinds=((1, ("p",), ""), (1, ("q",), "")))
    specs = [JobSpec("V", 4, 0.0, 9000.0, partitions=("p",)), JobSpec("H", 4, 0.0, 9000.0, partitions=("q",)),
             *(JobSpec(f"J{k}", 2, 500.0 + 50 * k, 100.0, partitions=("p",)) for k in range(4))]
    result = Simulation(config).run(specs)
    assert result.preemptions >= 1
    assert result.waited_behind_victim == 0


def test_the_summary_line_names_both_figures():
    result = grace_replay(d_duration_s=500.0, incremental=True)
    summary = summarize(result)
    assert (summary["useless_preemptions"], summary["waited_behind_victim"]) == (1, 0)
    assert handoff_line(summary) == ("dlas: preemptions that started nobody: 1 of 1; "
                                     "jobs that waited behind a usable victim > 2 rounds: 0")

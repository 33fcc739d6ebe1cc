"""Engine.eligibility keeps the last round's Eligibility while the nodes stay the same
(and report no CPUs or memory: nothing in it changes within a round), and the writer's
``real_nodes`` with it: over rounds of changing node tables, its answers must equal a
fresh Eligibility's and placement.nodes_are_real's."""
from __future__ import annotations

from controller.core.engine import Engine, EngineConfig
from controller.core.model import JobSpec, JobState, Node, Snapshot
from controller.core.placement import COUNT_NODE, Eligibility, nodes_are_real

PLAIN = [Node("a1", 8, 8), Node("a2", 8, 4)]
PARTS = [Node("a1", 8, 8, partitions=("p1",)), Node("a2", 8, 8, partitions=("p2",), gpu_type="v100")]
ONE_DOWN = [Node("a1", 8, 8, partitions=("p1",)), Node("a2", 8, 8, available=False, partitions=("p2",),
                                                          gpu_type="v100")]
ROOM = [Node("a1", 8, 8, cpus_total=64, cpus_free=32, mem_total_mb=1000, mem_free_mb=500), Node("a2", 8, 8)]
PSEUDO = [Node(COUNT_NODE, 16, 16)]
# rounds: repeated tables (kept), equal copies (kept), changes, room-reporting nodes (renewed)
ROUNDS = [PLAIN, PLAIN, list(PLAIN), PARTS, PARTS, ONE_DOWN, ONE_DOWN, PARTS, ROOM, ROOM, PSEUDO, PSEUDO,
          PLAIN, PSEUDO, ROOM]
SPECS = [JobSpec("1", 4, 0.0), JobSpec("2", 4, 0.0, partitions=("p1",)), JobSpec("3", 4, 0.0, partitions=("p2",)),
         JobSpec("4", 4, 0.0, gpu_type="v100"), JobSpec("5", 2, 0.0, features=("ib",)),
         JobSpec("6", 2, 0.0, cpus_per_node=16, mem_per_node_mb=100)]


def _room(eligible):
    room = eligible.room()
    return None if room is None else (room.cpus_free, room.cpus_total, room.mem_free)


def test_kept_eligibility_answers_as_a_fresh_one():
    engine = Engine(EngineConfig(policy="dlas"))
    kept = 0
    last = None
    for nodes in ROUNDS:
        eligible = engine.eligibility(nodes)
        fresh = Eligibility(nodes)
        for spec in SPECS:
            assert eligible.allowed(spec) == fresh.allowed(spec), (nodes, spec)
        assert _room(eligible) == _room(fresh)
        if eligible.room() is not None:  # the round places a job: its room is this round's own
            eligible.room().take(SPECS[-1], (("a1", 2),))
        assert engine._real_nodes == nodes_are_real(nodes)
        if eligible is last:
            kept += 1
            assert _room(eligible) is None  # only a table without a NodeRoom is kept
        last = eligible
    assert kept >= 5  # the repeated tables were kept, not rebuilt


def test_the_round_writer_reads_the_nodes_real_flag():
    engine = Engine(EngineConfig(policy="dlas", placement="count"))
    for round_id, nodes in enumerate(ROUNDS):
        seen = []
        engine.writer = (lambda make: lambda plan: seen.append(make(plan)) or seen[-1])(type(engine).writer.__get__(
            engine))
        job = JobState(spec=JobSpec("9", 2, 0.0), index=0)
        snapshot = Snapshot(now_s=float(round_id), jobs=[job], nodes=nodes, round_id=round_id)
        engine.step(snapshot)
        assert seen[0].real_nodes == nodes_are_real(nodes)
        assert seen[0].on_real_nodes(nodes) == nodes_are_real(nodes)

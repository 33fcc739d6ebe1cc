"""The replay's heaps drop their stale items as they grow (controller.replay.stale_heap)
and a replay reads the same moments: pruned at every push or never, a finite
PROMOTEKNOB (many preemptions, many stale moments) replays alike, and as the generic loop."""
from __future__ import annotations

import heapq
from pathlib import Path

import pytest

from controller.core.engine import EngineConfig
from controller.replay import stale_heap
from controller.replay.simulator import SimConfig, Simulation
from controller.replay.stale_heap import StaleHeap
from controller.replay.traces import load_trace

PHILLY200 = Path(__file__).resolve().parent / "fixtures" / "traces" / "philly_pollux_head200.csv"


def test_pruning_keeps_the_live_items_in_their_order(monkeypatch):
    monkeypatch.setattr(stale_heap, "MIN_PRUNED", 4)
    heap: list = []
    stale: set[int] = set()
    pushes = StaleHeap(heap, lambda item: item[1] not in stale)
    pushed = []
    for n in range(200):
        item = ((n * 37) % 50 * 1.0, n, 0)  # equal times too: ties go by the rest of the item
        pushes.push(item)
        pushed.append(item)
        if n % 3:
            stale.add(n)  # most go stale, as a preempted job's moments do
    assert len(heap) < len(pushed)  # pruned on the way
    live = [item for item in pushed if item[1] not in stale]
    popped = []
    while heap:
        item = heapq.heappop(heap)
        if item[1] not in stale:  # a reader skips what is stale
            popped.append(item)
    assert popped == sorted(live)


def _replay(jobs, incremental, knob):
    config = SimConfig(nodes=2, gpus_per_node=4, engine=EngineConfig(promote_knob=knob), incremental=incremental,
                       drop_oversize=True)
    result = Simulation(config).run(jobs)
    return ([(o.job_id, o.start_s, o.end_s, o.preemptions, o.attained_gpu_s) for o in result.outcomes],
            result.preemptions, result.promotions, result.rounds)


@pytest.mark.parametrize("knob", [2.0, 8.0])
def test_a_replay_pruned_at_every_push_replays_alike(monkeypatch, knob):
    jobs = load_trace(str(PHILLY200))
    unpruned = _replay(jobs, True, knob)  # 200 jobs: never as many items as MIN_PRUNED
    monkeypatch.setattr(stale_heap, "MIN_PRUNED", 1)
    pruned = _replay(jobs, True, knob)
    assert pruned[2] > 0 and pruned[1] > 0  # promotions and preemptions: stale moments were pruned
    assert pruned == unpruned
    assert pruned == _replay(jobs, False, knob)

"""Slurm's start order (SimConfig.slurm_starts) replays on the incremental loop
(controller.replay.mlfq_replay) exactly as on the generic one (controller.replay.simulator
``_loop``, forced by ``SimConfig(incremental=False)``): every job's start, end and
preemptions, exact floats, and the run's counts, with and without time limits
(backfill's reservations), for several policies, node kinds, a promote knob and the
controller's preemption costs."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.core.engine import EngineConfig  # noqa: E402
from controller.replay import mlfq_replay  # noqa: E402
from controller.replay.simulator import SimConfig, Simulation  # noqa: E402
from controller.replay.traces import load_trace  # noqa: E402

PHILLY = ROOT / "tests" / "fixtures" / "traces" / "philly_pollux_head200.csv"
ITP = ROOT / "tests" / "fixtures" / "traces" / "itp_cluster10.csv"
JOBS60 = ROOT / "tests" / "fixtures" / "traces" / "tiresias_60_job.csv"
KINDS = ((1, ("p0",), ""), (1, ("p1",), ""), (2, ("p2", "p1"), ""))
COSTS = dict(preempt_grace_s=30.0, requeue_delay_s=5.0)

# name -> (trace, nodes, partitions dealt, policy, engine options, SimConfig options)
CASES = {
    "dlas": (PHILLY, 2, False, "dlas", {}, {}),
    "dlas-limit": (PHILLY, 2, False, "dlas", {}, dict(time_limit_s=2e5)),
    "dlas-kinds-limit": (PHILLY, 4, True, "dlas", {}, dict(time_limit_s=2e6, node_kinds=KINDS)),
    "dlas-kinds": (PHILLY, 4, True, "dlas", {}, dict(node_kinds=KINDS)),
    "dlas-knob2": (PHILLY, 2, False, "dlas", dict(promote_knob=2.0), {}),
    "dlas-knob1-limit": (PHILLY, 2, False, "dlas", dict(promote_knob=1.0), dict(time_limit_s=2e5)),
    "dlas-costs-limit": (PHILLY, 2, False, "dlas", dict(preempt_min_runtime_s=60.0),
                         dict(time_limit_s=2e5, **COSTS)),
    "dlas-3queues-itp": (ITP, 4, False, "dlas", dict(thresholds_gpu_s=(3600.0, 36000.0)), dict(time_limit_s=3600.0)),
    "dgittins": (PHILLY, 2, False, "dgittins", {}, {}),
    "dgittins-kinds-limit": (PHILLY, 4, True, "dgittins", {}, dict(time_limit_s=2e6, node_kinds=KINDS)),
    "fifo": (ITP, 4, False, "fifo", {}, {}),
    "fifo-skip-limit": (ITP, 4, False, "fifo-skip", {}, dict(time_limit_s=3600.0)),
    "60-limit-kinds": (JOBS60, 2, True, "dlas", {}, dict(time_limit_s=3600.0, node_kinds=(
        (1, ("p0", "p1"), ""), (1, ("p2", "p1"), "")))),
}


def replay(name: str, incremental: bool):
    trace, nodes, deal, policy, engine, options = CASES[name]
    jobs = load_trace(str(trace))
    if deal:
        jobs = [dataclasses.replace(job, partition=f"p{i % 3}") for i, job in enumerate(jobs)]
    config = SimConfig(nodes=nodes, gpus_per_node=8, engine=EngineConfig(policy=policy, **engine),
                       drop_oversize=True, slurm_starts=True, incremental=incremental, **options)
    result = Simulation(config).run(jobs)
    return ((result.rounds, result.preemptions, result.promotions, result.useless_preemptions,
             result.waited_behind_victim),
            [(o.job_id, o.start_s, o.end_s, o.preemptions) for o in result.outcomes])


@pytest.mark.parametrize("name", sorted(CASES))
def test_slurm_starts_replay_alike_on_both_loops(name, monkeypatch):
    calls = []
    real = mlfq_replay.run_mlfq
    monkeypatch.setattr(mlfq_replay, "run_mlfq", lambda *a, **k: calls.append(1) or real(*a, **k))
    fast = replay(name, incremental=True)
    assert calls, "slurm starts did not replay on the incremental loop"
    generic = replay(name, incremental=False)
    assert len(calls) == 1
    assert fast[0] == generic[0]
    differ = [(a, b) for a, b in zip(fast[1], generic[1]) if a != b]
    assert len(fast[1]) == len(generic[1]) and not differ, differ[:5]

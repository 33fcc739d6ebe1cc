"""Every replay knob gives the replay it gave before the simulator was made faster
(issue 37 item 5): each case below is replayed and compared, job for job, with the
result recorded in tests/fixtures/replay/knob_results.json (every job's start, end and
preemptions, exact floats; the run's rounds, preemptions, promotions and its two audits'
counts: useless preemptions, jobs that waited behind a usable victim).

The recording was made by this file (``python tests/test_replay_knobs_recorded.py
--record``) at commit 2672e84, before any of issue 37's simulator changes; rewrite it
only for a change that is meant to change replays, and say so in the commit."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.core.engine import EngineConfig  # noqa: E402
from controller.replay.simulator import SimConfig, Simulation  # noqa: E402
from controller.replay.traces import load_trace  # noqa: E402

RECORDED = ROOT / "tests" / "fixtures" / "replay" / "knob_results.json"
PHILLY = ROOT / "tests" / "fixtures" / "traces" / "philly_pollux_head200.csv"
ITP = ROOT / "tests" / "fixtures" / "traces" / "itp_cluster10.csv"
JOBS60 = ROOT / "tests" / "fixtures" / "traces" / "tiresias_60_job.csv"
# three node kinds, one shared by two partitions (the jobs dealt round-robin into them)
KINDS = ((1, ("p0",), ""), (1, ("p1",), ""), (2, ("p2", "p1"), ""))
COSTS = dict(preempt_grace_s=30.0, requeue_delay_s=5.0)


def dealt(jobs):
    return [dataclasses.replace(job, partition=f"p{i % 3}") for i, job in enumerate(jobs)]


# name -> (trace, partitions dealt, policy, engine options, SimConfig options); 4 x 8 GPUs
# (2 x 8 for the 60-job trace: its gangs wait for backfill's reservations)
CASES = {
    "plain": (PHILLY, False, "dlas", {}, {}),
    "knob1": (PHILLY, False, "dlas", dict(promote_knob=1.0), {}),
    "knob2-costs": (PHILLY, False, "dlas", dict(promote_knob=2.0), COSTS),
    "kinds": (PHILLY, True, "dlas", {}, dict(node_kinds=KINDS)),
    "kinds-knob1": (PHILLY, True, "dlas", dict(promote_knob=1.0), dict(node_kinds=KINDS)),
    "kinds-costs": (PHILLY, True, "dlas", dict(preempt_min_runtime_s=60.0), dict(node_kinds=KINDS, **COSTS)),
    "slurm": (PHILLY, False, "dlas", {}, dict(slurm_starts=True)),
    "slurm-limit": (PHILLY, False, "dlas", {}, dict(slurm_starts=True, time_limit_s=2e6)),
    "slurm-limit-costs": (PHILLY, False, "dlas", {}, dict(slurm_starts=True, time_limit_s=2e6, **COSTS)),
    "slurm-kinds": (PHILLY, True, "dlas", {}, dict(slurm_starts=True, time_limit_s=2e6, node_kinds=KINDS)),
    "slurm-itp": (ITP, False, "dlas", {}, dict(slurm_starts=True, time_limit_s=3600.0)),
    "slurm-60": (JOBS60, False, "dlas", {}, dict(slurm_starts=True)),
    "slurm-60-limit": (JOBS60, False, "dlas", {}, dict(slurm_starts=True, time_limit_s=3600.0)),
    "slurm-60-limit-kinds": (JOBS60, True, "dlas", {}, dict(slurm_starts=True, time_limit_s=3600.0,
                                                           node_kinds=((1, ("p0", "p1"), ""), (1, ("p2", "p1"), "")))),
    "slurm-fifo": (ITP, False, "fifo", {}, dict(slurm_starts=True)),
    "dgittins": (PHILLY, False, "dgittins", {}, {}),
    "dgittins-kinds": (PHILLY, True, "dgittins", {}, dict(node_kinds=KINDS)),
    "dgittins-itp": (ITP, False, "dgittins", {}, {}),
    "itp-plain": (ITP, False, "dlas", {}, {}),
    "itp-knob4": (ITP, False, "dlas", dict(promote_knob=4.0), {}),
}


def replay(name: str) -> dict:
    trace, deal, policy, engine, options = CASES[name]
    jobs = load_trace(str(trace))
    if deal:
        jobs = dealt(jobs)
    config = SimConfig(nodes=2 if trace == JOBS60 else 4, gpus_per_node=8, engine=EngineConfig(policy=policy, **engine),
                       drop_oversize=True, **options)
    result = Simulation(config).run(jobs)
    return dict(rounds=result.rounds, preemptions=result.preemptions, promotions=result.promotions,
                audits=[result.useless_preemptions, result.waited_behind_victim],
                jobs=[[o.job_id, o.start_s, o.end_s, o.preemptions] for o in result.outcomes])


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_knob_replays_as_recorded(name):
    recorded = json.loads(RECORDED.read_text())[name]
    got = replay(name)
    assert (got["rounds"], got["preemptions"], got["promotions"], got["audits"]) == (
        recorded["rounds"], recorded["preemptions"], recorded["promotions"], recorded["audits"])
    differ = [(a, b) for a, b in zip(got["jobs"], recorded["jobs"]) if a != b]
    assert len(got["jobs"]) == len(recorded["jobs"]) and not differ, differ[:5]


if __name__ == "__main__" and "--record" in sys.argv:
    RECORDED.write_text(json.dumps({name: replay(name) for name in sorted(CASES)}, separators=(",", ":")).replace("],[", "],\n[") + "\n")
    for name, got in json.loads(RECORDED.read_text()).items():
        print(name, got["rounds"], got["preemptions"], got["promotions"], got["audits"], len(got["jobs"]))

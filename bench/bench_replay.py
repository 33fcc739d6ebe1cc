"""Replay speed and memory of the simulator on public traces (issue 11 targets).

Prints, in one process, the wall time of each replay beside its target (2-core
machine), its rounds and preemptions, the process's peak RSS after it, and the
speed-up of the incremental loop over the generic one on itp_cluster05 (the engine
rebuilding the queues from every job each round, as before issue 11), without and
with the controller's preemption costs (its default grace period, requeue settle
time and victim protection: both loops charge them, with the same replay).

- ITP clusters as in bench/bench_parity.py (count placement, K=3, 3,250 / 7,200 GPU-s):
  itp_cluster05 (2 x 8) dlas + dgittins < 1.2 s; itp_cluster04 (64 x 8) fifo + dlas < 2 s;
  each policy's and each group's speed against the reference simulator's own wall time
  on this machine (bench/bench_parity.py's REFERENCE; issue 37's goal: >= 50x).
- Philly (82,247 jobs; defaults: consolidate placement, K=2 at 3,600 GPU-s) with fifo
  and dlas on 256 x 8 GPUs and on a quarter of it (64 x 8: thousands waiting):
  < 20 s per policy under contention (dlas with the controller's costs is printed
  too, without a target). Peak memory < 1 GB.

Usage: python bench/bench_replay.py [--no-baseline | --baseline-only] [--itp-only]
Traces: ../shared/traces (Philly via the Pollux artifact, Apache-2.0; ITP via
microsoft/elasticflow-traces, MIT).
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from controller.core.engine import EngineConfig  # noqa: E402
from controller.replay.simulator import SimConfig, Simulation  # noqa: E402
from controller.replay.traces import load_trace  # noqa: E402
from bench_parity import POLICIES, REFERENCE  # noqa: E402

REFERENCE_NAME = dict(POLICIES)  # our policy -> the reference simulator's scheme

TRACES = ROOT.parent / "shared" / "traces"
ITP = dict(thresholds_gpu_s=(3250.0, 7200.0), placement="count")
# the controller's defaults (controller.service.ops.config): preempt_grace_s, requeue_settle_s,
# preempt_min_runtime_s, preempt_max_per_job
COSTS = dict(preempt_grace_s=30.0, requeue_delay_s=5.0)
PROTECTION = dict(preempt_min_runtime_s=60.0, preempt_max_per_job=10)

# (group label, trace, nodes, GPUs per node, policies, engine options, target for the group in s,
#  simulator costs or None)
GROUPS = [
    ("itp_cluster05 2x8", TRACES / "tiresias-format" / "itp_cluster05_tiresias.csv", 2, 8,
     ("dlas", "dgittins"), ITP, 1.2, None),
    ("itp_cluster04 64x8", TRACES / "tiresias-format" / "itp_cluster04_tiresias.csv", 64, 8,
     ("fifo", "dlas"), ITP, 2.0, None),
    ("philly 256x8", TRACES / "philly_pollux.csv", 256, 8, ("fifo", "dlas"), {}, None, None),
    ("philly 64x8 (contended)", TRACES / "philly_pollux.csv", 64, 8, ("fifo", "dlas"), {}, 20.0, None),
    # the same with the controller's costs: no target (issue 11's is for the plain replay);
    # more rounds (grace ends, requeues, protection ends are moments too)
    ("philly 64x8 contended+cost", TRACES / "philly_pollux.csv", 64, 8, ("dlas",), PROTECTION, None, COSTS),
]


# the reference's runs of the ITP groups (bench_parity's names)
REFERENCE_RUN = {"itp_cluster05 2x8": "itp05", "itp_cluster04 64x8": "itp04"}


def reference_s(label: str, policy: str):
    """The reference simulator's wall s for this group and policy (None: not run there)."""
    run = REFERENCE.get((REFERENCE_RUN.get(label), REFERENCE_NAME.get(policy)))
    return None if run is None else run[6]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def replay(jobs, nodes, gpus, policy, options, incremental=True, costs=None):
    """(wall s, CPU s of this process, result) of one replay; ``costs``: SimConfig's cost fields."""
    config = SimConfig(nodes=nodes, gpus_per_node=gpus, drop_oversize=True, incremental=incremental,
                       engine=EngineConfig(policy=policy, **options), **(costs or {}))
    started, cpu = time.perf_counter(), time.process_time()
    result = Simulation(config).run(jobs)
    return time.perf_counter() - started, time.process_time() - cpu, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-baseline", action="store_true", help="skip the generic-loop baselines (about 40 s)")
    parser.add_argument("--baseline-only", action="store_true", help="only the generic-loop baselines")
    parser.add_argument("--itp-only", action="store_true", help="only the ITP groups (no Philly)")
    args = parser.parse_args()
    if not TRACES.is_dir():
        print(f"bench_replay: traces not found at {TRACES}; nothing to do")
        return 0
    print("Targets are checked on CPU s (the replay is one thread: on an idle machine wall = CPU;"
          " a shared machine stretches wall).")
    if not args.baseline_only:
        print(f"{'replay':<26} {'policy':<9} {'jobs':>6} {'wall s':>7} {'CPU s':>6} {'rounds':>7} {'preempt':>8} "
              f"{'max wait':>8} {'RSS MB':>7}  target")
    loaded = {}
    groups = GROUPS[:2] if args.itp_only else GROUPS
    for label, trace, nodes, gpus, policies, options, target, costs in ([] if args.baseline_only else groups):
        jobs = loaded.setdefault(trace, load_trace(trace))
        total_wall = total_cpu = total_reference = 0.0
        for policy in policies:
            wall, cpu, result = replay(jobs, nodes, gpus, policy, options, costs=costs)
            total_wall += wall
            total_cpu += cpu
            most_waiting = max((waiting for _, waiting, _ in result.timeline), default=0)
            per_policy = f"< {target:g} s per policy: {'met' if cpu < target else 'MISSED'}" \
                if target is not None and "contended" in label else ""
            theirs = reference_s(label, policy)
            if theirs is not None:
                total_reference += theirs
                per_policy = f"{theirs / cpu:.0f}x the reference's {theirs:g} s (goal >= 50x)"
            print(f"{label:<26} {policy:<9} {len(result.outcomes):>6} {wall:>7.2f} {cpu:>6.2f} {result.rounds:>7} "
                  f"{result.preemptions:>8} {most_waiting:>8} {rss_mb():>7.0f}  {per_policy}")
        if target is not None and "contended" not in label:
            together = (f"; {total_reference / total_cpu:.0f}x the reference's {total_reference:g} s"
                        if total_reference else "")
            print(f"{label:<26} {'+'.join(policies):<9} {'':>6} {total_wall:>7.2f} {total_cpu:>6.2f} {'':>7} "
                  f"{'':>8} {'':>8} {'':>7}  < {target:g} s together: {'met' if total_cpu < target else 'MISSED'}"
                  + together)
    if not args.baseline_only:
        peak = rss_mb()
        print(f"process peak RSS: {peak:.0f} MB (all replays and traces; target < 1024 MB: "
              f"{'met' if peak < 1024 else 'MISSED'})")
    if not args.no_baseline:
        label, trace, nodes, gpus, _, options, _, _ = GROUPS[0]
        jobs = loaded.setdefault(trace, load_trace(trace))
        for policy, costs, what in (("dlas", None, "no costs"),
                                    ("dlas", COSTS, "controller's costs"), ("dgittins", COSTS, "controller's costs")):
            opts = dict(options, **(PROTECTION if costs else {}))
            _, fast, fast_result = replay(jobs, nodes, gpus, policy, opts, costs=costs)
            _, slow, slow_result = replay(jobs, nodes, gpus, policy, opts, incremental=False, costs=costs)
            same = [(o.job_id, o.preemptions) for o in fast_result.outcomes] == [
                (o.job_id, o.preemptions) for o in slow_result.outcomes] and max(
                abs(a.end_s - b.end_s) for a, b in zip(fast_result.outcomes, slow_result.outcomes)) < 1e-6
            print(f"{label} {policy} ({what}{', grace 30 s, requeue 5 s, min run 60 s, max 10' if costs else ''}):"
                  f" incremental loop {fast:.2f} CPU s, generic loop {slow:.2f} CPU s"
                  f" (queues rebuilt from all jobs every round): {slow / fast:.0f}x;"
                  f" {slow_result.preemptions} preemptions; same replay: {'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Replay speed and memory of the simulator on public traces.

Prints wall time, events per second and peak traced memory per run. Targets
(scheduling-core issue): the 82,247-job Philly replay on 2,048 GPUs under 30 s on
one core and under 1 GB. Usage: python bench/bench_replay.py [--quick]
Traces: ../shared/traces (Philly via the Pollux artifact, Apache-2.0; ITP via
microsoft/elasticflow-traces, MIT).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.core.engine import EngineConfig  # noqa: E402
from controller.replay.results import summarize  # noqa: E402
from controller.replay.simulator import SimConfig, Simulation  # noqa: E402
from controller.replay.traces import load_trace  # noqa: E402

TRACES = Path(os.environ.get("TIRESIAS_TRACES", ROOT.parent / "shared" / "traces"))

RUNS = [
    # (label, trace, nodes, gpus per node)
    ("philly_pollux 82k jobs", TRACES / "philly_pollux.csv", 256, 8),
    ("itp cluster05", TRACES / "itp" / "cluster05.csv", 2, 8),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="dlas,dgittins")
    parser.add_argument("--quick", action="store_true", help="only the ITP replay")
    args = parser.parse_args()
    missing = [str(trace) for _, trace, _, _ in RUNS if not trace.is_file()]
    if missing:  # a benchmark, not a test: a clone without the big traces has nothing to measure
        print(f"bench_replay: skipped, trace(s) not found: {', '.join(missing)} (set TIRESIAS_TRACES)")
        return 0
    print(f"{'run':<24} {'policy':<9} {'jobs':>6} {'wall s':>7} {'events':>7} {'events/s':>9} "
          f"{'rounds':>7} {'peak MB':>8} {'avg JCT h':>9}")
    for label, trace, nodes, gpus in RUNS[1:] if args.quick else RUNS:
        jobs = load_trace(trace)
        for policy in args.policies.split(","):
            config = SimConfig(nodes=nodes, gpus_per_node=gpus, drop_oversize=True,
                               engine=EngineConfig(policy=policy))
            started = time.perf_counter()
            result = Simulation(config).run(jobs)
            wall = time.perf_counter() - started
            # memory in a second run: tracemalloc slows Python several-fold
            tracemalloc.start()
            Simulation(config).run(jobs)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            summary = summarize(result)
            print(f"{label:<24} {policy:<9} {len(result.outcomes):>6} {wall:>7.2f} {result.events:>7} "
                  f"{result.events / wall:>9.0f} {result.rounds:>7} {peak / 2**20:>8.1f} "
                  f"{summary['avg_jct_s'] / 3600:>9.2f}")
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process peak RSS: {rss_mb:.0f} MB (includes the loaded traces; target < 1024 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

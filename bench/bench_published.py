"""Our figures next to the Tiresias paper's published ratios (shared/spec/scheduling.md).

The paper's production trace is not public; the public substitute is the Philly
trace as compacted by the Pollux artifact (Apache-2.0). We replay its first N jobs
on a cluster small enough to be contended and print, for each published ratio,
our measured ratio beside it. Nothing here is asserted: trace and cluster differ
from the paper's, so the point is the direction and rough size of each effect.

Usage: python bench/bench_published.py [--jobs 5000] [--nodes 64] [--pause-s 10 --resume-s 30]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.core.engine import EngineConfig  # noqa: E402
from controller.replay.results import format_table, summarize  # noqa: E402
from controller.replay.simulator import SimConfig, Simulation  # noqa: E402
from controller.replay.traces import load_trace  # noqa: E402

TRACE = Path(os.environ.get("TIRESIAS_TRACES", ROOT.parent / "shared" / "traces")) / "philly_pollux.csv"

# (label, policy, thresholds) -- Tiresias-L is dlas with K=2.
RUNS = [
    ("YARN-CS (fifo)", "fifo", (3600.0,)),
    ("best-effort FIFO", "fifo-skip", (3600.0,)),
    ("Gandiva time-sharing", "timeshare", (3600.0,)),
    ("SRTF (perfect knowledge)", "srtf", (3600.0,)),
    ("Tiresias-L (dlas K=2)", "dlas", (3600.0,)),
    ("Tiresias-G (dgittins K=2)", "dgittins", (3600.0,)),
    ("Tiresias-L K=3", "dlas", (3600.0, 36000.0)),
    ("Tiresias-L K=4", "dlas", (3600.0, 36000.0, 360000.0)),
]

# (measured ratio description, numerator label, denominator label, statistic, published)
PUBLISHED = [
    ("avg JCT YARN-CS / Tiresias-L", "YARN-CS (fifo)", "avg_jct_s", "2.4x"),
    ("median JCT YARN-CS / Tiresias-L", "YARN-CS (fifo)", "median_jct_s", "30.8x"),
    ("avg JCT best-effort FIFO / Tiresias-L", "best-effort FIFO", "avg_jct_s", "1.5x"),
    ("avg JCT Gandiva / Tiresias-L", "Gandiva time-sharing", "avg_jct_s", "2x"),
    ("avg JCT Tiresias-G / Tiresias-L", "Tiresias-G (dgittins K=2)", "avg_jct_s", "0.97x (about equal)"),
    ("avg JCT SRTF / Tiresias-L", "SRTF (perfect knowledge)", "avg_jct_s", "better only at the tail"),
    ("p95 JCT SRTF / Tiresias-L", "SRTF (perfect knowledge)", "p95_jct_s", "(tail)"),
    ("avg JCT K=3 / K=2", "Tiresias-L K=3", "avg_jct_s", "about 1.00 (+-1%)"),
    ("avg JCT K=4 / K=2", "Tiresias-L K=4", "avg_jct_s", "about 1.00 (+-1%)"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pause-s", type=float, default=0.0, help="checkpoint cost per preemption")
    parser.add_argument("--resume-s", type=float, default=0.0, help="restore cost per preemption")
    args = parser.parse_args()
    if not TRACE.is_file():  # a benchmark, not a test: a clone without the big traces has nothing to measure
        print(f"bench_published: skipped, trace not found: {TRACE} (set TIRESIAS_TRACES)")
        return 0
    jobs = load_trace(TRACE)[: args.jobs]
    print(f"Philly (Pollux compact), first {len(jobs)} jobs, {args.nodes} x {args.gpus_per_node} GPUs, "
          f"preemption cost {args.pause_s:g}+{args.resume_s:g} s")
    summaries = {}
    rows = []
    for label, policy, thresholds in RUNS:
        config = SimConfig(nodes=args.nodes, gpus_per_node=args.gpus_per_node, drop_oversize=True,
                           preempt_pause_s=args.pause_s, preempt_resume_s=args.resume_s,
                           engine=EngineConfig(policy=policy, thresholds_gpu_s=thresholds))
        started = time.perf_counter()
        summary = summarize(Simulation(config).run(jobs))
        summaries[label] = summary
        rows.append([label, f"{summary['avg_jct_s']:.0f}", f"{summary['median_jct_s']:.0f}",
                     f"{summary['p95_jct_s']:.0f}", summary["preemptions"],
                     f"{summary['preemption_overhead_s']:.0f}", f"{time.perf_counter() - started:.1f}"])
    print(format_table(["run", "avg JCT s", "median s", "p95 s", "preempt", "overhead s", "wall s"], rows))
    print()
    base = summaries["Tiresias-L (dlas K=2)"]
    ratio_rows = []
    for what, label, stat, published in PUBLISHED:
        ours = summaries[label][stat] / base[stat] if base[stat] else float("nan")
        ratio_rows.append([what, f"{ours:.2f}x", published])
    print(format_table(["ratio", "measured", "published (Tiresias, NSDI'19)"], ratio_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Multi-partition benchmarks (spec/multi-partition.md).

(a) ``ranks``: seeded instances (2-26 partitions of 10-100 nodes x 8 GPUs by
    default), each evaluated as a static snapshot (default ``--replay none``: a
    backlog of the first arrivals whose GPUs add up to ``--backlog-load`` x the total
    GPUs, all pending, none running); how often each of MCT+fifo, MCT+srsf, MCT+bfd,
    MCT+learned, EVO+learned ranks 1st, 2nd, ... by the exact scalarized objective
    (layer 2 re-run on the final assignment; ties share the better rank). EVO's
    value is always exact, whatever ``--evaluator`` ranks individuals with during
    the search. "learned" is ``--priority-file``: by default
    examples/learned_priority.txt, which `tiresias learn` produced from other seeds
    (the command is in the file). Target from the paper: EVO+learned first on >= 28
    of 30.
(b) ``timing``: wall-clock seconds of one full ``allocate_evo`` call for N pending
    jobs drawn from a 26-partition instance (no running jobs, published learned
    priority), population/generations as given. Included: the (pruned, exact) MCT
    seed, the search (surrogate or exact fitness), the exact re-check of the best
    ``exact_top`` individuals (only partitions that differ from the MCT seed are
    re-planned, MCT's own plans seed the cache), the exact local search
    (``--local-moves``) and the final layer-2 run that builds the Allocation.
    "layer-2 runs" counts the exact per-partition plans actually computed (cache
    misses), not MCT's. Single process, numpy only; a table and evo_timing.png.

Usage:
    python bench/bench_partitions.py ranks --instances 30 --population 100 --generations 200 \
        --evaluator surrogate [--local-moves 16] [--priority-file published]
    python bench/bench_partitions.py timing --jobs 100,500,1000,2000,5000 --evaluator surrogate --out DIR
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.allocator import AllocationProblem, EvoConfig, JobTable, Objective, allocate_evo  # noqa: E402
from controller.cmd_partitions import COMBINATIONS, ranks, run_combinations  # noqa: E402
from controller.expr import PUBLISHED_EXAMPLE, load_expression_file, parse_expression  # noqa: E402
from controller.allocator import snapshot_from_instance  # noqa: E402
from controller.results import format_table  # noqa: E402

LEARNED_FILE = Path(__file__).resolve().parents[1] / "examples" / "learned_priority.txt"
from controller.synthetic import generate_partition_instance  # noqa: E402


def bench_ranks(args) -> dict:
    expr = parse_expression(PUBLISHED_EXAMPLE) if args.priority_file == "published" \
        else load_expression_file(args.priority_file)
    evo = EvoConfig(population=args.population, generations=args.generations, seed=0, evaluator=args.evaluator,
                    local_moves=args.local_moves)
    rng = np.random.Generator(np.random.PCG64(args.seed))
    counts = {n: [0] * len(COMBINATIONS) for n in COMBINATIONS}
    rows = []
    for i in range(args.instances):
        parts = int(rng.integers(2, 27))
        inst = generate_partition_instance(args.seed + i, parts, nodes_range=(args.nodes_min, args.nodes_max),
                                           arrivals_per_node=args.arrivals_per_node)
        t0 = time.perf_counter()
        # replay "none": a backlog of the first arrivals whose GPUs add up to --backlog-load x the GPUs
        load = args.backlog_load if args.max_pending is None and args.replay == "none" else None
        problem = snapshot_from_instance(inst, max_pending=args.max_pending, replay=args.replay, backlog_load=load)
        replay_s = time.perf_counter() - t0
        res = run_combinations(problem, expr, evo, Objective())
        values = [res[n][0].value for n in COMBINATIONS]
        rk = ranks(values)
        for n, r in zip(COMBINATIONS, rk):
            counts[n][r - 1] += 1
        rows.append({"instance": i, "partitions": parts, "pending": len(problem.jobs),
                     "running": len(problem.running), "values": dict(zip(COMBINATIONS, values)),
                     "ranks": dict(zip(COMBINATIONS, rk)), "evo_s": res["EVO+learned"][1]})
        print(f"instance {i:2d}: {parts:2d} partitions, {len(problem.jobs):3d} pending, ranks "
              + " ".join(f"{n}={r}" for n, r in zip(COMBINATIONS, rk))
              + f", EVO {res['EVO+learned'][1]:.1f}s (replay {replay_s:.1f}s)", flush=True)
    print()
    print(format_table(["combination"] + [f"#{k + 1}" for k in range(len(COMBINATIONS))],
                       [[n] + counts[n] for n in COMBINATIONS]))
    return {"rank_counts": counts, "instances": rows}


def timing_problem(n_jobs: int, seed: int) -> AllocationProblem:
    """N jobs drawn from a 26-partition instance, all pending at the last arrival."""
    inst = generate_partition_instance(seed, 26)
    rng = np.random.Generator(np.random.PCG64(seed))
    pick = np.sort(rng.choice(len(inst.jobs), size=min(n_jobs, len(inst.jobs)), replace=False))
    index = {p.name: i for i, p in enumerate(inst.partitions)}
    chosen = [inst.jobs[i] for i in pick]
    now = max(j.submit_time_s for j in chosen)
    rows = [(j.job_id, j.duration_s, j.num_gpus, inst.workers[j.job_id], j.user_priority, now - j.submit_time_s,
             index[j.partition]) for j in chosen]
    return AllocationProblem(now, inst.partitions, JobTable.build(rows))


def bench_timing(args) -> dict:
    expr = parse_expression(PUBLISHED_EXAMPLE)
    out = []
    for n in args.jobs:
        problem = timing_problem(n, args.seed)
        jobs = problem.jobs
        prio = expr.evaluate(jobs.duration_s, jobs.queued_s, jobs.user_priority, jobs.gpus.astype(float))
        cfg = EvoConfig(population=args.population, generations=args.generations, seed=0,
                        evaluator=args.evaluator, local_moves=args.local_moves)
        t0 = time.perf_counter()
        result = allocate_evo(problem, prio, cfg)
        seconds = time.perf_counter() - t0
        out.append({"jobs": n, "seconds": seconds, "layer2_runs": result.evaluations,
                    "per_generation_s": seconds / max(1, args.generations)})
        print(f"{n:5d} jobs: {seconds:8.2f} s ({result.evaluations} layer-2 partition runs)", flush=True)
    print()
    print(format_table(["pending jobs", "seconds", "s/generation", "layer-2 runs"],
                       [[r["jobs"], f"{r['seconds']:.2f}", f"{r['per_generation_s']:.3f}", r["layer2_runs"]]
                        for r in out]))
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        Path(args.out).mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
        ax.plot([r["jobs"] for r in out], [r["seconds"] for r in out], marker="o")
        ax.set_xlabel("pending jobs (26 partitions)")
        ax.set_ylabel("one EVO round (s)")
        ax.set_title(f"EVO round, population {args.population}, {args.generations} generations")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(Path(args.out) / "evo_timing.png", metadata={"Software": None})
        plt.close(fig)
    return {"timing": out, "population": args.population, "generations": args.generations}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("ranks", "timing"))
    p.add_argument("--instances", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--nodes-min", type=int, default=10)
    p.add_argument("--nodes-max", type=int, default=100)
    p.add_argument("--arrivals-per-node", type=int, default=10)
    p.add_argument("--max-pending", type=int, default=None,
                   help="snapshot size (replay 'none': default from --backlog-load)")
    p.add_argument("--backlog-load", type=float, default=1.5,
                   help="replay 'none': pending GPUs / total GPUs of the backlog (default 1.5)")
    p.add_argument("--replay", choices=("none", "mct", "submitted"), default="none",
                   help="snapshot: 'none' (default) = a backlog of the first --max-pending arrivals, all "
                        "waiting; 'submitted' = busiest moment of a FIFO replay in the submitted partitions; "
                        "'mct' = busiest moment of an online MCT+FIFO replay")
    p.add_argument("--priority-file", default=str(LEARNED_FILE),
                   help="ranks: the 'learned' function (default: examples/learned_priority.txt, learned by "
                        "`tiresias learn` on other seeds; 'published' = the paper's example)")
    p.add_argument("--population", type=int, default=100)
    p.add_argument("--generations", type=int, default=200)
    p.add_argument("--jobs", type=lambda s: [int(x) for x in s.split(",")], default=[100, 200, 500, 1000, 2000, 5000])
    p.add_argument("--evaluator", choices=("exact", "surrogate"), default="exact",
                   help="EVO fitness: exact layer 2 (reference) or the vectorized surrogate")
    p.add_argument("--local-moves", type=int, default=EvoConfig().local_moves,
                   help="exact local-search moves after the EVO search (EvoConfig.local_moves)")
    p.add_argument("--out", help="folder for evo_timing.png and results JSON")
    args = p.parse_args(argv)
    result = bench_ranks(args) if args.what == "ranks" else bench_timing(args)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"{args.what}.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

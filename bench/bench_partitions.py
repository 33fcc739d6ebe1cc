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
    git show f797465:controller/partitions/allocator.py > /tmp/old.py   # the allocator before the split, for an A/B
    python bench/bench_partitions.py timing --jobs 1000 --evaluator surrogate --compare-with /tmp/old.py
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.partitions.evo import EvoConfig, allocate_evo  # noqa: E402
from controller.partitions.mct import allocate_mct  # noqa: E402
from controller.partitions.model import AllocationProblem, JobTable, Objective  # noqa: E402
from controller.cli.simulate_partitions import COMBINATIONS, ranks, run_combinations  # noqa: E402
from controller.partitions.priority_file import load_expression_file
from controller.core.expr import PUBLISHED_EXAMPLE, parse_expression  # noqa: E402
from controller.partitions.snapshot import snapshot_from_instance  # noqa: E402
from controller.replay.results import format_table  # noqa: E402

LEARNED_FILE = Path(__file__).resolve().parents[1] / "examples" / "learned_priority.txt"
from controller.partitions.instances import generate_partition_instance  # noqa: E402


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
                     "ranks": dict(zip(COMBINATIONS, rk)), "evo_s": res["EVO+learned"][1],
                     "evo_c_max_over_c_avg": res["EVO+learned"][0].c_max / max(res["EVO+learned"][0].c_avg, 1e-9)})
        print(f"instance {i:2d}: {parts:2d} partitions, {len(problem.jobs):3d} pending, ranks "
              + " ".join(f"{n}={r}" for n, r in zip(COMBINATIONS, rk))
              + f", EVO {res['EVO+learned'][1]:.1f}s (replay {replay_s:.1f}s)", flush=True)
    print()
    print(format_table(["combination"] + [f"#{k + 1}" for k in range(len(COMBINATIONS))],
                       [[n] + counts[n] for n in COMBINATIONS]))
    print()
    for line in _rank_details(rows):
        print(line)
    return {"rank_counts": counts, "instances": rows}


def _rank_details(rows: list[dict]) -> list[str]:
    """Head-to-head lines behind the rank table (values are exact objectives)."""
    value = lambda r, name: r["values"][name]  # noqa: E731
    gains = sorted(1 - value(r, "EVO+learned") / value(r, "MCT+learned") for r in rows)
    strict = sum(g > 1e-9 for g in gains)
    better = sum(value(r, "MCT+learned") < value(r, "MCT+srsf") for r in rows)
    ratio = sorted(r["evo_c_max_over_c_avg"] for r in rows)
    return [f"MCT+learned better than MCT+srsf on {better} of {len(rows)}",
            f"EVO+learned better than MCT+learned on {strict} of {len(rows)}: median gain "
            f"{100 * gains[len(gains) // 2]:.4f}%, best {100 * gains[-1]:.2f}%",
            f"EVO+learned's C_max / C_avg: median {ratio[len(ratio) // 2]:.2f} "
            f"(range {ratio[0]:.2f}-{ratio[-1]:.2f})"]


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


def _ab_against(path: str, problem: AllocationProblem, prio, cfg: EvoConfig, repeat: int) -> dict:
    """Median seconds of this allocator and of another version of it as a single module (the
    allocator before it was split into controller/partitions/*.py, e.g.
    ``git show f797465:controller/partitions/allocator.py > old.py``, or session 1's
    ``git show 471a277:controller/allocator.py``), runs alternating."""
    import statistics
    import types

    source = Path(path).read_text()
    # older single-module allocators import from where things lived then: InputError from
    # the flat package's model, Partition types from the synthetic generator (same fields)
    for then, now in (("controller.model", "controller.core.model"),
                      ("controller.synthetic", "controller.partitions.model"),
                      ("controller.replay.synthetic", "controller.partitions.model")):
        source = source.replace(f"from {then} import", f"from {now} import")
    other = types.ModuleType("allocator_baseline")
    other.__file__ = path
    sys.modules["allocator_baseline"] = other  # dataclasses look their module up
    exec(compile(source, path, "exec"), other.__dict__)
    other_problem = other.AllocationProblem(problem.now_s, problem.partitions, problem.jobs, problem.running)
    other_cfg = other.EvoConfig(population=cfg.population, generations=cfg.generations, seed=cfg.seed,
                                evaluator=cfg.evaluator)
    this_s, other_s = [], []
    for _ in range(repeat):
        for times, run in ((this_s, lambda: allocate_evo(problem, prio, cfg)),
                           (other_s, lambda: other.allocate_evo(other_problem, prio, other_cfg))):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
    return {"this_s": statistics.median(this_s), "other_s": statistics.median(other_s)}


def bench_timing(args) -> dict:
    """Each job count: ``--repeat`` full rounds on the same problem (min and median wall
    seconds: this VM's speed drifts by up to ~40% from minute to minute, the min is the
    least disturbed), the phase split of the median run, and MCT alone on the same
    problem in the same process as the baseline (EVO starts from MCT's assignment)."""
    expr = parse_expression(PUBLISHED_EXAMPLE)
    out = []
    for n in args.jobs:
        problem = timing_problem(n, args.seed)
        jobs = problem.jobs
        prio = expr.evaluate(jobs.duration_s, jobs.queued_s, jobs.user_priority, jobs.gpus.astype(float))
        cfg = EvoConfig(population=args.population, generations=args.generations, seed=0,
                        evaluator=args.evaluator, local_moves=args.local_moves)
        runs = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            mct = allocate_mct(problem, prio)
            mct_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            result = allocate_evo(problem, prio, cfg)
            runs.append((time.perf_counter() - t0, mct_s, result))
        runs.sort(key=lambda r: r[0])
        seconds, mct_s, result = runs[len(runs) // 2]
        best = runs[0][0]
        out.append({"jobs": n, "seconds_min": best, "seconds_median": seconds, "mct_seconds": mct_s,
                    "phases_s": result.phase_s, "layer2_runs": result.evaluations,
                    "evo_value": result.value, "mct_value": mct.value,
                    "surrogate_evaluated": result.surrogate_calls[0], "surrogate_asked": result.surrogate_calls[1]})
        phases = ", ".join(f"{k} {v:.2f}" for k, v in result.phase_s.items())
        evaluated, asked = result.surrogate_calls
        print(f"{n:5d} jobs: min {best:.2f} s, median {seconds:.2f} s ({phases}); MCT alone {mct_s:.2f} s; "
              f"surrogate evaluated {evaluated} of {asked} individuals asked for "
              f"({100 * (1 - evaluated / max(asked, 1)):.0f}% repeats)", flush=True)
        if args.compare_with:
            out[-1]["ab"] = _ab_against(args.compare_with, problem, prio, cfg, args.repeat)
            print(f"       A/B, alternating in this process: this allocator {out[-1]['ab']['this_s']:.2f} s, "
                  f"{args.compare_with} {out[-1]['ab']['other_s']:.2f} s (medians)", flush=True)
    print()
    print(format_table(["pending jobs", "EVO min s", "EVO median s", "MCT alone s", "EVO / MCT", "s/generation",
                        "objective EVO / MCT"],
                       [[r["jobs"], f"{r['seconds_min']:.2f}", f"{r['seconds_median']:.2f}",
                         f"{r['mct_seconds']:.2f}", f"{r['seconds_median'] / r['mct_seconds']:.1f}x",
                         f"{r['phases_s'].get('search', 0.0) / max(1, args.generations):.4f}",
                         f"{r['evo_value'] / r['mct_value']:.5f}"] for r in out]))
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        Path(args.out).mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
        ax.plot([r["jobs"] for r in out], [r["seconds_median"] for r in out], marker="o", label="EVO (median)")
        ax.plot([r["jobs"] for r in out], [r["mct_seconds"] for r in out], marker="s", label="MCT alone")
        ax.axhline(1.0, color="grey", linestyle=":", label="target at 1,000 jobs")
        ax.legend()
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
    p.add_argument("--repeat", type=int, default=3, help="timing: rounds per job count (min and median)")
    p.add_argument("--compare-with", metavar="FILE",
                   help="timing: also time this single-module allocator (the pre-split "
                        "controller/partitions/allocator.py of an older revision), alternating runs")
    p.add_argument("--out", help="folder for evo_timing.png and results JSON")
    args = p.parse_args(argv)
    result = bench_ranks(args) if args.what == "ranks" else bench_timing(args)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"{args.what}.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

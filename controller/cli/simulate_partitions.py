"""Compare job-to-partition allocators on multi-partition instances (static snapshot).

Each instance is first replayed FIFO in the partitions the jobs were submitted to,
up to its busiest moment (most jobs waiting; see partitions.snapshot.snapshot_from_instance).
At that moment every waiting job is allocated once: layer 1 picks a partition
(MCT or EVO), layer 2 plans starts in priority order, and the objective is computed
from the planned starts (a static snapshot evaluation, not an online simulation).
Reported per combination: C_avg and C_max (user priority x queued time, s), C_util,
the scalarized value w1*C_avg + w2*C_max + w3*(1 - C_util), and with several
instances how often each combination ranked 1st, 2nd, ... (ties share the better
rank). Combinations: MCT+fifo, MCT+srsf, MCT+bfd (Best-Fit Decreasing by GPUs per
worker), MCT+learned, EVO+learned.

Workloads: --instances N generated instances (seeds from --seed), or
--partitions-file F (YAML or CSV with name,nodes,gpus_per_node) with --trace F
(a job trace whose partition column names those partitions; each job gets the
fewest workers that fit one node each).
"""
from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from controller.cli import argtypes
from controller.cli.progress import progress_for
from controller.partitions.evo import EvoConfig, allocate_evo
from controller.partitions.instances import generate_partition_instance
from controller.partitions.mct import allocate_mct
from controller.partitions.model import AllocationProblem, Objective, Partition, PartitionInstance
from controller.partitions.snapshot import snapshot_from_instance, workers_for_gpus
from controller.partitions.priority_file import load_expression_file
from controller.core.expr import PUBLISHED_EXAMPLE, Node, parse_expression
from controller.core.model import InputError

COMBINATIONS = ("MCT+fifo", "MCT+srsf", "MCT+bfd", "MCT+learned", "EVO+learned")


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("workload")
    src.add_argument("--instances", type=argtypes.int_in(1, 10_000), default=3,
                     help="generated instances (default 3)")
    src.add_argument("--seed", type=argtypes.seed, default=1, help="first instance seed (default 1)")
    src.add_argument("--partitions-min", type=argtypes.int_in(1, 1000), default=2)
    src.add_argument("--partitions-max", type=argtypes.int_in(1, 1000), default=26)
    src.add_argument("--nodes-min", type=argtypes.int_in(1, 10_000), default=10)
    src.add_argument("--nodes-max", type=argtypes.int_in(1, 10_000), default=100)
    src.add_argument("--gpus-per-node", type=argtypes.gpus_per_node, default=8)
    src.add_argument("--arrivals-per-node", type=argtypes.int_in(1, 10_000), default=10)
    src.add_argument("--max-pending", type=argtypes.positive_int, default=None,
                     help="snapshot at the busiest moment with at most this many waiting jobs")
    src.add_argument("--partitions-file", metavar="FILE", help="partitions (YAML or CSV: name,nodes,gpus_per_node)")
    src.add_argument("--trace", metavar="FILE", help="job trace for --partitions-file")
    alg = p.add_argument_group("allocation")
    alg.add_argument("--priority-file", metavar="FILE",
                     help="learned expression (default: the published example)")
    alg.add_argument("--population", type=argtypes.int_in(1, 10_000), default=100, help="EVO population (default 100)")
    alg.add_argument("--generations", type=argtypes.int_in(0, 100_000), default=200,
                     help="EVO generations (default 200)")
    alg.add_argument("--mutation-rate", type=argtypes.unit_float, default=0.1, help="EVO mutation rate (default 0.1)")
    alg.add_argument("--evo-seed", type=argtypes.seed, default=0, help="EVO seed (default 0)")
    alg.add_argument("--weights", type=argtypes.objective_weights, default=(1.0, 1.0, 1.0), metavar="W1,W2,W3",
                     help="objective weights of C_avg, C_max, 1 - C_util (default 1,1,1)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (bar on a terminal, else a line every 30 s)")


# --------------------------------------------------------------------------- inputs
def load_partitions_file(path: str) -> list[Partition]:
    """Partitions from YAML (a list, or {partitions: [...]}) or CSV (name,nodes,gpus_per_node)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read the partitions file ({getattr(err, 'strerror', None) or err})")
    fields = ("name", "nodes", "gpus_per_node")
    records: list[tuple[str, dict]] = []
    if str(path).lower().endswith((".yaml", ".yml")):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f":{mark.line + 1}" if mark is not None else ""
            raise InputError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', None) or 'syntax error'})")
        if isinstance(data, dict) and "partitions" in data:
            data = data["partitions"]
        if not isinstance(data, list):
            raise InputError(f"{path}: expected a list of partitions (name, nodes, gpus_per_node)")
        for i, item in enumerate(data, start=1):
            if not isinstance(item, dict):
                raise InputError(f"{path}: partition {i} is not a mapping of name, nodes, gpus_per_node")
            records.append((f"{path}: partition {i}", item))
    else:
        rows = list(csv.reader(text.splitlines()))
        if not rows:
            raise InputError(f"{path}: empty partitions file")
        header = [h.strip().lower() for h in rows[0]]
        missing = [f for f in fields if f not in header]
        if missing:
            raise InputError(f"{path}:1: missing column '{missing[0]}' (need name,nodes,gpus_per_node)")
        for line, row in enumerate(rows[1:], start=2):
            if not any(c.strip() for c in row):
                continue
            records.append((f"{path}:{line}", {h: (row[i].strip() if i < len(row) else "")
                                                for i, h in enumerate(header)}))
    parts, seen = [], set()
    for where, rec in records:
        for f in fields:
            if rec.get(f) in (None, ""):
                raise InputError(f"{where}: missing field '{f}'")
        name = str(rec["name"]).strip()
        values = []
        for f in ("nodes", "gpus_per_node"):
            try:
                v = int(str(rec[f]).strip())
            except ValueError:
                v = 0
            if v <= 0 or isinstance(rec[f], bool):
                raise InputError(f"{where}: {f} value '{rec[f]}' is not a positive integer")
            values.append(v)
        if name in seen:
            raise InputError(f"{where}: partition '{name}' appears twice")
        seen.add(name)
        parts.append(Partition(name, *values))
    if not parts:
        raise InputError(f"{path}: no partitions")
    return parts


def trace_instance(partitions: list[Partition], trace_path: str) -> PartitionInstance:
    from controller.replay.traces import load_trace

    jobs = load_trace(trace_path)
    biggest = max(p.gpus_per_node for p in partitions)
    names = {p.name for p in partitions}
    for j in jobs:
        if j.partition not in names:
            raise InputError(f"{trace_path}: job {j.job_id}: partition '{j.partition}' is not in the partitions "
                             f"file ({', '.join(sorted(names))})")
        if j.duration_s is None:
            raise InputError(f"{trace_path}: job {j.job_id}: no duration; multi-partition mode needs one")
    workers = {j.job_id: workers_for_gpus(int(j.num_gpus), biggest) for j in jobs}
    return PartitionInstance(partitions, sorted(jobs, key=lambda j: j.submit_time_s), workers)


# --------------------------------------------------------------------------- evaluation
def priorities(problem: AllocationProblem, expr: Node) -> dict[str, np.ndarray]:
    jobs = problem.jobs
    learned = np.broadcast_to(np.asarray(
        expr.evaluate(jobs.duration_s, jobs.queued_s, jobs.user_priority, jobs.gpus.astype(float)), dtype=float),
        jobs.duration_s.shape)
    return {
        "fifo": -jobs.queued_s,  # longest waiting first = arrival order
        "srsf": jobs.gpus * jobs.duration_s,
        "bfd": -jobs.gpus_per_worker.astype(float),  # largest worker first
        "learned": learned,
    }


def run_combinations(problem: AllocationProblem, expr: Node, evo: EvoConfig, objective: Objective,
                     on_done=None) -> dict:
    """name -> (Allocation, seconds) for the five combinations; ``on_done(name)`` after each."""
    prio = priorities(problem, expr)
    out = {}
    for name in COMBINATIONS:
        method, policy = name.split("+")
        t0 = time.perf_counter()
        if method == "MCT":
            alloc = allocate_mct(problem, prio[policy], objective)
        else:
            alloc = allocate_evo(problem, prio[policy], evo, objective)
        out[name] = (alloc, time.perf_counter() - t0)
        if on_done is not None:
            on_done(name)
    return out


def ranks(values: list[float], rel_tol: float = 1e-9) -> list[int]:
    """1-based competition ranks, smaller value = better; near-equal values tie."""
    out = []
    for v in values:
        better = sum(1 for w in values if w < v - rel_tol * max(1.0, abs(v)))
        out.append(better + 1)
    return out


def _problems(args) -> list[tuple[str, AllocationProblem]]:
    if args.partitions_file or args.trace:
        if not (args.partitions_file and args.trace):
            raise InputError("--partitions-file and --trace go together")
        inst = trace_instance(load_partitions_file(args.partitions_file), args.trace)
        return [(Path(args.trace).name, snapshot_from_instance(inst, max_pending=args.max_pending))]
    if args.partitions_min > args.partitions_max:
        raise InputError(f"--partitions-min {args.partitions_min} is larger than --partitions-max "
                         f"{args.partitions_max}")
    if args.nodes_min > args.nodes_max:
        raise InputError(f"--nodes-min {args.nodes_min} is larger than --nodes-max {args.nodes_max}")
    rng = np.random.Generator(np.random.PCG64(args.seed))
    out = []
    for i in range(args.instances):
        count = int(rng.integers(args.partitions_min, args.partitions_max + 1))
        seed = args.seed + i
        inst = generate_partition_instance(seed, count, nodes_range=(args.nodes_min, args.nodes_max),
                                           gpus_per_node=args.gpus_per_node,
                                           arrivals_per_node=args.arrivals_per_node)
        out.append((f"seed {seed}, {count} partitions", snapshot_from_instance(inst, max_pending=args.max_pending)))
    return out


def run(args) -> int:
    from controller.replay.results import format_table

    expr = load_expression_file(args.priority_file) if args.priority_file else parse_expression(PUBLISHED_EXAMPLE)
    objective = Objective(*args.weights)
    evo = EvoConfig(population=max(2, args.population), generations=args.generations,
                    mutation_rate=args.mutation_rate, seed=args.evo_seed)
    problems = _problems(args)
    per_instance = []
    rank_counts = {name: [0] * len(COMBINATIONS) for name in COMBINATIONS}
    progress = progress_for(args, "simulate-partitions", "allocations", total=len(problems) * len(COMBINATIONS))
    finished = 0

    def one_done(name: str) -> None:
        nonlocal finished
        finished += 1
        progress(finished, note=f"{label}: {name}")

    for label, problem in problems:
        results = run_combinations(problem, expr, evo, objective, on_done=one_done)
        values = [results[n][0].value for n in COMBINATIONS]
        for name, rank in zip(COMBINATIONS, ranks(values)):
            rank_counts[name][rank - 1] += 1
        per_instance.append({
            "instance": label, "pending_jobs": len(problem.jobs), "running_jobs": len(problem.running),
            "partitions": len(problem.partitions),
            "results": {n: {"c_avg_s": a.c_avg, "c_max_s": a.c_max, "c_util": a.c_util, "value": a.value,
                            "seconds": s, "infeasible": a.infeasible} for n, (a, s) in results.items()},
        })
    progress.close()
    if args.json:
        print(json.dumps({"expression": expr.to_text(), "weights": list(args.weights),
                          "instances": per_instance, "rank_counts": rank_counts}, indent=2, sort_keys=True))
        return 0
    print(f"learned expression: {expr.to_text()}")
    for item in per_instance:
        print(f"\n{item['instance']}: {item['pending_jobs']} pending, {item['running_jobs']} running jobs")
        rows = []
        for n in COMBINATIONS:
            r = item["results"][n]
            rows.append([n, f"{r['c_avg_s']:.1f}", f"{r['c_max_s']:.1f}", f"{r['c_util']:.4f}",
                         f"{r['value']:.1f}", f"{r['seconds']:.2f}"])
        print(format_table(["combination", "C_avg (s)", "C_max (s)", "C_util", "objective", "time (s)"], rows))
        infeasible = item["results"]["MCT+fifo"]["infeasible"]
        if infeasible:
            print(f"jobs that fit no partition (left in place): {', '.join(infeasible)}")
    if len(per_instance) > 1:
        print(f"\nrank counts over {len(per_instance)} instances (ties share the better rank)")
        headers = ["combination"] + [f"#{i + 1}" for i in range(len(COMBINATIONS))]
        print(format_table(headers, [[n] + rank_counts[n] for n in COMBINATIONS]))
    return 0

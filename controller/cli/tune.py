"""Tune the MLFQ settings for your workload on a trace replay.

Searches K (2..--max-k), the queue thresholds (log-spaced candidates between the
5% and 99% quantiles of the trace's GPU-seconds per job, and 3600) and PROMOTEKNOB (inf
and a few finite values). --evaluations fixes the number of replays, so a seed
and an evaluation count always give the same result. --budget-s is a safety stop
for the whole command: no round of replays starts that would not fit, and a replay
still running when it is spent is cut and counted as cut. Ctrl-C stops within a
couple of seconds and prints the best settings found so far (exit 130). Prints the
best settings against the default (K=2, 3600 GPU-s, knob inf), each with its
preemptions, and a block to paste into /etc/tiresias/tiresias.yaml.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time

from controller.cli import argtypes
from controller.core.model import InputError
from controller.core.policies import MLFQ_POLICIES
from controller.replay.results import format_duration, format_table
from controller.replay.run_config import parse_node_kinds
from controller.replay.tuner import OBJECTIVES, ROUND_SIZE, format_number, tune, yaml_block

YAML_MARKER = "# ready to paste into /etc/tiresias/tiresias.yaml:"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", required=True, metavar="FILE", help="job trace (any format `simulate` reads)")
    p.add_argument("--nodes", type=argtypes.nodes, default=None,
                   help="node count (required unless --node-kinds gives it)")
    p.add_argument("--gpus-per-node", type=argtypes.gpus_per_node, required=True)
    p.add_argument("--policy", choices=MLFQ_POLICIES, default="dlas", help="policy to tune (default dlas)")
    p.add_argument("--evaluations", type=argtypes.int_in(1, 100_000), default=32,
                   help="replays to run, the default setting included (default 32)")
    p.add_argument("--budget-s", type=argtypes.seconds, default=60.0,
                   help="the whole command's time limit in seconds: no round of replays starts that would "
                        "not fit, and a replay still running when it is spent is cut (default 60)")
    p.add_argument("--node-kinds", type=parse_node_kinds, default=(), metavar="N:PART[+PART][:TYPE],...",
                   help="the cluster's node kinds, as simulate takes them (the hint `simulate --trace` prints for "
                        "an exported history); the node count is their sum")
    p.add_argument("--seed", type=argtypes.seed, default=1, help="search seed (default 1)")
    p.add_argument("--max-k", type=argtypes.int_in(1, 64), default=4, help="largest number of queues (default 4)")
    p.add_argument("--objective", choices=OBJECTIVES, default="avg",
                   help="avg: average JCT, p95 breaks ties (default); p95: the reverse; "
                        "mixed: mean of both relative to the default")
    p.add_argument("--time-scale", type=argtypes.positive_float, default=1.0,
                   help="multiply every duration and submit time (compress a trace)")
    p.add_argument("--drop-oversize", action="store_true",
                   help="drop jobs larger than the cluster instead of failing")
    p.add_argument("--preempt-cost-s", type=argtypes.non_negative_float, default=0.0,
                   help="pause + resume seconds charged per preemption (default 0)")
    p.add_argument("--workers", type=argtypes.int_in(1, 1024), default=None,
                   help=f"parallel replay processes (default: CPUs, at most {ROUND_SIZE}); "
                        "does not change the result")
    p.add_argument("--slurm-array", action="store_true",
                   help="replay each round's candidates as one Slurm job array on this cluster (sbatch --wait) "
                        "instead of local processes; same search, same ranking")
    p.add_argument("--array-dir", metavar="DIR", default=None,
                   help="with --slurm-array: directory the nodes can read and write, for round files, results "
                        "and task output (default ./tiresias-tune-TIMESTAMP)")
    p.add_argument("--sbatch-args", metavar="ARGS", default="",
                   help="with --slurm-array: extra sbatch options, e.g. \"-p batch -t 30\"")
    p.add_argument("--top", type=argtypes.int_in(1, 100_000), default=5, help="settings to list (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (bar on a terminal, else a line every 30 s)")


def _change(value: float, base: float) -> str:
    return f"{100 * (value / base - 1):+.1f}%" if base > 0 else "-"


def _vs(evaluation, default, name: str) -> str:
    return _change(getattr(evaluation, name), getattr(default, name)) if default is not None else "-"


def run(args) -> int:
    began = time.monotonic()  # the budget covers the whole command, loading the trace included
    if args.node_kinds:
        kinds_nodes = sum(count for count, _, _ in args.node_kinds)
        if args.nodes is not None and args.nodes != kinds_nodes:
            raise InputError(f"nodes value {args.nodes} differs from the {kinds_nodes} nodes --node-kinds lists")
        args.nodes = kinds_nodes
    elif args.nodes is None:
        raise InputError("tune needs --nodes (or --node-kinds)")
    if args.max_k < 2:
        raise InputError(f"max-k value {args.max_k} must be >= 2")
    from controller.replay.traces import load_trace

    jobs = load_trace(args.trace, time_scale=args.time_scale)
    if not jobs:
        raise InputError(f"trace {args.trace}: no jobs")
    workers = args.workers or max(1, min(ROUND_SIZE, os.cpu_count() or 1))
    evaluate = None
    if args.slurm_array:
        from controller.cli.tune_array import ArrayEvaluator

        try:
            sbatch_args = shlex.split(args.sbatch_args)
        except ValueError as err:
            raise InputError(f"--sbatch-args value {args.sbatch_args!r}: {err}") from None
        array_dir = args.array_dir or f"tiresias-tune-{time.strftime('%Y%m%dT%H%M%S')}"
        evaluate = ArrayEvaluator(args.trace, args.time_scale, array_dir, sbatch_args)
        workers = ROUND_SIZE  # a round's tasks run at once (as far as the cluster has room)
    elif args.array_dir or args.sbatch_args:
        raise InputError("--array-dir and --sbatch-args need --slurm-array")
    from controller.cli.progress import progress_for

    budget_left_s = max(args.budget_s - (time.monotonic() - began), 0.0)
    with progress_for(args, "tune", "replays", total=args.evaluations) as progress:
        result = tune(jobs, nodes=args.nodes, gpus_per_node=args.gpus_per_node, policy=args.policy,
                      evaluations=args.evaluations, max_k=args.max_k, seed=args.seed, budget_s=budget_left_s,
                      objective=args.objective, workers=workers, preempt_cost_s=args.preempt_cost_s,
                      drop_oversize=args.drop_oversize, node_kinds=args.node_kinds, progress=progress,
                      evaluate=evaluate)
    best, default = result.best, result.default
    exit_code = 130 if result.interrupted else 0  # interrupted: the best so far, then the usual 130
    if best is None:
        why = "interrupted" if result.interrupted else f"--budget-s {args.budget_s:g} was spent"
        print(f"tiresias tune: no replay finished ({why}; {len(result.cut)} cut): raise --budget-s, "
              "or replay a shorter trace", file=sys.stderr)
        return exit_code or 1
    where_text = f"on {os.path.basename(args.trace)}, {args.nodes}x{args.gpus_per_node} GPUs"
    if default is None:
        comment = (f"tiresias tune: avg JCT {format_duration(best.avg_jct_s)}, p95 {format_duration(best.p95_jct_s)} "
                   f"(the default's replay was cut) {where_text}")
    else:
        comment = (f"tiresias tune: avg JCT {format_duration(best.avg_jct_s)} (default {format_duration(default.avg_jct_s)}), "
                   f"p95 {format_duration(best.p95_jct_s)} (default {format_duration(default.p95_jct_s)}) {where_text}")
    block = yaml_block(best.setting, args.policy, comment)

    def cut_rows():
        return [{"k": c.k, "queues_gpu_s": list(c.thresholds_gpu_s),
                 "promote_knob": None if math.isinf(c.promote_knob) else c.promote_knob} for c in result.cut]

    if args.json:
        def row(e):
            if e is None:
                return None
            return {"k": e.setting.k, "queues_gpu_s": list(e.setting.thresholds_gpu_s),
                    "promote_knob": None if math.isinf(e.setting.promote_knob) else e.setting.promote_knob,
                    "avg_jct_s": e.avg_jct_s, "p95_jct_s": e.p95_jct_s, "preemptions": e.preemptions}
        where = ({"slurm_arrays": evaluate.array_ids, "array_dir": str(evaluate.workdir)} if evaluate
                 else {"workers": workers})
        print(json.dumps({**where, "wall_s": result.elapsed_s, "trace": args.trace, "nodes": args.nodes,
                          "gpus_per_node": args.gpus_per_node,
                          "policy": args.policy, "objective": args.objective, "seed": args.seed,
                          "evaluations": result.evaluations, "requested": result.requested,
                          "stopped_by_budget": result.stopped_by_budget, "interrupted": result.interrupted,
                          "cut": cut_rows(), "best": row(best),
                          "default": row(default), "top": [row(e) for e in result.ranked[:args.top]],
                          "yaml": block}, sort_keys=True))
        return exit_code
    print(f"tune: {args.trace} ({len(jobs)} jobs) on {args.nodes}x{args.gpus_per_node} GPUs, policy {args.policy}, "
          f"objective {args.objective}, seed {args.seed}: {result.evaluations} evaluations in {result.elapsed_s:.1f} s "
          f"wall" + (f" (on Slurm: {len(evaluate.array_ids)} job arrays {','.join(evaluate.array_ids)}, "
                     f"{evaluate.wall_s:.1f} s waiting for them; files in {evaluate.workdir})" if evaluate else
                     f" ({workers} local processes)"))
    print(f"searched: K 2..{result.max_k}; thresholds from {len(result.grid_gpu_s)} values "
          f"{format_number(result.grid_gpu_s[0])}..{format_number(result.grid_gpu_s[-1])} GPU-s "
          f"(service quantiles 5%..99%, and 3600); PROMOTEKNOB {','.join(format_number(k) for k in result.knobs)}")
    if result.interrupted:
        print(f"note: interrupted after {result.evaluations} of {result.requested} evaluations; "
              "the best settings found so far:")
    if result.stopped_by_budget:
        print(f"note: stopped by --budget-s {args.budget_s:g} after {result.evaluations} of {result.requested} "
              f"evaluations; the result depends on machine speed (raise --budget-s or lower --evaluations)")
    if result.cut:
        print(f"note: {len(result.cut)} replays cut unfinished (not ranked): "
              + "; ".join(f"K={c.k} {','.join(format_number(t) for t in c.thresholds_gpu_s)} "
                          f"knob {format_number(c.promote_knob)}" for c in result.cut))
    if default is None:
        print("note: the default setting's replay was cut, so nothing is compared with it")
    if result.exhausted:
        print(f"note: the search space was exhausted after {result.evaluations} evaluations")
    headers = ["rank", "K", "queues_gpu_s", "knob", "avg JCT", "p95 JCT", "preempt", "avg vs default",
               "p95 vs default"]
    rows = []
    for rank, e in enumerate(result.ranked[:args.top], start=1):
        rows.append([str(rank), e.setting.k, ",".join(format_number(t) for t in e.setting.thresholds_gpu_s),
                     format_number(e.setting.promote_knob), format_duration(e.avg_jct_s),
                     format_duration(e.p95_jct_s), f"{e.preemptions:,}", _vs(e, default, "avg_jct_s"),
                     _vs(e, default, "p95_jct_s")])
    if default is not None:
        rows.append(["default", default.setting.k, ",".join(format_number(t) for t in default.setting.thresholds_gpu_s),
                     format_number(default.setting.promote_knob), format_duration(default.avg_jct_s),
                     format_duration(default.p95_jct_s), f"{default.preemptions:,}", "", ""])
    print(format_table(headers, rows))
    noise = noise_note(jobs, best, default)
    if noise:
        print(noise)
    print()
    print(YAML_MARKER)
    print(block)
    print("# (replace the policy, queues_gpu_s and promote_knob lines of that file with these:"
          " a key written twice is refused)")
    sys.stdout.flush()
    return exit_code


def noise_note(jobs, best, default) -> str:
    """A warning when the best setting's gain on the average JCT is within twice the
    standard error of a mean over this many jobs (their durations' spread over the
    square root of their number): on a short history that gain is noise, not a
    property of the setting."""
    if best is None or default is None or default.avg_jct_s <= 0 or len(jobs) < 2:
        return ""
    durations = [job.duration_s or 0.0 for job in jobs]
    mean = sum(durations) / len(durations)
    if mean <= 0:
        return ""
    spread = math.sqrt(sum((d - mean) ** 2 for d in durations) / (len(durations) - 1))
    noise = 2 * spread / mean / math.sqrt(len(durations))
    gain = 1 - best.avg_jct_s / default.avg_jct_s
    if abs(gain) >= noise:
        return ""
    return (f"warning: the best gain ({100 * gain:+.1f}% avg JCT) is within the noise of {len(jobs)} jobs "
            f"(+-{100 * noise:.0f}%: twice the standard error of their mean duration); replay a longer history "
            "before changing the settings")

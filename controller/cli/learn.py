"""Learn a priority function f(d, q, u, g) by genetic programming (multi-partition mode).

Training and validation instances are seeded synthetic multi-partition snapshots;
layer 1 is MCT. The score of a function is its objective divided by SRSF's
(f = g * d) on the same instance (< 1 is better). Defaults are small and fast;
--published selects the paper's settings (population 512, 100 generations,
50 training instances, 2-26 partitions of 10-100 nodes). Writes the best
expression (by validation score) to --out as one line of text.
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from controller.cli import argtypes
from controller.cli.out_paths import check_output_file, write_error
from controller.partitions.model import Objective
from controller.core.model import InputError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="FILE", required=True, help="where to write the learned expression")
    p.add_argument("--published", action="store_true", help="start from the published settings")
    p.add_argument("--instances", type=argtypes.int_in(1, 10_000), help="training instances (default 6; published 50)")
    p.add_argument("--validation", type=argtypes.int_in(1, 10_000), help="validation instances (default 3)")
    p.add_argument("--population", type=argtypes.int_in(1, 10_000), help="GP population (default 32; published 512)")
    p.add_argument("--generations", type=argtypes.int_in(0, 100_000), help="generations (default 10; published 100)")
    p.add_argument("--max-depth", type=argtypes.int_in(1, 64), help="maximum tree depth (default 7)")
    p.add_argument("--mutation-rate", type=argtypes.unit_float, help="subtree mutation probability (default 0.1)")
    p.add_argument("--tournament", type=argtypes.int_in(1, 10_000), help="tournament size k (default 4)")
    p.add_argument("--subset", type=argtypes.int_in(1, 10_000), help="training instances per generation (default 3)")
    p.add_argument("--partitions-min", type=argtypes.int_in(1, 1000))
    p.add_argument("--partitions-max", type=argtypes.int_in(1, 1000))
    p.add_argument("--nodes-min", type=argtypes.int_in(1, 10_000))
    p.add_argument("--nodes-max", type=argtypes.int_in(1, 10_000))
    p.add_argument("--arrivals-per-node", type=argtypes.int_in(1, 10_000))
    p.add_argument("--start-from", action="append", metavar="EXPR|FILE", default=[],
                   help="put this expression (or the one in this file) in the initial population; "
                        "repeatable, e.g. --start-from 'g * d' (SRSF) --start-from published")
    p.add_argument("--backlog-load", type=argtypes.positive_float, metavar="X",
                   help="train on backlog snapshots (nothing running; the first arrivals whose GPUs add up "
                        "to X times the instance's GPUs), as `bench_partitions.py ranks` tests on; default: "
                        "the busiest moment of a FIFO replay in the submitted partitions")
    p.add_argument("--seed", type=argtypes.seed, default=0, help="seed (default 0)")
    p.add_argument("--weights", type=argtypes.objective_weights, default=(1.0, 1.0, 1.0), metavar="W1,W2,W3",
                   help="objective weights of C_avg, C_max, 1 - C_util (default 1,1,1)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (bar on a terminal, else a line every 30 s)")


def _start_expression(value: str) -> str:
    """``published`` (the paper's example), a file holding one expression, or an expression."""
    from controller.partitions.priority_file import load_expression_file
    from controller.core.expr import PUBLISHED_EXAMPLE, parse_expression

    if value == "published":
        return PUBLISHED_EXAMPLE
    if Path(value).is_file():
        return load_expression_file(value).to_text()
    return parse_expression(value).to_text()


def config_from_args(args):
    from controller.partitions.learner import LearnConfig

    base = LearnConfig.published() if args.published else LearnConfig()
    changes = {"seed": args.seed}
    for option, field in (("instances", "training"), ("validation", "validation"), ("population", "population"),
                          ("generations", "generations"), ("max_depth", "max_depth"),
                          ("mutation_rate", "mutation_rate"), ("tournament", "tournament"), ("subset", "subset"),
                          ("arrivals_per_node", "arrivals_per_node")):
        value = getattr(args, option)
        if value is not None:
            changes[field] = value
    parts = (args.partitions_min or base.partitions[0], args.partitions_max or base.partitions[1])
    nodes = (args.nodes_min or base.nodes[0], args.nodes_max or base.nodes[1])
    if parts[0] > parts[1]:
        raise InputError(f"--partitions-min {parts[0]} is larger than --partitions-max {parts[1]}")
    if nodes[0] > nodes[1]:
        raise InputError(f"--nodes-min {nodes[0]} is larger than --nodes-max {nodes[1]}")
    training = changes.get("training", base.training)
    if args.subset is not None and args.subset > training:  # the learner would quietly use all instances
        raise InputError(f"--subset {args.subset} is larger than the {training} training instances (--instances)")
    changes["partitions"], changes["nodes"] = parts, nodes
    if args.backlog_load is not None:
        changes["replay"], changes["backlog_load"] = "none", args.backlog_load
    if args.start_from:
        changes["start_from"] = tuple(_start_expression(x) for x in args.start_from)
    max_depth = changes.get("max_depth", base.max_depth)
    lo, hi = base.init_depth
    changes["init_depth"] = (min(lo, max_depth), min(hi, max_depth))
    return replace(base, **changes)


def run(args) -> int:
    from controller.cli.progress import progress_for
    from controller.partitions.learner import learn

    config = config_from_args(args)
    out = check_output_file(args.out)  # before learning: a bad --out must not cost the run
    total = (config.generations + 1) * config.population  # expressions scored
    with progress_for(args, "learn", "expr", total=total) as progress:
        result = learn(config, Objective(*args.weights), progress=progress)
    snapshot = (f" backlog load {config.backlog_load}" if config.backlog_load is not None
                else f" replay {config.replay} max pending {config.max_pending}")
    try:
        out.write_text(f"# tiresias learn --seed {config.seed} population {config.population} generations "
                       f"{config.generations} training {config.training} partitions {config.partitions} "
                       f"nodes {config.nodes}{snapshot}\n"
                       f"# validation score {result.validation_score:.6f} (objective / SRSF objective)\n"
                       f"{result.expression.to_text()}\n")
    except OSError as err:
        raise write_error("--out", out, err) from None
    print(f"learned: {result.expression.to_text()}")
    print(f"validation score {result.validation_score:.4f}, training score {result.training_score:.4f} "
          f"(objective relative to MCT + SRSF; < 1 is better)")
    print(f"written to {out}")
    return 0

"""The ``tiresias`` command line. Each subcommand lives in its own module; this file
only wires them up. Bad input is one line on stderr and exit code 2."""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional

from controller.core.model import InputError

# name -> (module, help). Modules expose add_arguments(parser) and run(args) -> int.
SUBCOMMANDS = {
    "simulate": ("controller.cli.simulate", "replay a job trace (or the synthetic default) under several policies"),
    "run": ("controller.cli.run", "run the controller against Slurm (observe, shadow or enforce)"),
    "learn": ("controller.cli.learn", "learn a multi-partition priority function by genetic programming"),
    "simulate-partitions": ("controller.cli.simulate_partitions",
                            "compare MCT/EVO job-to-partition allocators on multi-partition snapshots"),
    "profile-skew": ("controller.cli.profile_skew", "compute a checkpoint's tensor-size skew; --job stores it"),
    "acct": ("controller.cli.acct", "accounting of GPU jobs, like sacct (store or simulator output)"),
    "usage": ("controller.cli.usage", "the node hooks' usage records collected into the store (per run, per node)"),
    "queue": ("controller.cli.queue", "pending and running GPU jobs in the controller's priority order, like squeue"),
    "explain": ("controller.cli.explain", "why a job waits: level, jobs ahead, GPUs, promotion, decisions"),
    "preflight": ("controller.cli.preflight", "check the slurm.conf settings the controller depends on"),
    "show-config": ("controller.cli.show_config", "print the effective settings with their documentation"),
    "report": ("controller.cli.report", "PNG figures: JCT CDF, queue length and GPU utilization over time"),
    "demo-cluster": ("controller.cli.demo_cluster", "a containerized Slurm + controller demo (needs Docker)"),
    "trace": ("controller.cli.trace", "export a trace of your own cluster from Slurm accounting (sacct)"),
    "restore": ("controller.cli.restore", "reset every lever the controller set on Slurm jobs (SiteFactor, pins, "
                "AdminComment line)"),
    "shadow-diff": ("controller.cli.shadow_diff", "what enforce would change now against Slurm's own order (sprio)"),
    "migrate": ("controller.cli.migrate", "upgrade the store's schema after a backup; --check prints its version"),
    "tune": ("controller.cli.tune", "search queue thresholds, K and PROMOTEKNOB on a trace replay"),
}


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line naming the option and the value, exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(selected: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser; only the selected subcommand's module is imported (fast start, and
    one command's optional dependency never breaks another command)."""
    import importlib

    parser = OneLineErrorParser(
        prog="tiresias",
        description="GPU job-priority controller for Slurm (discretized 2D attained service) and its simulator.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if name != selected:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip())
        module.add_arguments(command)
        command.set_defaults(handler=module.run)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    selected = next((arg for arg in argv if arg in SUBCOMMANDS), None)
    if argv and not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS:
        build_parser().error(f"unknown command '{argv[0]}' (choose from {', '.join(SUBCOMMANDS)})")
    if selected is None and not any(arg in ("-h", "--help") for arg in argv):
        argv, selected = ["simulate"] + argv, "simulate"  # no command: the built-in simulation
    args = build_parser(selected).parse_args(argv)
    handler: Callable = args.handler
    try:
        return handler(args) or 0
    except InputError as err:
        print(f"tiresias {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tiresias: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `tiresias acct | head`: the reader left; that is not an error.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``tiresias`` command line. Each subcommand lives in its own module; this file
only wires them up. Bad input is one line on stderr and exit code 2."""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional

from controller.model import InputError

# name -> (module, help). Modules expose add_arguments(parser) and run(args) -> int.
SUBCOMMANDS = {
    "simulate": ("controller.cmd_simulate", "replay a job trace (or the synthetic default) under several policies"),
    "run": ("controller.cmd_run", "run the controller against Slurm (observe, shadow or enforce)"),
    "learn": ("controller.cmd_learn", "learn a multi-partition priority function by genetic programming"),
    "simulate-partitions": ("controller.cmd_partitions",
                            "compare MCT/EVO job-to-partition allocators on multi-partition snapshots"),
    "profile-skew": ("controller.cmd_profile_skew", "compute a checkpoint's tensor-size skew; --job stores it"),
    "acct": ("controller.cmd_acct", "accounting of GPU jobs, like sacct (store or simulator output)"),
    "queue": ("controller.cmd_queue", "pending and running GPU jobs in the controller's priority order, like squeue"),
    "explain": ("controller.cmd_explain", "why a job waits: level, jobs ahead, GPUs, promotion, decisions"),
    "show-config": ("controller.cmd_show_config", "print the effective settings with their documentation"),
    "report": ("controller.cmd_report", "PNG figures: JCT CDF, queue length and GPU utilization over time"),
    "demo-cluster": ("controller.cmd_demo_cluster", "a containerized Slurm + controller demo (needs Docker)"),
    "trace": ("controller.cmd_trace", "export a trace of your own cluster from Slurm accounting (sacct)"),
    "tune": ("controller.cmd_tune", "search queue thresholds, K and PROMOTEKNOB on a trace replay"),
}


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line naming the option and the value, exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = OneLineErrorParser(
        prog="tiresias",
        description="GPU job-priority controller for Slurm (discretized 2D attained service) and its simulator.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip())
        module.add_arguments(command)
        command.set_defaults(handler=module.run)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["simulate"] + list(argv if argv is not None else sys.argv[1:]))
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

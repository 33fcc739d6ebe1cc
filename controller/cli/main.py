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
    "install-files": ("controller.cli.install_files", "lay out the Slurm plugins, node hooks, checkpoint helpers and "
                      "service files under DEST"),
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
    parser.add_argument("--version", action="version", version=f"tiresias {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if name != selected:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        # a command whose -h means something else (queue: squeue's --noheader) adds --help itself
        command = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip(),
                                 add_help=getattr(module, "SHORT_H_IS_HELP", True))
        module.add_arguments(command)
        command.set_defaults(handler=module.run)
    return parser


def package_version(distribution: str = "tiresias-slurm") -> str:
    """The installed distribution's version; from a checkout that is not installed,
    pyproject.toml's; 'unknown' when neither says."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        pass
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return "unknown"


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # as most tools do: the command list, not a long simulation nobody asked for
        build_parser().print_help()
        return 0
    selected = next((arg for arg in argv if arg in SUBCOMMANDS), None)
    if not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS:
        build_parser().error(f"unknown command '{argv[0]}' (choose from {', '.join(SUBCOMMANDS)})")
    if selected is None and not any(arg in ("-h", "--help", "--version") for arg in argv):
        # options alone once meant the built-in simulation; say where it went
        build_parser().error(f"no command before option '{argv[0]}' (choose from {', '.join(SUBCOMMANDS)}; "
                             "the simulation is 'tiresias simulate')")
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

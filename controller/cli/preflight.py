"""Check the slurm.conf settings the controller depends on (controller.service.preflight).

Reads the running slurmctld's settings (`scontrol show config`), or a saved copy of
that output with --from-file, and prints one line per wrong setting: its name, its
value and the value it needs. Exit 0 when every setting is right, 1 when one is
wrong or Slurm did not answer, 2 for a bad flag or config.
"""
from __future__ import annotations

import argparse
import sys

from controller.checkpoint import REQUEUE_EXIT_CODE
from controller.core.model import InputError
from controller.service.config import DEFAULT_PATH, load


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=f"YAML settings (default {DEFAULT_PATH} if present): "
                                                     "site_factor_band sets the weight limit")
    p.add_argument("--from-file", metavar="FILE", help="check this saved `scontrol show config` output instead")


def run(args) -> int:
    from controller.service.backend import BackendUnavailable
    from controller.service.preflight import check, parse_show_config

    config = load(args.config, {})
    if args.from_file:
        try:
            with open(args.from_file, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as err:
            raise InputError(f"--from-file {args.from_file!r}: {err.strerror or err}") from None
        source = args.from_file
    else:
        from slurm_plugin.backend import SlurmBackend

        try:
            text = SlurmBackend().slurm_config()
        except BackendUnavailable as err:
            print(f"tiresias preflight: Slurm did not answer: {err}", file=sys.stderr)
            return 1
        source = "scontrol show config"
    settings = parse_show_config(text)
    if not settings:
        raise InputError(f"{source}: no 'Key = Value' lines (is it `scontrol show config` output?)")
    findings = check(settings, config.site_factor_band, REQUEUE_EXIT_CODE)
    for finding in findings:
        print(finding.line())
    if findings:
        print(f"tiresias preflight: {len(findings)} setting(s) wrong ({source}); enforce mode refuses to start",
              file=sys.stderr)
        return 1
    print(f"preflight passed: every slurm.conf setting the controller depends on is right ({source})")
    return 0

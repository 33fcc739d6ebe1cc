"""Check the slurm.conf settings the controller depends on (controller.service.ops.slurm_conf).

Reads the running slurmctld's settings (`scontrol show config` and `scontrol show
partition -o`), or saved copies of that output with --from-file (and
--partitions-from-file), and prints one line per wrong setting: its name, its value
and the value it needs; a setting enforce mode starts with anyway is a line marked
"warning:". Reading Slurm, it also reports the queue it sees: the share of pending
GPU jobs whose request the plan does not model (controller.service.ops.unmodelled), and
per reason a warning naming the slurm.conf line or job option behind it. Exit 0 when no setting refuses enforce (warnings printed after the
verdict), 1 when one does or Slurm did not answer, 2 for a bad flag or config.
"""
from __future__ import annotations

import argparse
import os
import sys

from controller.checkpoint import REQUEUE_EXIT_CODE
from controller.core.model import InputError
from controller.service.ops import config as settings_module
from controller.service.ops.config import DEFAULT_PATH, load
from controller.service.ops.qos_limits import IMPLIED_DEFAULT_QOS
from slurm_plugin.commands import DEFAULT_QOS_COMMAND, QOS_LIMITS_COMMAND


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=f"YAML settings (default {DEFAULT_PATH} if present): "
                                                     "preemption picks the mechanism checked, site_factor_band "
                                                     "the weight limit")
    p.add_argument("--from-file", metavar="FILE", help="check this saved `scontrol show config` output instead")
    p.add_argument("--partitions-from-file", metavar="FILE",
                   help="with --from-file: a saved `scontrol show partition` output (each partition's PreemptMode)")
    p.add_argument("--qos-from-file", metavar="FILE",
                   help="with --from-file and preemption: slurm: a saved `sacctmgr -n -P show qos "
                        "format=name,preemptmode,gracetime,preemptexempttime,preempt` output")
    p.add_argument("--qos-limits-from-file", metavar="FILE",
                   help="with --from-file and preemption: slurm: a saved `" + " ".join(QOS_LIMITS_COMMAND) +
                        "` output (the limits the QOS swap would drop; with --default-qos-from-file)")
    p.add_argument("--default-qos-from-file", metavar="FILE",
                   help="with --qos-limits-from-file: a saved `" + " ".join(DEFAULT_QOS_COMMAND) + "` output "
                        f"(without it every association's default QOS is {IMPLIED_DEFAULT_QOS})")


def _read_file(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as err:
        raise InputError(f"{flag} {path!r}: {err.strerror or err}") from None


def run(args) -> int:
    from controller.service.acting.backend import BackendUnavailable
    from controller.service.ops.preempt_qos import installed_cli_filter_findings, parse_qos, qos_findings
    from controller.service.ops.queue_census import queue_census, queue_findings
    from controller.service.ops.slurm_conf import Finding, check, parse_show_partitions
    from controller.service.acting.backend import parse_show_config
    from controller.service.ops.qos_limits import parse_default_qos, parse_qos_limits, qos_limit_findings

    config = load(args.config, {})
    checked = _checked(args.config, config.preemption)
    partitions_text = qos_text = limits = partition_nodes = queue = None
    if (args.partitions_from_file or args.qos_from_file or args.qos_limits_from_file) and not args.from_file:
        raise InputError("--partitions-from-file, --qos-from-file and --qos-limits-from-file go with --from-file "
                         "(without it all is read from Slurm)")
    if args.default_qos_from_file and not args.qos_limits_from_file:
        raise InputError("--default-qos-from-file goes with --qos-limits-from-file")
    if args.from_file:
        text = _read_file(args.from_file, "--from-file")
        if args.partitions_from_file:
            partitions_text = _read_file(args.partitions_from_file, "--partitions-from-file")
        if args.qos_from_file:
            qos_text = _read_file(args.qos_from_file, "--qos-from-file")
        if args.qos_limits_from_file:
            limits = (_read_file(args.qos_limits_from_file, "--qos-limits-from-file"),
                      _read_file(args.default_qos_from_file, "--default-qos-from-file")
                      if args.default_qos_from_file else "")
        source = args.from_file
    else:
        from slurm_plugin.backend import SlurmBackend

        backend = SlurmBackend()
        try:
            text = backend.slurm_config()
            partitions_text = backend.partition_config()
            if config.preemption == "slurm":
                qos_text = backend.qos_config()
                limits = backend.qos_limits()
            observation = backend.observe()  # the queue as the controller would see it now
            partition_nodes = backend.partition_nodes()
            queue = queue_census(observation.jobs, observation.nodes)
        except BackendUnavailable as err:
            print(f"tiresias preflight: Slurm did not answer: {err}", file=sys.stderr)
            return 1
        source = "scontrol show config"
    settings = parse_show_config(text)
    if not settings:
        raise InputError(f"{source}: no 'Key = Value' lines (is it `scontrol show config` output?)")
    partitions = parse_show_partitions(partitions_text) if partitions_text is not None else None
    if partitions and partition_nodes is None:
        partition_nodes = _expanded_nodes(partitions)
    findings = check(settings, config.site_factor_band, REQUEUE_EXIT_CODE, partitions, config.preemption,
                     partition_nodes, config.partition_moves)
    if config.preemption == "slurm" and qos_text is not None:
        rows = parse_qos(qos_text)
        findings += qos_findings(rows, config.preempt_qos, settings.get("PreemptExemptTime", "")) + \
            installed_cli_filter_findings(settings, rows, config.preempt_qos)
    if config.preemption == "slurm" and limits is not None:
        defaults = parse_default_qos(limits[1]) if limits[1] else {IMPLIED_DEFAULT_QOS: 0}
        findings += [Finding(*f) for f in qos_limit_findings(parse_qos_limits(limits[0]), defaults,
                                                             config.preempt_qos)]
    if queue is not None:
        findings += queue_findings(queue, settings, partitions)
    findings = [f for f in findings if f.refuses] + [f for f in findings if not f.refuses]
    refusing = sum(f.refuses for f in findings)
    warnings = len(findings) - refusing
    if refusing:
        for finding in findings:
            print(finding.report())
        if queue is not None:
            print(_queue_line(queue))
        print(f"tiresias preflight: {refusing} setting(s) wrong ({source}; {checked}); enforce mode refuses to start"
              f"{f' ({warnings} more warning(s))' if warnings else ''}", file=sys.stderr)
        return 1
    print(f"preflight passed: every slurm.conf setting the controller depends on is right ({source}; {checked})"
          f"{f', with {warnings} warning(s):' if warnings else ''}")
    for finding in findings:
        print(finding.report())
    if queue is not None:
        print(_queue_line(queue))
    return 0


def _checked(path: str | None, preemption: str) -> str:
    """Which mechanism's settings were checked, and whose word that is: the settings a
    plain `tiresias preflight` reads are the controller's own (DEFAULT_PATH), so an
    admin sees at once whether it checked the mechanism the site runs."""
    default = settings_module.DEFAULT_PATH  # read now: load() reads the same name
    if path:
        return f"preemption: {preemption}, from {path}"
    if os.path.exists(default):
        return f"preemption: {preemption}, from {default}"
    return f"preemption: {preemption}, the default: no {default}; --config names the YAML"


def _queue_line(queue) -> str:
    """The share of the queue's pending GPU jobs that cannot cause a preemption, in one line."""
    if queue.jobs:
        return (f"queue: {queue.counts()} cannot cause a preemption (requests the plan does not model)"
                + (": the controller is not reordering this site (see the warnings)" if queue.not_reordering
                   else ""))
    if queue.pending:
        return f"queue: every one of {queue.pending} pending GPU jobs may cause a preemption"
    return "queue: no pending GPU jobs"

def _expanded_nodes(partitions: dict[str, dict[str, str]]):
    """Partition -> node names of saved `scontrol show partition` output (its Nodes=
    hostlists expanded); None when one does not expand (each then compared as written)."""
    from slurm_plugin.grammar import SlurmParseError, expand_hostlist

    try:
        return {name: expand_hostlist(values.get("Nodes", "")) for name, values in partitions.items()}
    except SlurmParseError:
        return None

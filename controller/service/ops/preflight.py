"""Preflight: the check of slurm.conf (controller.service.ops.slurm_conf) and, under
``preemption: slurm``, of the QOS (controller.service.ops.preempt_qos), run against the
running slurmctld.

Enforce refuses to start with any refusing finding; shadow and observe log them as
warnings and start (controller.cli.run). A slurmctld that does not answer at start
leaves the preflight pending: enforce then acts on nothing until it has run and passed
(``Pending``, retried before every round by controller.service.round.daemon). ``tiresias
preflight`` prints them all for an admin.
"""
from __future__ import annotations

import logging
from typing import Optional

from controller.core.levers.preemption import strategy_for
from controller.service.acting.backend import Backend, BackendUnavailable
from controller.service.acting.executor import acts
from controller.service.ops.preempt_qos import installed_cli_filter_findings, parse_qos, qos_findings
from controller.service.ops.qos_limits import parse_default_qos, parse_qos_limits, qos_limit_findings
from controller.service.ops.slurm_conf import Finding, check, parse_show_partitions
from controller.service.acting.backend import parse_show_config


def run_checks(backend: Backend, site_factor_band: int, requeue_exit_code: int,
               preemption: str = "controller", qos: str = "", partition_moves: bool = False) -> list[Finding]:
    """Read the running slurmctld's settings through the backend (and its partitions,
    when the backend reads them: ``partition_config``) and check them. Raises
    BackendUnavailable when slurmctld does not answer."""
    settings = parse_show_config(backend.slurm_config())
    text = backend.partition_config() if backend.offers("partition_config") else None
    partitions = parse_show_partitions(text) if isinstance(text, str) else None
    # expanded node names (sinfo), when offered
    nodes = backend.partition_nodes() if partitions and backend.offers("partition_nodes") else None
    found = check(settings, site_factor_band, requeue_exit_code, partitions, preemption,
                  nodes if isinstance(nodes, dict) else None, partition_moves)
    if strategy_for(preemption).by_qos and qos and backend.offers("qos_config"):
        rows = parse_qos(backend.qos_config())
        found += qos_findings(rows, qos, settings.get("PreemptExemptTime", "")) + \
            installed_cli_filter_findings(settings, rows, qos)
        answer = backend.qos_limits() if backend.offers("qos_limits") else None
        if isinstance(answer, tuple):  # (the QOS limits, the associations' default QOS)
            found += [Finding(*f) for f in qos_limit_findings(parse_qos_limits(answer[0]),
                                                              parse_default_qos(answer[1]), qos)]
        found = [f for f in found if f.refuses] + [f for f in found if not f.refuses]
    return found


def report(mode: str, findings: list[Finding], log: logging.Logger) -> bool:
    """Log the findings: False (refuse) in enforce mode with a refusing finding, each
    logged as an error; warnings, and every finding in other modes, as warnings."""
    refuse = acts(mode) and any(f.refuses for f in findings)
    for finding in findings:
        (log.error if refuse and finding.refuses else log.warning)("preflight: %s", finding.report())
    if refuse:
        log.error("preflight: %d slurm.conf setting(s) wrong: enforce mode refuses to start "
                  "(run `tiresias preflight`; shadow and observe start with these warnings)",
                  sum(f.refuses for f in findings))
    return not refuse


def at_start(mode: str, backend: Backend, site_factor_band: int, requeue_exit_code: int,
             log: logging.Logger, preemption: str = "controller", qos: str = "",
             partition_moves: bool = False) -> Optional[bool]:
    """The check at the controller's start: True (start), False (refuse: enforce mode
    with a refusing finding, each logged as an error; other modes log them as
    warnings and start), None when slurmctld does not answer: the check is pending
    (``Pending``): enforce acts on nothing until it has run and passed."""
    try:
        findings = run_checks(backend, site_factor_band, requeue_exit_code, preemption, qos, partition_moves)
    except BackendUnavailable as err:
        log.warning("preflight: slurm.conf settings not checked yet, slurmctld did not answer: %s%s", err,
                    "; enforce acts on nothing until they are (retried before every round)"
                    if acts(mode) else "; retried before every round")
        return None
    return report(mode, findings, log)


class Pending:
    """A preflight that could not run at start (slurmctld did not answer), tried again
    by ``attempt`` until it runs. Logged once per change of state: at_start logged the
    first failure, ``attempt`` logs nothing while slurmctld still does not answer,
    then the findings and the outcome once it does."""

    def __init__(self, mode: str, backend: Backend, site_factor_band: int, requeue_exit_code: int,
                 log: logging.Logger, preemption: str = "controller", qos: str = "", partition_moves: bool = False):
        self.mode = mode
        self.partition_moves = partition_moves
        self.preemption = preemption
        self.qos = qos
        self.backend = backend
        self.site_factor_band = site_factor_band
        self.requeue_exit_code = requeue_exit_code
        self.log = log
        self._failed = False

    def attempt(self) -> Optional[bool]:
        """None: slurmctld still does not answer; True: the check ran and the mode may
        act (enforce: no refusing finding); False: enforce refuses (logged)."""
        try:
            findings = run_checks(self.backend, self.site_factor_band, self.requeue_exit_code, self.preemption,
                                  self.qos, self.partition_moves)
        except BackendUnavailable:
            return None
        except Exception as err:  # noqa: BLE001 - odd output or a bug: not run, tried again (logged once)
            if not self._failed:
                self.log.error("preflight failed, tried again before every round: %s: %s", type(err).__name__, err)
            self._failed = True
            return None
        passed = report(self.mode, findings, self.log)
        if passed:
            self.log.warning("preflight: slurmctld answers: slurm.conf settings checked (%s)%s",
                             f"{len(findings)} finding(s)" if findings else "all right",
                             ", enforce acts from now on" if acts(self.mode) else "")
        return passed

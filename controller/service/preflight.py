"""Preflight: the slurm.conf settings the controller depends on, read from `scontrol show config`.

Each wrong setting is one Finding: its name, its value and the value it needs, and
why. The rules (slurm_plugin/slurm.conf.fragment explains each line):

- ``PriorityType=priority/multifactor``: SiteFactor, the controller's only lever on
  the queue order, is a term of the multifactor priority; under priority/basic the
  bands change nothing while preemptions still happen.
- the weighted factors (``PriorityWeightAge``, ``...Assoc``, ``...FairShare``,
  ``...JobSize``, ``...Partition``, ``...QOS``, each ``PriorityWeightTRES`` term)
  add up to less than half a band (``site_factor_band`` / 2): each factor is at most
  1 times its weight, and half a band is the step between a queue's started and
  never-started jobs (controller.service.starts), so no weighted factor can reorder
  the bands.
- ``JobRequeue=1``: batch jobs are requeueable unless submitted ``--no-requeue``.
- ``RequeueExit`` contains the checkpoint helpers' exit code (85): a job that
  checkpoints and exits 85 is requeued by Slurm, not ended FAILED (and taken as a
  complete service sample).
- ``SchedulerType=sched/backfill``: the plan starts lower-priority jobs on GPUs a
  waiting gang cannot use (backfill); sched/builtin starts strictly in priority order.
- Slurm's own preemption off (``PreemptType=preempt/none`` or unset, or
  ``PreemptMode=OFF``): otherwise slurmctld picks victims by QOS or partition, not by
  attained service, and preempts jobs outside the checkpoint contract. (The same
  slurm.conf without a PreemptType line shows ``PreemptType = preempt/none`` on 22.05
  and ``PreemptType = (null)`` on 26.05.)

Enforce refuses to start with any finding; shadow and observe log them as warnings
and start (controller.cli.run). ``tiresias preflight`` prints them for an admin.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from controller.service.backend import Backend, BackendUnavailable

# The weighted priority factors of the multifactor plugin, as `scontrol show config` names them.
PRIORITY_WEIGHTS = ("PriorityWeightAge", "PriorityWeightAssoc", "PriorityWeightFairShare", "PriorityWeightJobSize",
                    "PriorityWeightPartition", "PriorityWeightQOS")
UNSET = "(null)"  # how `scontrol show config` prints a setting that is not set


@dataclass(frozen=True)
class Finding:
    """One setting that is not what the controller needs."""

    setting: str
    value: str
    needs: str
    why: str

    def line(self) -> str:
        return f"{self.setting}={self.value or UNSET}: needs {self.needs} ({self.why})"


def parse_show_config(text: str) -> dict[str, str]:
    """``Key = Value`` lines of `scontrol show config` as a dict (other lines, such as
    section titles and the ping line at the end, are skipped). Values are stripped."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            continue
        settings.setdefault(key, value.strip())
    return settings


def exit_codes(spec: str) -> set[int]:
    """``RequeueExit`` as a set of codes: "85", "1-9,18", "(null)" -> empty. Raises ValueError."""
    codes: set[int] = set()
    if spec in ("", UNSET):
        return codes
    for part in spec.split(","):
        first, dash, last = part.strip().partition("-")
        low, high = int(first), int(last) if dash else int(first)
        if not 0 <= low <= high <= 255:
            raise ValueError(f"exit code range {part!r} outside 0-255")
        codes.update(range(low, high + 1))
    return codes


def _number(text: str) -> int:
    return 0 if text in ("", UNSET) else int(text)


def tres_weights(spec: str) -> dict[str, float]:
    """``PriorityWeightTRES`` ("CPU=1000,Mem=2000,GRES/gpu=3000") as a dict. Raises ValueError."""
    weights: dict[str, float] = {}
    if spec in ("", UNSET):
        return weights
    for part in spec.split(","):
        name, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"term {part!r} is not NAME=WEIGHT")
        weights[name.strip()] = float(value)
    return weights


def check(settings: dict[str, str], site_factor_band: int, requeue_exit_code: int) -> list[Finding]:
    """Every finding for these settings (``parse_show_config``); [] when all is right."""
    found: list[Finding] = []

    def get(key: str) -> str:
        return settings.get(key, "")

    priority = get("PriorityType")
    if priority != "priority/multifactor":
        found.append(Finding("PriorityType", priority, "priority/multifactor",
                             "SiteFactor bands order the queue only under multifactor priority"))
    else:
        weights: dict[str, float] = {}
        for key in PRIORITY_WEIGHTS:
            try:
                weights[key] = _number(get(key))
            except ValueError:
                found.append(Finding(key, get(key), "a whole number", "a weight of the multifactor priority"))
        try:
            weights.update({f"PriorityWeightTRES[{k}]": v for k, v in tres_weights(get("PriorityWeightTRES")).items()})
        except ValueError as err:
            found.append(Finding("PriorityWeightTRES", get("PriorityWeightTRES"), "NAME=WEIGHT[,NAME=WEIGHT...]",
                                 str(err)))
        total = sum(weights.values())
        limit = site_factor_band // 2
        if total >= limit:
            terms = "+".join(f"{k.removeprefix('PriorityWeight')} {v:g}" for k, v in weights.items() if v)
            found.append(Finding("PriorityWeight*", f"{total:g} ({terms})", f"a sum below {limit}",
                                 f"half of site_factor_band {site_factor_band}, so that no weighted factor "
                                 "reorders the SiteFactor bands"))
    if get("JobRequeue") != "1":
        found.append(Finding("JobRequeue", get("JobRequeue"), "1",
                             "batch jobs must be requeueable for a preemption to resume them"))
    requeue_exit = get("RequeueExit")
    try:
        codes = exit_codes(requeue_exit)
    except ValueError:
        codes = set()
    if requeue_exit_code not in codes:
        found.append(Finding("RequeueExit", requeue_exit, f"a list containing {requeue_exit_code}",
                             f"a job that checkpoints and exits {requeue_exit_code} must be requeued, "
                             "not ended FAILED"))
    scheduler = get("SchedulerType")
    if scheduler != "sched/backfill":
        found.append(Finding("SchedulerType", scheduler, "sched/backfill",
                             "the plan backfills GPUs a waiting gang cannot use"))
    preempt_type, preempt_mode = get("PreemptType"), get("PreemptMode")
    if preempt_type not in ("", UNSET, "preempt/none") and preempt_mode.upper() != "OFF":
        found.append(Finding("PreemptType", f"{preempt_type} (PreemptMode={preempt_mode or UNSET})",
                             "preempt/none (or PreemptMode=OFF)",
                             "Slurm's own preemption picks victims by QOS or partition, not by attained "
                             "service, and outside the checkpoint contract"))
    return found


def run_checks(backend: Backend, site_factor_band: int, requeue_exit_code: int) -> list[Finding]:
    """Read the running slurmctld's settings through the backend and check them.
    Raises BackendUnavailable when slurmctld does not answer."""
    return check(parse_show_config(backend.slurm_config()), site_factor_band, requeue_exit_code)


def at_start(mode: str, backend: Backend, site_factor_band: int, requeue_exit_code: int,
             log: logging.Logger) -> bool:
    """The check at the controller's start: False (refuse to start) in enforce mode
    with a finding, each logged as an error; other modes log them as warnings and
    start. A slurmctld that does not answer is logged and the controller starts (it
    acts on nothing until Slurm answers; the settings are then unchecked)."""
    try:
        findings = run_checks(backend, site_factor_band, requeue_exit_code)
    except BackendUnavailable as err:
        log.warning("preflight: slurm.conf settings not checked, slurmctld did not answer: %s", err)
        return True
    refuse = mode == "enforce" and bool(findings)
    for finding in findings:
        (log.error if refuse else log.warning)("preflight: %s", finding.line())
    if refuse:
        log.error("preflight: %d slurm.conf setting(s) wrong: enforce mode refuses to start "
                  "(run `tiresias preflight`; shadow and observe start with these warnings)", len(findings))
    return not refuse

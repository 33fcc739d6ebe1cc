"""What ``preemption: slurm`` needs beyond slurm.conf: the declared jobs' QOS as
sacctmgr shows it (``qos_findings``) and the lua files' site policy,
tiresias-policy.conf next to slurm.conf (``cli_filter_policy_findings``).
The default QOS limits a job would lose in that QOS: controller.service.ops.qos_limits."""
from __future__ import annotations

import os
import re
from typing import Optional

from controller.service.ops.slurm_conf import Finding, preempt_modes

def parse_qos(text: str) -> dict[str, dict[str, str]]:
    """``sacctmgr -n -P show qos format=name,preemptmode,gracetime,preemptexempttime,preempt``
    as {name: {PreemptMode, GraceTime, PreemptExemptTime, Preempt}}; lines that are not
    five fields are left out."""
    rows = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 5 and fields[0]:
            rows[fields[0]] = dict(zip(("PreemptMode", "GraceTime", "PreemptExemptTime", "Preempt"), fields[1:5]))
    return rows


def qos_grace_s(rows: dict[str, dict[str, str]], qos: str) -> Optional[float]:
    """QOS ``qos``'s GraceTime in seconds from ``parse_qos`` rows (sacctmgr prints
    ``[D-]HH:MM:SS``; empty is 0); None when the QOS is missing or the time unreadable."""
    row = rows.get(qos)
    return None if row is None else _duration_s(row["GraceTime"])


def _duration_s(text: str) -> Optional[float]:
    """sacctmgr's and scontrol's ``[D-]HH:MM:SS`` in seconds; empty is 0; None when unreadable."""
    text = text.strip()
    if not text:
        return 0.0
    found = re.fullmatch(r"(?:([0-9]+)-)?([0-9]+):([0-9]{2}):([0-9]{2})", text)
    if found is None:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in found.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def qos_findings(rows: dict[str, dict[str, str]], qos: str, cluster_exempt: str = "") -> list[Finding]:
    """What ``preemption: slurm`` needs of the declared jobs' QOS ``qos``
    (docs/slurm-preemption.md, facts 2-4): it exists; its PreemptMode requeues and
    compares priorities (requeue,within; 25.05+ requeue,priority): ``within`` alone
    leaves its jobs unpreemptable, no within/priority lets none of them preempt
    another; a GraceTime (else the signal and the requeue come in one pass: no time to
    checkpoint; a warning). Warning: another QOS whose Preempt list names it without
    PRIORITY preempts its jobs whatever their band. Warning: no PreemptExemptTime (the
    QOS's, else slurm.conf's ``cluster_exempt``): a job slurmctld has just started may
    be preempted before its script has set its signal trap, which the signal then ends,
    and before the controller has raised its band."""
    setting = f"QOS {qos} PreemptMode"
    row = rows.get(qos)
    if row is None:
        return [Finding(f"QOS {qos}", "(none)", "a QOS (sacctmgr add qos; preempt_qos names it)",
                        "preemption: slurm preempts the jobs of this QOS, the ones that declared their signal")]
    found = []
    modes = preempt_modes(row["PreemptMode"])
    if "REQUEUE" not in modes or not modes & {"WITHIN", "PRIORITY"} or modes & {"CANCEL", "SUSPEND", "GANG"}:
        found.append(Finding(setting, row["PreemptMode"], "requeue,within (25.05+: or requeue,priority)",
                             "its jobs must preempt each other by priority and be requeued: within alone leaves "
                             "them unpreemptable, no within lets none preempt another, cancel kills"))
    if row["GraceTime"] in ("", "00:00:00", "0"):
        found.append(Finding(f"QOS {qos} GraceTime", row["GraceTime"] or "0", "the checkpoint lead time, e.g. 00:01:00",
                             "with no grace slurmctld signals and requeues in one pass: no time to checkpoint",
                             refuses=False))
    exempt = row["PreemptExemptTime"].strip() or cluster_exempt.strip()
    if not _duration_s(exempt):
        found.append(Finding(f"QOS {qos} PreemptExemptTime", exempt or "(none)",
                             "a minimum run time, e.g. 00:01:00 (preempt_min_runtime_s)",
                             "a job slurmctld has just started may be preempted before its script has set its "
                             "signal trap (the signal then ends it) and before the controller raised its band",
                             refuses=False))
    for name, other in rows.items():
        if name != qos and qos in other["Preempt"].split(",") and "PRIORITY" not in preempt_modes(other["PreemptMode"]):
            found.append(Finding(f"QOS {name} Preempt", other["Preempt"], f"no {qos} (25.05+: or PreemptMode "
                                 "with priority)", f"its jobs preempt {qos} jobs whatever their band",
                                 refuses=False))
    return found


POLICY_FILE = "tiresias-policy.conf"  # slurm_plugin/tiresias-policy.conf: the lua files' site policy
POLICY_KEYS = {"preemptable_qos": r"[A-Za-z0-9_.-]+", "preemptable_qos_grace_s": r"[0-9]+"}


def cli_filter_path(settings: dict[str, str], name: str = "cli_filter.lua") -> Optional[str]:
    """Where sbatch reads cli_filter.lua (or ``name``, e.g. POLICY_FILE, which the lua
    files read next to themselves): next to the slurm.conf slurmctld names
    (``SLURM_CONF``); None when it names none."""
    conf = settings.get("SLURM_CONF", "")
    return os.path.join(os.path.dirname(conf), name) if conf.startswith("/") else None


def parse_policy(text: str) -> tuple[dict[str, str], list[tuple[int, str]]]:
    """tiresias-policy.conf as the lua files read it (``tiresias_read_policy`` in
    cli_filter.lua): ``key = value`` lines, ``#`` to the end of a line a comment, the
    last value of a key wins. Returns the values and the (line number, text) of each
    line the lua files skip (an unknown key, a bad value, no ``=``)."""
    values: dict[str, str] = {}
    skipped = []
    for number, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        found = re.fullmatch(r"([a-z_]+)\s*=\s*(.*?)", body)
        if found and found.group(1) in POLICY_KEYS and re.fullmatch(POLICY_KEYS[found.group(1)], found.group(2)):
            values[found.group(1)] = found.group(2)
        else:
            skipped.append((number, line.strip()))
    return values, skipped


def cli_filter_policy_findings(policy_text: str, qos: str, grace_s: Optional[float],
                               where: str = POLICY_FILE) -> list[Finding]:
    """Warnings on the lua files' site policy for ``preemption: slurm``, read from
    tiresias-policy.conf's text ``policy_text`` (never run): a line the lua files skip,
    named by its number; preemptable_qos must name ``qos``, or no job enters it and
    slurmctld preempts nobody; preemptable_qos_grace_s (default 60) should not exceed the
    QOS's GraceTime ``grace_s``, or jobs whose lead time is between the two enter the QOS
    only to be kept from slurmctld by the controller (never preempted)."""
    values, skipped = parse_policy(policy_text)
    found = [Finding(f"{where} line {number}", line, "preemptable_qos = NAME or preemptable_qos_grace_s = SECONDS",
                     "cli_filter.lua and job_submit.lua skip a line they cannot read", refuses=False)
             for number, line in skipped]
    value = values.get("preemptable_qos")
    if value != qos:
        found.append(Finding(f"{where} preemptable_qos", value or "(unset)", f"{qos} (preempt_qos)",
                             "cli_filter.lua puts the declared jobs in that QOS: else slurmctld has none to preempt",
                             refuses=False))
    limit = int(values.get("preemptable_qos_grace_s", "60"))
    if value is not None and grace_s is not None and limit > grace_s:
        found.append(Finding(f"{where} preemptable_qos_grace_s", str(limit),
                             f"at most QOS {qos}'s GraceTime, {grace_s:g}", "a job whose lead time is longer than "
                             "the grace enters the QOS, and the controller keeps it from slurmctld", refuses=False))
    return found


def installed_cli_filter_findings(settings: dict[str, str], rows: dict[str, dict[str, str]],
                                  qos: str) -> list[Finding]:
    """cli_filter_policy_findings of the tiresias-policy.conf next to slurm.conf, when
    this host has it or cli_filter.lua (they may live on the submit hosts only: then
    nothing is checked; cli_filter.lua without the file is its defaults: no QOS)."""
    path = cli_filter_path(settings, POLICY_FILE)
    try:
        with open(path or "", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        if not os.path.isfile(cli_filter_path(settings) or ""):
            return []
        text = ""
    return cli_filter_policy_findings(text, qos, qos_grace_s(rows, qos), path or POLICY_FILE)

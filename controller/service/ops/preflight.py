"""Preflight: the slurm.conf settings the controller depends on, read from `scontrol show config`.

Each wrong setting is one Finding: its name, its value and the value it needs, and
why. The rules whose finding refuses enforce (slurm_plugin/slurm.conf.fragment
explains each line):

- ``PriorityType=priority/multifactor``: SiteFactor, the controller's only lever on
  the queue order, is a term of the multifactor priority; under priority/basic the
  bands change nothing while preemptions still happen.
- the weighted factors (``PriorityWeightAge``, ``...Assoc``, ``...FairShare``,
  ``...JobSize``, ``...Partition``, ``...QOS``, each ``PriorityWeightTRES`` term)
  add up to less than half a band (``site_factor_band`` / 2): each factor is at most
  1 times its weight, and half a band is the step between a queue's started and
  never-started jobs (controller.service.round.starts), so no weighted factor can reorder
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
- ``PriorityFlags`` without ``INCR_ONLY`` (a job's priority then never decreases, so a
  band the controller lowers never takes effect). The other flags are judged in
  ``priority_flag_findings``.
- no partition with a ``PreemptMode`` of its own other than OFF when a preemption
  plugin is configured (read from `scontrol show partition`, when the backend has it):
  the partition's mode overrides the cluster's OFF, and slurmctld preempts there.

With ``preemption: slurm`` the two preemption rules above are replaced by what
slurmctld's own preemption needs (``slurm_preemption_findings``): preempt/qos, a
requeueing PreemptMode, the job's own signal sent at preemption, no partition mode
that does not requeue.

Warnings (``Finding.refuses`` False: enforce starts; every mode logs them):

- ``CliFilterPlugins`` without ``cli_filter/lua``: sbatch then writes no job's final
  ``--signal`` into its comment, so a signal given only on the command line or in
  SBATCH_SIGNAL is invisible (no JSON shows it): such jobs look undeclared and are
  never preempted (the controller's order is weaker, nothing is lost).
- ``PriorityFlags`` ``NO_NORMAL_*`` with the matching weight set: the weight check
  above assumes every factor is at most 1; unnormalized, it is the raw partition
  factor, QOS priority, ... whose size slurm.conf does not show.
- a partition ``PreemptMode`` other than OFF under ``preempt/none``: no plugin picks
  victims, but GANG time-slices (suspends) jobs there behind the controller.

Enforce refuses to start with any refusing finding; shadow and observe log them as
warnings and start (controller.cli.run). A slurmctld that does not answer at start
leaves the preflight pending: enforce then acts on nothing until it has run and passed
(``Pending``, retried before every round by controller.service.round.daemon). ``tiresias
preflight`` prints them all for an admin.
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from controller.core.model import Node
from controller.service.acting.backend import Backend, BackendUnavailable, ObservedJob
from controller.service.acting.executor import acts
from controller.service.ops.qos_limits import parse_default_qos, parse_qos_limits, qos_limit_findings
from controller.service.round.startable import slurm_wait
from controller.service.ops.unmodelled import NOT_REORDERING_SHARE, REASONS, Census, census

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
    refuses: bool = True  # False: a warning in every mode (enforce starts with it)

    def line(self) -> str:
        return f"{self.setting}={self.value or UNSET}: needs {self.needs} ({self.why})"

    def report(self) -> str:
        """``line()``, marked when it is a warning only."""
        return self.line() if self.refuses else f"warning: {self.line()}"


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


_PARTITION_WORD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=(\S*)")  # one Key=Value word


def parse_show_partitions(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show partition` (one ``Key=Value`` line per partition with ``-o``, or
    the indented multi-line form) as partition name -> its settings. Values hold no
    spaces there; a ``TRES=cpu=4,...`` value keeps its own '='."""
    partitions: dict[str, dict[str, str]] = {}
    current: Optional[dict[str, str]] = None
    for key, value in _PARTITION_WORD.findall(text):
        if key == "PartitionName":
            current = partitions.setdefault(value, {})
        if current is not None:
            current.setdefault(key, value)
    return partitions


# What each PriorityFlags value does to SiteFactor bands (slurm.conf(5), PriorityFlags;
# the multifactor plugin). SiteFactor is added unweighted to the weighted factors, so
# a flag matters when it (a) stops a job's priority from following its SiteFactor, or
# (b) lets a weighted factor exceed its weight, which the weight check takes as the
# factor's largest value.
# (a) INCR_ONLY: "priority will only increase in value, never decrease": a band the
#     controller lowers (a preempted job requeued into a lower queue) leaves the old,
#     higher priority in place. A refusal.
# (b) NO_NORMAL_ASSOC / _PART / _QOS / _TRES (and NO_NORMAL_ALL, all four; some
#     scontrol versions print NO_NORMAL_ALL for any one of them): that factor is not normalized to
#     0..1 but is the raw association priority, partition PriorityJobFactor (up to
#     65533), QOS priority, TRES count, times its weight. How large those are is not
#     in slurm.conf: a warning, when the matching weight is set at all.
# Harmless: ACCRUE_ALWAYS (the age factor counts held time: still at most its weight),
# SMALL_RELATIVE_TO_TIME (job size over time limit: still 0..1), CALCULATE_RUNNING
# (running jobs' priorities are recomputed: they do not compete in the queue),
# DEPTH_OBLIVIOUS, FAIR_TREE, NO_FAIR_TREE (how fairshare is computed: still 0..1),
# MAX_TRES (how billable TRES are summed for usage: fairshare input only).
_NOT_NORMALIZED = {"NO_NORMAL_ASSOC": ("PriorityWeightAssoc",), "NO_NORMAL_PART": ("PriorityWeightPartition",),
                   "NO_NORMAL_QOS": ("PriorityWeightQOS",), "NO_NORMAL_TRES": ("PriorityWeightTRES",)}
_NOT_NORMALIZED["NO_NORMAL_ALL"] = tuple(w for ws in _NOT_NORMALIZED.values() for w in ws)


def priority_flag_findings(flags_value: str, weights: dict[str, float]) -> list[Finding]:
    """The findings of ``PriorityFlags`` (see the table above); ``weights``: each
    weight's value by name (``PriorityWeightTRES[GRES/gpu]`` for a TRES term)."""
    flags = {f.strip().upper() for f in flags_value.split(",") if f.strip() and f.strip() != UNSET}
    found: list[Finding] = []
    if "INCR_ONLY" in flags:
        found.append(Finding("PriorityFlags", flags_value, "no INCR_ONLY",
                             "a job's priority then never decreases: a SiteFactor band the controller lowers "
                             "(a requeued job in a lower queue) would leave it ranked where it was"))
    unbounded = sorted({w for flag in flags & _NOT_NORMALIZED.keys() for w in _NOT_NORMALIZED[flag]})
    weighted = [w for w in unbounded if any(v for k, v in weights.items() if k.split("[")[0] == w)]
    if weighted:
        names = ", ".join(w.removeprefix("PriorityWeight") for w in weighted)
        found.append(Finding("PriorityFlags", flags_value, f"no NO_NORMAL_* flag for a weighted factor ({names})",
                             "an unnormalized factor is not bounded by its weight, so the weight check cannot "
                             "tell whether it reorders the SiteFactor bands: compare weight x its largest raw "
                             "value (partition PriorityJobFactor, QOS priority, ...) with half a band",
                             refuses=False))
    return found


def cli_filter_finding(plugins_value: str) -> Optional[Finding]:
    """A warning when ``CliFilterPlugins`` lacks the lua plugin (``cli_filter/lua`` or
    ``lua``)."""
    names = {p.strip().removeprefix("cli_filter/") for p in plugins_value.split(",")}
    if "lua" in names:
        return None
    return Finding("CliFilterPlugins", plugins_value, "cli_filter/lua (slurm_plugin/cli_filter.lua on every "
                   "submit host)", "without it a --signal given only on the sbatch command line or in "
                   "SBATCH_SIGNAL is invisible to the controller: those jobs look undeclared and are never "
                   "preempted", refuses=False)


def partition_findings(settings: dict[str, str], partitions: dict[str, dict[str, str]]) -> list[Finding]:
    """Partitions whose own PreemptMode (one other than OFF and than the cluster's)
    lets slurmctld preempt or suspend jobs there by itself: a refusal when a
    preemption plugin is configured (the partition's mode overrides the cluster's
    OFF), a warning under preempt/none (no plugin picks victims, but GANG
    time-slices jobs). A partition that inherits the cluster's mode prints it."""
    preempt_type = settings.get("PreemptType", "")
    active = preempt_type not in ("", UNSET, "preempt/none")
    cluster_mode = settings.get("PreemptMode", "").upper()
    found: list[Finding] = []
    for name, values in partitions.items():
        mode = values.get("PreemptMode", "")
        if mode.upper() in ("", "OFF", cluster_mode):
            continue
        why = (f"PreemptType={preempt_type} preempts in this partition by its own mode, by QOS or partition, "
               "not by attained service, and outside the checkpoint contract" if active else
               "no preemption plugin picks victims, but this mode (GANG) can suspend jobs behind the controller")
        found.append(Finding(f"PartitionName={name} PreemptMode", mode, "OFF (or no PreemptMode of its own)", why,
                             refuses=active))
    return found


def _modes(value: str) -> set[str]:
    return {m.strip().upper() for m in value.split(",") if m.strip()}


def slurm_preemption_findings(settings: dict[str, str], partitions: dict[str, dict[str, str]]) -> list[Finding]:
    """What ``preemption: slurm`` needs of slurm.conf (docs/slurm-preemption.md):
    ``PreemptType=preempt/qos`` (the plugin whose WITHIN and PRIORITY modes compare the
    jobs' priorities, i.e. the bands), a cluster ``PreemptMode`` that requeues (REQUEUE;
    never CANCEL, which kills, nor SUSPEND/GANG, which keep the GPUs held), the job's own
    ``--signal`` sent at preemption (22.05: ``SlurmctldParameters=preempt_send_user_signal``;
    24.11+ also ``PreemptParameters=send_user_signal``; without it slurmctld sends SIGTERM
    and a job trapping USR1 dies without its checkpoint), and no partition with a mode of
    its own that does not requeue. The QOS rows (WITHIN or PRIORITY, GraceTime) are in
    sacctmgr, not in slurm.conf: docs/slurm-preemption.md says how to make them."""
    found: list[Finding] = []
    preempt_type, preempt_mode = settings.get("PreemptType", ""), settings.get("PreemptMode", "")
    if preempt_type != "preempt/qos":
        found.append(Finding("PreemptType", preempt_type or UNSET, "preempt/qos",
                             "preemption: slurm lets slurmctld preempt by priority, which preempt/qos does for jobs "
                             "of a QOS with PreemptMode WITHIN (or PRIORITY, 25.05+)"))
    modes = _modes(preempt_mode)
    if "REQUEUE" not in modes or modes & {"CANCEL", "SUSPEND", "GANG", "OFF"}:
        found.append(Finding("PreemptMode", preempt_mode or UNSET, "REQUEUE",
                             "a preempted job must be requeued to resume from its checkpoint: CANCEL kills it, "
                             "SUSPEND and GANG keep its GPUs, OFF preempts nobody"))
    send_user_signal = ("preempt_send_user_signal" in settings.get("SlurmctldParameters", "")
                        or "send_user_signal" in settings.get("PreemptParameters", ""))
    if not send_user_signal:
        found.append(Finding("SlurmctldParameters", settings.get("SlurmctldParameters", "") or UNSET,
                             "preempt_send_user_signal (24.11+: or PreemptParameters=send_user_signal)",
                             "at preemption slurmctld must send the job's own --signal, its checkpoint request; "
                             "without it the job gets SIGTERM and loses its work"))
    found += accounting_findings(settings)
    for name, values in partitions.items():
        mode = values.get("PreemptMode", "")
        own = _modes(mode)
        if mode.upper() in ("", preempt_mode.upper()) or own == {"REQUEUE"}:
            continue
        found.append(Finding(f"PartitionName={name} PreemptMode", mode, "REQUEUE (or no PreemptMode of its own)",
                             "slurmctld preempts jobs of this partition by its mode: anything but REQUEUE kills a "
                             "job or keeps its GPUs"))
    version = _release(settings.get("SLURM_VERSION", ""))
    if version is not None and version < (25, 5):
        found.append(Finding("SLURM_VERSION", settings["SLURM_VERSION"],
                             "25.05+ for undeclared jobs to preempt (their QOS with Preempt=<preempt_qos> and "
                             "PreemptMode=requeue,priority), or preemption: controller",
                             "an undeclared job cannot preempt before 25.05; waiting at the head of a partition it "
                             "takes that partition's nodes out of slurmctld's main pass, so declared jobs behind it "
                             "never preempt (issue 35: 1.17x stock against 2.88x for preemption: controller, 22.05)",
                             refuses=False))
    return found


def accounting_findings(settings: dict[str, str]) -> list[Finding]:
    """What ``preemption: slurm`` needs of accounting (docs/admin.md, "Install
    preemption: slurm"): QOS live in slurmdbd (``AccountingStorageType=
    accounting_storage/slurmdbd``), and ``AccountingStorageEnforce`` with ``associations``
    and ``qos``, so that a job runs only in a QOS its association was granted: the
    preempt QOS holds the jobs cli_filter.lua put there, not any job that names it.
    (slurm.conf's ``qos`` alone also sets associations: `scontrol show config` prints
    both.) A change of either needs a slurmctld restart, not a reconfigure."""
    found = []
    storage = settings.get("AccountingStorageType", "")
    if storage != "accounting_storage/slurmdbd":
        found.append(Finding("AccountingStorageType", storage or UNSET, "accounting_storage/slurmdbd",
                             "preempt/qos preempts by QOS, and QOS live in slurmdbd (restart slurmctld after)"))
    enforce = settings.get("AccountingStorageEnforce", "")
    missing = [word for word in ("associations", "qos")
               if word not in {w.strip().lower() for w in enforce.split(",")}]
    if missing:
        found.append(Finding("AccountingStorageEnforce", enforce or UNSET,
                             f"a list with {' and '.join(missing)} (e.g. associations,qos)",
                             "a job must run only in a QOS its association was granted: the preempt QOS holds the "
                             "jobs cli_filter.lua put there (restart slurmctld after: a reconfigure keeps the old "
                             "value)"))
    return found


def _release(text: str) -> Optional[tuple[int, int]]:
    """``SLURM_VERSION`` (``22.05.8``) as (22, 5); None when unreadable."""
    found = re.match(r"\s*([0-9]+)\.([0-9]+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else None


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
    modes = _modes(row["PreemptMode"])
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
        if name != qos and qos in other["Preempt"].split(",") and "PRIORITY" not in _modes(other["PreemptMode"]):
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


def _node_names(value: str) -> set[str]:
    """A partition's ``Nodes=`` as written, split at the commas outside brackets: the
    names when no map of expanded names is at hand (a hostlist range then matches only
    the same range written the same way)."""
    return {word for word in re.split(r",(?![^\[]*\])", value) if word and word != UNSET}


def priority_tier_findings(partitions: dict[str, dict[str, str]],
                           partition_nodes: Optional[dict[str, Iterable[str]]] = None) -> list[Finding]:
    """A warning for each pair of partitions of different ``PriorityTier`` that share
    nodes: slurmctld schedules a higher tier's pending jobs on those nodes before a
    lower tier's whatever their priority (the SiteFactor bands), so the controller's
    order does not hold across them. ``partition_nodes``: partition -> node names
    (expanded: the backend's sinfo map, or the CLI's hostlist expansion); else the
    ``Nodes=`` words as written."""
    if partition_nodes:  # the partitions in the controller's scope (the map names those only)
        partitions = {name: values for name, values in partitions.items() if name in partition_nodes}
    tiers = {name: values.get("PriorityTier", "1") for name, values in partitions.items()}
    nodes = {name: set(partition_nodes[name]) if partition_nodes else _node_names(values.get("Nodes", ""))
             for name, values in partitions.items()}
    found = []
    names = sorted(partitions)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            shared = nodes[first] & nodes[second]
            if tiers[first] == tiers[second] or not shared:
                continue
            listed = ",".join(sorted(shared)[:8]) + (f",... ({len(shared)} nodes)" if len(shared) > 8 else "")
            found.append(Finding(f"PartitionName={first},{second} PriorityTier",
                                 f"{tiers[first]},{tiers[second]} (sharing nodes {listed})",
                                 "one PriorityTier for partitions that share nodes",
                                 "slurmctld starts the higher tier's pending jobs on those nodes before the lower "
                                 "tier's, whatever their priority: the controller's order (its SiteFactor bands) does "
                                 "not hold across these partitions, and a job it preempts for may be overtaken",
                                 refuses=False))
    return found


def site_findings(settings: dict[str, str], partitions: Optional[dict[str, dict[str, str]]] = None,
                  partition_nodes: Optional[dict[str, Iterable[str]]] = None,
                  partition_moves: bool = False) -> list[Finding]:
    """Site settings the bands and levers depend on, whatever the preemption mechanism:
    no other writer of SiteFactor (``PrioritySiteFactorPlugin``: a refusal, it would
    overwrite the bands); PriorityTier partitions sharing nodes (a warning,
    ``priority_tier_findings``); ``partition_moves`` without associations (a warning:
    slurmctld refuses a job's partition update with a stale errno, see
    controller.service.round.partition_moves)."""
    found = []
    plugin = settings.get("PrioritySiteFactorPlugin", "")
    if plugin not in ("", UNSET):
        found.append(Finding("PrioritySiteFactorPlugin", plugin, f"{UNSET} (no site factor plugin)",
                             "the plugin writes every job's SiteFactor, the controller's bands: it would undo the "
                             "controller's order, or the controller its"))
    found += priority_tier_findings(partitions or {}, partition_nodes)
    accounting = settings.get("AccountingStorageType", "")
    if partition_moves and accounting != "accounting_storage/slurmdbd":
        found.append(Finding("partition_moves", "true", "AccountingStorageType=accounting_storage/slurmdbd with "
                             "associations (or partition_moves: false)",
                             f"AccountingStorageType={accounting or UNSET}: without associations slurmctld refuses "
                             "a job's partition update with a stale errno (EAGAIN, EINTR) for up to 28 s",
                             refuses=False))
    return found


# Where each unmodelled reason comes from, for an admin: the job option, or the
# slurm.conf line when `scontrol show config` shows one that fills it into jobs.
_JOB_OPTIONS = {
    "cpus": "the jobs' --cpus-per-gpu / --cpus-per-task",
    "memory": "the jobs' --mem-per-gpu / --mem-per-cpu",
    "constraint": "the jobs' --constraint with OR (|), brackets ([]) or counts (*N)",
    "exclusive": "the jobs' --exclusive=user / mcs / topo",
    "oversubscribe": "a partition's OverSubscribe=FORCE",
    "mixed_gpu_types": "the jobs' --gres=gpu:TYPE:N,gpu:OTHER:M (several GPU types)",
    "het": "het jobs (sbatch ... : ...) whose components ask for different nodes",
    "per_socket": "the jobs' --gpus-per-socket",
    "per_task": "the jobs' --ntasks-per-gpu / --gpus-per-task",
    "unreported_request": "a field of the request this Slurm release does not report",
    "unreported_nodes": "the nodes: sinfo reports no CPUs, memory or features for them",
    "other": "the jobs' requests",
}
_CONF_DEFAULTS = {"cpus": ("DefCpuPerGPU",), "memory": ("DefMemPerGPU", "DefMemPerCPU", "MaxMemPerCPU")}


def unmodelled_source(code: str, settings: dict[str, str],
                      partitions: Optional[dict[str, dict[str, str]]] = None) -> str:
    """The slurm.conf line or job option behind unmodelled reason ``code``."""
    lines = []
    for key in _CONF_DEFAULTS.get(code, ()):
        value = settings.get(key, "")  # DefMemPerCPU and MaxMemPerCPU have lines of their own
        if value not in ("", UNSET, "UNLIMITED", "0"):
            lines.append(f"{key}={value}")
        term = re.search(rf"\b{key}=([^,\s]+)", settings.get("JobDefaults", ""))
        if term:
            lines.append(f"JobDefaults={key}={term.group(1)}")
    if code == "oversubscribe":
        lines += [f"PartitionName={name} OverSubscribe={values['OverSubscribe']}"
                  for name, values in (partitions or {}).items()
                  if values.get("OverSubscribe", "").upper().startswith("FORCE")]
    if lines:
        return f"slurm.conf {', '.join(lines)} (filled into every job that names none), or {_JOB_OPTIONS[code]}"
    return _JOB_OPTIONS[code]


def queue_census(jobs: Iterable[ObservedJob], nodes: Iterable[Node]) -> Census:
    """The census of the queue as the plan weighs it: the pending GPU jobs that do not
    wait on Slurm (a hold, a dependency, a limit: controller.service.round.startable)."""
    return census((j for j in jobs if j.gpus > 0 and j.state == "PENDING" and not slurm_wait(j)), nodes)


def queue_findings(queue: Census, settings: dict[str, str],
                   partitions: Optional[dict[str, dict[str, str]]] = None) -> list[Finding]:
    """Warnings on the queue: per unmodelled reason its count of pending GPU jobs, the
    slurm.conf line or job option behind it and an example; first, when more than
    NOT_REORDERING_SHARE of them cannot cause a preemption, that the controller is
    not reordering this site, and why."""
    found = []
    if queue.not_reordering:
        found.append(Finding("unmodelled pending GPU jobs", f"{len(queue.jobs)} of {queue.pending} "
                             f"({queue.share:.0%})", f"at most {NOT_REORDERING_SHARE:.0%}",
                             "the controller is not reordering this site: these jobs cannot cause a preemption, "
                             f"so Slurm's own order stands; top reasons: {queue.top_reasons()}", refuses=False))
    for code, ids in queue.by_reason().items():
        example = queue.jobs[ids[0]][1]
        found.append(Finding(f"unmodelled {code}", f"{len(ids)} of {queue.pending} pending GPU jobs",
                             f"a request the plan can express (from {unmodelled_source(code, settings, partitions)})",
                             f"{REASONS[code]}: no job is preempted for them; e.g. job {ids[0]}: {example}",
                             refuses=False))
    return found


def check(settings: dict[str, str], site_factor_band: int, requeue_exit_code: int,
          partitions: Optional[dict[str, dict[str, str]]] = None, preemption: str = "controller",
          partition_nodes: Optional[dict[str, Iterable[str]]] = None, partition_moves: bool = False) -> list[Finding]:
    """Every finding for these settings (``parse_show_config``) and, when given, the
    partitions' (``parse_show_partitions``; ``partition_nodes`` their node names,
    expanded), for the preemption mechanism ``preemption`` (controller or slurm) and
    ``partition_moves``; [] when all is right. The refusing findings come first, each
    group in a fixed order."""
    found: list[Finding] = []
    weights: dict[str, float] = {}

    def get(key: str) -> str:
        return settings.get(key, "")

    priority = get("PriorityType")
    if priority != "priority/multifactor":
        found.append(Finding("PriorityType", priority, "priority/multifactor",
                             "SiteFactor bands order the queue only under multifactor priority"))
    else:
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
        found += priority_flag_findings(get("PriorityFlags"), weights)
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
    if preemption == "slurm":
        found += slurm_preemption_findings(settings, partitions or {})
    else:
        if preempt_type not in ("", UNSET, "preempt/none") and preempt_mode.upper() != "OFF":
            found.append(Finding("PreemptType", f"{preempt_type} (PreemptMode={preempt_mode or UNSET})",
                                 "preempt/none (or PreemptMode=OFF)",
                                 "Slurm's own preemption picks victims by QOS or partition, not by attained "
                                 "service, and outside the checkpoint contract"))
        found += partition_findings(settings, partitions or {})
    found += site_findings(settings, partitions, partition_nodes, partition_moves)
    cli_filter = cli_filter_finding(get("CliFilterPlugins"))
    if cli_filter is not None:
        found.append(cli_filter)
    return [f for f in found if f.refuses] + [f for f in found if not f.refuses]


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
    if preemption == "slurm" and qos and backend.offers("qos_config"):
        rows = parse_qos(backend.qos_config())
        found += qos_findings(rows, qos, settings.get("PreemptExemptTime", "")) + \
            installed_cli_filter_findings(settings, rows, qos)
        answer = backend.qos_limits() if backend.offers("qos_limits") else None
        if isinstance(answer, tuple):  # (the QOS limits, the associations' default QOS)
            found += [Finding(*f) for f in qos_limit_findings(parse_qos_limits(answer[0]),
                                                              parse_default_qos(answer[1]), qos)]
        found = [f for f in found if f.refuses] + [f for f in found if not f.refuses]
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

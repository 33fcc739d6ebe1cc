"""The slurm.conf settings the controller depends on, read from `scontrol show config`
(and `scontrol show partition`), judged by ``check`` (controller.service.ops.preflight
runs it against the running slurmctld).

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
  never-started jobs (controller.service.round.levers), so no weighted factor can reorder
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

The QOS and the lua files' policy that ``preemption: slurm`` needs:
controller.service.ops.preempt_qos.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

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


def preempt_modes(value: str) -> set[str]:
    """A ``PreemptMode`` value ("requeue,within") as its upper-case words."""
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
    modes = preempt_modes(preempt_mode)
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
        own = preempt_modes(mode)
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

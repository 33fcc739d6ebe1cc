"""The GPU limits of a pending job's QOS: no preemption for a job its QOS keeps from starting.

Slurm applies a QOS's limits when its scheduler looks at a pending job; until it has,
the job shows ``Priority`` or ``Resources`` like any other (the conformance suite saw
it: a ``-N 2 --gres=gpu:3`` job under a partition QOS of ``MaxTRESPerUser=gres/gpu=4``
was shown ``Priority``, two victims were preempted for it, and Slurm never started
it). So the controller reads the limits itself: every QOS's from slurmdbd
(``sacctmgr``, controller.service.ops.qos_limits' command) and each partition's ``QOS=``
(``scontrol show partition``), at the first round and every ``READ_EVERY_S``.

The QOS that apply to a pending job are its partition's QOS and its own (Slurm applies
both; a job QOS with ``Flags=OverPartQOS`` would override the partition's: not read,
so both are checked, which can only make a job wait). Per QOS the GPU limits modelled:
``MaxTRES`` (per job), ``MaxTRESPerNode``, ``MaxTRESPerUser``, ``MaxTRESPerAccount``
and ``GrpTRES``, each of ``gres/gpu``. The last three count the GPUs of the jobs
running under that QOS (its partition's QOS or its own), less those of the jobs the
plan could preempt under that QOS (a victim outside it frees nothing of the QOS's
total), plus the job's own. A job beyond a limit even then waits on Slurm, banded, with
a wait reason naming the QOS and the limit (``explain``).

What the controller cannot judge is said, never guessed: a QOS whose limits could not
be read (sacctmgr failed, no accounting, a QOS sacctmgr does not list) or that sets a
GPU limit not modelled here (a typed ``gres/gpu:a100=2``) makes the jobs under it
unmodelled (reason code ``qos_limits``). Other limits (CPUs, memory, job counts, wall
time) are Slurm's to show in its reason at its next pass.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from controller.service.acting.backend import BackendUnavailable, ObservedJob
from controller.service.ops.slurm_conf import parse_show_partitions
from controller.service.ops.qos_limits import parse_qos_limits

READ_EVERY_S = 300.0  # QOS limits and partition QOS change rarely (an admin's sacctmgr)
RETRY_S = 30.0  # after a failed read: the jobs under a QOS are unmodelled until it answers
# the limits modelled, in the order checked: (sacctmgr's name, whose GPUs it counts)
MODELLED = (("MaxTRES", "job"), ("MaxTRESPerNode", "node"), ("MaxTRESPerUser", "user"),
            ("MaxTRESPerAccount", "account"), ("GrpTRES", "qos"))
GPU_TRES = "gres/gpu"
NO_QOS = ("", "N/A", "(null)")  # scontrol's and squeue's words for none


@dataclass(frozen=True)
class QosGpuLimits:
    """One QOS's GPU limits by MODELLED name (absent: not set), and the GPU limits it
    sets that are not modelled (their text; non-empty: its jobs are unmodelled)."""

    limits: dict
    unmodelled: tuple = ()


def gpu_limits(row: dict[str, str]) -> QosGpuLimits:
    """A QOS's row of parse_qos_limits as its GPU limits: ``gres/gpu=N`` in each
    MODELLED limit; a typed ``gres/gpu:TYPE=N`` (or any GPU limit of a form not read)
    is unmodelled. Other TRES (cpu, mem, node) are not GPU limits."""
    limits: dict[str, int] = {}
    unmodelled: list[str] = []
    for name, _ in MODELLED:
        for item in row.get(name, "").split(","):
            key, _, value = item.strip().partition("=")
            if key != GPU_TRES and not key.startswith(GPU_TRES + ":"):
                continue
            if key == GPU_TRES and value.isdigit():
                limits[name] = int(value)
            else:
                unmodelled.append(f"{name}={item.strip()}")
    return QosGpuLimits(limits, tuple(unmodelled))


def partition_qos(text: str) -> dict[str, str]:
    """`scontrol show partition -o`'s answer as partition -> its QOS (only those with one).
    scontrol spells the key ``QoS`` (22.05, 24.11), slurm.conf ``QOS``: either is read."""
    out = {}
    for name, row in parse_show_partitions(text).items():
        qos = next((value for key, value in row.items() if key.upper() == "QOS"), "")
        if qos not in NO_QOS:
            out[name] = qos
    return out


@dataclass(frozen=True)
class Verdict:
    """What the gate says of a pending job: ``wait`` a limit it waits on (text for
    explain), else ``unmodelled`` the QOS it cannot judge (text), else neither."""

    wait: str = ""
    unmodelled: str = ""


class QosGate:
    """The QOS limits as last read, and the rule. ``read_limits``: the backend's
    ``qos_limit_table`` (QOS_LIMITS_COMMAND's output), ``read_partitions``: its
    ``partition_config``; None (a backend without them): the gate is off."""

    def __init__(self, read_limits: Optional[Callable[[], str]], read_partitions: Optional[Callable[[], str]],
                 log_once: Callable[[str], None] = lambda message: None):
        self.read_limits = read_limits
        self.read_partitions = read_partitions
        self.log_once = log_once
        self.qos: Optional[dict[str, QosGpuLimits]] = None  # None: unknown (not read, or the read failed)
        self.partitions: Optional[dict[str, str]] = None  # partition -> its QOS; None: never read
        self.error = "not read yet"
        self._next_read = -math.inf

    @property
    def on(self) -> bool:
        return callable(self.read_limits) and callable(self.read_partitions)

    def refresh(self, now: float) -> None:
        """Read the limits at the first call and every READ_EVERY_S (RETRY_S after a
        failure, which leaves them unknown)."""
        if not self.on or now < self._next_read:
            return
        try:  # the partitions' QOS apart: known even when slurmdbd does not answer
            partitions = self.read_partitions()
        except BackendUnavailable as err:
            partitions = None
            self.log_once(f"partitions' QOS not read ({err}): the last read stands")
        try:
            limits = self.read_limits()
        except BackendUnavailable as err:
            limits = None
            self.qos, self.error = None, str(err)
            self.log_once(f"QOS limits not read ({err}): pending jobs under a QOS cause no preemption until "
                          "sacctmgr answers")
        if limits is None or partitions is None:
            self._next_read = now + RETRY_S
        if not isinstance(partitions, (str, type(None))) or not isinstance(limits, (str, type(None))):
            self.read_limits = None  # a backend that answers nothing (a recording stand-in): off
            return
        if partitions is not None:
            self.partitions = partition_qos(partitions)
        if limits is None:
            return
        self.qos = {name: gpu_limits(row) for name, row in parse_qos_limits(limits).items()}
        self.error = ""
        if partitions is not None:
            self._next_read = now + READ_EVERY_S

    def applying(self, job: ObservedJob) -> list[tuple[str, str]]:
        """The (partition, QOS) pairs whose limits apply to ``job`` in each partition it
        may run in ('' partition: its own QOS, in every one)."""
        return self._applying(job.partition, job.qos)

    def _applying(self, partition: str, qos: str) -> list[tuple[str, str]]:
        if self.partitions is None:  # which partitions have a QOS is unknown: every one may
            return [(p, "?") for p in partition.split(",")]
        pairs = [(p, self.partitions[p]) for p in partition.split(",") if p in self.partitions]
        if qos not in NO_QOS:
            pairs.append(("", qos))
        return pairs

    def _silent(self, pairs: list[tuple[str, str]]) -> bool:
        """Every QOS of these (partition, QOS) pairs is known and sets no GPU limit (or
        none applies): a job under them gets an empty verdict."""
        return not pairs or (self.partitions is not None and self.qos is not None
                             and all(q in self.qos and not self.qos[q].unmodelled and not self.qos[q].limits
                                     for _, q in pairs))

    def silent_for(self, partitions_and_qos: Iterable[tuple[str, str]]) -> bool:
        """judge() has nothing to say of any job whose (partition, qos) is one of these:
        the round asks it of every job's pair at once (a set made in C), and skips the
        per-job passes when the site's QOSes set no GPU limit."""
        return not self.on or all(self._silent(self._applying(*key)) for key in partitions_and_qos)

    def judge(self, pending: Iterable[ObservedJob], running: Iterable[ObservedJob],
              preemptable: Callable[[str], bool]) -> dict[str, Verdict]:
        """Per pending job under some QOS, its verdict (jobs with nothing to say left
        out). ``running``: the jobs holding GPUs now (not those already being
        preempted: their GPUs are leaving the totals); ``preemptable(job_id)``: the plan
        may preempt that running job."""
        if not self.on:
            return {}
        # Thousands of jobs share a few (partition, QOS) pairs and (user, account, size)
        # requests: each pair's QOSes and each distinct request's verdict is worked out
        # once a round (judging every pending job alone was a sixth of a round at 12k).
        applying: dict[tuple[str, str], list[tuple[str, str]]] = {}
        silent: dict[tuple[str, str], bool] = {}  # every QOS of the pair known and without a GPU limit

        def pairs_of(job: ObservedJob) -> list[tuple[str, str]]:
            key = (job.partition, job.qos)
            pairs = applying.get(key)
            if pairs is None:
                pairs = applying[key] = self._applying(*key)
            return pairs

        def says_something(job: ObservedJob) -> bool:
            key = (job.partition, job.qos)
            quiet = silent.get(key)
            if quiet is None:
                quiet = silent[key] = self._silent(pairs_of(job))
            return not quiet

        pending = [job for job in pending if says_something(job)]  # (a silent pair's verdict is always empty)
        if not pending:
            return {}
        # per QOS, the GPUs held under it: in all, per user, per account; and of those,
        # the GPUs the plan could free (held by preemptable jobs). Only the QOSes with a
        # limit on such a total are counted: no other verdict reads them.
        totals = {name for name, qos in (self.qos or {}).items()
                  if any(qos.limits.get(limit) is not None for limit, whose in MODELLED
                         if whose in ("user", "account", "qos"))}
        held: dict[tuple, int] = {}
        freeable: dict[tuple, int] = {}
        for job in running:
            for qos in {q for _, q in pairs_of(job)} & totals:
                for key in ((qos, "qos", ""), (qos, "user", job.user), (qos, "account", job.account)):
                    held[key] = held.get(key, 0) + job.gpus
                    if preemptable(job.job_id):
                        freeable[key] = freeable.get(key, 0) + job.gpus
        out: dict[str, Verdict] = {}
        verdicts: dict[tuple, Verdict] = {}
        for job in pending:
            # every field _judge and _limit read of the job
            key = (job.partition, job.qos, job.user, job.account, job.gpus, job.min_nodes)
            verdict = verdicts.get(key)
            if verdict is None:
                verdict = verdicts[key] = self._judge(job, pairs_of(job), held, freeable)
            if verdict.wait or verdict.unmodelled:
                out[job.job_id] = verdict
        return out

    def _judge(self, job: ObservedJob, pairs: list[tuple[str, str]], held: dict, freeable: dict) -> Verdict:
        if self.partitions is None:
            return Verdict(unmodelled="which partitions have a QOS is unknown (scontrol show partition not read)")
        if self.qos is None:
            names = ", ".join(dict.fromkeys(q for _, q in pairs))
            return Verdict(unmodelled=f"QOS {names}: its limits could not be read ({self.error})")
        unknown = [q for _, q in pairs if q not in self.qos or self.qos[q].unmodelled]
        if unknown:
            q = unknown[0]
            what = ("not listed by sacctmgr" if q not in self.qos else
                    f"GPU limits not modelled: {' '.join(self.qos[q].unmodelled)}")
            return Verdict(unmodelled=f"QOS {q}: {what}")
        # blocked in every partition it may run in (its own QOS applies in each)
        own = [q for p, q in pairs if not p]
        named = [p for p in job.partition.split(",") if p]
        blocks = []
        for partition in named or [""]:
            qos_here = own + ([self.partitions[partition]] if partition in self.partitions else [])
            block = next((b for b in (self._limit(q, job, held, freeable) for q in dict.fromkeys(qos_here)) if b),
                         "")
            if not block:
                return Verdict()
            blocks.append(f"{block} (partition {partition})" if partition in self.partitions else block)
        return Verdict(wait="; ".join(dict.fromkeys(blocks)))

    def _limit(self, qos: str, job: ObservedJob, held: dict, freeable: dict) -> str:
        """The first limit of ``qos`` that keeps ``job`` from starting even after every
        preemption the plan could make under it, in words; '' none."""
        limits = self.qos[qos].limits
        per_node = math.ceil(job.gpus / max(job.min_nodes, 1))
        for name, whose in MODELLED:
            limit = limits.get(name)
            if limit is None:
                continue
            if whose == "job":
                if job.gpus > limit:
                    return f"QOS {qos} {name} {GPU_TRES}={limit}: the job asks for {job.gpus} GPUs"
                continue
            if whose == "node":
                if per_node > limit:
                    return f"QOS {qos} {name} {GPU_TRES}={limit}: the job asks for {per_node} GPUs on a node"
                continue
            key = (qos, whose, {"user": job.user, "account": job.account}.get(whose, ""))
            running, free = held.get(key, 0), freeable.get(key, 0)
            if running - free + job.gpus > limit:
                who = {"user": f"user {job.user}", "account": f"account {job.account}"}.get(whose, "the QOS")
                return (f"QOS {qos} {name} {GPU_TRES}={limit}: {who} would hold {running - free + job.gpus} GPUs "
                        f"({running} running under it, {free} of them preemptable, + {job.gpus} asked)")
        return ""


def wait_text(limit: str) -> str:
    """A job a QOS limit keeps waiting, in words for its owner (explain)."""
    return f"{limit}: Slurm does not start it while that holds, so no job is preempted for it"

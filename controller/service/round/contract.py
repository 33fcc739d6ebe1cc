"""The preemption contract: which running jobs may be preempted, and with which signal.

A job is preemptable only when Slurm may requeue it (Requeue=1: never forced on a
job submitted with --no-requeue) AND it said how it checkpoints, with a convention
ML users already have:

- its own ``--signal=[B:]SIG[@T]`` (the same spec Slurm uses to warn a job before its
  time limit): sent the way Slurm sends it, ``B:`` to the batch shell only, otherwise
  to the job's steps (``srun`` tasks) and not to the batch shell, so a batch script
  that traps nothing is not killed by a signal meant for its training process;
- or ``--comment=tiresias:preemptable`` (the job's own ``--signal`` when one is known,
  else ``preempt_signal``, default USR1, to the batch shell, as prolog/checkpoint.sh
  expects), or ``tiresias:preemptable=SPEC`` (one hint grammar for every ``tiresias:``
  comment hint: controller.core.hints, which job_submit.lua also enforces at sbatch
  time).

Which ``--signal`` counts is the one sbatch gives the job: the command line beats
SBATCH_SIGNAL, which beats the script's ``#SBATCH --signal`` lines. Slurm 22.05 shows
the result in neither ``squeue --json`` nor ``scontrol show job``;
slurm_plugin/cli_filter.lua, which runs inside sbatch after it has read every source,
records it in the comment as ``tiresias:preemptable=SPEC``. So ``declared`` takes, in
this order: the ``--signal`` the cluster manager reports (``ObservedJob.signal``, where
a release shows it); the signal a ``tiresias:preemptable=SPEC`` comment names (the
filter's record of sbatch's final value, or the user's own); the last ``#SBATCH
--signal`` line of the batch script (``scontrol write batch_script``, read once per
job when it is first seen running), which is only a fallback: it may have been
overridden on the command line or in the environment, which only the filter sees; and
last the bare ``tiresias:preemptable`` opt-in's ``preempt_signal``. A spec's ``@T`` is
the job's own lead time, 60 s without ``@T`` as in sbatch (CheckpointSignal.lead_s;
the grace: controller.core.checkpoint_signal.grace_s). An admin may widen the contract
(``preempt_undeclared``): undeclared requeueable jobs are then requeued without a
signal. Jobs outside the contract are never signalled and the plan keeps them
running (JobSpec.preemptable).
"""
from __future__ import annotations

import logging
import math
import shlex
from typing import Callable, Optional

# CheckpointSignal and parse_signal_spec are the contract's vocabulary; defined in the
# core so that the comment-hint grammar (controller.core.hints) shares the spec grammar
from controller.core.checkpoint_signal import CheckpointSignal, parse_signal_spec  # noqa: F401 - re-exported
from controller.core.levers.preemption import strategy_for
from controller.core.hints import PREEMPTABLE_PREFIX, PREEMPTABLE_SOURCE, Hints, parse_hints
from controller.service.acting.backend import Backend, BackendUnavailable, ObservedJob
from controller.service.ops.config import Config
from controller.service.ops.preempt_qos import parse_qos, qos_grace_s

log = logging.getLogger("tiresias.controller")

# Batch scripts read per round at most: after a restart with thousands of running jobs
# the reads spread over rounds instead of one burst of RPCs to slurmctld; a job not
# read yet counts as non-preemptable until it is.
SCRIPT_READS_PER_ROUND = 50
# preempt_qos's GraceTime is read again this often (an admin may change it while the
# controller runs); one sacctmgr call to slurmdbd, none to slurmctld
QOS_READ_EVERY_S = 600.0


def signal_from_script(script: str) -> str:
    """The ``--signal`` value of a batch script's ``#SBATCH`` lines ('' if none).
    Like sbatch, stops at the first line that is neither blank nor a comment; the
    last ``--signal`` wins."""
    found = ""
    for number, line in enumerate((script or "").splitlines()):
        stripped = line.strip()
        if number == 0 and stripped.startswith("#!"):
            continue
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if not stripped.startswith("#SBATCH"):
            continue
        try:
            words = shlex.split(stripped[len("#SBATCH"):], comments=True)
        except ValueError:
            continue
        for index, word in enumerate(words):
            if word.startswith("--signal="):
                found = word[len("--signal="):]
            elif word == "--signal" and index + 1 < len(words):
                found = words[index + 1]
    return found


class Contract:
    """Per-job answers, cached: a job's declared signal never changes while it runs.

    ``given_up``: job id -> why its signal is not tried any more (failed
    ``preempt_signal_attempts`` times): such a job is treated as non-preemptable.
    ``qos_grace_s``: under ``preemption: slurm``, preempt_qos's GraceTime as slurmdbd
    last said it (None: not read yet; see why_not_slurms).
    """

    @property
    def strategy(self):
        """Who carries out the plan's victims (controller.core.levers.preemption.strategy_for)."""
        return strategy_for(self.config.preemption)

    def __init__(self, config: Config, backend: Backend, log_once: Callable[[str], None] = log.warning):
        self.config = config
        self.backend = backend
        self.log_once = log_once
        self.declared_signals: dict[str, Optional[CheckpointSignal]] = {}
        self.given_up: dict[str, str] = {}
        self.signal_failures: dict[str, int] = {}
        self.reads_per_round = SCRIPT_READS_PER_ROUND
        self.reads_left = SCRIPT_READS_PER_ROUND
        self.qos_grace_s: Optional[float] = None
        # the QOS whose jobs may preempt preempt_qos's: itself (WITHIN) and any whose
        # Preempt list names it (25.05+ PRIORITY); None until sacctmgr answered
        self.preemptor_qos: Optional[set[str]] = None
        self._qos_read_at = -math.inf

    def read_qos_grace(self, now: float) -> None:
        """Under ``preemption: slurm``: preempt_qos's GraceTime (why_not_slurms), read at
        the first round and every QOS_READ_EVERY_S. A failed read keeps the last value."""
        if (not self.strategy.by_qos or now < self._qos_read_at + QOS_READ_EVERY_S
                or not self.backend.offers("qos_config")):
            return
        self._qos_read_at = now
        qos = self.config.preempt_qos
        try:
            text = self.backend.qos_config()
        except BackendUnavailable as err:
            self.log_once(f"QOS {qos}: GraceTime not read ({err}); running jobs stay as they were")
            return
        rows = parse_qos(text if isinstance(text, str) else "")
        grace = qos_grace_s(rows, qos)
        self.preemptor_qos = {qos} | {name for name, row in rows.items() if qos in row["Preempt"].split(",")}
        if grace is None:
            self.log_once(f"QOS {qos}: no GraceTime in sacctmgr's answer (no such QOS?); slurmctld is left no "
                          "running job to preempt")
        self.qos_grace_s = grace

    def begin_round(self) -> None:
        self.reads_left = self.reads_per_round

    def unread(self, job: ObservedJob) -> bool:
        """A running job whose batch script is still to be read (read budget spent): it
        has no signal recorded elsewhere (reported by the cluster manager, or in its
        comment as tiresias:preemptable=SPEC)."""
        return (job.job_id not in self.declared_signals and job.state == "RUNNING" and not job.signal
                and self.reads_left <= 0 and self.backend.offers("batch_script")
                and parse_hints(job.comment).preempt_signal is None)

    def declared(self, job: ObservedJob) -> Optional[CheckpointSignal]:
        """The job's checkpoint signal, or None when it declared none (the order of the
        sources: the module docstring). Reads the batch script (one backend call) the
        first time a running job with no signal recorded elsewhere is asked about."""
        if job.job_id in self.declared_signals:
            return self.declared_signals[job.job_id]
        if self.unread(job):
            return None  # not cached: the script is read in a later round
        hints = self._comment_hints(job)
        signal = self._parsed(job, job.signal, "--signal") or hints.preempt_signal
        if signal is None and not job.signal and job.state == "RUNNING":
            # (a reported --signal, even an unusable one, is sbatch's final value: the
            # script's line was overridden)
            signal = self._parsed(job, self._read_script_signal(job.job_id), "#SBATCH --signal")
        if signal is None and hints.preemptable:  # the bare opt-in
            signal = CheckpointSignal(self.config.preempt_signal, True, PREEMPTABLE_SOURCE)
        if job.state == "RUNNING":  # pending jobs are asked again once they run
            self.declared_signals[job.job_id] = signal
        return signal

    def _parsed(self, job: ObservedJob, spec: str, source: str) -> Optional[CheckpointSignal]:
        """The signal of a ``--signal`` spec from ``source``; None (logged) for a bad one."""
        if not spec:
            return None
        signal, problem = parse_signal_spec(spec, source)
        if problem:
            self.log_once(f"job {job.job_id}: {problem}; not preemptable by its --signal")
        return signal

    def _comment_hints(self, job: ObservedJob) -> Hints:
        """The job's comment hints (grammar: controller.core.hints; a comment with any bad
        hint carries none, logged)."""
        hints = parse_hints(job.comment)
        if hints.problem is not None and PREEMPTABLE_PREFIX in (job.comment or ""):
            self.log_once(f"job {job.job_id}: comment {hints.problem}; not preemptable by its comment")
        return hints

    def _read_script_signal(self, job_id: str) -> str:
        if not self.backend.offers("batch_script"):
            return ""
        self.reads_left -= 1
        try:
            return signal_from_script(self.backend.batch_script(job_id) or "")
        except BackendUnavailable:
            raise
        except (RuntimeError, ValueError) as err:
            self.log_once(f"job {job_id}: batch script not readable ({err}); only its comment can opt in")
            return ""

    def why_not(self, job: ObservedJob) -> str:
        """Why the contract forbids preempting this running job, or '' when it allows it."""
        if not job.batch:
            return "not a batch job"
        if not job.requeueable:
            return "not requeueable (--no-requeue or JobRequeue=0): never preempted"
        if job.job_id in self.given_up:
            return self.given_up[job.job_id]
        if self.declared(job) is None and self.unread(job):
            return f"checkpoint signal not read yet (at most {SCRIPT_READS_PER_ROUND} batch scripts per round)"
        if self.declared(job) is None and not self.config.preempt_undeclared:
            return ("declared no checkpoint signal (#SBATCH --signal=[B:]SIG@T or "
                    "--comment=tiresias:preemptable): never signalled nor requeued")
        return self.why_not_slurms(job) if self.strategy.by_qos else ""

    def why_not_slurms(self, job: ObservedJob) -> str:
        """Under ``preemption: slurm``, why slurmctld must not preempt this running job
        ('' when it may). slurmctld sends the job's own --signal when it preempts and
        requeues it one GraceTime later, whatever lead time the job asked for
        (docs/slurm-preemption.md), and it preempts only preempt_qos's jobs. So a job is
        left to it only in that QOS, with its own --signal, whose lead time fits in the
        grace. Every other running job is kept a band above every pending job
        (controller.core.levers.bands.gpu_site_factors): slurmctld's priority rule then never picks it."""
        qos = self.config.preempt_qos
        if job.qos and job.qos != qos:
            return f"runs in QOS {job.qos}, not {qos}: slurmctld never preempts it"
        signal = self.declared(job)
        if signal is not None and signal.source == PREEMPTABLE_SOURCE:
            return ("opted in by its comment without a --signal of its own, which is all slurmctld sends when "
                    "it preempts: kept above every pending job, never preempted")
        lead_s = (signal.lead_s or 0) if signal is not None else 0
        if self.qos_grace_s is None:
            return f"QOS {qos}'s GraceTime not read from slurmdbd yet: kept above every pending job until it is"
        if lead_s > self.qos_grace_s:
            return (f"its lead time {lead_s} s is longer than QOS {qos}'s GraceTime {self.qos_grace_s:g} s, the "
                    "time slurmctld gives from its signal to the requeue: kept above every pending job, never "
                    "preempted")
        return ""

    def may_preempt_slurms(self, job: ObservedJob) -> bool:
        """Under ``preemption: slurm``, whether slurmctld may preempt one of preempt_qos's
        jobs for this pending job: its QOS is preempt_qos or names it in its Preempt
        list (preemptor_qos), or its QOS is not reported; before sacctmgr has answered,
        any job whose QOS is not known to be another one."""
        known = self.preemptor_qos if self.preemptor_qos is not None else {self.config.preempt_qos}
        return not job.qos or job.qos in known

    def signal_failed(self, job_id: str, detail: str) -> str:
        """Count a failed signal; after preempt_signal_attempts the job is left alone.
        Returns the text for the decision log."""
        failures = self.signal_failures.get(job_id, 0) + 1
        self.signal_failures[job_id] = failures
        attempts = self.config.preempt_signal_attempts
        if failures >= attempts:
            self.given_up[job_id] = f"checkpoint signal failed {failures} times: left running, never requeued"
            log.warning("job %s: checkpoint signal failed %d times (%s): not preempting it any more",
                        job_id, failures, detail)
            return f"signal failed ({failures}/{attempts}), gave up: not requeued, not preempted again: {detail}"
        return f"signal failed ({failures}/{attempts}): not requeued, tried again next round: {detail}"

    def forget(self, job_id: str) -> None:
        for table in (self.declared_signals, self.given_up, self.signal_failures):
            table.pop(job_id, None)

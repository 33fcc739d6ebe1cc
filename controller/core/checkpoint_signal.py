"""A job's checkpoint signal: Slurm's ``--signal`` spec, defined once.

Used by the preemption contract (controller/service/round/contract.py) for a job's
``#SBATCH --signal=...`` and by the hint grammar (controller/core/hints.py) for
``--comment=tiresias:preemptable=SPEC``; ``slurm_plugin/job_submit.lua`` checks the
same spec at submission (tests/fixtures/hint_cases.tsv holds both to it).

Grammar: ``[FLAGS:][SIG]NAME[@SECONDS]``, ASCII only, letters in any case:
FLAGS is one or two of ``R``/``B`` (``B``: to the batch shell only; ``R`` is kept by
Slurm for reservations and ignored here); NAME is a signal a job can trap for a
checkpoint (KILL and STOP cannot be caught) or one of the numbers 1, 2, 3, 10, 12,
14, 15 (Linux numbering); SECONDS is 1 to 9 ASCII digits (Slurm's warning time: the
job's own lead time, kept as ``lead_s``; the grace period is the larger of it and
preempt_grace_s, never past the job's time limit: ``grace_s``). Without ``@SECONDS``
the lead time is Slurm's default, 60 s (``DEFAULT_LEAD_S``: sbatch sets it for a
``--signal`` without ``@``, and reports a 60 s lead back without ``@``, e.g. to
slurm_plugin/cli_filter.lua); ``@0`` is taken as written, 0 s, as sbatch takes it.

Pure: stdlib only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

# Slurm's --signal=[{R}{B}:]<sig_num>[@sig_time]: a name (USR1, SIGUSR1) or a number.
SIGNAL_SPEC = re.compile(r"(?:([RB]{1,2}):)?(?:SIG)?([A-Z][A-Z0-9]*|[0-9]{1,2})(?:@([0-9]{1,9}))?", re.ASCII)
SIGNAL_NAMES = {"HUP", "INT", "QUIT", "ABRT", "KILL", "USR1", "USR2", "TERM", "ALRM", "CONT", "STOP", "TSTP",
                "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS", "TRAP", "BUS", "PIPE"}
UNCATCHABLE = ("KILL", "STOP")
NUMBERED = {1: "HUP", 2: "INT", 3: "QUIT", 10: "USR1", 12: "USR2", 14: "ALRM", 15: "TERM"}
_ASCII_SPACE = " \t\n\v\f\r"
# the lead time sbatch gives a --signal without @T (man sbatch: a sig_num without a
# sig_time gets 60 seconds)
DEFAULT_LEAD_S = 60


@dataclass(frozen=True)
class CheckpointSignal:
    """``name``: e.g. "USR1"; ``batch_only``: to the batch shell (B:) rather than the
    steps; ``source``: where it was declared, for logs and ``explain``; ``lead_s``: the
    seconds the job asked for between the signal and its end (``@T``; DEFAULT_LEAD_S for a
    spec without ``@T``), None for no spec at all (the bare ``tiresias:preemptable`` opt-in)."""

    name: str
    batch_only: bool
    source: str
    lead_s: Optional[int] = None

    @property
    def spec(self) -> str:
        """The canonical spec, e.g. ``"B:USR1"`` or ``"USR2"`` (the lead time is not part of
        it: the hint grammar's shared table, tests/fixtures/hint_cases.tsv, compares it)."""
        return f"{'B:' if self.batch_only else ''}{self.name}"

    def describe(self) -> str:
        lead = "" if self.lead_s is None else f"@{self.lead_s}"
        return f"{self.spec}{lead} ({self.source})"


def parse_signal_spec(text: Optional[str], source: str) -> tuple[Optional[CheckpointSignal], str]:
    """``"B:USR1@90"`` -> (CheckpointSignal("USR1", True, source, lead_s=90), ""); ``"USR1"``
    -> lead_s=DEFAULT_LEAD_S (60 s, as sbatch reads it); garbage -> (None, why), ``why``
    one line naming the spec."""
    cleaned = (text or "").strip(_ASCII_SPACE)
    # ASCII first: str.upper() would turn some non-ASCII letters into ASCII ones ("ſ" -> "S")
    match = SIGNAL_SPEC.fullmatch(cleaned.upper()) if cleaned.isascii() else None
    if match is None:
        return None, f"signal spec {_shown(text)} is not [B:]SIG[@seconds]"
    flags, name, lead = match.groups()
    if name.isdigit():
        if int(name) not in NUMBERED:
            return None, f"signal number {name} in {_shown(text)} is not one a job can trap for a checkpoint"
        name = NUMBERED[int(name)]
    if name not in SIGNAL_NAMES or name in UNCATCHABLE:
        return None, f"signal {_shown(name)} in {_shown(text)} cannot be caught"
    lead_s = int(lead) if lead is not None else DEFAULT_LEAD_S
    return CheckpointSignal(name, "B" in (flags or ""), source, lead_s), ""


def grace_s(configured_s: float, signal: Optional[CheckpointSignal], signalled_at_s: Optional[float] = None,
            ends_by_s: Optional[float] = None) -> float:
    """The preemption's grace period in seconds: the larger of ``configured_s`` and the
    job's own lead time (``signal.lead_s``; none for no signal or the bare opt-in), cut
    so that it ends no later than the job's time limit (``ends_by_s``, start + limit;
    the job is killed then anyway)."""
    lead = signal.lead_s if signal is not None and signal.lead_s is not None else 0
    grace = max(configured_s, float(lead))
    if ends_by_s is not None and signalled_at_s is not None:
        grace = min(grace, max(0.0, ends_by_s - signalled_at_s))
    return grace


def _shown(text: Optional[str]) -> str:
    text = text or ""
    return repr(text if len(text) <= 40 else text[:40] + "...")

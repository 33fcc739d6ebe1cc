"""The job-comment hint grammar, defined once (``sbatch --comment=...``).

``slurm_plugin/job_submit.lua`` implements the same grammar in Lua to refuse a bad
hint at submission; ``tests/fixtures/hint_cases.tsv`` is the shared table of cases
that both implementations must answer identically (tests/test_hints.py runs both).

Grammar (bytes and characters agree: every separator is ASCII):

- A comment is split into *tokens* at runs of the separators space, tab, newline,
  vertical tab, form feed, carriage return, ``,`` and ``;`` (only these: a
  non-breaking space is part of a token).
- A token that starts with ``tiresias:skew`` is a skew hint and must be exactly
  ``tiresias:skew=V`` where V is ``D+``, ``D+.D*`` or ``.D+`` (D = ASCII digit
  ``0-9``; no sign, exponent, ``_`` or other digits), at most 16 characters, with
  value 0 <= V <= 1: the share of the model in its largest tensor.
- A token that starts with ``tiresias:class`` is a class hint and must be exactly
  ``tiresias:class=latency`` or ``tiresias:class=batch``.
- A token that starts with ``tiresias:preemptable`` is the preemption opt-in and must
  be exactly ``tiresias:preemptable`` (no signal named: the job's own ``--signal`` if
  the contract finds one, else the configured checkpoint signal, to the batch shell)
  or ``tiresias:preemptable=SPEC`` with SPEC a checkpoint signal spec
  ``[B:][SIG]NAME[@SECONDS]`` (grammar: controller/core/checkpoint_signal.py; KILL,
  STOP and unknown names are bad; no ``@SECONDS`` is Slurm's 60 s lead). The
  cli_filter plugin writes sbatch's final ``--signal`` here.
- Each hint may appear at most once; a second one is an error.
- Anything else is ordinary comment text (``xtiresias:skew=5`` is not a hint).
- When any hint token is bad, the whole comment carries no hints: the result is
  (skew None, class None, not preemptable, bad = the first bad token).

Pure: stdlib only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from controller.core.checkpoint_signal import CheckpointSignal, parse_signal_spec

SEPARATORS = " \t\n\v\f\r,;"
_SPLIT = re.compile(r"[ \t\n\v\f\r,;]+")
_SKEW_VALUE = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
SKEW_PREFIX = "tiresias:skew"
CLASS_PREFIX = "tiresias:class"
PREEMPTABLE_PREFIX = "tiresias:preemptable"
PREEMPTABLE_SOURCE = "--comment=tiresias:preemptable"
MAX_SKEW_CHARS = 16
CLASSES = ("latency", "batch")
MAX_COMMENT_CHARS = 65536  # Slurm caps comments far below this; longer text is not read


@dataclass(frozen=True)
class Hints:
    skew: Optional[float] = None
    job_class: Optional[str] = None
    # the job opted in to preemption; its signal is ``preempt_signal`` when it named
    # one (tiresias:preemptable=SPEC), None when it did not (the bare opt-in)
    preemptable: bool = False
    preempt_signal: Optional[CheckpointSignal] = None
    bad: Optional[str] = None  # the first bad hint token, when any
    problem: Optional[str] = None  # one line saying what is wrong with it


def _bad(token: str, why: str) -> Hints:
    shown = token if len(token) <= 40 else token[:40] + "..."
    return Hints(bad=token, problem=f"hint {shown!r} {why}")


def parse_hints(comment: Optional[str]) -> Hints:
    """The hints of one job comment (see the module docstring)."""
    if not comment:
        return Hints()
    if len(comment) > MAX_COMMENT_CHARS:
        comment = comment[:MAX_COMMENT_CHARS]
    skew: Optional[float] = None
    klass: Optional[str] = None
    preempt: Optional[CheckpointSignal] = None
    seen_skew = seen_class = seen_preempt = False
    for token in _SPLIT.split(comment):
        if token.startswith(SKEW_PREFIX):
            if not token.startswith(SKEW_PREFIX + "="):
                return _bad(token, "has no '=value' (expected tiresias:skew=<0..1>)")
            if seen_skew:
                return _bad(token, "is a second skew hint")
            value = token[len(SKEW_PREFIX) + 1:]
            if len(value) > MAX_SKEW_CHARS or _SKEW_VALUE.fullmatch(value) is None:
                return _bad(token, "is not a number in 0..1 (ASCII digits, e.g. tiresias:skew=0.73)")
            number = float(value)
            if not 0.0 <= number <= 1.0:
                return _bad(token, "is outside 0..1")
            skew, seen_skew = number, True
        elif token.startswith(CLASS_PREFIX):
            if seen_class:
                return _bad(token, "is a second class hint")
            value = token[len(CLASS_PREFIX) + 1:] if token.startswith(CLASS_PREFIX + "=") else None
            if value not in CLASSES:
                return _bad(token, f"is not tiresias:class= one of {', '.join(CLASSES)}")
            klass, seen_class = value, True
        elif token.startswith(PREEMPTABLE_PREFIX):
            if seen_preempt:
                return _bad(token, "is a second preemptable hint")
            if token != PREEMPTABLE_PREFIX:
                if not token.startswith(PREEMPTABLE_PREFIX + "="):
                    return _bad(token, "is not tiresias:preemptable or tiresias:preemptable=[B:]SIG[@seconds]")
                preempt, why = parse_signal_spec(token[len(PREEMPTABLE_PREFIX) + 1:], PREEMPTABLE_SOURCE + "=")
                if preempt is None:
                    return _bad(token, f"has a bad checkpoint signal: {why}")
            seen_preempt = True
    return Hints(skew=skew, job_class=klass, preemptable=seen_preempt, preempt_signal=preempt)


def parse_skew_hint(comment: Optional[str]) -> tuple[Optional[float], Optional[str]]:
    """(skew, None) for a valid hint, (None, None) for none, (None, why) for a bad one."""
    hints = parse_hints(comment)
    return hints.skew, hints.problem

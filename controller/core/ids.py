"""The one place decision ids are minted.

A decision of its own is ``r<round>.<prefix><n>``: the engine's starts, preemptions
and promotions (prefix ''), and each lever family's decisions. A lever that carries
out another decision is ``<cause id>.<suffix>`` (a start's pin, a preemption's
signal). ``explain --story`` and the decision log follow a job by these ids, and
the simulator mints the same ones, so two kinds never share a prefix: the tables
below are checked at import.
"""
from __future__ import annotations

# kind -> prefix of a decision numbered within its round (r12.b3)
ROUND_PREFIXES = {
    "engine": "",  # Start, Preempt, Promote of the plan (r12.3)
    "band": "b",  # SetBand
    "unpin": "u",  # a pin's expiry
    "requeue": "q",  # a requeue not caused by one of this round's decisions (grace over, job ended)
    "move": "m",  # MovePartition
    "share": "s",  # SetMpsShare
    "hold": "k",  # HoldJob: kept off the GPUs by sharing
    "release_hold": "kr",  # ReleaseHold
    "handoff": "h",  # a handoff checked (did the preempting job start)
    "comment": "c",  # SetAdminComment
    "nice": "n",  # SetNice (controller.core.levers.nice)
    "slurm_start": "slurm",  # the simulated slurmctld's own starts
    "slurm_preempt": "slurmpre",  # the simulated slurmctld's own preemptions (preempt/qos)
    "slurm_requeue": "sq",  # slurmctld's requeue of a victim left to it, observed (preemption: slurm)
}
# kind -> suffix of a lever that carries out the decision named before it (r12.3.pin)
CAUSED_SUFFIXES = {"pin": "pin", "release": "release", "signal": "signal", "requeue_after_grace": "requeue",
                   "slurm_gain": "start"}


def _check_distinct(prefixes: dict[str, str]) -> None:
    """No two kinds may read alike: prefixes are distinct and letters only, so the
    number that follows ends each (r1.s3 and r1.slurm3 differ at the letter after 's')."""
    seen = {}
    for kind, prefix in prefixes.items():
        if prefix in seen:
            raise AssertionError(f"decision id prefix {prefix!r} minted by both {seen[prefix]} and {kind}")
        seen[prefix] = kind
        if prefix and (not prefix.isalpha()):
            raise AssertionError(f"decision id prefix {prefix!r} of {kind} must be letters")


_check_distinct(ROUND_PREFIXES)
_check_distinct(CAUSED_SUFFIXES)


def decision_id(round_id: int, kind: str, number: int) -> str:
    """``r<round>.<prefix><number>``; an unknown kind is a KeyError (a new kind is added above)."""
    return f"r{round_id}.{ROUND_PREFIXES[kind]}{number}"


def caused_id(cause_id: str, kind: str) -> str:
    """``<cause id>.<suffix>``: the lever that carries out decision ``cause_id``."""
    return f"{cause_id}.{CAUSED_SUFFIXES[kind]}"


def kind_of(decision: str) -> str:
    """The kind that minted ``decision`` (``explain`` and tests read ids back)."""
    head, _, last = decision.rpartition(".")
    if last in CAUSED_SUFFIXES.values() and head:
        return next(kind for kind, suffix in CAUSED_SUFFIXES.items() if suffix == last)
    letters = last.rstrip("0123456789")
    for kind, prefix in ROUND_PREFIXES.items():
        if prefix == letters:
            return kind
    raise ValueError(f"decision id {decision!r}: no kind mints it")

"""Why a pending job's request is beyond the plan's model: one vocabulary of reasons.

A job whose request the plan cannot express is never a reason to preempt (the plan
would guess where Slurm starts it). That must never be silent: each reason code here
is what the metric ``tiresias_unmodelled_jobs{reason=...}``, the rate-limited log
line, ``preflight`` and ``explain`` count and name. A backend says a job's reasons as
(code, text) pairs: the code for counting, the text (the job's own option or the
slurm.conf line) for the admin and the user.
"""
from __future__ import annotations

from typing import Iterable

# code -> what the admin reads beside a count of jobs (metric help, log, preflight)
REASONS: dict[str, str] = {
    "cpus": "CPUs the record does not report, or a --cpus-per-gpu form not read",
    "memory": "memory the record does not report, or a --mem-per-gpu form not read",
    "constraint": "a --constraint with OR, brackets or counts (which nodes satisfy it is Slurm's choice)",
    "exclusive": "an --exclusive mode other than the whole node (user, mcs, topo)",
    "oversubscribe": "a partition's OverSubscribe=FORCE (Slurm shares the nodes it gives)",
    "mixed_gpu_types": "GPUs of several types in one request (the plan gives a job one type)",
    "het": "a het job whose components ask for different nodes (features, partitions, GPU types)",
    "per_socket": "GPUs per socket (--gpus-per-socket: which sockets is Slurm's choice)",
    "per_task": "a per-task request the release does not report in full (--ntasks-per-gpu)",
    "unreported_request": "a field of the request the release does not report",
    "unreported_nodes": "CPUs, memory or features that no node reports",
    "other": "another request the plan cannot express",
}


def unmodelled_fields(reasons: Iterable[tuple[str, str]]) -> dict:
    """The ObservedJob fields of a job's (code, text) reasons: ``unmodelled`` the
    texts joined for people, ``unmodelled_reasons`` the codes, in order, for counting.
    An unknown code is a programming error: it would be counted under no name."""
    pairs = list(reasons)
    unknown = [code for code, _ in pairs if code not in REASONS]
    if unknown:
        raise ValueError(f"unmodelled reason code {unknown[0]!r} is not one of {sorted(REASONS)}")
    return dict(unmodelled="; ".join(text for _, text in pairs),
                unmodelled_reasons=tuple(dict.fromkeys(code for code, _ in pairs)))

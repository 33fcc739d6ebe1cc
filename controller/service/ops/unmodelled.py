"""Why a pending job's request is beyond the plan's model: one vocabulary of reasons.

A job whose request the plan cannot express is never a reason to preempt (the plan
would guess where Slurm starts it). That must never be silent: each reason code here
is what the metric ``tiresias_unmodelled_jobs{reason=...}``, the rate-limited log
line, ``preflight`` and ``explain`` count and name. A backend says a job's reasons as
(code, text) pairs: the code for counting, the text (the job's own option or the
slurm.conf line) for the admin and the user.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from controller.core.model import MIXED_TYPES, Node
# the vocabulary is the port's: a backend says a job's reasons in it
from controller.service.acting.backend import UNMODELLED_REASONS as REASONS
from controller.service.acting.backend import ObservedJob

# More than this share of the pending GPU jobs the plan weighs cannot cause a
# preemption: the controller is not reordering the site (the log's and preflight's
# WARNING). A fifth: a queue where that many jobs only wait for Slurm is ordered by
# Slurm more than by attained service.
NOT_REORDERING_SHARE = 0.2
LOG_EVERY_S = 300.0  # the census line, at most this often
EXAMPLES = 2  # job ids (with their text) named per reason in a line


@dataclass(frozen=True)
class Census:
    """One round's unmodelled pending GPU jobs: ``pending`` the pending GPU jobs the
    plan weighs (not those that wait on Slurm for a hold, a dependency, a limit),
    ``jobs`` job id -> (its reason codes, its text), in the plan's order."""

    pending: int = 0
    jobs: Mapping[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)

    def by_reason(self) -> dict[str, list[str]]:
        """Reason code -> the job ids under it (a job with two reasons is under each),
        the most common reason first (ties in REASONS order)."""
        out: dict[str, list[str]] = {}
        for job_id, (codes, _) in self.jobs.items():
            for code in codes:
                out.setdefault(code, []).append(job_id)
        order = list(REASONS)
        return dict(sorted(out.items(), key=lambda kv: (-len(kv[1]), order.index(kv[0]))))

    @property
    def share(self) -> float:
        """The share of the pending GPU jobs that cannot cause a preemption (0 with none pending)."""
        return len(self.jobs) / self.pending if self.pending else 0.0

    @property
    def not_reordering(self) -> bool:
        return self.share > NOT_REORDERING_SHARE

    def counts(self) -> str:
        """'12 of 40 pending GPU jobs (30%)'."""
        return f"{len(self.jobs)} of {self.pending} pending GPU jobs ({self.share:.0%})"

    def top_reasons(self, n: int = 3) -> str:
        """'cpus (10 jobs: CPUs the record ...), memory (3 jobs: ...)'."""
        return ", ".join(f"{code} ({len(ids)} job{'s' if len(ids) != 1 else ''}: {REASONS[code]})"
                         for code, ids in list(self.by_reason().items())[:n])

    def summary(self) -> str:
        """Per reason its count and up to EXAMPLES job ids with their texts."""
        parts = []
        for code, ids in self.by_reason().items():
            examples = "; ".join(f"job {job_id}: {self.jobs[job_id][1]}" for job_id in ids[:EXAMPLES])
            parts.append(f"{code} {len(ids)} (e.g. {examples}{'; ...' if len(ids) > EXAMPLES else ''})")
        return ", ".join(parts)


def census(pending: Iterable[ObservedJob], nodes: Iterable[Node]) -> Census:
    """The unmodelled jobs among ``pending`` (the pending GPU jobs the plan weighs):
    the backend's reasons (ObservedJob.unmodelled_reasons), GPUs of several types
    (``mixed_gpu_types``: the plan gives a job one type), and CPUs, memory, features
    or --exclusive that no available node reports (``unreported_nodes``: the plan
    would guess where it fits). One pass reading two fields a job, unless some count
    goes unreported."""
    pending = list(pending)
    available = [n for n in nodes if n.available]
    no_cpus = all(n.cpus_free is None or n.cpus_total is None for n in available)
    no_mem = all(n.mem_free_mb is None for n in available)
    no_features = all(n.features is None for n in available)
    unreported = no_cpus or no_mem or no_features
    jobs: dict[str, tuple[tuple[str, ...], str]] = {}
    for job in pending:
        codes: list[str] = []
        texts: list[str] = []
        if job.gpu_type == MIXED_TYPES:
            codes.append("mixed_gpu_types")
            texts.append(f"GPUs of several types ({', '.join(job.gpu_types)}; {job.gpus} in all)")
        if job.unmodelled:
            codes += job.unmodelled_reasons or ("other",)  # a backend that gives text only
            texts.append(job.unmodelled)
        elif unreported:
            missing = [what for what, asked, unknown in (("CPUs", job.cpus_per_node or job.exclusive, no_cpus),
                                                         ("memory", job.mem_per_node_mb, no_mem),
                                                         ("features", job.features, no_features))
                       if asked and unknown]
            if missing:
                codes.append("unreported_nodes")
                texts.append(f"its {' and '.join(missing)}, which no node reports")
        if codes:
            jobs[job.job_id] = (tuple(dict.fromkeys(codes)), "; ".join(texts))
    return Census(len(pending), jobs)


class CensusLog:
    """The census in the log, at most every ``every_s`` (controller clock) while some
    job is unmodelled, never a line per job: the count and examples per reason, as
    a WARNING that says the controller is not reordering this site when more than
    NOT_REORDERING_SHARE of the pending GPU jobs cannot cause a preemption (an INFO
    line below that). Once every job is modelled again after a line, one INFO line
    says so."""

    def __init__(self, log: logging.Logger, every_s: float = LOG_EVERY_S):
        self.log = log
        self.every_s = every_s
        self._last_at = -math.inf
        self._said = False  # a census line since the last 'modelled again'

    def note(self, census: Census, now: float) -> None:
        if not census.jobs:
            if self._said:
                self.log.info("unmodelled requests: none among %d pending GPU jobs: each may cause a preemption "
                              "again", census.pending)
                self._said = False
                self._last_at = -math.inf  # the next unmodelled job is said at once
            return
        if now - self._last_at < self.every_s:
            return
        self._last_at, self._said = now, True
        if census.not_reordering:
            self.log.warning("the controller is not reordering this site: %s cannot cause a preemption, more than "
                             "%.0f%%; top reasons: %s. Per reason: %s (see docs/admin.md, 'Requests the plan does "
                             "not model')", census.counts(), NOT_REORDERING_SHARE * 100, census.top_reasons(),
                             census.summary())
        else:
            self.log.info("unmodelled requests: %s cannot cause a preemption (Slurm may start them; no job is "
                          "preempted for them): %s", census.counts(), census.summary())

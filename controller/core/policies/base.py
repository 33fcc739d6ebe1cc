"""What every priority policy provides: a sort key per job, smaller = served first.

Policies are pure: they read a job's state and the round's context and return a
key; the engine does the all-or-nothing walk, placement and preemption.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Optional

from controller.core.gittins import ServiceDistribution
from controller.core.model import JobState
from controller.core.queues import ENTERED, SETTLED_RUNNING, groups_and_entries


# Float round-off must not keep a job one ulp below a threshold it has reached:
# the simulator schedules a demotion at the exact crossing time.
LEVEL_TOLERANCE_GPU_S = 1e-6
STARVATION_TOLERANCE_S = 1e-6


@dataclass(frozen=True)
class PolicyContext:
    """Round-wide inputs of a policy.

    ``thresholds_gpu_s`` are hi_1..hi_{K-1} of the MLFQ (increasing); ``service``
    is the learned or given service distribution (None = nothing known yet).
    ``queue_service_override`` holds jobs promoted in this round (service 0).
    """

    now_s: float
    thresholds_gpu_s: tuple[float, ...] = (3600.0,)
    service: Optional[ServiceDistribution] = None
    queue_service_override: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict)  # per-round values a policy computes in bulk
    # level per job object, memoized for the round: a job's level is read by the sort
    # key, the plan's levels, its display value and its wait reason (by id(): the
    # snapshot keeps every job alive for the whole round).
    _levels: dict = field(default_factory=dict, repr=False, compare=False)

    def queue_service(self, job: JobState) -> float:
        if self.queue_service_override:
            return self.queue_service_override.get(job.job_id, job.queue_service_gpu_s)
        return job.queue_service_gpu_s

    def precompute_levels(self, jobs: list[JobState]):
        """Every job's level in one vectorized pass (same values as ``level``); returns
        them as an array aligned with ``jobs`` (memoized for that list)."""
        import numpy as np

        cached = self.cache.get("_level_array")
        if cached is not None and cached[0] is jobs:
            return cached[1]
        if self.queue_service_override:
            services = [self.queue_service(job) for job in jobs]
        else:
            services = [job.queue_service_gpu_s for job in jobs]
        levels = np.searchsorted(np.asarray(self.thresholds_gpu_s, dtype=float),
                                 np.asarray(services, dtype=float) + LEVEL_TOLERANCE_GPU_S, side="right")
        self._levels.update(zip(map(id, jobs), levels.tolist()))
        self.cache["_level_array"] = (jobs, levels)
        return levels

    def level(self, job: JobState) -> int:
        """0-based MLFQ level: Q_1 is 0."""
        level = self._levels.get(id(job))
        if level is None:
            level = bisect.bisect_right(self.thresholds_gpu_s, self.queue_service(job) + LEVEL_TOLERANCE_GPU_S)
            self._levels[id(job)] = level
        return level


def mlfq_order(jobs: list[JobState], ctx: PolicyContext, policy: "Policy") -> list[tuple[tuple, JobState]]:
    """The MLFQ walk order (controller.core.queue_book): by level, then inside each
    queue its settled running jobs by place, then the other jobs by ``(within, group,
    entry, index)`` where ``within`` is ``policy.waiting_order`` (0 for FIFO).

    Equivalent to sorting by ``mlfq_key``; the keys returned are ``(level, within)``
    (``(level,)`` for settled running jobs), which is what reports display.
    """
    from controller.core.queue_book import QueueBook

    if not jobs:
        return []
    levels = ctx.precompute_levels(jobs).tolist()
    groups, entries = groups_and_entries(jobs, levels, ctx.thresholds_gpu_s, ctx.now_s, ctx.queue_service)
    policy.regroup(jobs, levels, groups, ctx)
    within = policy.waiting_order(jobs, levels, groups, ctx)
    book = QueueBook.build(jobs, levels, groups, entries, within, len(ctx.thresholds_gpu_s) + 1)
    keyed = []
    for job in book.order():
        key = book.key_of(job)
        keyed.append(((book.level_of(job),) if key is None else (book.level_of(job), key[0]), job))
    return keyed


def mlfq_key(job: JobState, ctx: PolicyContext, within_waiting: float = 0.0) -> tuple:
    """One job's MLFQ sort key (smaller first); ``mlfq_order`` sorts all at once."""
    level = ctx.level(job)
    (group,), (entry,) = groups_and_entries([job], [level], ctx.thresholds_gpu_s, ctx.now_s, ctx.queue_service)
    if group == SETTLED_RUNNING:
        within_waiting = 0.0
    return (level, group != SETTLED_RUNNING, within_waiting, group, entry, job.index)


def service_at_entry(job: JobState, level: int, group: int, ctx: PolicyContext) -> float:
    """The queue service a job's waiting order is judged at: a job demoted while
    running is judged at the threshold it crossed (where it entered its queue), any
    other job at its service now (constant while it waits). The crossing point, not
    the service at the round, so that a replay that wakes at the crossing judges it
    the same."""
    return judged_at(ctx.thresholds_gpu_s, level, group == ENTERED and job.running, job.queue_level,
                     ctx.queue_service(job))


def judged_at(thresholds_gpu_s, level: int, entered_running: bool, queue_level, served_gpu_s: float) -> float:
    """``service_at_entry`` on plain values (the replay's book keys use it too)."""
    if entered_running and queue_level is not None and level > queue_level:
        return thresholds_gpu_s[level - 1]
    return served_gpu_s


class Policy:
    """Base class. Subclasses set the flags and implement ``sort_key``."""

    name = "base"
    needs_duration = False  # reads the true duration (perfect-knowledge baseline)
    discretized = False  # MLFQ levels (reported as the job's level)
    head_of_line_blocking = False  # strict FIFO: stop at the first job that does not fit
    preemptive = True  # False: running jobs keep their GPUs whatever the order says
    static_order = False  # non-preemptive, ordered by arrival: a replay may keep a queue book
    drifts_while_running = False  # priority changes continuously: needs a quantum
    uses_service_distribution = False
    conditions_service = False  # reads a distribution per job (controller.core.conditioned)
    bands_by_index = False  # SiteFactor inside a level from the plan's index (controller.core.levers.bands)

    def waiting_order(self, jobs: list[JobState], levels: list[int], groups: list[int], ctx: PolicyContext):
        """MLFQ policies: a value per job that orders the waiting jobs of a queue before
        their FIFO places (smaller first), or None for pure FIFO queues."""
        return None

    def waiting_value(self, service, thresholds, level: int, service_gpu_s: float, spec=None) -> float:
        """One job's ``waiting_order`` value, given the service it is judged at (0: FIFO)."""
        return 0.0

    def regroup(self, jobs: list[JobState], levels: list[int], groups: list[int], ctx: PolicyContext) -> None:
        """MLFQ policies: move settled running jobs the policy re-judges this round into
        the ENTERED group (in place; their entries stay their places)."""

    def prepare(self, jobs: list[JobState], ctx: PolicyContext) -> None:
        """Compute per-round values for all jobs at once (into ctx.cache), if useful."""

    def sort_key(self, job: JobState, ctx: PolicyContext) -> tuple:
        raise NotImplementedError

    def ordered(self, jobs: list[JobState], ctx: PolicyContext) -> list[tuple[tuple, JobState]]:
        """(key, job) pairs, highest priority first. Policies may do this in bulk."""
        self.prepare(jobs, ctx)
        sort_key = self.sort_key
        return sorted(((sort_key(job, ctx), job) for job in jobs), key=lambda kj: kj[0])

    def display_value(self, job: JobState, ctx: PolicyContext) -> float:
        """The number shown in reports as the job's priority (policy-specific)."""
        return float(self.sort_key(job, ctx)[0])

    def display_from_key(self, key: tuple, job: JobState, ctx: PolicyContext) -> float:
        """``display_value`` given the job's sort key of this round (saves recomputing it)."""
        return self.display_value(job, ctx)

    def level(self, job: JobState, ctx: PolicyContext) -> int:
        return ctx.level(job) if self.discretized else 0

"""Slurm's job times on the controller's clock.

slurmctld stamps a job's submit, start and end with its own clock; the controller
measures "now" with its own. With the controller's clock 2 minutes ahead, a job that
started 10 s ago had run 130 s by the controller's arithmetic: charged 130 s of
service per GPU (2,080 GPU-s on 16 GPUs), and old enough for preempt_min_runtime_s.
squeue --json reports no elapsed time (its records have start_time, never a run
time), so the controller measures the offset ``controller clock - slurmctld clock``
and moves every Slurm time (each ``*_time_s`` field of ObservedJob) onto its own
clock, once, as the observation comes in; nothing after that mixes the two clocks.

Each piece of evidence bounds the offset (Slurm's times are whole seconds):

- slurmctld's own clock when it answered (``Observation.slurm_now_s``: squeue
  --json's top-level ``last_update``: in the 24.11 and 26.05 recordings, not
  on 22.05), between the local times just before the command
  ran and just after it answered (``observed_at_s``, ``answered_at_s``):
  ``observed_at - slurm_now - 1 <= offset <= answered_at - slurm_now``.
- a job the previous observation saw pending and this one sees running, started at
  Slurm time S: it started after that observation was taken, and before this one
  answered: ``previous observed_at - S - 1 <= offset <= answered_at - S``. This is
  all 22.05 gives.

The offset used is the one nearest 0 that every bound of the last ``WINDOW_S`` allows
(no evidence yet: 0; the newest bound is kept however old). An older bound that
contradicts newer ones (the clock was stepped) is dropped. An offset within
``TOLERANCE_S`` is taken as 0 (Slurm's whole seconds and the command's duration make a
few seconds of noise), and the offset in use changes only when the estimate moves by
more than ``STEP_S``: each change gives every job a new ObservedJob, which the
accounts then read whole. A change into or out of the tolerance is logged once.
"""
from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import fields, replace
from typing import Optional

from controller.service.acting.backend import Observation, ObservedJob

log = logging.getLogger("tiresias.controller")

TOLERANCE_S = 5.0
STEP_S = 1.0
WINDOW_S = 3600.0
MAX_BOUNDS = 4096  # one per observation with evidence: an hour of 1 s polls
# A start time that would put the clocks more than a day apart is taken as a wrong
# record, not as evidence (one such job would otherwise move every job's times).
MAX_OFFSET_S = 86400.0
# every epoch time of ObservedJob (submit, start, end, eligible, ...): named *_time_s
TIME_FIELDS = tuple(f.name for f in fields(ObservedJob) if f.name.endswith("_time_s"))


class SlurmClock:
    """The offset of the controller's clock from slurmctld's (``offset_s``, seconds,
    positive: the controller's is ahead) and the observations moved onto the
    controller's clock (``localize``)."""

    def __init__(self, logger: logging.Logger = log):
        self.log = logger
        self.offset_s = 0.0  # in use: local time = Slurm time + offset_s
        self.estimate_s = 0.0  # the offset nearest 0 the bounds allow
        self._bounds: deque[tuple[float, float, float]] = deque()  # (observed at, low, high), oldest first
        self._pending: set[str] = set()  # the jobs the last fresh observation saw pending
        self._pending_at: Optional[float] = None  # when that observation was taken (local)
        self._moved: dict[int, tuple[ObservedJob, ObservedJob]] = {}  # id(raw job) -> (raw, moved by offset_s)

    def localize(self, observation: Observation, fresh: bool = True) -> Observation:
        """``observation`` with its jobs' Slurm times on the controller's clock (the
        same object when the offset in use is 0). ``fresh``: read from Slurm just now
        (its evidence is taken in); a repeated observation only has its times moved.
        A job unchanged since the last call keeps its moved ObservedJob (the same
        object), as the backend keeps a job's ObservedJob while its record is unchanged."""
        if fresh:
            self._take_evidence(observation)
        if self.offset_s == 0.0:
            self._moved = {}
            return observation
        moved, kept = {}, self._moved
        jobs = []
        for job in observation.jobs:
            pair = kept.get(id(job))
            if pair is None or pair[0] is not job:
                pair = (job, self._moved_job(job))
            moved[id(job)] = pair
            jobs.append(pair[1])
        self._moved = moved
        return replace(observation, jobs=jobs)

    def _moved_job(self, job: ObservedJob) -> ObservedJob:
        offset = self.offset_s
        changes = {name: value + offset for name in TIME_FIELDS if (value := getattr(job, name)) is not None}
        return replace(job, **changes) if changes else job

    def _take_evidence(self, observation: Observation) -> None:
        at = observation.observed_at_s
        answered = observation.answered_at_s if observation.answered_at_s is not None else at
        low, high = -math.inf, math.inf
        if observation.slurm_now_s is not None and abs(at - observation.slurm_now_s) <= MAX_OFFSET_S:
            low, high = at - observation.slurm_now_s - 1.0, answered - observation.slurm_now_s
        pending, last_pending, last_at = set(), self._pending, self._pending_at
        for job in observation.jobs:
            state = job.state
            if state == "PENDING":
                pending.add(job.job_id)
            elif state == "RUNNING" and last_at is not None and job.start_time_s is not None \
                    and job.job_id in last_pending:
                start = job.start_time_s
                if last_at - start - 1.0 <= MAX_OFFSET_S and answered - start >= -MAX_OFFSET_S:
                    low, high = max(low, last_at - start - 1.0), min(high, answered - start)
        self._pending, self._pending_at = pending, at
        if low > high:  # this observation contradicts itself (a time Slurm got wrong): no evidence
            return
        if low > -math.inf or high < math.inf:
            self._bounds.append((at, low, high))
            # the newest stays however old: evidence that expired is no evidence of agreement
            while len(self._bounds) > 1 and (len(self._bounds) > MAX_BOUNDS or self._bounds[0][0] < at - WINDOW_S):
                self._bounds.popleft()
        self._update(self._narrowest())

    def _narrowest(self) -> float:
        """The offset nearest 0 within the newest bounds that agree (older ones that
        contradict them are dropped: the clock was stepped since)."""
        low, high = -math.inf, math.inf
        agreeing = 0
        for _, lo, hi in reversed(self._bounds):
            if max(low, lo) > min(high, hi):
                break
            low, high = max(low, lo), min(high, hi)
            agreeing += 1
        for _ in range(len(self._bounds) - agreeing):
            self._bounds.popleft()
        return min(max(0.0, low), high)

    def _update(self, estimate: float) -> None:
        self.estimate_s = estimate
        wanted = estimate if abs(estimate) > TOLERANCE_S else 0.0
        if wanted == 0.0 and self.offset_s == 0.0 or abs(wanted - self.offset_s) <= STEP_S:
            return
        before, self.offset_s = self.offset_s, round(wanted)
        if self.offset_s == 0.0:
            self.log.warning("clock: the controller's clock agrees with slurmctld's again (within %g s): Slurm's "
                             "job times are taken as they are", TOLERANCE_S)
        elif before == 0.0 or abs(self.offset_s - before) > TOLERANCE_S:
            self.log.warning("clock: the controller's clock is %g s %s slurmctld's: Slurm's job times are moved onto "
                             "the controller's clock (run times, service, protection); fix the clocks (NTP/chrony)",
                             abs(self.offset_s), "ahead of" if self.offset_s > 0 else "behind")

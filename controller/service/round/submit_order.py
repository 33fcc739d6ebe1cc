"""The controller's arrival order: active jobs by (submit time, numeric job id), kept
across rounds.

The engine numbers the jobs it plans in arrival order (JobState.index, the
deterministic tie-breaker), as the simulator numbers a trace's jobs. The submit time
is the one the accounts took at first sight (JobRecord.submit_time_s, also the
JobSpec's), so a job keeps its place for good: a requeue that makes Slurm show
another submit time does not move it. Kept as job ids, each sorted in once when
first seen and dropped when its job is forgotten: sorting 55,000 jobs every round,
or even checking each one's submit time, was a tenth of a round (every pass over
the jobs' objects is a cache miss per job); ids of jobs that left the active
states without ending (a transient state) stay, and the caller skips them.
"""
from __future__ import annotations

import bisect
from typing import Callable, Iterable, Mapping

from controller.service.acting.backend import numeric_id

SORTED_AGAIN_ABOVE = 256  # more new jobs in a round than this: all sorted again (one C-level sort)


class SubmitOrder:
    def __init__(self):
        self._ids: list[str] = []
        self._keys: dict[str, float] = {}  # job id -> its first-sight submit time

    def _key(self, job_id: str) -> tuple:
        # (submit time, numeric id): the tuple is made when sorting, not kept a job
        return self._keys[job_id], numeric_id(job_id)

    def ids(self, observed: Mapping[str, object], submit_time_s: Callable[[str], float],
            active: Callable[[str], bool]) -> list[str]:
        """Every job id known, in arrival order, with the new ones of ``observed``
        sorted in (``active(job_id)``: it is pending or running; ``submit_time_s``: its
        first-sight submit time). The caller skips the ids that are not active now."""
        keys = self._keys
        new = [job_id for job_id in observed.keys() - keys.keys() if active(job_id)]
        if len(new) > SORTED_AGAIN_ABOVE:
            keys.update((job_id, submit_time_s(job_id)) for job_id in new)
            self._ids += new
            self._ids.sort(key=self._key)
        else:
            for job_id in new:
                keys[job_id] = submit_time_s(job_id)
                bisect.insort(self._ids, job_id, key=self._key)
        return self._ids

    def forget(self, job_ids: Iterable[str]) -> None:
        """Ended jobs leave the order."""
        keys = self._keys
        dropped = [job_id for job_id in job_ids if keys.pop(job_id, None) is not None]
        if dropped:
            self._ids = list(filter(keys.__contains__, self._ids))

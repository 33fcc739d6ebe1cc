"""The line each managed job carries in its Slurm AdminComment, so that its owner sees
why it waits with the tools they already have (``scontrol show job``):

    site text [tiresias: queue 2/3 · 5,400 GPU-s attained · position 4 · preemptable]

Ours is the bracketed part; whatever else the field holds is the site's and is kept as
it is (a site that rewrites the field loses only our part, which the next round puts
back after theirs). Written only when the text differs from what Slurm shows, and
bounded: a change of queue level or of pending/running goes out in the same round,
other changes (attained service, position) at most every ``refresh_s`` per job, and
at most ``max_per_round`` writes per round, level changes first. Only when the
executor pulls levers: observe and shadow write nothing (this is information, not a
scheduling decision).
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

from controller.core.actions import SetAdminComment
from controller.service.backend import ObservedJob

OUR_PART = re.compile(r"\s*\[tiresias: [^\[\]]*\]")
SEPARATOR = " · "


# Memoized: most jobs ask for the same line (and show the same comment) round after
# round; building 12,000 lines from scratch was a tenth of a round.
MEMO_SIZE = 1 << 16


@lru_cache(maxsize=MEMO_SIZE)
def rounded_gpu_s(value: float) -> str:
    """Attained service with two significant digits (5,400; 130,000): stable between
    rounds, so the line does not change every time a running job gains a little."""
    value = max(0.0, float(value))
    if value < 100:
        return f"{int(value):,}"
    digits = len(str(int(value))) - 2
    return f"{int(value) // 10 ** digits * 10 ** digits:,}"


@lru_cache(maxsize=MEMO_SIZE)
def our_line(level: int, queues: int, attained_gpu_s: float, position: Optional[int], running: bool,
             preemptable: bool) -> str:
    """Our part of the AdminComment, without brackets. ``level`` is 0-based; ``queues``
    0 leaves the queue out (a policy without MLFQ queues); ``position`` is the job's
    place in the plan order, as ``tiresias queue`` shows it."""
    parts = [f"queue {level + 1}/{queues}"] if queues else []
    parts.append(f"{rounded_gpu_s(attained_gpu_s)} GPU-s attained")
    if position is not None:
        parts.append(f"position {position}")
    if running:
        parts.append("preemptable" if preemptable else "not preemptable")
    return "tiresias: " + SEPARATOR.join(parts)


def site_part(current: str) -> str:
    """What the site wrote: the field without our bracketed part(s)."""
    return OUR_PART.sub("", current or "").strip()


@lru_cache(maxsize=MEMO_SIZE)
def ours_in(current: str) -> str:
    """Our part as Slurm shows it now ('' when there is none)."""
    match = OUR_PART.search(current or "")
    return match.group(0).strip()[1:-1] if match else ""


def combined(current: str, line: str) -> str:
    """The full AdminComment: the site's text first, then ours in brackets."""
    site = site_part(current)
    return f"{site} [{line}]" if site else f"[{line}]"


@dataclass(slots=True)
class _Written:
    at_s: float
    urgent_key: tuple  # (level, running): a change here is written at once
    # the ObservedJob last found to show this line (its comment and state as then):
    # while the job is that object, at that level and not due, it is not looked at again
    checked: Optional[ObservedJob] = None


class AdminComments:
    """Decides which jobs' AdminComment to write this round (the diffing and bounds);
    the caller carries the writes out through the executor."""

    def __init__(self, refresh_s: float = 300.0, max_per_round: int = 50):
        self.refresh_s = refresh_s
        self.max_per_round = max_per_round
        self._written: dict[str, _Written] = {}
        self.backlog = False  # the last round left lines to write (more than max_per_round)

    def updates(self, wanted: dict[str, tuple[str, tuple]], observed: dict[str, ObservedJob],
                now: float) -> dict[str, str]:
        """``wanted``: job id -> (our line, urgent key). Returns job id -> full new
        AdminComment for the jobs to write now (at most max_per_round)."""
        urgent, routine = [], []
        for job_id, (line, key) in wanted.items():
            job = observed.get(job_id)
            if job is None or ours_in(job.admin_comment) == line:
                continue
            last = self._written.get(job_id)
            if last is None or last.urgent_key != key or not ours_in(job.admin_comment):
                urgent.append(job_id)
            elif now - last.at_s >= self.refresh_s:
                routine.append((last.at_s, job_id))
        chosen = urgent + [job_id for _, job_id in sorted(routine)]
        self.backlog = len(chosen) > self.max_per_round
        return {job_id: combined(observed[job_id].admin_comment, wanted[job_id][0])
                for job_id in chosen[:self.max_per_round]}

    def apply(self, plan, observed: dict[str, ObservedJob], attained_gpu_s: Callable[[str], float], queues: int,
              preemptable, executor, now: float) -> int:
        """Write this round's AdminComment changes through ``executor`` (SetAdminComment
        actions, ids ``r<round>.c<n>``). ``queues``: K, or 0 for a policy without queues;
        ``attained_gpu_s(job_id)``: its service; ``preemptable(job) -> bool`` for running jobs. Returns the
        writes applied."""
        position = None
        wanted, written, refresh_s = {}, self._written, self.refresh_s
        for job_id, level in plan.levels.items():
            job = observed.get(job_id)
            if job is None or job.array_record:  # a write naming the task would split it off its array
                continue
            last = written.get(job_id)
            if last is not None and last.checked is job and last.urgent_key[0] == level and now - last.at_s < refresh_s:
                continue  # found up to date before, and neither the job nor its level changed since
            state = job.state
            if state != "RUNNING" and state != "PENDING":
                continue
            running = state == "RUNNING"
            if (last is not None and now - last.at_s < refresh_s and last.urgent_key == (level, running)
                    and ours_in(job.admin_comment)):
                last.checked = job
                continue  # neither urgent nor due (as updates() rules): its line is not even built
            if position is None:
                position = dict(zip(plan.order, itertools.count(1)))
            line = our_line(level, queues, attained_gpu_s(job_id), position.get(job_id), running,
                            running and preemptable(job))
            if ours_in(job.admin_comment) != line:  # what updates() skips, left out before it (most jobs)
                wanted[job_id] = (line, (level, running))
        applied = 0
        for number, (job_id, text) in enumerate(self.updates(wanted, observed, now).items(), 1):
            if executor.apply(SetAdminComment(f"r{plan.round_id}.c{number}", job_id, text,
                                              reason="the line users see in scontrol show job")).applied:
                self.written(job_id, wanted[job_id][1], now)
                applied += 1
        return applied

    def next_refresh_s(self) -> float:
        """When the oldest line written is next due for its routine refresh (inf: none)."""
        return min((w.at_s for w in self._written.values()), default=math.inf) + self.refresh_s

    def written(self, job_id: str, key: tuple, now: float) -> None:
        self._written[job_id] = _Written(now, key)

    def forget(self, job_id: str) -> None:
        self._written.pop(job_id, None)

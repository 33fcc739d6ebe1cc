"""The handoff rule: did the preemption pay off, and may a plan preempt again for a job?

When a round signals victims, the jobs the same plan starts are the beneficiaries;
the cluster manager's scheduler, not the controller, then starts them. Each is
watched until it runs ("landed"), leaves ("gone") or ``timeout_s`` passes ("failed":
no preemption is made for it for BLOCK_FACTOR timeouts). While a beneficiary's
victims have all left and it still has not started, a plan that starts it keeps all
of its victims running. Pure state and rule: controller.service.handoff persists
each transition and logs it; the lever replay (controller.replay.lever_replay) keeps
the same book, so the simulator holds back the same preemptions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional

BLOCK_FACTOR = 10  # a failed handoff blocks preemptions for the job this many timeouts


@dataclass
class Watch:
    signalled_s: float
    victims: tuple[str, ...]
    causes: tuple[str, ...] = ()  # the preemption decisions that made room (the handoff cites them)


class HandoffBook:
    """``watching``: beneficiary job id -> its Watch; ``blocked_until``: job id -> the
    time until which no preemption is made for it (its handoff failed)."""

    def __init__(self):
        self.watching: dict[str, Watch] = {}
        self.blocked_until: dict[str, float] = {}

    def check(self, state_of: Callable[[str], Optional[str]], now: float, timeout_s: float,
              extra_s: Callable[[Watch], float] = lambda watch: 0.0) -> list[tuple[str, str, Optional[Watch]]]:
        """Advance every watch by the job's state now (``state_of``: "PENDING",
        "RUNNING", anything else or None: gone); returns (event, job id, watch) for
        each change, in order: "gone", "landed", "failed", and "unblocked" for a block
        that ran out. ``extra_s``: how much longer than the configured grace the
        watch's victims may take to leave (their own --signal lead time), added to the
        time-out so a victim's own grace never fails a handoff."""
        events: list[tuple[str, str, Optional[Watch]]] = []
        for job_id, watch in list(self.watching.items()):
            state = state_of(job_id)
            if state not in ("PENDING", "RUNNING"):
                self._end(job_id)
                events.append(("gone", job_id, watch))
            elif state == "RUNNING":
                self._end(job_id)
                events.append(("landed", job_id, watch))
            elif now - watch.signalled_s > timeout_s + extra_s(watch):
                del self.watching[job_id]
                self.blocked_until[job_id] = now + BLOCK_FACTOR * timeout_s
                events.append(("failed", job_id, watch))
        for job_id in [j for j, until in self.blocked_until.items() if until <= now]:
            self._end(job_id)
            events.append(("unblocked", job_id, None))
        return events

    def _end(self, job_id: str) -> None:
        self.watching.pop(job_id, None)
        self.blocked_until.pop(job_id, None)

    def blocking(self, start_ids: Iterable[str], now: float, leaving: set[str]) -> list[str]:
        """Why a plan's preemptions must wait, one line per job it starts that got a
        preemption already: its handoff failed recently, or is pending with every
        victim gone and the job still not started. While some victim is still
        leaving, its GPUs are the job's, so the plan's preemptions are for others."""
        why = []
        for job_id in start_ids:
            if self.blocked_until.get(job_id, -1.0) > now:
                why.append(f"{job_id} did not start after the last preemption made for it (handoff failed)")
                continue
            watch = self.watching.get(job_id)
            if watch is not None and not leaving.intersection(watch.victims):
                why.append(f"{job_id} has not started yet after the preemption of {','.join(watch.victims)} "
                           "made for it (handoff pending)")
        return why

    def expect(self, start_ids: Iterable[str], now: float, victims: tuple[str, ...], causes: tuple[str, ...]
               ) -> list[str]:
        """After a round's preemptions (``victims``, signalled by decisions ``causes``):
        watch the jobs its plan starts that are not watched yet; returns them."""
        if not victims:
            return []
        added = []
        for job_id in start_ids:
            if job_id not in self.watching:
                self.watching[job_id] = Watch(now, victims, causes)
                added.append(job_id)
        return added

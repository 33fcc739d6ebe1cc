"""Did the preemption pay off? The handoff from the victims to the job they made room for.

When a round signals victims, the jobs the same plan starts are the beneficiaries.
Slurm's scheduler, not the controller, then starts them: another job (backfill,
another partition) may take the freed GPUs first. Each beneficiary is watched until
it runs (a "handoff" decision, applied, with the delay from the victims' signal to
its start) or ``handoff_timeout_s`` passes (a "handoff" decision, not applied).

No second preemption for a job whose handoff is pending: once its victims have left
(requeued) and it still has not started, a round whose plan starts it keeps its
victims running until the watch ends. A job whose handoff failed gets no preemption
made for it for ten times the timeout. Both are kept in the store (written before the
round's preemptions could repeat them), so a restarted or standby controller does not
signal again for such a job.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from controller.core.plan import Plan
from controller.service.backend import ObservedJob
from controller.service.config import Config
from controller.service.report import RoundReport
from controller.service.store import Store

BLOCK_FACTOR = 10  # a failed handoff blocks preemptions for the job this many timeouts
MAX_DELAYS_KEPT = 1000  # handoff delays kept for reports (the latest)
_STARTED = re.compile(r"started (\d+)s after the victims' signal")


def started_detail(delay_s: float) -> str:
    """The detail of a landed handoff decision (``started_delay_s`` reads it back)."""
    return f"started {delay_s:.0f}s after the victims' signal"


def started_delay_s(detail: str) -> Optional[float]:
    """The delay (s) a landed handoff's logged detail records, or None for any other text."""
    match = _STARTED.fullmatch(detail or "")
    return float(match.group(1)) if match else None


@dataclass
class Watch:
    signalled_s: float
    victims: tuple[str, ...]
    causes: tuple[str, ...] = ()  # the preemption decisions that made room (the handoff cites them)


class Handoffs:
    """The watched handoffs (``watching``: beneficiary job id -> its watch) and the
    failed ones (``blocked_until``: job id -> epoch s), loaded from the store."""

    def __init__(self, config: Config, store: Store):
        self.config = config
        self.store = store
        self.watching: dict[str, Watch] = {}
        self.blocked_until: dict[str, float] = {}
        for job_id, signalled_s, victims, blocked_until_s in store.load_handoffs(config.cluster):
            if blocked_until_s is None:
                self.watching[job_id] = Watch(signalled_s, victims)
            else:
                self.blocked_until[job_id] = blocked_until_s
        self.landed = 0
        self.failed = 0
        self.delays_s: list[float] = []

    def blocking(self, plan: Plan, now: float, leaving: set[str]) -> list[str]:
        """Why this plan's preemptions must wait, one line per job it starts that got
        a preemption already: its handoff failed recently, or is pending with every
        victim gone (requeued) and the job still not started. While some victim is
        still leaving, its GPUs are the job's (Controller._snapshot), so the plan's
        preemptions are for other jobs."""
        why = []
        for action in plan.of_kind("start"):
            job_id = action.job_id
            if self.blocked_until.get(job_id, -1.0) > now:
                why.append(f"{job_id} did not start after the last preemption made for it (handoff failed)")
                continue
            watch = self.watching.get(job_id)
            if watch is not None and not leaving.intersection(watch.victims):
                why.append(f"{job_id} has not started yet after the preemption of {','.join(watch.victims)} "
                           "made for it (handoff pending)")
        return why

    def expect(self, plan: Plan, report: RoundReport, now: float) -> None:
        """After this round's preemptions: watch the jobs the plan starts, if any victim was signalled."""
        preempted = [e for e in report.applied if e["kind"] == "preempt" and e["applied"]]
        if not preempted:
            return
        victims = tuple(e["job_id"] for e in preempted)
        causes = tuple(e["decision_id"] for e in preempted)
        for action in plan.of_kind("start"):
            if action.job_id not in self.watching:
                self.store.save_handoff(self.config.cluster, action.job_id, now, victims)
                self.watching[action.job_id] = Watch(now, victims, causes)

    def _end(self, job_id: str) -> None:
        self.store.clear_handoff(self.config.cluster, job_id)
        self.watching.pop(job_id, None)
        self.blocked_until.pop(job_id, None)

    def check(self, observed: dict[str, ObservedJob], now: float, report: RoundReport) -> None:
        """Log each watched job that started, or that did not within handoff_timeout_s."""
        timeout = self.config.handoff_timeout_s
        checked = 0
        for job_id, watch in list(self.watching.items()):
            job = observed.get(job_id)
            victims = ",".join(watch.victims)
            if job is None or job.state not in ("PENDING", "RUNNING"):
                self._end(job_id)
            elif job.state == "RUNNING":
                delay = max(0.0, (job.start_time_s or now) - watch.signalled_s)
                self.landed += 1
                self.delays_s.append(delay)
                del self.delays_s[:-MAX_DELAYS_KEPT]  # a controller runs for months: keep it bounded
                self._end(job_id)
                checked += 1
                report.applied.append({"decision_id": f"r{report.round_id}.h{checked}", "job_id": job_id,
                                       "kind": "handoff", "applied": True, "cause_id": ",".join(watch.causes),
                                       "reason": f"made room for by preempting {victims}",
                                       "detail": started_detail(delay)})
            elif now - watch.signalled_s > timeout:
                self.failed += 1
                self.store.save_handoff(self.config.cluster, job_id, watch.signalled_s, watch.victims,
                                        blocked_until_s=now + BLOCK_FACTOR * timeout)
                self.blocked_until[job_id] = now + BLOCK_FACTOR * timeout
                del self.watching[job_id]
                checked += 1
                report.applied.append({"decision_id": f"r{report.round_id}.h{checked}", "job_id": job_id,
                                       "kind": "handoff", "applied": False, "cause_id": ",".join(watch.causes),
                                       "reason": f"made room for by preempting {victims}",
                                       "detail": f"not started {timeout:g}s after the victims' signal (reason "
                                                 f"{job.reason or '-'}): no preemption for it for "
                                                 f"{BLOCK_FACTOR * timeout:g}s"})
        for job_id in [j for j, until in self.blocked_until.items() if until <= now]:
            self._end(job_id)

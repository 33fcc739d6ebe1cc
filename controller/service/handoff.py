"""Did the preemption pay off? The handoff from the victims to the job they made room for.

When a round signals victims, the jobs the same plan starts are the beneficiaries.
Slurm's scheduler, not the controller, then starts them: another job (backfill,
another partition) may take the freed GPUs first. Each beneficiary is watched until
it runs (a "handoff" decision, applied, with the delay from the victims' signal to
its start) or ``handoff_timeout_s`` passes (a "handoff" decision, not applied). A job
whose handoff failed gets no preemption made for it for ten times the timeout: a round
whose plan would start it that way keeps its victims running (logged). State is in
memory: a restart forgets the watch (at worst one more preemption for the job).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from controller.core.plan import Plan
from controller.service.backend import ObservedJob
from controller.service.config import Config
from controller.service.report import RoundReport

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


@dataclass
class Handoffs:
    config: Config
    watching: dict[str, Watch] = field(default_factory=dict)  # beneficiary job id -> its watch
    blocked_until: dict[str, float] = field(default_factory=dict)
    landed: int = 0
    failed: int = 0
    delays_s: list[float] = field(default_factory=list)  # the latest MAX_DELAYS_KEPT, oldest first

    def blocking(self, plan: Plan, now: float) -> list[str]:
        """Jobs this plan starts whose last handoff failed recently: its preemptions wait."""
        return [a.job_id for a in plan.of_kind("start") if self.blocked_until.get(a.job_id, -1.0) > now]

    def expect(self, plan: Plan, report: RoundReport, now: float) -> None:
        """After this round's preemptions: watch the jobs the plan starts, if any victim was signalled."""
        victims = tuple(e["job_id"] for e in report.applied if e["kind"] == "preempt" and e["applied"])
        if not victims:
            return
        for action in plan.of_kind("start"):
            self.watching.setdefault(action.job_id, Watch(now, victims))

    def check(self, observed: dict[str, ObservedJob], now: float, report: RoundReport) -> None:
        """Log each watched job that started, or that did not within handoff_timeout_s."""
        timeout = self.config.handoff_timeout_s
        for job_id, watch in list(self.watching.items()):
            job = observed.get(job_id)
            victims = ",".join(watch.victims)
            if job is None or job.state not in ("PENDING", "RUNNING"):
                del self.watching[job_id]
            elif job.state == "RUNNING":
                delay = max(0.0, (job.start_time_s or now) - watch.signalled_s)
                self.landed += 1
                self.delays_s.append(delay)
                del self.delays_s[:-MAX_DELAYS_KEPT]  # a controller runs for months: keep it bounded
                del self.watching[job_id]
                report.applied.append({"decision_id": f"r{report.round_id}.h", "job_id": job_id, "kind": "handoff",
                                       "applied": True, "reason": f"made room for by preempting {victims}",
                                       "detail": started_detail(delay)})
            elif now - watch.signalled_s > timeout:
                self.failed += 1
                self.blocked_until[job_id] = now + BLOCK_FACTOR * timeout
                del self.watching[job_id]
                report.applied.append({"decision_id": f"r{report.round_id}.h", "job_id": job_id, "kind": "handoff",
                                       "applied": False, "reason": f"made room for by preempting {victims}",
                                       "detail": f"not started {timeout:g}s after the victims' signal (reason "
                                                 f"{job.reason or '-'}): no preemption for it for "
                                                 f"{BLOCK_FACTOR * timeout:g}s"})
        for job_id in [j for j, until in self.blocked_until.items() if until <= now]:
            del self.blocked_until[job_id]

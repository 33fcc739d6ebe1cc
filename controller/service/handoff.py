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
from typing import Callable, Optional

# The rule, shared with the simulator; Watch is re-exported for the callers that build one.
from controller.core.handoffs import BLOCK_FACTOR, HandoffBook, Watch  # noqa: F401
from controller.core.plan import Plan
from controller.service.backend import ObservedJob
from controller.service.config import Config
from controller.service.report import RoundReport
from controller.service.store import Store

MAX_DELAYS_KEPT = 1000  # handoff delays kept for reports (the latest)
_STARTED = re.compile(r"started (\d+)s after the victims' signal")


def started_detail(delay_s: float) -> str:
    """The detail of a landed handoff decision (``started_delay_s`` reads it back)."""
    return f"started {delay_s:.0f}s after the victims' signal"


def started_delay_s(detail: str) -> Optional[float]:
    """The delay (s) a landed handoff's logged detail records, or None for any other text."""
    match = _STARTED.fullmatch(detail or "")
    return float(match.group(1)) if match else None


class Handoffs:
    """The watched handoffs (``watching``: beneficiary job id -> its watch) and the
    failed ones (``blocked_until``: job id -> epoch s), loaded from the store; the
    rule is controller.core.handoffs.HandoffBook's, this class persists and logs it."""

    def __init__(self, config: Config, store: Store):
        self.config = config
        self.store = store
        self.book = HandoffBook()
        self.watching = self.book.watching
        self.blocked_until = self.book.blocked_until
        for job_id, signalled_s, victims, blocked_until_s in store.load_handoffs(config.cluster):
            if blocked_until_s is None:
                self.watching[job_id] = Watch(signalled_s, victims)
            else:
                self.blocked_until[job_id] = blocked_until_s
        self.landed = 0
        self.failed = 0
        self.delays_s: list[float] = []

    def check(self, observed: dict[str, ObservedJob], now: float, report: RoundReport,
              grace_of: Callable[[ObservedJob, float], float] = lambda job, at: 0.0) -> None:
        """Log each watched job that started, or that did not within handoff_timeout_s
        (plus its victims' grace beyond preempt_grace_s; ``grace_of``: a job's grace)."""
        timeout = self.config.handoff_timeout_s

        def extra_s(watch) -> float:
            graces = [grace_of(observed[v], watch.signalled_s) for v in watch.victims if v in observed]
            return max([0.0] + [g - self.config.preempt_grace_s for g in graces])

        checked = 0
        events = self.book.check(lambda j: observed[j].state if j in observed else None, now, timeout, extra_s)
        for event, job_id, watch in events:
            if event in ("gone", "unblocked"):
                self.store.clear_handoff(self.config.cluster, job_id)
                continue
            job = observed[job_id]
            victims = ",".join(watch.victims)
            checked += 1
            decision = {"decision_id": f"r{report.round_id}.h{checked}", "job_id": job_id, "kind": "handoff",
                        "cause_id": ",".join(watch.causes), "reason": f"made room for by preempting {victims}"}
            if event == "landed":
                delay = max(0.0, (job.start_time_s or now) - watch.signalled_s)
                self.landed += 1
                self.delays_s.append(delay)
                del self.delays_s[:-MAX_DELAYS_KEPT]  # a controller runs for months: keep it bounded
                self.store.clear_handoff(self.config.cluster, job_id)
                report.applied.append(dict(decision, applied=True, detail=started_detail(delay)))
            else:  # failed
                self.failed += 1
                self.store.save_handoff(self.config.cluster, job_id, watch.signalled_s, watch.victims,
                                        blocked_until_s=self.blocked_until[job_id])
                report.applied.append(dict(decision, applied=False,
                                           detail=f"not started {timeout:g}s after the victims' signal (reason "
                                                  f"{job.reason or '-'}): no preemption for it for "
                                                  f"{BLOCK_FACTOR * timeout:g}s"))

    def blocking(self, plan: Plan, now: float, leaving: set[str]) -> list[str]:
        """Why this plan's preemptions must wait (HandoffBook.blocking)."""
        return self.book.blocking((a.job_id for a in plan.of_kind("start")), now, leaving)

    def expect(self, plan: Plan, report: RoundReport, now: float) -> None:
        """After this round's preemptions: watch the jobs the plan starts, if any victim was signalled."""
        preempted = [e for e in report.applied if e["kind"] == "preempt" and e["applied"]]
        victims = tuple(e["job_id"] for e in preempted)
        causes = tuple(e["decision_id"] for e in preempted)
        for job_id in self.book.expect((a.job_id for a in plan.of_kind("start")), now, victims, causes):
            self.store.save_handoff(self.config.cluster, job_id, now, victims)

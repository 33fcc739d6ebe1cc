"""What one round decided and did: the report the round returns and the decision log stores."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional

from controller.core.plan import Plan


@dataclass
class RoundReport:
    round_id: int
    observed_at_s: float
    plan: Optional[Plan]
    applied: list[dict] = field(default_factory=list)  # decision-log entries, in the order taken
    levers: list = field(default_factory=list)  # the lever actions (controller.core.actions) taken, in order
    skipped_reason: str = ""


def entry(action, *, applied: bool, detail: str = "", cause_id: str = "") -> dict:
    """The decision-log entry for one action (controller.core.plan.Action or a lever
    action of controller.core.actions); ``cause_id`` defaults to the action's own."""
    return {"decision_id": action.decision_id, "job_id": action.job_id, "kind": action.kind,
            "reason": action.reason, "applied": applied, "detail": detail,
            "cause_id": cause_id or getattr(action, "cause_id", "")}


class LogOnce:
    """Warn about a message the first time only: a condition that holds every round
    (a bad comment, a backend without a partition map) is logged once per process."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger
        self.seen: set[str] = set()

    def __call__(self, message: str) -> None:
        if message not in self.seen:
            self.seen.add(message)
            self.logger.warning(message)

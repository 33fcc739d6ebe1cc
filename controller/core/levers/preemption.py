"""A preemption's levers: the checkpoint signal, then the requeue once the grace period is over.
Pure."""
from __future__ import annotations

from controller.core.actions import Requeue, Signal
from controller.core.plan import Preempt
from controller.core.ids import caused_id


def signal_for(preempt: Preempt, signal_name: str, batch_only: bool, how: str) -> Signal:
    """The checkpoint signal a preemption sends before its requeue."""
    return Signal(caused_id(preempt.decision_id, "signal"), preempt.job_id, signal_name, batch_only,
                  reason=f"checkpoint before the requeue: {how}", cause_id=preempt.decision_id)


def requeue_after_grace(decision_id: str, job_id: str, grace_s: float, cause_id: str) -> Requeue:
    """The requeue that ends a preemption's grace period; cites the preemption."""
    return Requeue(decision_id, job_id, reason=f"grace period of {grace_s:g}s over", cause_id=cause_id)

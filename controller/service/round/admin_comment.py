"""The AdminComment lines users see (``scontrol show job``): planned in the core
(controller.core.levers.comments, through the lever planner), kept here for the callers
that write them one book at a time (``AdminComments.apply``: tests, benches)."""
from __future__ import annotations

from typing import Callable, Optional

from controller.core.levers.bands import RpcBudget
from controller.core.levers.comments import (CommentBook, combined, our_line, ours_in,  # noqa: F401  (re-exported)
                                             rounded_gpu_s, site_part)
from controller.service.acting.backend import ObservedJob


class AdminComments(CommentBook):
    """A CommentBook with its own RPC budget (``budget``; None: none) that carries its
    writes out through an executor."""

    def __init__(self, refresh_s: float = 300.0, max_per_round: int = 50, budget: Optional[RpcBudget] = None):
        super().__init__(refresh_s, max_per_round)
        self.budget = budget

    def apply(self, plan, observed: dict[str, ObservedJob], attained_gpu_s: Callable[[str], float], queues: int,
              preemptable, executor, now: float) -> int:
        """Write this round's AdminComment changes through ``executor``; returns the
        writes applied."""
        limit = self.budget.allowance(now) if self.budget is not None else None
        actions, keys, due = self.plan(plan, observed, attained_gpu_s, queues, preemptable, now, limit)
        if self.budget is not None:
            self.budget.spend(len(actions))
        outcomes = {action.decision_id: executor.apply(action).applied for action in actions}
        return self.settle(actions, keys, due, lambda action: outcomes[action.decision_id], now)

"""What one scheduling round decides: a plan of actions, each with a reason.

The engine produces a Plan from a Snapshot; an executor (the simulated cluster or
the Slurm backend) applies it. ``explain``, shadow mode and the decision log all
read the same decision ids.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Union


# Start and Preempt: frozen dataclasses (equality, hash, repr, no assignment) whose
# __init__ fills the instance dict directly: a frozen dataclass's own __init__ sets each
# field through object.__setattr__, which doubled the cost of the replay's most frequent
# objects (one per start and preemption). tests/test_plan_actions.py checks they equal
# the plain frozen dataclasses field for field.
@dataclass(frozen=True, init=False)
class Start:
    """Run a pending job on these (node, gpus) slots."""

    decision_id: str
    job_id: str
    placement: tuple[tuple[str, int], ...]
    reason: str
    kind: str = "start"

    def __init__(self, decision_id: str, job_id: str, placement: tuple[tuple[str, int], ...], reason: str,
                 kind: str = "start"):
        fields = self.__dict__
        fields["decision_id"] = decision_id
        fields["job_id"] = job_id
        fields["placement"] = placement
        fields["reason"] = reason
        fields["kind"] = kind


@dataclass(frozen=True, init=False)
class Preempt:
    """A running job must yield its GPUs (checkpoint, then requeue)."""

    decision_id: str
    job_id: str
    reason: str
    kind: str = "preempt"

    def __init__(self, decision_id: str, job_id: str, reason: str, kind: str = "preempt"):
        fields = self.__dict__
        fields["decision_id"] = decision_id
        fields["job_id"] = job_id
        fields["reason"] = reason
        fields["kind"] = kind


@dataclass(frozen=True)
class Promote:
    """Starvation promotion: back to the first queue, starvation clocks reset."""

    decision_id: str
    job_id: str
    reason: str
    kind: str = "promote"


Action = Union[Start, Preempt, Promote]


@dataclass
class Plan:
    """The outcome of one round.

    ``order`` lists every active job id, highest priority first; ``levels`` gives
    each job's MLFQ queue (0-based; 0 for continuous policies); ``wait_reasons``
    says, for each job left waiting, why. ``positions`` gives the new MLFQ place
    ``(level, entry)`` of each job whose place changes (MLFQ policies only): the
    executor stores it on the job and passes it back next round.
    """

    round_id: int
    now_s: float
    order: list[str] = field(default_factory=list)
    levels: dict[str, int] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    wait_reasons: dict[str, str] = field(default_factory=dict)
    # dgittins with conditioned distributions, explain rounds: job id -> (the key its
    # index came from, that key's sample count)
    index_sources: dict[str, tuple[str, int]] = field(default_factory=dict)
    keys: dict[str, float] = field(default_factory=dict)  # the priority value shown to users
    positions: dict[str, tuple[int, float]] = field(default_factory=dict)
    # Until when planning the same jobs again gives this plan (controller.core.plan_stands);
    # -inf: plan again every round.
    stands_until_s: float = -math.inf
    # The same but for the threshold crossings of running jobs no victim rule may preempt,
    # which move only their own queue, no action and no band: until then the plan acts the same.
    acts_until_s: float = -math.inf

    def of_kind(self, kind: str) -> list[Action]:
        return [a for a in self.actions if a.kind == kind]

"""Start and Preempt fill their fields in their own __init__ (controller.core.plan: the
replay builds one per start and preemption): they must behave as the plain frozen
dataclasses they were, field for field."""
from __future__ import annotations

import dataclasses
import pickle

import pytest

from controller.core.plan import Preempt, Start


@dataclasses.dataclass(frozen=True)
class _PlainStart:
    decision_id: str
    job_id: str
    placement: tuple
    reason: str
    kind: str = "start"


@dataclasses.dataclass(frozen=True)
class _PlainPreempt:
    decision_id: str
    job_id: str
    reason: str
    kind: str = "preempt"


CASES = [
    (Start, _PlainStart, ("r3.e1", "17", (("n1", 4), ("n2", 4)), "queue 1: 8 GPUs free")),
    (Start, _PlainStart, ("r3.e2", "18", (), "backfill")),
    (Preempt, _PlainPreempt, ("r3.e3", "19", "yields 4 GPUs")),
]


@pytest.mark.parametrize("cls, plain, args", CASES)
def test_action_equals_plain_frozen_dataclass(cls, plain, args):
    action, reference = cls(*args), plain(*args)
    assert dataclasses.asdict(action) == dataclasses.asdict(reference)
    assert [f.name for f in dataclasses.fields(action)] == [f.name for f in dataclasses.fields(reference)]
    assert vars(action) == vars(reference)
    assert repr(action).split("(", 1)[1] == repr(reference).split("(", 1)[1]
    assert action == cls(*args) and hash(action) == hash(cls(*args))
    assert action != cls(*args[:-1], args[-1] + " (other)")
    assert dataclasses.replace(action, job_id="99").job_id == "99"
    assert pickle.loads(pickle.dumps(action)) == action
    keyword = cls(**{f.name: getattr(reference, f.name) for f in dataclasses.fields(reference)})
    assert keyword == action
    with pytest.raises(dataclasses.FrozenInstanceError):
        action.job_id = "20"
    assert action.kind == reference.kind

"""Slurm's RPC budget for the bulk levers (controller.core.levers.RpcBudget,
bands_in_budget): what goes this round, in which order, and what waits."""
from __future__ import annotations

import math

import pytest

from controller.core.levers.bands import RpcBudget, band_urgency, bands_in_budget


def test_the_bucket_refills_at_its_rate_up_to_its_burst():
    budget = RpcBudget(per_s=2.0, burst=30)
    assert budget.allowance(100.0) == 30
    budget.spend(30)
    assert budget.allowance(100.0) == 0  # the same round: nothing refilled
    assert budget.allowance(105.0) == 10
    budget.spend(10)
    assert budget.allowance(1000.0) == 30  # never above the burst


def test_no_budget_lets_everything_go():
    assert RpcBudget(per_s=0.0, burst=20).allowance(0.0) == math.inf
    assert bands_in_budget({"1": 5, "2": 6}, lambda j: None, (), (), math.inf) == ({"1": 5, "2": 6}, 0)


def test_a_negative_rate_is_refused():
    with pytest.raises(ValueError, match="per_s -1"):
        RpcBudget(per_s=-1.0, burst=20)


def test_starts_then_falling_or_running_bands_then_the_rest_in_the_plans_order():
    changed = {"new1": 200000, "new2": 200000, "demoted": 100000, "start": 200000, "running": 199999,
               "new3": 200000}
    current = {"demoted": 200000, "running": 150000}.get
    send, waiting = bands_in_budget(changed, current, {"start"}, {"running"}, 4)
    assert list(send) == ["start", "demoted", "running", "new1"]
    assert waiting == 2
    assert band_urgency("new2", 200000, 0, (), ()) == 2  # rising: late, it only waits below its place


def test_what_waits_goes_in_the_next_rounds():
    budget = RpcBudget(per_s=1.0, burst=3)
    wanted = {str(j): 200000 for j in range(10)}
    sent: dict[str, int] = {}
    rounds = 0
    now = 0.0
    while len(sent) < len(wanted):
        changed = {j: v for j, v in wanted.items() if sent.get(j) != v}
        send, waiting = bands_in_budget(changed, lambda j: None, (), (), budget.allowance(now))
        budget.spend(len(send))
        assert waiting == len(changed) - len(send)
        sent.update(send)
        rounds += 1
        now += 2.0
    assert rounds == 1 + math.ceil((10 - 3) / 2)  # the burst, then 2 a round (1/s, 2 s rounds)

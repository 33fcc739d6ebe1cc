"""The controller's arrival order (controller.service.round.submit_order): kept across rounds,
new jobs sorted in (one by one, or all again when many come), ended ones dropped;
always the order of (first-sight submit time, numeric job id)."""
import random

from controller.service.acting.backend import numeric_id
from controller.service.round.submit_order import SORTED_AGAIN_ABOVE, SubmitOrder


def test_the_order_kept_across_rounds_is_the_sorted_one():
    rng = random.Random(3)
    submit = {str(i): float(rng.randint(0, 50)) for i in range(1, 400)}  # ties in submit time
    active = set(submit)
    order, next_id, ended = SubmitOrder(), 400, []
    for round_number in range(30):
        observed = dict.fromkeys(active | {"idle"})  # "idle": listed, not active (never in the order)
        ids = order.ids(observed, submit.__getitem__, active.__contains__)
        shown = [job_id for job_id in ids if job_id in active]
        assert shown == sorted(active, key=lambda j: (submit[j], numeric_id(j))), round_number
        assert "idle" not in ids and not set(ended) & set(ids)  # ended jobs were forgotten
        ended = rng.sample(sorted(active), rng.randint(0, 5))
        active -= set(ended)
        order.forget(ended)
        for _ in range(rng.choice([0, 3, SORTED_AGAIN_ABOVE + 44])):  # many new jobs: sorted again
            submit[str(next_id)] = float(rng.randint(0, 60))
            active.add(str(next_id))
            next_id += 1
        if round_number == 11:  # an array task ("12_3") after its head
            head = min(active, key=numeric_id)
            submit[f"{head}_3"] = submit[head]
            active.add(f"{head}_3")


def test_a_job_keeps_its_place_when_slurm_shows_another_submit_time():
    """The first-sight submit time places it: a requeue's new submit time does not."""
    submit = {"1": 5.0, "2": 3.0}
    order = SubmitOrder()
    assert order.ids(dict.fromkeys(submit), submit.__getitem__, lambda _: True) == ["2", "1"]
    submit["2"] = 9.0  # Slurm shows a later submit time now
    submit["3"] = 4.0
    assert order.ids(dict.fromkeys(submit), submit.__getitem__, lambda _: True) == ["2", "3", "1"]
    order.forget(["2", "unknown"])
    assert order.ids(dict.fromkeys(["1", "3"]), submit.__getitem__, lambda _: True) == ["3", "1"]

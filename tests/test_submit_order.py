"""The controller's submit order (Controller._submit_order): brought up to date from
the last round's when few jobs came or went, sorted again otherwise; always the
order of (submit time, numeric job id)."""
import random

from controller.service.accounting import numeric_id
from controller.service.backend import ObservedJob
from controller.service.daemon import Controller


def observed(job_id: str, submit):
    return ObservedJob(job_id, "alice", "gpu", "PENDING", "Priority", 1, submit_time_s=submit)


def sorted_order(jobs):
    return [j.job_id for j in sorted(jobs, key=lambda j: (j.submit_time_s or 0.0, numeric_id(j.job_id)))]


class Orders:
    """Just what _submit_order reads and writes of a Controller."""
    _order = ([], [])
    _submit_order = Controller._submit_order
    _submit_order_updated = staticmethod(Controller._submit_order_updated)


def test_the_order_kept_across_rounds_is_the_sorted_one():
    rng = random.Random(3)
    jobs = [observed(str(i), float(rng.randint(0, 50))) for i in range(1, 400)]  # ties in submit time
    orders, next_id = Orders(), 400
    for round_number in range(30):
        assert [j.job_id for j in orders._submit_order(list(jobs))] == sorted_order(jobs), round_number
        rng.shuffle(jobs)  # the observation's own order does not matter
        for _ in range(rng.randint(0, 5)):
            jobs.pop(rng.randrange(len(jobs)))
        for _ in range(rng.choice([0, 3, 300])):  # 300 new jobs: sorted again
            jobs.append(observed(str(next_id), float(rng.randint(0, 60))))
            next_id += 1
        if round_number % 7 == 3:  # a changed record is a new object with the same id
            k = rng.randrange(len(jobs))
            jobs[k] = observed(jobs[k].job_id, jobs[k].submit_time_s)
        if round_number == 11:  # an array task ("12_3") after its head
            jobs.append(observed(f"{jobs[0].job_id}_3", jobs[0].submit_time_s))


def test_a_changed_or_unknown_submit_time_sorts_again():
    orders = Orders()
    jobs = [observed("1", 5.0), observed("2", 3.0)]
    assert [j.job_id for j in orders._submit_order(jobs)] == ["2", "1"]
    jobs = [observed("1", 1.0), observed("2", 3.0), observed("3", None)]
    assert [j.job_id for j in orders._submit_order(jobs)] == ["3", "1", "2"]

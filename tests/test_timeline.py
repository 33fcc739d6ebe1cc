"""The layer-2 timeline (controller/partitions/timeline.py) against a brute-force model.

The reference keeps only the list of booked jobs: free GPUs of a node at time x are
its GPUs minus the jobs running at x, and a job may start at a breakpoint t when,
at every breakpoint of [t, t + d) (at least t itself), the nodes hold its workers."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from controller.core.model import InputError
from controller.partitions.timeline import Timeline, timeline_after

NODES, GPUS = 3, 4


def _free_at(x, booked):
    free = np.full(NODES, GPUS, dtype=np.int64)
    for start, finish, alloc in booked:
        if start <= x < finish:
            free -= alloc
    return free


def _reference_start(breakpoints, booked, d, k, r):
    """Earliest breakpoint where the whole run holds r workers of k GPUs, and the window's min free."""
    for t in breakpoints:
        window = [b for b in breakpoints if t <= b < t + d] or [t]
        wmin = np.min([_free_at(b, booked) for b in window], axis=0)
        if (wmin // k).sum() >= r:
            return t, wmin
    raise AssertionError("the empty tail always fits")


jobs = st.lists(st.tuples(st.integers(0, 12), st.sampled_from([1, 2, 4]), st.integers(1, NODES)),
                min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(jobs=jobs, start=st.integers(0, 5))
def test_placements_match_the_brute_force_model(jobs, start):
    tl = Timeline(float(start), NODES, GPUS, capacity=2)  # tiny capacity: growth by doubling is exercised
    booked = []
    for d, k, r in jobs:
        breakpoints = tl.times.tolist()
        expected_start, expected_wmin = _reference_start(breakpoints, booked, d, k, r)
        row, wmin = tl.earliest(float(d), k, r)
        assert tl.times[row] == expected_start
        assert wmin.tolist() == expected_wmin.tolist()
        s, f, alloc = tl.place(row, wmin, float(d), k, r)
        assert (s, f) == (expected_start, expected_start + d)
        assert alloc.sum() == k * r and np.all(alloc % k == 0) and np.all(alloc <= expected_wmin)
        booked.append((s, f, alloc))
    # every row holds what the booked jobs leave free, never less than 0
    for b, row_free in zip(tl.times.tolist(), tl.free[:-1]):
        assert row_free.tolist() == _free_at(b, booked).tolist()
        assert row_free.min() >= 0
    assert tl.free[:-1][-1].tolist() == [GPUS] * NODES  # after the last finish all is free
    # rebuilt in one go from the same placements: the same arrays
    starts = np.array([b[0] for b in booked])
    finishes = np.array([b[1] for b in booked])
    nodes = [np.flatnonzero(b[2]) for b in booked]
    rebuilt = timeline_after(Timeline(float(start), NODES, GPUS), starts, finishes, np.concatenate(nodes),
                             np.concatenate([b[2][n] for b, n in zip(booked, nodes)]),
                             np.array([n.size for n in nodes]))
    assert rebuilt.times.tolist() == tl.times.tolist()
    assert rebuilt.free[:-1].tolist() == tl.free[:-1].tolist()


def test_best_fit_fills_the_fullest_node_first():
    tl = Timeline(0.0, 3, 8)
    tl.occupy(0.0, 10.0, np.array([2, 5, 0]))  # free 6, 3, 8
    row, wmin = tl.earliest(5.0, 3, 1)
    assert tl.place(row, wmin, 5.0, 3, 1)[2].tolist() == [0, 3, 0]  # 3 free: the tightest fit
    row, wmin = tl.earliest(5.0, 2, 4)  # free 6, 0, 8: node 0 takes 3 workers, node 2 the last
    assert tl.place(row, wmin, 5.0, 2, 4)[2].tolist() == [6, 0, 2]


def test_a_job_waits_when_only_part_of_its_run_fits():
    tl = Timeline(0.0, 1, 4)
    tl.occupy(5.0, 9.0, np.array([4]))  # the node is busy in [5, 9)
    row, _ = tl.earliest(3.0, 4, 1)
    assert tl.times[row] == 0.0  # [0, 3) ends before 5
    row, _ = tl.earliest(6.0, 4, 1)
    assert tl.times[row] == 9.0  # [0, 6) would overlap [5, 9)
    assert tl.earliest(1.0, 8, 1)[0] == -1  # more than the node holds: never


def test_overbooking_and_times_before_the_start_are_errors():
    tl = Timeline(10.0, 2, 4)
    tl.occupy(10.0, 20.0, np.array([4, 0]), "r1")
    with pytest.raises(InputError, match="r2: placement exceeds the free GPUs"):
        tl.occupy(12.0, 15.0, np.array([1, 0]), "r2")
    with pytest.raises(InputError, match="before the timeline start"):
        tl.occupy(5.0, 15.0, np.array([0, 1]))
    with pytest.raises(InputError, match="does not fit"):
        tl.place(-1, np.array([4, 4]), 1.0, 1, 1)


def test_drop_before_keeps_the_row_in_force():
    tl = Timeline(0.0, 2, 4)
    tl.occupy(0.0, 10.0, np.array([4, 0]))
    tl.occupy(0.0, 20.0, np.array([0, 2]))
    tl.drop_before(15.0)
    assert tl.times.tolist() == [10.0, 20.0]
    assert tl.free[:-1].tolist() == [[4, 2], [4, 4]]
    row, _ = tl.earliest(1.0, 4, 2, not_before=15.0)  # inserts 15 and starts the search there
    assert tl.times[row] == 20.0

"""The published job-type table and the seeded draws (spec/multi-partition.md)."""
import numpy as np
import pytest

from controller.core.job_types import JOB_TYPES, draw_jobs, feasible_types, mean_gpu_seconds, require_positive
from controller.core.model import InputError


def test_job_type_table():
    assert len(JOB_TYPES) == 21
    assert (JOB_TYPES[3].workers, JOB_TYPES[3].gpus, JOB_TYPES[3].mean_hours, JOB_TYPES[3].weight) == (1, 8, 3.285060, 4.29e-1)
    assert JOB_TYPES[-1].gpus == 256 and JOB_TYPES[-1].workers == 32
    assert all(t.gpus % t.workers == 0 for t in JOB_TYPES)


def test_feasible_types_spec_rule():
    # floor(G r / g) * N >= r
    small = feasible_types(10, 8)
    assert max(t.gpus for t in small) == 80
    assert all(t.gpus <= 80 for t in small)
    assert len(feasible_types(100, 8)) == len(JOB_TYPES)
    assert [t.gpus for t in feasible_types(1, 8)] == [1, 2, 4, 8, 2, 4, 8, 4, 8]


def test_mean_gpu_seconds():
    one = [t for t in JOB_TYPES if t.gpus == 1]
    assert mean_gpu_seconds(one) == pytest.approx(1.499136 * 3600)


def test_draws_follow_the_types_and_the_seed():
    types = feasible_types(4, 8)
    a = draw_jobs(np.random.default_rng(5), 400, types, 0.01, 1.0)
    b = draw_jobs(np.random.default_rng(5), 400, types, 0.01, 1.0)
    assert a.type_index.tolist() == b.type_index.tolist() and a.model_name == b.model_name
    assert a.submit_s[0] == 0.0 and np.all(np.diff(a.submit_s) >= 0)
    assert a.type_index.max() < len(types) and np.all(a.duration_s >= 1)
    assert set(a.user_priority.tolist()) == {1, 2, 3}
    sensitive = np.array([m.startswith("vgg") for m in a.model_name])
    assert np.all((a.skew[sensitive] >= 0.6) & (a.skew[sensitive] <= 0.8))
    assert np.all((a.skew[~sensitive] >= 0.03) & (a.skew[~sensitive] <= 0.15))
    # time_scale shortens the durations, not the arrivals or the types
    c = draw_jobs(np.random.default_rng(5), 400, types, 0.01, 0.5)
    assert c.type_index.tolist() == a.type_index.tolist() and c.submit_s.tolist() == a.submit_s.tolist()
    assert c.duration_s.sum() < 0.6 * a.duration_s.sum()


@pytest.mark.parametrize("value,integer", [(0, False), (-1.5, False), (float("inf"), False), (True, False),
                                           ("3", False), (2.5, True)])
def test_require_positive_names_the_field_and_the_value(value, integer):
    with pytest.raises(InputError, match=f"nodes value '{value}' is not a positive"):
        require_positive("nodes", value, integer=integer)
    require_positive("nodes", 3, integer=integer)

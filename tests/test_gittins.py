import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from controller.core.gittins import LearnedDistribution, ServiceDistribution
from controller.replay.traces import load_service_distribution as load_service_samples
from controller.core.model import InputError

from tests.conftest import FIXTURE_TRACES


def brute_force_index(samples, a, b):
    survivors = [s for s in samples if s > a]
    if not survivors:
        return 0.0
    p = sum(1 for s in survivors if s <= b) / len(survivors)
    e = sum(min(s, b) - a for s in survivors) / len(survivors)
    return p / e if e > 0 else 0.0


def test_hand_computed_values():
    d = ServiceDistribution([4, 8, 12])
    assert d.index(0, 4) == pytest.approx(1 / 12)  # P=1/3, E=4
    assert d.index(0, 8) == pytest.approx(0.1)  # P=2/3, E=20/3
    assert d.index_sup(0) == pytest.approx(0.125)  # best quantum: run to 12
    assert d.index_sup(4) == pytest.approx(1 / 6)
    assert d.index_sup(12) == 0.0  # beyond every sample


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.integers(0, 60), st.integers(0, 80))
def test_matches_brute_force(samples, a, extra):
    d = ServiceDistribution(samples)
    b = a + extra
    assert d.index(a, b) == pytest.approx(brute_force_index(samples, a, b))
    expected_sup = max([brute_force_index(samples, a, s) for s in samples if s > a], default=0.0)
    assert d.index_sup(a) == pytest.approx(expected_sup)


def test_infinite_quantum_is_one_over_mean_residual():
    d = ServiceDistribution([4, 8, 12])
    assert d.index(2, math.inf) == pytest.approx(1 / np.mean([2, 6, 10]))


def test_loads_shipped_sample_file():
    d = load_service_samples(FIXTURE_TRACES / "yarn_gpu_time_head300.csv")
    assert len(d) == 300
    assert d.index_sup(0) > 0


def test_bad_sample_file(tmp_path):
    f = tmp_path / "s.csv"
    f.write_text("duration\n10\nabc\n")
    with pytest.raises(InputError, match=r"s.csv:3: field 'duration' value 'abc'"):
        load_service_samples(f)
    f.write_text("nonsense\n1\n")
    with pytest.raises(InputError, match="header"):
        load_service_samples(f)


def test_learned_distribution_refreshes_in_batches():
    learned = LearnedDistribution(refresh_fraction=0.5, min_new=2)
    assert learned.current is None
    learned.add(1)
    assert learned.current is None  # fewer than min_new new samples
    learned.add(2)
    assert len(learned.current) == 2

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
        return ServiceDistribution(samples).tail_index
    p = sum(1 for s in survivors if s <= b) / len(survivors)
    e = sum(min(s, b) - a for s in survivors) / len(survivors)
    return p / e if e > 0 else 0.0


def test_hand_computed_values():
    d = ServiceDistribution([4, 8, 12])
    assert d.index(0, 4) == pytest.approx(1 / 12)  # P=1/3, E=4
    assert d.index(0, 8) == pytest.approx(0.1)  # P=2/3, E=20/3
    assert d.index_sup(0) == pytest.approx(0.125)  # best quantum: run to 12
    assert d.index_sup(4) == pytest.approx(1 / 6)
    # beyond every sample: the tail's index, 1 / mean excess over 8 of the top sample
    assert d.index_sup(12) == pytest.approx(1 / 4)
    assert d.index(13, 20) == pytest.approx(1 / 4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.integers(0, 60), st.integers(0, 80))
def test_matches_brute_force(samples, a, extra):
    d = ServiceDistribution(samples)
    b = a + extra
    assert d.index(a, b) == pytest.approx(brute_force_index(samples, a, b))
    expected_sup = max([brute_force_index(samples, a, s) for s in samples if s > a], default=d.tail_index)
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


def brute_force_kaplan_meier(samples, censored):
    """Survival function by the textbook product-limit formula, at each distinct completed value."""
    survival, masses = 1.0, {}
    for value in sorted({s for s, c in zip(samples, censored) if not c}):
        at_risk = sum(1 for s in samples if s >= value)
        deaths = sum(1 for s, c in zip(samples, censored) if s == value and not c)
        masses[value] = survival * deaths / at_risk
        survival *= 1 - deaths / at_risk
    return masses, survival


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 30), st.booleans()), min_size=1, max_size=25))
def test_kaplan_meier_weights_match_product_limit(rows):
    samples = [s for s, _ in rows]
    censored = [c for _, c in rows]
    d = ServiceDistribution(samples, censored)
    masses, left = brute_force_kaplan_meier(samples, censored)
    if left > 1e-12:  # Efron: what survives the largest sample stays on it
        masses[max(samples)] = masses.get(max(samples), 0.0) + left
    got = {}
    for point, weight in zip(d.samples.tolist(), d.weights.tolist()):
        got[point] = got.get(point, 0.0) + weight / len(samples)
    assert got.keys() == {k for k, v in masses.items() if v > 1e-12}
    for point, mass in got.items():
        assert mass == pytest.approx(masses[point])


def test_censored_samples_raise_the_estimate():
    """A job cut short at 10 says only S >= 10: completed-only learning (the old bias)
    would keep it at 10 or drop it; Kaplan-Meier moves its weight to the longer samples."""
    completed_only = ServiceDistribution([5, 10, 40])
    with_censored = ServiceDistribution([5, 10, 40], censored=[False, True, False])
    # the censored 10 no longer finishes: its weight went to 40
    assert with_censored.weights.tolist() == pytest.approx([1.0, 2.0])
    assert with_censored.samples.tolist() == [5, 40]
    # so a job at 6 GPU-s looks less likely to finish within the quantum to 12
    assert with_censored.index(6, 12) < completed_only.index(6, 12)


def test_tail_index_is_not_zero_and_below_young_jobs():
    """Heavy-tailed (Pareto 1.5) samples: a job past all of them gets 1 / the mean
    excess of the top tenth, above 0 and below a young job's index."""
    quantiles = (np.arange(1000) + 0.5) / 1000
    samples = 100 * (1 - quantiles) ** (-1 / 1.5)
    d = ServiceDistribution(samples)
    past = d.index(samples.max() + 1, samples.max() * 2)
    edge = np.sort(samples)[899]
    top = np.sort(samples)[900:]
    assert past == pytest.approx(1 / np.mean(top - edge)) and past > 0
    assert past < d.index(0, 200)


def test_censoring_flags_must_match_samples():
    with pytest.raises(InputError, match="2 censoring flags for 3 samples"):
        ServiceDistribution([1, 2, 3], censored=[True, False])


def _spec(i, user, name, gpus=1, limit=None):
    from controller.core.model import JobSpec
    return JobSpec(f"j{i}", gpus, 0.0, None, user=user, job_name=name, time_limit_s=limit)


def test_conditioned_backs_off_to_coarser_keys_until_a_key_has_enough_samples():
    from controller.core.conditioned import ConditionedDistributions

    learned = ConditionedDistributions(min_samples=30, window=None)
    for i in range(40):
        learned.add_job(_spec(i, "alice", "debug"), 10.0)
    for i in range(20):
        learned.add_job(_spec(100 + i, "bob", "train"), 5000.0)
    assert learned.describe(_spec(1, "alice", "debug")) == ("user+name=alice,debug", 40)
    assert learned.describe(_spec(2, "bob", "train")) == ("gpus=1", 60)  # bob: 20 < 30 samples
    # alice's new job is judged on her own history: likely done within a short quantum
    alice = learned.index_for(_spec(3, "alice", "debug"), 0.0, 100.0)
    bob = learned.index_for(_spec(4, "bob", "train"), 0.0, 100.0)
    assert alice > 5 * bob  # bob (backed off to the mix): 1/60


def test_conditioned_window_keeps_the_newest_samples():
    from controller.core.conditioned import ConditionedDistributions

    learned = ConditionedDistributions(min_samples=30, window=50, min_new=1)
    for i in range(50):
        learned.add_job(_spec(i, "u", "n"), 10000.0)
    for i in range(60):  # rebuilt every 2 new samples (5% of the window)
        learned.add_job(_spec(50 + i, "u", "n"), 10.0)
    distribution, _ = learned.choose(_spec(0, "u", "n"))
    assert float(distribution.samples.max()) == 10.0


def test_time_limit_bounds_the_index():
    """Every sample is far past a 1 GPU x 100 s limit: capped, the job surely ends by
    100 GPU-s, so its index is 1 / 100 (uncapped: 0, no sample within the quantum)."""
    service = ServiceDistribution([5000.0] * 10)
    assert service.index_for(_spec(0, "", "", limit=None), 0.0, 200.0) == 0.0
    assert service.index_for(_spec(0, "", "", limit=100.0), 0.0, 200.0) == pytest.approx(1 / 100)


def test_project_traces_keep_account_job_name_and_time_limit(tmp_path):
    from controller.core.model import JobSpec
    from controller.replay.traces import load_trace, write_trace

    jobs = [JobSpec("1", 2, 0.0, 50.0, user="alice", account="vision", job_name="train", time_limit_s=3600.0),
            JobSpec("2", 1, 5.0, 10.0)]
    path = tmp_path / "t.csv"
    write_trace(path, jobs)
    back = load_trace(path)
    assert [(j.account, j.job_name, j.time_limit_s) for j in back] == [("vision", "train", 3600.0), ("", "", None)]
    path.write_text(path.read_text().replace("3600", "soon"))
    with pytest.raises(InputError, match="t.csv:2: field 'time_limit_s' value 'soon'"):
        load_trace(path)


def test_a_jobs_memoised_choice_equals_a_fresh_one_and_keeps_no_old_distribution_alive():
    """ConditionedDistributions.choose's memo (issue 37: it kept every job's old
    distribution, and a replay's memory grew faster than its trace): after each batch of
    ended jobs the memoised answer is the fresh one, and a distribution rebuilt since is
    freed."""
    import gc
    import weakref

    from controller.core.conditioned import ConditionedDistributions
    from controller.core.model import JobSpec

    learned = ConditionedDistributions(min_samples=3, window=None)
    asking = [JobSpec(f"a{i}", 1 + i % 2, 0.0, None, user="u", job_name="n" if i % 3 else "") for i in range(6)]
    old = []
    for batch in range(8):
        for i in range(4):
            learned.add_job(JobSpec(f"e{batch}-{i}", 1 + i % 2, 0.0, None, user="u", job_name="n"), 100.0 * (i + batch))
        once = JobSpec(f"once{batch}", 1, 0.0, None, user="u", job_name="n")  # asked once, as a job that ends
        for spec in asking + [once]:
            memoised = learned.choose(spec)
            fresh = ConditionedDistributions.choose(_without_memo(learned), spec)
            assert memoised[0] is fresh[0] and memoised[1] == fresh[1]
            if memoised[0] is not None:
                old.append(weakref.ref(memoised[0]))
    gc.collect()
    current = {id(entry.built) for entry in learned.keys.values()}
    assert all(ref() is None or id(ref()) in current for ref in old)


def _without_memo(learned):
    """A view of ``learned`` with an empty memo (its keys and version shared)."""
    import copy

    view = copy.copy(learned)
    view._chosen = {}
    return view

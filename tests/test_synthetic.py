"""The synthetic single-cluster workload (spec/multi-partition.md, synthetic workload)."""
from __future__ import annotations

import pytest

from controller.core.job_types import JOB_TYPES
from controller.core.model import InputError
from controller.replay.synthetic import generate


def test_deterministic_same_seed():
    a = generate(500, seed=7, total_gpus=64)
    b = generate(500, seed=7, total_gpus=64)
    assert a == b
    c = generate(500, seed=8, total_gpus=64)
    assert a != c


def test_basic_shape():
    jobs = generate(2000, seed=1, total_gpus=64)
    assert len(jobs) == 2000
    assert jobs[0].submit_time_s == 0.0
    times = [j.submit_time_s for j in jobs]
    assert times == sorted(times)
    assert [j.job_id for j in jobs] == [str(i) for i in range(1, 2001)]
    assert {j.user_priority for j in jobs} == {1, 2, 3}
    for j in jobs:
        assert j.duration_s >= 1 and j.duration_s == int(j.duration_s)
    multi = [j for j in jobs if j.num_gpus > 1]
    sens = [j for j in multi if j.skew >= 0.6]
    assert all(0.6 <= j.skew <= 0.8 and j.model_name.startswith("vgg") for j in sens)
    rest = [j for j in multi if j.skew < 0.6]
    assert all(0.03 <= j.skew <= 0.15 and j.model_name.startswith("resnet") for j in rest)
    assert 0.27 < len(sens) / len(multi) < 0.40


@pytest.mark.parametrize("total,gpn", [(8, 8), (16, 8), (64, 8), (4, 4), (32, 4)])
def test_type_filtering_respects_cluster(total, gpn):
    jobs = generate(3000, seed=3, total_gpus=total, gpus_per_node=gpn)
    allowed = {(t.gpus) for t in JOB_TYPES if t.gpus <= total and t.gpus // t.workers <= gpn}
    assert {j.num_gpus for j in jobs} <= allowed
    assert max(j.num_gpus for j in jobs) <= total


def test_offered_load_matches():
    total = 64
    work = span = 0.0
    for seed in range(8):
        jobs = generate(3000, seed=seed, total_gpus=total, load=0.8)
        work += sum(j.duration_s * j.num_gpus for j in jobs)
        span += jobs[-1].submit_time_s * total
    # Offered load over ~24k jobs; the per-seed std is about 0.055 (heavy tail).
    assert work / span == pytest.approx(0.8, rel=0.08)


def test_explicit_rate_and_time_scale():
    jobs = generate(4000, seed=5, total_gpus=64, rate_per_s=0.01)
    mean_gap = jobs[-1].submit_time_s / (len(jobs) - 1)
    assert mean_gap == pytest.approx(100.0, rel=0.06)
    full = generate(3000, seed=2, total_gpus=64)
    scaled = generate(3000, seed=2, total_gpus=64, time_scale=0.01)
    # Same arrivals relative to the durations: load is unchanged by time_scale.
    assert [j.num_gpus for j in full] == [j.num_gpus for j in scaled]
    assert sum(j.duration_s for j in scaled) < sum(j.duration_s for j in full) / 50


def test_bad_arguments():
    with pytest.raises(InputError, match="total_gpus"):
        generate(10, seed=1, total_gpus=0)
    with pytest.raises(InputError, match="load"):
        generate(10, seed=1, total_gpus=8, load=-1)
    with pytest.raises(InputError, match="num_jobs"):
        generate(-1, seed=1, total_gpus=8)
    assert generate(0, seed=1, total_gpus=8) == []

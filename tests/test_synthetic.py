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


def offered_load(seeds, total=64, **site):
    work = span = 0.0
    for seed in seeds:
        jobs = generate(3000, seed=seed, total_gpus=total, load=0.8, **site)
        work += sum(j.duration_s * j.num_gpus for j in jobs)
        span += jobs[-1].submit_time_s * total
    return work / span


def test_offered_load_matches():
    # The table alone over ~24k jobs; the per-seed std is about 0.055 (heavy tail).
    assert offered_load(range(8), users=0) == pytest.approx(0.8, rel=0.08)
    # With sweeps and per-user scales the per-seed std is about 0.2: more seeds.
    assert offered_load(range(40)) == pytest.approx(0.8, rel=0.08)


def test_site_users_names_and_sweeps():
    jobs = generate(3000, seed=4, total_gpus=64)
    assert all(j.user.startswith("user") and j.job_name.startswith("job") for j in jobs)
    assert len({j.user for j in jobs}) == 8 and len({(j.user, j.job_name) for j in jobs}) == 24
    sweeps = {}
    for j in jobs:  # a sweep: one submit time, user, name, GPU count and model
        sweeps.setdefault(j.submit_time_s, []).append(j)
    assert 2.5 < len(jobs) / len(sweeps) < 3.5
    for members in sweeps.values():
        assert len({(j.user, j.job_name, j.num_gpus, j.model_name, j.skew) for j in members}) == 1
    # each user's names run for their own typical time: mean time over the type mean
    means = {t.gpus: t.mean_hours * 3600.0 for t in JOB_TYPES if t.workers == 1}
    ratio = {}
    for j in jobs:
        if j.num_gpus in means:
            ratio.setdefault((j.user, j.job_name), []).append(j.duration_s / means[j.num_gpus])
    typical = sorted(sum(r) / len(r) for r in ratio.values() if len(r) >= 20)
    assert typical[-1] > 5 * typical[0]


def test_no_users_is_the_table_alone():
    jobs = generate(500, seed=7, total_gpus=64, users=0)
    assert all(j.user == "" and j.job_name == "" for j in jobs)
    assert len({j.submit_time_s for j in jobs}) == 500
    site = generate(500, seed=7, total_gpus=64)
    # the site's draws come after the table's: the first job of each sweep keeps its type
    assert site[0].num_gpus == jobs[0].num_gpus and site[0].model_name == jobs[0].model_name


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
    with pytest.raises(InputError, match="users value '-1'"):
        generate(0, seed=1, total_gpus=8, users=-1)
    with pytest.raises(InputError, match="mean_sweep value '0.5'"):
        generate(10, seed=1, total_gpus=8, mean_sweep=0.5)
    with pytest.raises(InputError, match="scale_sigma"):
        generate(10, seed=1, total_gpus=8, scale_sigma=-1.0)
    assert generate(0, seed=1, total_gpus=8) == []

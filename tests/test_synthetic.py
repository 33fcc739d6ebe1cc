"""Synthetic workload generators (spec/multi-partition.md, synthetic workload)."""
from __future__ import annotations

import math

import pytest

from controller.core.model import InputError
from controller.replay.synthetic import (
    JOB_TYPES,
    PartitionJob,
    feasible_types,
    generate,
    generate_partition_instance,
    mean_gpu_seconds,
)


def test_job_type_table():
    assert len(JOB_TYPES) == 21
    assert (JOB_TYPES[3].workers, JOB_TYPES[3].gpus, JOB_TYPES[3].mean_hours, JOB_TYPES[3].weight) == (1, 8, 3.285060, 4.29e-1)
    assert JOB_TYPES[-1].gpus == 256 and JOB_TYPES[-1].workers == 32
    assert all(t.gpus % t.workers == 0 for t in JOB_TYPES)


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


def test_feasible_types_spec_rule():
    # floor(G r / g) * N >= r
    small = feasible_types(10, 8)
    assert max(t.gpus for t in small) == 80
    assert all(t.gpus <= 80 for t in small)
    assert len(feasible_types(100, 8)) == len(JOB_TYPES)
    assert [t.gpus for t in feasible_types(1, 8)] == [1, 2, 4, 8, 2, 4, 8, 4, 8]


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


def test_mean_gpu_seconds():
    one = [t for t in JOB_TYPES if t.gpus == 1]
    assert mean_gpu_seconds(one) == pytest.approx(1.499136 * 3600)


def test_bad_arguments():
    with pytest.raises(InputError, match="total_gpus"):
        generate(10, seed=1, total_gpus=0)
    with pytest.raises(InputError, match="load"):
        generate(10, seed=1, total_gpus=8, load=-1)
    with pytest.raises(InputError, match="num_jobs"):
        generate(-1, seed=1, total_gpus=8)
    assert generate(0, seed=1, total_gpus=8) == []


def test_partition_instance_shapes():
    inst = generate_partition_instance(11, 5)
    parts, jobs, workers = inst
    assert len(parts) == 5
    assert len({p.name for p in parts}) == 5
    for p in parts:
        assert 10 <= p.nodes <= 100 and p.gpus_per_node == 8
    assert len(jobs) == sum(10 * p.nodes for p in parts)
    assert set(workers) == {j.job_id for j in jobs}
    times = [j.submit_time_s for j in jobs]
    assert times == sorted(times)
    by_name = {p.name: p for p in parts}
    per_part = {p.name: 0 for p in parts}
    for j in jobs:
        p = by_name[j.partition]
        per_part[j.partition] += 1
        r = workers[j.job_id]
        assert j.num_gpus % r == 0
        assert math.floor(p.gpus_per_node * r / j.num_gpus) * p.nodes >= r  # feasible
        assert j.user_priority in (1, 2, 3)
    assert per_part == {p.name: 10 * p.nodes for p in parts}
    pj = inst.jobs_with_workers
    assert isinstance(pj[0], PartitionJob) and pj[0].workers == workers[pj[0].job_id]


def test_partition_instance_deterministic_and_rate_bounds():
    a = generate_partition_instance(3, 4)
    assert a == generate_partition_instance(3, 4)
    assert a != generate_partition_instance(4, 4)
    # Narrow nodes range and a fixed load: each partition's offered load ~ 0.5.
    inst = generate_partition_instance(9, 3, nodes_range=(60, 60), load_range=(0.5, 0.5),
                                       arrivals_per_node=40)
    for p in inst.partitions:
        js = [j for j in inst.jobs if j.partition == p.name]
        assert len(js) == 2400
        lam = (len(js) - 1) / js[-1].submit_time_s
        lam_max = p.nodes * p.gpus_per_node / mean_gpu_seconds(feasible_types(p.nodes, p.gpus_per_node))
        assert lam == pytest.approx(0.5 * lam_max, rel=0.1)

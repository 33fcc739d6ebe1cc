"""The synthetic multi-partition instance (spec/multi-partition.md)."""
import math

import pytest

from controller.core.job_types import feasible_types, mean_gpu_seconds
from controller.partitions.instances import generate_partition_instance
from controller.partitions.model import PartitionJob


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

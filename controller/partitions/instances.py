"""The spec's synthetic multi-partition instance (spec/multi-partition.md): P partitions
of 10-100 nodes x 8 GPUs, 10 x N_p arrivals per partition at a rate drawn uniformly
in [lambda_min, lambda_max], jobs of the published types (``controller.core.job_types``).

One ``PCG64(seed)`` stream, read partition by partition (its nodes, its rate, then
``draw_jobs``): the seed alone fixes the instance, for a given numpy version.
"""
from __future__ import annotations

import numpy as np

from controller.core.job_types import draw_jobs, feasible_types, mean_gpu_seconds, require_positive
from controller.core.model import InputError, JobSpec
from controller.partitions.model import Partition, PartitionInstance

__all__ = ["generate_partition_instance"]


def generate_partition_instance(
    seed: int,
    num_partitions: int,
    *,
    nodes_range: tuple[int, int] = (10, 100),
    gpus_per_node: int = 8,
    arrivals_per_node: int = 10,
    load_range: tuple[float, float] = (0.25, 1.0),
    time_scale: float = 1.0,
) -> PartitionInstance:
    """The spec's synthetic multi-partition instance.

    Per partition p (named ``p01``, ``p02``, ...): N_p uniform in ``nodes_range``
    (inclusive), ``gpus_per_node`` GPUs per node, ``arrivals_per_node * N_p`` jobs
    of the types feasible there (``floor(G_p r / g) N_p >= r``), Poisson arrivals
    starting at 0 with rate lambda uniform in [lambda_min, lambda_max] where
    ``lambda_max = load_range[1] * N_p G_p / E[d g]`` and
    ``lambda_min = load_range[0] * N_p G_p / E[d g]`` (the spec: lambda_max / 4).
    Jobs of all partitions are merged by (submit time, partition, sequence); ids are
    "1".. in that order; ``JobSpec.partition`` is the partition submitted to.
    """
    require_positive("num_partitions", num_partitions, integer=True)
    require_positive("gpus_per_node", gpus_per_node, integer=True)
    require_positive("arrivals_per_node", arrivals_per_node, integer=True)
    require_positive("time_scale", time_scale)
    n_lo, n_hi = nodes_range
    require_positive("nodes_range[0]", n_lo, integer=True)
    require_positive("nodes_range[1]", n_hi, integer=True)
    if n_hi < n_lo:
        raise InputError(f"nodes_range value '{nodes_range}' is not (low, high) with low <= high")
    l_lo, l_hi = load_range
    require_positive("load_range[0]", l_lo)
    require_positive("load_range[1]", l_hi)
    if l_hi < l_lo:
        raise InputError(f"load_range value '{load_range}' is not (low, high) with low <= high")

    rng = np.random.Generator(np.random.PCG64(seed))
    width = max(2, len(str(num_partitions)))
    partitions: list[Partition] = []
    drawn = []  # (submit, partition index, seq, JobSpec fields..., workers)
    for p in range(int(num_partitions)):
        name = f"p{p + 1:0{width}d}"
        nodes = int(rng.integers(n_lo, n_hi + 1))
        partitions.append(Partition(name, nodes, int(gpus_per_node)))
        types = feasible_types(nodes, int(gpus_per_node))
        if not types:
            raise InputError(f"partition {name}: no job type fits {nodes} nodes x {gpus_per_node} GPUs")
        lam_max = nodes * gpus_per_node / mean_gpu_seconds(types, time_scale)
        lam = float(rng.uniform(l_lo * lam_max, l_hi * lam_max))
        n = int(arrivals_per_node) * nodes
        draws = draw_jobs(rng, n, types, lam, time_scale)
        for i in range(n):
            drawn.append((float(draws.submit_s[i]), p, i, types[draws.type_index[i]], float(draws.duration_s[i]),
                          float(draws.skew[i]), int(draws.user_priority[i]), name, draws.model_name[i]))
    drawn.sort(key=lambda x: (x[0], x[1], x[2]))
    jobs: list[JobSpec] = []
    workers: dict[str, int] = {}
    for k, (t, _, _, jt, d, sk, pr, name, model) in enumerate(drawn):
        jid = str(k + 1)
        jobs.append(JobSpec(job_id=jid, num_gpus=jt.gpus, submit_time_s=t, duration_s=d,
                            skew=sk, user_priority=pr, partition=name, model_name=model))
        workers[jid] = jt.workers
    return PartitionInstance(partitions, jobs, workers)

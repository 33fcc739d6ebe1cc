"""The synthetic single-cluster workload: a Poisson stream of jobs of the published
types (spec/multi-partition.md, synthetic workload).

``generate``: one cluster, a Poisson stream whose offered load is a chosen share of
the cluster (or an explicit arrival rate). The job-type table and the draws live in
``controller.core.job_types`` (the multi-partition instances of
``controller.partitions.instances`` draw from the same table).

Everything is drawn from ``numpy.random.Generator(PCG64(seed))`` in a fixed order,
so a seed fully determines the output (same numpy version).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from controller.core.job_types import draw_jobs, feasible_types, mean_gpu_seconds, require_positive
from controller.core.model import InputError, JobSpec

__all__ = ["generate"]


def generate(
    num_jobs: int,
    *,
    seed: int,
    total_gpus: int,
    gpus_per_node: int = 8,
    load: float = 0.8,
    rate_per_s: Optional[float] = None,
    time_scale: float = 1.0,
    partition: str = "default",
) -> list[JobSpec]:
    """``num_jobs`` jobs for one cluster of ``total_gpus`` GPUs.

    Types that cannot run (more GPUs than the cluster, a worker larger than a node,
    or too few nodes for the workers) are dropped and the weights renormalized.
    Durations are exponential with the type's mean (hours x 3600 x ``time_scale``),
    rounded to whole seconds, at least 1 s. Arrivals are Poisson (first at 0) with
    ``rate_per_s`` when given, else ``lambda = load * total_gpus / E[d * g]``, so the
    offered load is ``load`` of the cluster. Job ids are "1".."num_jobs".
    """
    if isinstance(num_jobs, bool) or not isinstance(num_jobs, (int, np.integer)) or num_jobs < 0:
        raise InputError(f"num_jobs value '{num_jobs}' is not a non-negative integer")
    require_positive("total_gpus", total_gpus, integer=True)
    require_positive("gpus_per_node", gpus_per_node, integer=True)
    require_positive("time_scale", time_scale)
    nodes, rest = divmod(int(total_gpus), int(gpus_per_node))
    types = feasible_types(nodes, int(gpus_per_node), rest)
    if not types:
        raise InputError(f"total_gpus value '{total_gpus}': no job type fits the cluster")
    if rate_per_s is None:
        require_positive("load", load)
        rate = load * total_gpus / mean_gpu_seconds(types, time_scale)
    else:
        require_positive("rate_per_s", rate_per_s)
        rate = float(rate_per_s)
    if num_jobs == 0:
        return []
    rng = np.random.Generator(np.random.PCG64(seed))
    drawn = draw_jobs(rng, int(num_jobs), types, rate, time_scale)
    jobs = []
    for i in range(int(num_jobs)):
        jt = types[drawn.type_index[i]]
        jobs.append(JobSpec(
            job_id=str(i + 1), num_gpus=jt.gpus, submit_time_s=float(drawn.submit_s[i]),
            duration_s=float(drawn.duration_s[i]), skew=float(drawn.skew[i]),
            user_priority=int(drawn.user_priority[i]), partition=partition, model_name=drawn.model_name[i],
        ))
    return jobs

"""Synthetic workloads from the published job-type table (spec/multi-partition.md).

- ``generate``: one cluster, a Poisson stream whose offered load is a chosen share of
  the cluster (or an explicit arrival rate).
- ``generate_partition_instance``: the spec's multi-partition instance: P partitions
  of 10-100 nodes x 8 GPUs, 10 x N_p arrivals per partition at a rate drawn uniformly
  in [lambda_min, lambda_max].

Everything is drawn from ``numpy.random.Generator(PCG64(seed))`` in a fixed order,
so a seed fully determines the output (same numpy version).

Skew / model: every job draws "consolidation-sensitive" with probability 1/3
(skew uniform in [0.6, 0.8], a VGG model name) and otherwise skew uniform in
[0.03, 0.15] with a ResNet model name; so about 1/3 of the multi-GPU jobs (the only
ones whose placement matters) are sensitive. Skew is rounded to 3 decimals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional, Sequence

import numpy as np

from controller.core.model import InputError, JobSpec

__all__ = [
    "JobType",
    "JOB_TYPES",
    "Partition",
    "PartitionJob",
    "PartitionInstance",
    "type_fits",
    "feasible_types",
    "mean_gpu_seconds",
    "generate",
    "generate_partition_instance",
]


@dataclass(frozen=True)
class JobType:
    """A published job type: ``workers`` gangs of ``gpus / workers`` GPUs each."""

    workers: int
    gpus: int
    mean_hours: float  # mean of the exponential training time
    weight: float  # sampling weight (renormalized over the feasible types)

    @property
    def gpus_per_worker(self) -> int:
        return self.gpus // self.workers


JOB_TYPES: tuple[JobType, ...] = (
    JobType(1, 1, 1.499136, 2.44e-1),
    JobType(1, 2, 0.906435, 1.23e-1),
    JobType(1, 4, 1.050502, 8.20e-2),
    JobType(1, 8, 3.285060, 4.29e-1),
    JobType(2, 2, 1.701724, 3.00e-2),
    JobType(2, 4, 1.348965, 1.00e-3),
    JobType(2, 8, 0.167778, 1.80e-4),
    JobType(2, 16, 6.448247, 2.40e-2),
    JobType(3, 24, 0.277222, 3.70e-4),
    JobType(4, 4, 0.039333, 2.64e-4),
    JobType(4, 32, 4.548746, 2.90e-2),
    JobType(6, 48, 5.659565, 3.30e-3),
    JobType(8, 8, 0.751250, 4.00e-4),
    JobType(8, 64, 11.871677, 1.93e-2),
    JobType(10, 80, 6.448889, 8.50e-4),
    JobType(12, 96, 0.449074, 1.70e-4),
    JobType(16, 16, 0.135417, 1.00e-3),
    JobType(16, 64, 0.036111, 5.30e-5),
    JobType(16, 128, 12.898697, 3.91e-2),
    JobType(24, 192, 0.198611, 5.30e-5),
    JobType(32, 256, 12.730382, 8.60e-4),
)

SENSITIVE_SHARE = 1.0 / 3.0
SENSITIVE_SKEW = (0.6, 0.8)
INSENSITIVE_SKEW = (0.03, 0.15)
SENSITIVE_MODELS = ("vgg11", "vgg16", "vgg19")
INSENSITIVE_MODELS = ("resnet50", "resnet101", "resnet152")


class Partition(NamedTuple):
    name: str
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class PartitionJob:
    """A generated multi-partition job: the spec plus its worker count.

    ``spec.partition`` is the partition the job was submitted to; each of the
    ``workers`` workers needs ``spec.num_gpus // workers`` GPUs on one node.
    """

    spec: JobSpec
    workers: int

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def gpus_per_worker(self) -> int:
        return self.spec.num_gpus // self.workers


class PartitionInstance(NamedTuple):
    """``partitions, jobs, workers = generate_partition_instance(...)`` also works.

    ``jobs`` is sorted by submit time; ``workers`` maps job id -> worker count
    (the same information as ``jobs_with_workers``).
    """

    partitions: list[Partition]
    jobs: list[JobSpec]
    workers: dict[str, int]

    @property
    def jobs_with_workers(self) -> list[PartitionJob]:
        return [PartitionJob(j, self.workers[j.job_id]) for j in self.jobs]


# --------------------------------------------------------------------------- helpers
def type_fits(jt: JobType, nodes: int, gpus_per_node: int, extra_node_gpus: int = 0) -> bool:
    """Spec feasibility: every worker fits on one node and enough nodes exist.

    ``floor(G * r / g) * N >= r`` (workers per node x nodes), plus the workers that fit
    on one partial node of ``extra_node_gpus`` GPUs.
    """
    k = jt.gpus_per_worker
    if k <= 0 or jt.gpus % jt.workers:
        return False
    per_node = gpus_per_node // k
    return per_node * nodes + extra_node_gpus // k >= jt.workers


def feasible_types(nodes: int, gpus_per_node: int, extra_node_gpus: int = 0,
                   types: Sequence[JobType] = JOB_TYPES) -> list[JobType]:
    return [jt for jt in types if type_fits(jt, nodes, gpus_per_node, extra_node_gpus)]


def mean_gpu_seconds(types: Sequence[JobType], time_scale: float = 1.0) -> float:
    """E[d * g] in GPU-seconds when sampling ``types`` by weight."""
    w = np.array([t.weight for t in types], dtype=float)
    m = np.array([t.mean_hours * 3600.0 * time_scale * t.gpus for t in types], dtype=float)
    return float((w * m).sum() / w.sum())


def _positive(name: str, v, *, integer: bool = False) -> None:
    ok = isinstance(v, (int, np.integer)) and not isinstance(v, bool) if integer else \
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    if not ok or not (0 < v < math.inf):
        kind = "a positive integer" if integer else "a positive number"
        raise InputError(f"{name} value '{v}' is not {kind}")


def _draw_jobs(rng: np.random.Generator, n: int, types: Sequence[JobType], rate: float,
               time_scale: float):
    """Types, durations, arrivals, priorities, skews, models: fixed draw order."""
    w = np.array([t.weight for t in types], dtype=float)
    idx = rng.choice(len(types), size=n, p=w / w.sum())
    means = np.array([t.mean_hours * 3600.0 * time_scale for t in types])[idx]
    dur = np.maximum(1.0, np.rint(rng.exponential(1.0, size=n) * means))
    gaps = rng.exponential(1.0 / rate, size=n)
    gaps[0] = 0.0  # the first job arrives at 0 (trace convention)
    submit = np.cumsum(gaps)
    prio = rng.integers(1, 4, size=n)
    sensitive = rng.random(n) < SENSITIVE_SHARE
    u = rng.random(n)
    lo = np.where(sensitive, SENSITIVE_SKEW[0], INSENSITIVE_SKEW[0])
    hi = np.where(sensitive, SENSITIVE_SKEW[1], INSENSITIVE_SKEW[1])
    skew = np.round(lo + u * (hi - lo), 3)
    model_pick = rng.integers(0, 3, size=n)
    return idx, dur, submit, prio, sensitive, skew, model_pick


# --------------------------------------------------------------------------- generators
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
    _positive("total_gpus", total_gpus, integer=True)
    _positive("gpus_per_node", gpus_per_node, integer=True)
    _positive("time_scale", time_scale)
    nodes, rest = divmod(int(total_gpus), int(gpus_per_node))
    types = feasible_types(nodes, int(gpus_per_node), rest)
    if not types:
        raise InputError(f"total_gpus value '{total_gpus}': no job type fits the cluster")
    if rate_per_s is None:
        _positive("load", load)
        rate = load * total_gpus / mean_gpu_seconds(types, time_scale)
    else:
        _positive("rate_per_s", rate_per_s)
        rate = float(rate_per_s)
    if num_jobs == 0:
        return []
    rng = np.random.Generator(np.random.PCG64(seed))
    idx, dur, submit, prio, sens, skew, pick = _draw_jobs(rng, int(num_jobs), types, rate, time_scale)
    jobs = []
    for i in range(int(num_jobs)):
        jt = types[idx[i]]
        model = (SENSITIVE_MODELS if sens[i] else INSENSITIVE_MODELS)[pick[i]]
        jobs.append(JobSpec(
            job_id=str(i + 1), num_gpus=jt.gpus, submit_time_s=float(submit[i]),
            duration_s=float(dur[i]), skew=float(skew[i]), user_priority=int(prio[i]),
            partition=partition, model_name=model,
        ))
    return jobs


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
    _positive("num_partitions", num_partitions, integer=True)
    _positive("gpus_per_node", gpus_per_node, integer=True)
    _positive("arrivals_per_node", arrivals_per_node, integer=True)
    _positive("time_scale", time_scale)
    n_lo, n_hi = nodes_range
    _positive("nodes_range[0]", n_lo, integer=True)
    _positive("nodes_range[1]", n_hi, integer=True)
    if n_hi < n_lo:
        raise InputError(f"nodes_range value '{nodes_range}' is not (low, high) with low <= high")
    l_lo, l_hi = load_range
    _positive("load_range[0]", l_lo)
    _positive("load_range[1]", l_hi)
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
        idx, dur, submit, prio, sens, skew, pick = _draw_jobs(rng, n, types, lam, time_scale)
        for i in range(n):
            jt = types[idx[i]]
            model = (SENSITIVE_MODELS if sens[i] else INSENSITIVE_MODELS)[pick[i]]
            drawn.append((float(submit[i]), p, i, jt, float(dur[i]), float(skew[i]),
                          int(prio[i]), name, model))
    drawn.sort(key=lambda x: (x[0], x[1], x[2]))
    jobs: list[JobSpec] = []
    workers: dict[str, int] = {}
    for k, (t, _, _, jt, d, sk, pr, name, model) in enumerate(drawn):
        jid = str(k + 1)
        jobs.append(JobSpec(job_id=jid, num_gpus=jt.gpus, submit_time_s=t, duration_s=d,
                            skew=sk, user_priority=pr, partition=name, model_name=model))
        workers[jid] = jt.workers
    return PartitionInstance(partitions, jobs, workers)

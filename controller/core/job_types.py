"""The published job-type table and how synthetic jobs are drawn from it (spec/multi-partition.md).

Pure data and seeded draws, no I/O: both the single-cluster workload
(``controller.replay.synthetic``) and the multi-partition instances
(``controller.partitions.instances``) draw their jobs here, so the two agree on the
types, their weights and the draw order.

Skew / model: every job draws "consolidation-sensitive" with probability 1/3
(skew uniform in [0.6, 0.8], a VGG model name) and otherwise skew uniform in
[0.03, 0.15] with a ResNet model name; so about 1/3 of the multi-GPU jobs (the only
ones whose placement matters) are sensitive. Skew is rounded to 3 decimals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from controller.core.model import InputError

__all__ = ["JobType", "JOB_TYPES", "JobDraws", "type_fits", "feasible_types", "mean_gpu_seconds", "draw_jobs",
           "require_positive"]


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
    """The types of ``types`` that ``type_fits`` nodes x GPUs (plus one partial node)."""
    return [jt for jt in types if type_fits(jt, nodes, gpus_per_node, extra_node_gpus)]


def mean_gpu_seconds(types: Sequence[JobType], time_scale: float = 1.0) -> float:
    """E[d * g] in GPU-seconds when sampling ``types`` by weight."""
    w = np.array([t.weight for t in types], dtype=float)
    m = np.array([t.mean_hours * 3600.0 * time_scale * t.gpus for t in types], dtype=float)
    return float((w * m).sum() / w.sum())


def require_positive(name: str, v, *, integer: bool = False) -> None:
    """Raise ``InputError`` naming ``name`` unless ``v`` is a finite number > 0 (an int if ``integer``)."""
    ok = isinstance(v, (int, np.integer)) and not isinstance(v, bool) if integer else \
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    if not ok or not (0 < v < math.inf):
        kind = "a positive integer" if integer else "a positive number"
        raise InputError(f"{name} value '{v}' is not {kind}")


class JobDraws(NamedTuple):
    """``n`` drawn jobs as arrays: index into the types, duration (s), arrival (s), user
    priority (1-3), skew, model name."""

    type_index: np.ndarray
    duration_s: np.ndarray
    submit_s: np.ndarray
    user_priority: np.ndarray
    skew: np.ndarray
    model_name: list[str]


def draw_jobs(rng: np.random.Generator, n: int, types: Sequence[JobType], rate_per_s: float,
              time_scale: float) -> JobDraws:
    """``n`` jobs of ``types`` (by weight) arriving as a Poisson stream of ``rate_per_s``.

    Durations are exponential with the type's mean (hours x 3600 x ``time_scale``),
    rounded to whole seconds, at least 1 s; the first job arrives at 0 (trace
    convention). The draws are made in a fixed order (types, durations, arrivals,
    priorities, sensitivity, skews, models), so a generator state gives one result.
    """
    w = np.array([t.weight for t in types], dtype=float)
    idx = rng.choice(len(types), size=n, p=w / w.sum())
    means = np.array([t.mean_hours * 3600.0 * time_scale for t in types])[idx]
    dur = np.maximum(1.0, np.rint(rng.exponential(1.0, size=n) * means))
    gaps = rng.exponential(1.0 / rate_per_s, size=n)
    gaps[0] = 0.0
    submit = np.cumsum(gaps)
    prio = rng.integers(1, 4, size=n)
    sensitive = rng.random(n) < SENSITIVE_SHARE
    u = rng.random(n)
    lo = np.where(sensitive, SENSITIVE_SKEW[0], INSENSITIVE_SKEW[0])
    hi = np.where(sensitive, SENSITIVE_SKEW[1], INSENSITIVE_SKEW[1])
    skew = np.round(lo + u * (hi - lo), 3)
    model_pick = rng.integers(0, 3, size=n)
    models = [(SENSITIVE_MODELS if s else INSENSITIVE_MODELS)[m] for s, m in zip(sensitive.tolist(), model_pick.tolist())]
    return JobDraws(idx, dur, submit, prio, skew, models)

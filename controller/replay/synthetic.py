"""The synthetic single-cluster workload: a Poisson stream of jobs of the published
types (spec/multi-partition.md, synthetic workload).

``generate``: one cluster, a Poisson stream whose offered load is a chosen share of
the cluster (or an explicit arrival rate). The job-type table and the draws live in
``controller.core.job_types`` (the multi-partition instances of
``controller.partitions.instances`` draw from the same table).

What a site has on top of the table (``users`` > 0, the default): a user submits
jobs as sweeps (a job array: a geometric number of jobs, mean ``mean_sweep``, with
one submit time, job name, GPU count and model), and each user's job names run
for their own typical time (the type's exponential times a lognormal scale per
user and name, ``scale_sigma``, the scales normalized to mean 1 so the offered
load stays ``load``). Why: a site's jobs are not one distribution. A user's
two-minute debug runs and another's week-long trainings are told apart by who
submitted them and under which name, and conditioned dgittins learns from exactly
that; with one distribution and Poisson arrivals, queue 1 of the default K=2 is
congested only when a whole-cluster gang waits, skip-ahead starts every smaller
newcomer in any order, and dgittins replays exactly as dlas (measured: 600 and 2,000
jobs, also with users but no sweeps). ``users=0``: the table alone (no user, name or
sweep), as before.

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
    users: int = 8,
    names_per_user: int = 3,
    scale_sigma: float = 1.0,
    mean_sweep: float = 3.0,
) -> list[JobSpec]:
    """``num_jobs`` jobs for one cluster of ``total_gpus`` GPUs.

    Types that cannot run (more GPUs than the cluster, a worker larger than a node,
    or too few nodes for the workers) are dropped and the weights renormalized.
    Durations are exponential with the type's mean (hours x 3600 x ``time_scale``),
    rounded to whole seconds, at least 1 s. Arrivals are Poisson (first at 0) with
    ``rate_per_s`` when given, else ``lambda = load * total_gpus / E[d * g]``, so the
    offered load is ``load`` of the cluster. Job ids are "1".."num_jobs".
    ``users``, ``names_per_user``, ``scale_sigma``, ``mean_sweep``: the site's users,
    their job names and sweeps (module doc; drawn after the table's draws).
    """
    if isinstance(num_jobs, bool) or not isinstance(num_jobs, (int, np.integer)) or num_jobs < 0:
        raise InputError(f"num_jobs value '{num_jobs}' is not a non-negative integer")
    require_positive("total_gpus", total_gpus, integer=True)
    require_positive("gpus_per_node", gpus_per_node, integer=True)
    require_positive("time_scale", time_scale)
    _check_site(users, names_per_user, scale_sigma, mean_sweep)
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
    first, user, name, scale = _sweeps(rng, int(num_jobs), users, names_per_user, scale_sigma, mean_sweep)
    means = np.array([t.mean_hours * 3600.0 * time_scale for t in types])
    # a sweep member's time: its own exponential draw at the sweep's type mean and scale
    duration = drawn.duration_s if users == 0 else np.maximum(1.0, np.rint(
        drawn.duration_s / means[drawn.type_index] * means[drawn.type_index[first]] * scale))
    jobs = []
    for i in range(int(num_jobs)):
        f = int(first[i])
        jobs.append(JobSpec(
            job_id=str(i + 1), num_gpus=types[drawn.type_index[f]].gpus, submit_time_s=float(drawn.submit_s[f]),
            duration_s=float(duration[i]), skew=float(drawn.skew[f]),
            user_priority=int(drawn.user_priority[i]), partition=partition, model_name=drawn.model_name[f],
            user=f"user{user[i]}" if users else "", job_name=f"job{name[i]}" if users else "",
        ))
    return jobs


def _check_site(users, names_per_user, scale_sigma, mean_sweep) -> None:
    """One-line errors for the site's settings (before anything is drawn)."""
    if isinstance(users, bool) or not isinstance(users, (int, np.integer)) or users < 0:
        raise InputError(f"users value '{users}' is not a non-negative integer")
    require_positive("names_per_user", names_per_user, integer=True)
    if isinstance(scale_sigma, bool) or not isinstance(scale_sigma, (int, float)) or not 0 <= scale_sigma < np.inf:
        raise InputError(f"scale_sigma value '{scale_sigma}' is not a non-negative number")
    if isinstance(mean_sweep, bool) or not isinstance(mean_sweep, (int, float)) or not 1 <= mean_sweep < np.inf:
        raise InputError(f"mean_sweep value '{mean_sweep}' is not a number >= 1")


def _sweeps(rng: np.random.Generator, n: int, users: int, names_per_user: int, scale_sigma: float,
            mean_sweep: float):
    """Per job: the first job of its sweep, its user, job name and duration scale
    (``users`` 0: every job its own sweep, no user, scale 1)."""
    if users == 0:
        return np.arange(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.ones(n)
    scales = np.exp(rng.normal(0.0, scale_sigma, size=(users, names_per_user)))
    scales /= scales.mean()
    sizes = rng.geometric(1.0 / mean_sweep, size=n)  # at most n sweeps
    starts = np.cumsum(sizes) - sizes
    starts = starts[starts < n]
    sweep_user = rng.integers(0, users, size=len(starts))
    sweep_name = rng.integers(0, names_per_user, size=len(starts))
    sweep_of = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    return (starts[sweep_of], sweep_user[sweep_of], sweep_name[sweep_of],
            scales[sweep_user[sweep_of], sweep_name[sweep_of]])

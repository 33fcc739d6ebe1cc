"""Exact Gittins index of a learned service distribution.

For a job that has attained ``a`` GPU-seconds and a quantum that ends at service
``b`` (``b > a``), with S the total service of a job drawn from the distribution
(points s with weights w):

    G(a, b) = P(a < S <= b | S > a) / E[min(S, b) - a | S > a]
            = W(a < s <= b) / (sum_{a<s<=b} w s + b * W(s > b) - a * W(s > a))

Both conditional expectations share the denominator W(s > a), so it cancels.
Sorted points and prefix sums make one index O(log n); the supremum over all
quanta (continuous 2D-Gittins) is attained at b = some point s > a, O(n).

Samples come from every job that ended. A job cut short (failed, cancelled, timed
out, preempted for good) only says S >= its attained service: a censored sample.
The weights are the Kaplan-Meier estimate (each censored sample's weight is
passed on to the samples above it); the weight left above the largest sample when
that one is censored stays on it (Efron's convention). With no censored sample
every weight is 1: the plain empirical distribution.

A job past every sample gets the tail's index, not 0: the index of a memoryless
tail whose mean residual service is that of the top ``TAIL_SHARE`` of the weight,
1 / E[S - q | S > q] (q: where that share begins, or the second largest point). For an exponential tail this is
exact for any quantum.
"""
from __future__ import annotations

import bisect
import math
from typing import Iterable, Optional, Sequence

import numpy as np

from controller.core.model import InputError

TAIL_SHARE = 0.1


def service_cap(spec) -> float:
    """The most service a job can get: its time limit x its GPUs (inf: no limit)."""
    limit = spec.time_limit_s
    return limit * spec.num_gpus if limit is not None and limit > 0 else math.inf


class ServiceDistribution:
    """Service distribution (GPU-seconds) from samples, some possibly censored.

    ``learned``: built from the jobs that ended so far (the controller's store, a
    replay's past), not given whole up front; dgittins orders by a learned one only
    once it holds enough samples."""

    def __init__(self, samples_gpu_s: Iterable[float], censored: Optional[Iterable[bool]] = None,
                 learned: bool = False):
        self.learned = learned
        values = np.asarray(list(samples_gpu_s), dtype=float)
        if values.size and (not np.all(np.isfinite(values)) or values.min() < 0):
            raise InputError("service samples: values must be finite and >= 0")
        cut = np.zeros(values.size, dtype=bool) if censored is None else np.asarray(list(censored), dtype=bool)
        if cut.size != values.size:
            raise InputError(f"service samples: {cut.size} censoring flags for {values.size} samples")
        # sort by value; at equal values a completed sample before a censored one (KM)
        order = np.lexsort((cut, values))
        values, cut = values[order], cut[order]
        self.count = int(values.size)
        self.censored_count = int(cut.sum())
        self.samples, weights = _kaplan_meier(values, cut)
        self.weights = weights
        self.prefix_weight = np.concatenate(([0.0], np.cumsum(weights)))
        self.prefix = np.concatenate(([0.0], np.cumsum(weights * self.samples)))
        self.tail_index = _tail_index(self.samples, weights)
        self._lists = None  # plain-list copies for scalar lookups, made on first use

    def __len__(self) -> int:
        return self.count

    def index(self, attained_gpu_s: float, quantum_end_gpu_s: float) -> float:
        """Gittins index for service a with the quantum ending at service b (b may be inf).

        Same value as ``indices`` for one job, in plain Python (a numpy call on one
        element costs tens of microseconds; replays ask for one index per event)."""
        if self._lists is None:
            self._lists = (self.samples.tolist(), self.prefix.tolist(), self.prefix_weight.tolist())
        x, prefix, weight = self._lists
        a = attained_gpu_s
        b = max(quantum_end_gpu_s, a)
        k = bisect.bisect_right(x, a)
        if k >= len(x):
            return self.tail_index
        m = bisect.bisect_right(x, b)
        total = weight[-1]
        b_finite = b if math.isfinite(b) else 0.0
        denominator = (prefix[m] - prefix[k]) + b_finite * (total - weight[m]) - a * (total - weight[k])
        return (weight[m] - weight[k]) / denominator if denominator > 0 else 0.0

    def index_for(self, spec, attained_gpu_s: float, quantum_end_gpu_s: float) -> float:
        """``index`` for this job: its time limit caps its service (``service_cap``), so
        a quantum reaching the cap ends the job surely (the mass above moves to it)."""
        cap = service_cap(spec)
        if quantum_end_gpu_s < cap or math.isinf(cap):  # (no limit: the quantum's own end, inf included)
            return self.index(attained_gpu_s, quantum_end_gpu_s)
        return self.capped_index(attained_gpu_s, cap)

    def indices_for(self, specs, attained, quantum_end) -> np.ndarray:
        """``index_for`` of many jobs (vectorized when none reaches its cap)."""
        caps = np.array([service_cap(spec) for spec in specs], dtype=float)
        ends = np.asarray(quantum_end, dtype=float)
        values = self.indices(np.asarray(attained, dtype=float), ends)
        for i in np.flatnonzero((ends >= caps) & np.isfinite(caps)).tolist():
            values[i] = self.capped_index(float(attained[i]), float(caps[i]))
        return values

    def capped_index(self, attained_gpu_s: float, cap_gpu_s: float) -> float:
        """G(a, cap) of S' = min(S, cap): every job still running ends by the cap."""
        if self._lists is None:
            self._lists = (self.samples.tolist(), self.prefix.tolist(), self.prefix_weight.tolist())
        x, prefix, weight = self._lists
        a = attained_gpu_s
        if a >= cap_gpu_s:
            return math.inf  # at its limit: it ends now
        k = bisect.bisect_right(x, a)
        if k >= len(x):
            return max(self.tail_index, 1.0 / (cap_gpu_s - a))
        m = bisect.bisect_right(x, cap_gpu_s)
        total = weight[-1]
        denominator = (prefix[m] - prefix[k]) + cap_gpu_s * (total - weight[m]) - a * (total - weight[k])
        return (total - weight[k]) / denominator if denominator > 0 else 0.0

    def indices(self, attained: np.ndarray, quantum_end: np.ndarray) -> np.ndarray:
        """Vectorized G(a, b); a job past every sample gets ``tail_index``."""
        x, prefix, weight = self.samples, self.prefix, self.prefix_weight
        total = weight[-1]
        a = np.asarray(attained, dtype=float)
        b = np.maximum(np.asarray(quantum_end, dtype=float), a)
        k = np.searchsorted(x, a, side="right")  # first point > a
        m = np.searchsorted(x, b, side="right")  # first point > b
        finished_within = weight[m] - weight[k]
        b_finite = np.where(np.isfinite(b), b, 0.0)
        denominator = (prefix[m] - prefix[k]) + b_finite * (total - weight[m]) - a * (total - weight[k])
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.where(denominator > 0, finished_within / denominator, 0.0)
        return np.where(k < x.size, g, self.tail_index)

    def index_sup(self, attained_gpu_s: float) -> float:
        """sup over all quanta of G(a, a + Delta): the continuous 2D-Gittins index."""
        x = self.samples
        k = int(np.searchsorted(x, attained_gpu_s, side="right"))
        if k >= x.size:
            return self.tail_index
        ends = np.unique(x[k:])
        return float(np.max(self.indices(np.full(ends.size, attained_gpu_s), ends)))


def _kaplan_meier(values: np.ndarray, censored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points (the completed samples, plus the largest sample if censored) and their
    Kaplan-Meier weights, scaled to sum to the sample count."""
    n = values.size
    if n == 0 or not censored.any():
        return values, np.ones(n)
    at_risk = n - np.arange(n)  # samples >= this one (ties: sorted completed first)
    factors = np.where(censored, 1.0, 1.0 - 1.0 / at_risk)
    survival_after = np.cumprod(factors)
    survival_before = np.concatenate(([1.0], survival_after[:-1]))
    mass = np.where(censored, 0.0, survival_before - survival_after)
    if censored[-1]:
        mass[-1] = survival_before[-1]  # Efron: the largest sample keeps what is left
    keep = mass > 0
    return values[keep], mass[keep] * n


def _tail_index(points: np.ndarray, weights: np.ndarray) -> float:
    """1 / mean residual service of the top TAIL_SHARE of the weight (0 without samples)."""
    if points.size == 0:
        return 0.0
    cumulative = np.cumsum(weights)
    edge_at = int(np.searchsorted(cumulative, cumulative[-1] * (1.0 - TAIL_SHARE), side="left"))
    edge = points[max(min(edge_at, points.size - 2), 0)]  # keep at least one point above it
    above = points > edge
    excess = float(np.sum(weights[above] * (points[above] - edge)) / np.sum(weights[above])) if above.any() else 0.0
    if excess <= 0:
        excess = float(points[-1])  # no spread at the top: the largest sample as the mean
    return 1.0 / excess if excess > 0 else 0.0


class LearnedDistribution:
    """A distribution learned from the jobs that ended so far, refreshed in batches.

    Rebuilding the prefix sums on every completion would cost O(n) per event; the
    distribution is rebuilt when the sample count has grown by ``refresh_fraction``
    (and at least ``min_new`` samples). (The spec gives no refresh rule; the
    controller rebuilds its distribution from the store every ``service_refresh_s``.)
    """

    def __init__(self, refresh_fraction: float = 0.02, min_new: int = 1, initial: Sequence[float] = ()):
        self.refresh_fraction = refresh_fraction
        self.min_new = min_new
        self._all: list[float] = list(initial)
        self._censored: list[bool] = [False] * len(self._all)
        self._current = ServiceDistribution(self._all, learned=True) if self._all else None

    version = 0  # grows with every rebuild (as ConditionedDistributions.version)

    def add_job(self, spec, service_gpu_s: float, censored: bool = False) -> None:
        """``add`` (``spec`` unused: one distribution for every job)."""
        self.add(service_gpu_s, censored)

    def add(self, service_gpu_s: float, censored: bool = False) -> None:
        """One job ended with this attained service; ``censored``: it was cut short."""
        self._all.append(service_gpu_s)
        self._censored.append(censored)
        built = len(self._current) if self._current is not None else 0
        if len(self._all) - built >= max(self.min_new, int(built * self.refresh_fraction)):
            self._current = ServiceDistribution(self._all, self._censored, learned=True)
            self.version += 1

    @property
    def current(self) -> ServiceDistribution | None:
        return self._current

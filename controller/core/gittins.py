"""Exact Gittins index of an empirical service distribution.

For a job that has attained ``a`` GPU-seconds and a quantum that ends at service
``b`` (``b > a``), with S the total service of a job drawn from the samples:

    G(a, b) = P(a < S <= b | S > a) / E[min(S, b) - a | S > a]
            = count(a < s <= b) / (sum_{a<s<=b} s + b * count(s > b) - a * count(s > a))

Both conditional expectations share the denominator count(s > a), so it cancels.
Sorted samples and prefix sums make one index O(log n); the supremum over all
quanta (continuous 2D-Gittins) is attained at b = some sample s > a, O(n).
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from controller.core.model import InputError


class ServiceDistribution:
    """Empirical distribution of total job service (GPU-seconds)."""

    def __init__(self, samples_gpu_s: Iterable[float]):
        values = np.sort(np.asarray(list(samples_gpu_s), dtype=float))
        if values.size and (not np.all(np.isfinite(values)) or values[0] < 0):
            raise InputError("service samples: values must be finite and >= 0")
        self.samples = values
        self.prefix = np.concatenate(([0.0], np.cumsum(values)))

    def __len__(self) -> int:
        return int(self.samples.size)

    def index(self, attained_gpu_s: float, quantum_end_gpu_s: float) -> float:
        """Gittins index for service a with the quantum ending at service b (b may be inf)."""
        return float(self.indices(np.array([attained_gpu_s]), np.array([quantum_end_gpu_s]))[0])

    def indices(self, attained: np.ndarray, quantum_end: np.ndarray) -> np.ndarray:
        """Vectorized G(a, b). A job beyond every sample gets index 0 (nothing known)."""
        x, prefix, n = self.samples, self.prefix, self.samples.size
        a = np.asarray(attained, dtype=float)
        b = np.maximum(np.asarray(quantum_end, dtype=float), a)
        k = np.searchsorted(x, a, side="right")  # first sample > a
        m = np.searchsorted(x, b, side="right")  # first sample > b
        finished_within = (m - k).astype(float)
        b_finite = np.where(np.isfinite(b), b, 0.0)
        denominator = (prefix[m] - prefix[k]) + b_finite * (n - m) - a * (n - k)
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.where(denominator > 0, finished_within / denominator, 0.0)
        return np.where(n - k > 0, g, 0.0)

    def index_sup(self, attained_gpu_s: float) -> float:
        """sup over all quanta of G(a, a + Delta): the continuous 2D-Gittins index."""
        x = self.samples
        k = int(np.searchsorted(x, attained_gpu_s, side="right"))
        if k >= x.size:
            return 0.0
        ends = np.unique(x[k:])
        return float(np.max(self.indices(np.full(ends.size, attained_gpu_s), ends)))


class LearnedDistribution:
    """A distribution learned from jobs finished so far, refreshed in batches.

    Rebuilding the prefix sums on every completion would cost O(n) per event; the
    distribution is rebuilt when the sample count has grown by ``refresh_fraction``
    (and at least ``min_new`` samples), which is how the controller refreshes too.
    """

    def __init__(self, refresh_fraction: float = 0.02, min_new: int = 1, initial: Sequence[float] = ()):
        self.refresh_fraction = refresh_fraction
        self.min_new = min_new
        self._all: list[float] = list(initial)
        self._current = ServiceDistribution(self._all) if self._all else None

    def add(self, service_gpu_s: float) -> None:
        self._all.append(service_gpu_s)
        built = len(self._current) if self._current is not None else 0
        if len(self._all) - built >= max(self.min_new, int(built * self.refresh_fraction)):
            self._current = ServiceDistribution(self._all)

    @property
    def current(self) -> ServiceDistribution | None:
        return self._current

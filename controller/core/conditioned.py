"""Service distributions conditioned on what Slurm knows about a job at submit.

One global distribution mixes a user's two-minute debug runs with another's week-long
trainings; the index of a job then says little about the job. A site knows more: the
user and job name, the account (or partition), the GPU request and the time limit.
Each ended job's service is a sample of every key it has, finest first:

    user+name     same user and job name
    account+gpus  same account (the partition when no account) and GPU count
    gpus          same GPU count
    global        every job

A job's index comes from the finest key holding at least ``min_samples`` samples.
Each key keeps the newest ``window`` samples (a sliding window: it follows a changing
mix; bench/bench_gittins.py compares it with no window), Kaplan-Meier weighted as the
global distribution is (controller.core.gittins). A job's time limit bounds its
service (limit x GPUs): the index never counts on service past it.
"""
from __future__ import annotations

from collections import deque
from typing import Optional

from controller.core.gittins import ServiceDistribution
from controller.core.model import InputError, JobSpec

KEY_LABELS = ("user+name", "account+gpus", "gpus", "global")


def keys_of(spec: JobSpec) -> list[tuple]:
    """The job's keys, finest first (a key whose fields Slurm left empty is skipped)."""
    keys = []
    if spec.user and spec.job_name:
        keys.append(("user+name", spec.user, spec.job_name))
    group = spec.account or (spec.partition if spec.partition != "default" else "")
    if group:
        keys.append(("account+gpus", group, spec.num_gpus))
    keys.append(("gpus", spec.num_gpus))
    keys.append(("global",))
    return keys


class _Key:
    """One key's newest samples and the distribution last built from them."""

    __slots__ = ("samples", "added", "built", "built_at")

    def __init__(self, window: Optional[int]):
        self.samples: deque = deque(maxlen=window)
        self.added = 0  # samples ever added
        self.built: Optional[ServiceDistribution] = None
        self.built_at = 0  # ``added`` when ``built`` was made


class ConditionedDistributions:
    """Per-key distributions learned online from ended jobs (see the module doc).

    ``len()`` is the number of ended jobs (dgittins orders nothing before 300);
    ``version`` grows whenever a distribution an index reads is rebuilt."""

    learned = True

    def __init__(self, min_samples: int = 30, window: Optional[int] = 5000, refresh_fraction: float = 0.05,
                 min_new: int = 5):
        if min_samples < 1:
            raise InputError(f"conditioning min_samples {min_samples!r} must be >= 1")
        if window is not None and window < min_samples:
            raise InputError(f"conditioning window {window!r} must be >= min_samples {min_samples}")
        self.min_samples = min_samples
        self.window = window
        self.refresh_fraction = refresh_fraction
        self.min_new = min_new
        self.keys: dict[tuple, _Key] = {}
        self.count = 0
        self.censored_count = 0
        self.version = 0
        # job id -> (version, key, whether that key was built): the key's distribution is read
        # back from ``keys`` (unchanged while the version is), so a memo never keeps an old
        # distribution alive (each holds its samples: kept per job, they grew faster than the trace)
        self._chosen: dict[str, tuple] = {}

    def __len__(self) -> int:
        return self.count

    @property
    def current(self):
        """As LearnedDistribution.current: what a round reads (None before any sample)."""
        return self if self.count else None

    def add_job(self, spec: JobSpec, service_gpu_s: float, censored: bool = False, build: bool = True) -> None:
        """One job ended with this service (``censored``: it was cut short); ``build``
        False: only record it (``build_all`` builds every key once, after a bulk load)."""
        self.count += 1
        self.censored_count += bool(censored)
        for key in keys_of(spec):
            entry = self.keys.get(key)
            if entry is None:
                entry = self.keys[key] = _Key(self.window)
            entry.samples.append((service_gpu_s, censored))
            entry.added += 1
            if build and entry.added >= self.min_samples and (entry.built is None or entry.added - entry.built_at >= max(
                    self.min_new, int(len(entry.samples) * self.refresh_fraction))):
                values, cut = zip(*entry.samples)
                entry.built = ServiceDistribution(values, cut, learned=True)
                entry.built_at = entry.added
                self.version += 1

    def build_all(self, learned: bool = True) -> None:
        """Build every key with enough samples from what it holds now (``learned``
        False: a distribution given up front, as an oracle)."""
        for entry in self.keys.values():
            if len(entry.samples) >= self.min_samples:
                values, cut = zip(*entry.samples)
                entry.built = ServiceDistribution(values, cut, learned=learned)
                entry.built_at = entry.added
        self.version += 1

    def choose(self, spec: JobSpec) -> tuple[Optional[ServiceDistribution], tuple]:
        """The distribution of the finest key with enough samples, and that key."""
        memo = self._chosen.get(spec.job_id)
        if memo is not None and memo[0] == self.version:
            return (self.keys[memo[1]].built if memo[2] else None), memo[1]
        chosen, chosen_key = None, ("global",)
        for key in keys_of(spec):
            entry = self.keys.get(key)
            if entry is not None and entry.built is not None:
                chosen, chosen_key = entry.built, key
                break
        self._chosen[spec.job_id] = (self.version, chosen_key, chosen is not None)
        return chosen, chosen_key

    def index_for(self, spec: JobSpec, attained_gpu_s: float, quantum_end_gpu_s: float) -> float:
        distribution, _ = self.choose(spec)
        if distribution is None:
            return 0.0
        return distribution.index_for(spec, attained_gpu_s, quantum_end_gpu_s)

    def indices_for(self, specs, attained, quantum_end) -> list[float]:
        return [self.index_for(spec, a, b) for spec, a, b in zip(specs, attained, quantum_end)]

    def describe(self, spec: JobSpec) -> tuple[str, int]:
        """(the key an index of this job comes from, as text; that key's sample count)."""
        distribution, key = self.choose(spec)
        label = key[0] if len(key) == 1 else f"{key[0]}={','.join(str(part) for part in key[1:])}"
        return label, len(distribution) if distribution is not None else 0


def learn_conditioned(rows, window: Optional[int]) -> ConditionedDistributions:
    """The controller's distributions from its store's samples, oldest first:
    (GPU-s, censored, user, account or partition, job name, GPUs) per ended job."""
    learned = ConditionedDistributions(window=window)
    for index, (gpu_s, censored, user, group, job_name, gpus) in enumerate(rows):
        spec = JobSpec(f"sample{index}", max(int(gpus or 1), 1), 0.0, None, user=user or "", account=group or "",
                       job_name=job_name or "")
        learned.add_job(spec, gpu_s, censored, build=False)
    learned.build_all()
    return learned

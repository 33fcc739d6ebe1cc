"""What both replay loops share: the run's configuration, its results, each job's
run state, and the charges of the controller's preemption (grace period, requeue).

controller.replay.simulator (the generic loop) and controller.replay.mlfq_replay
(the loop with a queue book kept alive) both import from here, never from each
other's loop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional

from controller.core.engine import EngineConfig
from controller.core.gittins import ServiceDistribution
from controller.core.model import InputError, JobState

@dataclass(frozen=True)
class SimConfig:
    """The simulated cluster and the run's options (times in seconds)."""

    nodes: int = 4
    gpus_per_node: int = 4
    engine: EngineConfig = field(default_factory=EngineConfig)
    round_interval_s: Optional[float] = None  # None: event-driven rounds
    preempt_pause_s: float = 0.0  # checkpoint time, charged when the job resumes
    preempt_resume_s: float = 0.0  # restore time
    # What the controller's preemption costs (controller.service.preemption): a victim
    # keeps its GPUs for the grace period after the signal (its work after the signal's
    # checkpoint is lost), and after its requeue waits requeue_delay_s (settle +
    # BeginTime) before it may start again. Rounds then start only jobs whose GPUs are
    # really free, as on Slurm. Grace 0: the victim's GPUs change hands at once.
    preempt_grace_s: float = 0.0
    requeue_delay_s: float = 0.0
    # True: jobs also checkpoint on their own (e.g. every second, as bench/slurm_harness's
    # job does), so work done during the grace period is kept, and a victim whose work
    # ends within its grace period simply finishes (its preemption never happened).
    grace_work_kept: bool = False
    spread_speed: float = 0.6  # speed of a consolidation-sensitive gang spread over extra nodes
    service: Optional[ServiceDistribution] = None  # given distribution; None = learn from finished jobs
    drop_oversize: bool = False
    # MLFQ policies replay with one queue book kept across rounds (controller.replay.
    # mlfq_replay) when promotion is off and rounds are event-driven, with or without the
    # costs above; False forces the generic loop (the engine rebuilds the queues every
    # round: same results, slower).
    incremental: bool = True

    def __post_init__(self):
        if self.nodes <= 0:
            raise InputError(f"nodes value {self.nodes!r} must be a positive integer")
        if self.gpus_per_node <= 0:
            raise InputError(f"gpus-per-node value {self.gpus_per_node!r} must be a positive integer")
        if self.round_interval_s is not None and not (self.round_interval_s > 0):
            raise InputError(f"round-interval-s value {self.round_interval_s!r} must be > 0")
        for name in ("preempt_pause_s", "preempt_resume_s", "preempt_grace_s", "requeue_delay_s"):
            value = getattr(self, name)
            if not (value >= 0) or not math.isfinite(value):
                raise InputError(f"{name.replace('_', '-')} value {value!r} must be >= 0")
        if not (0 < self.spread_speed <= 1):
            raise InputError(f"spread-speed value {self.spread_speed!r} must be within (0, 1]")

    @property
    def capacity_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def charges_handoff(self) -> bool:
        """True when a preemption costs a grace period or a requeue delay, or the
        engine protects victims (both replay loops charge these, with the same results)."""
        return self.preempt_grace_s > 0 or self.requeue_delay_s > 0 or self.engine.protects_victims


@dataclass
class JobOutcome:
    """One finished job, as written to the per-job CSV."""

    job_id: str
    num_gpus: int
    submit_s: float
    start_s: float
    end_s: float
    duration_s: float
    preemptions: int
    attained_gpu_s: float
    executed_s: float
    user: str = ""
    partition: str = ""

    @property
    def jct_s(self) -> float:
        return self.end_s - self.submit_s

    @property
    def queueing_s(self) -> float:
        """Time spent pending: JCT minus time holding GPUs."""
        return max(self.jct_s - self.executed_s, 0.0)


@dataclass
class SimResult:
    policy: str
    outcomes: list[JobOutcome]
    capacity_gpus: int
    preemptions: int
    preemption_overhead_s: float
    rounds: int
    events: int
    dropped_oversize: list[str]
    promotions: int
    timeline: list[tuple[float, int, int]]  # (time, pending jobs, GPUs busy) after each round


@dataclass
class RunState:
    """The simulator's own per-job state: when its counters were last synced, its speed
    (spread gangs run slower), restart overhead still to pay, and a version that
    outdates queued events when the job stops or restarts."""

    last_sync_s: float = 0.0
    speed: float = 1.0
    overhead_left_s: float = 0.0
    version: int = 0


def outcome_of(job: JobState, end_s: float) -> JobOutcome:
    """The finished ``job``'s row (both replay loops)."""
    return JobOutcome(job.job_id, job.num_gpus, job.spec.submit_time_s, job.first_start_s, end_s,
                      job.spec.duration_s, job.preemptions, job.attained_gpu_s, job.executed_s, job.spec.user,
                      job.spec.partition)


def charge_grace(job: JobState, p: RunState, held_s: float, work_kept: bool) -> None:
    """A victim held its GPUs ``held_s`` seconds after the signal: charged as service
    (as the controller's accounting does); progress only if the job checkpoints on
    its own (``work_kept``: SimConfig.grace_work_kept), less any restart overhead left."""
    job.executed_s += held_s
    job.executed_since_promotion_s += held_s
    job.attained_gpu_s += job.num_gpus * held_s
    job.queue_service_gpu_s += job.num_gpus * held_s
    if work_kept:
        lost = min(p.overhead_left_s, held_s)
        p.overhead_left_s -= lost
        job.progress_s += (held_s - lost) * p.speed


def plannable_free(free_by_node: dict[str, int], victims: Iterable[JobState]) -> dict[str, int]:
    """Free GPUs as the plan sees them: a victim's GPUs in its grace period are promised
    to the job its preemption made room for (as the controller's snapshot counts them),
    so no second victim is preempted for that job; a start planned onto them waits
    until they are really free (both replay loops)."""
    free = dict(free_by_node)
    for job in victims:
        for node, gpus in job.placement:
            free[node] += gpus
    return free

"""What the lever planner may know of the jobs and of the controller's settings.

The service builds a LeverView from its observation (controller.service.round.snapshot),
the simulator from its simulated slurmctld (controller.replay.lever_replay): the same
planner (controller.core.levers.planner) then plans the same levers from either. A job
is seen through ``JobFacts``, neutral flags the service's ObservedJob carries as they
are (no copy per job and round: a round of 12,000 jobs builds nothing per job) and the
simulator's small stand-in carries too. Pure: no I/O, no clock, no mode.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Container, Mapping, Optional, Protocol, Sequence


class JobFacts(Protocol):
    """One job as the planner sees it. ``state``: Slurm's (PENDING, RUNNING, ...);
    ``site_factor``: the band Slurm shows now (None: unknown); ``band_id``: the id its
    band and comment live on (its own, or the shared record's it is still listed inside
    of: an array's pending record); ``lever_id``: the id a per-job lever may name ('' when
    none may: naming a job inside a shared record would split it off); ``pinnable``: a
    pin may name it (not inside a shared record, not a gang whose parts each have their
    own node list: a het job);
    ``required_nodes`` / ``excluded_nodes``: its node lists as Slurm shows them (a pin
    this controller set included); ``qos``: its QOS ('' when not reported);
    ``admin_comment``: its AdminComment as Slurm shows it."""

    job_id: str
    state: str
    site_factor: Optional[int]
    band_id: str
    lever_id: str
    pinnable: bool
    required_nodes: tuple
    excluded_nodes: tuple
    qos: str
    admin_comment: str


@dataclass(frozen=True)
class LeverConfig:
    """The settings the planner reads (controller.service.ops.config's names)."""

    queue_count: int  # K: the MLFQ's queues
    site_factor_band: int = 100000
    thresholds_gpu_s: Sequence[float] = ()  # the queues' thresholds (MPS jobs' levels)
    by_level: bool = True  # the policy is discretized: one band a queue level
    by_index: bool = False  # dgittins: inside a level by the plan's index
    slurm_preempts: bool = False  # preemption: slurm (running jobs banded too)
    preempt_qos: str = ""
    consolidate: bool = False  # placement: consolidate (skew-sensitive jobs pinned)
    pack_limit: float = 0.5
    pin_expiry_s: float = 300.0
    requeue_settle_s: float = 5.0
    comment_queues: int = 0  # the AdminComment's "queue n/K": K, 0 for a policy without queues
    preemption: str = "controller"  # who carries out the plan's victims (core.levers.preemption.strategy_for)
    requeue_ended: bool = True  # preempt_requeue_ended: a victim that ended in its grace is requeued
    interval_s: float = 10.0  # a round's length: the slack on a victim's end time
    handoff_timeout_s: float = 120.0  # how long a preemption's beneficiary is watched
    # the lever table's families' settings, by config key (controller.core.levers.table.SETTINGS)
    settings: Mapping[str, object] = field(default_factory=dict)


@dataclass
class LeverView:
    """What the planner may know this round: the jobs by what it does with them (the
    planned GPU jobs ``gpu``; the pending CPU-only jobs, the MPS-only jobs and, under
    ``preemption: slurm``, the running CPU-only jobs, for their bands), and per job:

    ``skew`` (its consolidation sensitivity), ``started_once`` (ran before: half a band
    more), ``shared_service`` (an MPS job's queue service in GPU-equivalents; None: no
    record), ``requeueing`` (ended inside its grace period, requeued this round: keeps
    its pin), ``kept_from_slurm`` (running jobs slurmctld must not preempt),
    ``may_preempt`` (whether a job's QOS lets it preempt preempt_qos's jobs; None: all),
    ``unjudged`` (first seen at reason None: no band or line this round),
    ``begin_time_ours`` (requeued, its BeginTime the requeue's: ours to release),
    ``stopped_at`` (when its last run stopped), ``rpc_budgeted`` (the levers reach
    Slurm, so they are held to its RPC budget), ``attained_gpu_s`` and ``preemptable``
    (the AdminComment line)."""

    now: float
    gpu: Mapping[str, JobFacts]
    cpu_pending: Mapping[str, JobFacts] = field(default_factory=dict)
    shared: Mapping[str, JobFacts] = field(default_factory=dict)
    cpu_running: Mapping[str, JobFacts] = field(default_factory=dict)
    skew: Callable[[str], float] = lambda job_id: 0.0
    started_once: Container[str] = ()
    shared_service: Callable[[str], Optional[float]] = lambda job_id: None
    requeueing: Container[str] = ()
    kept_from_slurm: Container[str] = ()
    may_preempt: Optional[Callable[[JobFacts], bool]] = None
    unjudged: Container[str] = ()
    begin_time_ours: Callable[[JobFacts], bool] = lambda job: False
    stopped_at: Mapping[str, float] = field(default_factory=dict)
    rpc_budgeted: bool = True
    attained_gpu_s: Callable[[str], float] = lambda job_id: 0.0
    preemptable: Callable[[JobFacts], bool] = lambda job: False

    def find(self, job_id: str) -> Optional[JobFacts]:
        """The job in any of the view's maps (None: not seen)."""
        for jobs in (self.gpu, self.cpu_pending, self.shared, self.cpu_running):
            job = jobs.get(job_id)
            if job is not None:
                return job
        return None

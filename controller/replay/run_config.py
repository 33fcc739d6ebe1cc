"""A replay's configuration and its results, shared by every replay loop and the
simulated cluster: ``SimConfig`` (the simulated cluster and the run's options),
``JobOutcome`` / ``SimResult`` (what a replay returns), ``ReplayCut`` (a replay stopped
by its watch) and the constants the loops share."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from controller.core.engine import EngineConfig
from controller.core.gittins import ServiceDistribution
from controller.core.model import InputError, JobState, Node

EPS = 1e-9  # seconds: events this close to a moment happen at it
# A replay's watch (a deadline, an interrupt, progress) is called every this many
# passes of its event loop: often enough that a cut lands within a few rounds even
# when one round plans thousands of jobs, rarely enough to cost nothing measurable.
WATCH_EVERY = 32
# A job counted as "waited behind a usable victim" waited so for more rounds in a row
# than this (issue 28: the victim rule should act within two rounds).
BEHIND_VICTIM_ROUNDS = 2
# How many of each kind of finding a result keeps by name (for reports, not counts).
EXAMPLES_KEPT = 5


class ReplayCut(Exception):
    """A replay stopped by its watch (a tuning budget's deadline, an interrupt)
    before its last job ended; it has no result."""

@dataclass(frozen=True)
class SimConfig:
    """The simulated cluster and the run's options (times in seconds)."""

    nodes: int = 4
    gpus_per_node: int = 4
    engine: EngineConfig = field(default_factory=EngineConfig)
    round_interval_s: Optional[float] = None  # None: event-driven rounds
    preempt_pause_s: float = 0.0  # checkpoint time, charged when the job resumes
    preempt_resume_s: float = 0.0  # restore time
    # What the controller's preemption costs (controller.service.round.preemption): a victim
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
    # True: a victim that ends inside its grace period is requeued all the same, as the
    # controller does with preempt_requeue_ended (its default): its work is done, but it
    # ends only when it runs again (its restart resumes from the last checkpoint and
    # exits), so it waits in its queue like any requeued victim. Measured on the 60-job
    # A/B (bench/ab_slurm.py): 4 of 7 victims finished in their grace period and were
    # requeued, ending 38-228 s later; a replay that let them finish said 0.
    requeue_ended_in_grace: bool = False
    # True: Slurm starts the plan's jobs (controller.replay.slurm_order: priority order,
    # backfill reserving nodes for a waiting job by the running jobs' ``time_limit_s``,
    # None: no limits), on the generic loop; the plan still preempts and releases.
    slurm_starts: bool = False
    time_limit_s: Optional[float] = None
    spread_speed: float = 0.6  # speed of a consolidation-sensitive gang spread over extra nodes
    service: Optional[ServiceDistribution] = None  # given distribution; None = learn from finished jobs
    # learned distributions per key of what Slurm knows at submit (controller.core.
    # conditioned); False: one global distribution
    conditioned: bool = True
    service_window: Optional[int] = None  # newest samples kept per key (None: all)
    drop_oversize: bool = False
    # MLFQ policies replay with one queue book kept across rounds (controller.replay.
    # mlfq_replay) when promotion is off and rounds are event-driven, with or without the
    # costs above; False forces the generic loop (the engine rebuilds the queues every
    # round: same results, slower).
    incremental: bool = True
    # The nodes' partitions and GPU types, as groups (count, partitions, GPU type) that
    # add up to ``nodes`` (parse_node_kinds reads them from --node-kinds); () = one
    # partition, one type: every node is every job's.
    node_kinds: tuple[tuple[int, tuple[str, ...], str], ...] = ()

    def __post_init__(self):
        if self.node_kinds and sum(count for count, _, _ in self.node_kinds) != self.nodes:
            raise InputError(f"node-kinds value {self.node_kinds!r} must add up to nodes {self.nodes}")
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

    def node_table(self) -> list[Node]:
        """The simulated nodes, all GPUs free, with their partitions and GPU types."""
        kinds = self.node_kinds or ((self.nodes, (), ""),)
        nodes, number = [], 0
        for count, partitions, gpu_type in kinds:
            for _ in range(count):
                nodes.append(Node(f"n{number:04d}", self.gpus_per_node, self.gpus_per_node,
                                  partitions=partitions, gpu_type=gpu_type))
                number += 1
        return nodes


def parse_node_kinds(text: str) -> tuple[tuple[int, tuple[str, ...], str], ...]:
    """``COUNT:PARTITION+PARTITION:TYPE,...`` (e.g. ``2:batch:v100,2:batch+urgent:a100``;
    the type may be left out: untyped) -> SimConfig.node_kinds."""
    kinds = []
    for group in text.split(","):
        fields = group.strip().split(":")
        if len(fields) not in (2, 3) or not fields[0].isdigit() or int(fields[0]) < 1 or not fields[1]:
            raise InputError(f"node-kinds value {group.strip()!r} must be COUNT:PARTITION[+PARTITION...][:TYPE]")
        partitions = tuple(p for p in fields[1].split("+") if p)
        kinds.append((int(fields[0]), partitions, fields[2] if len(fields) == 3 else ""))
    return tuple(kinds)


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
    # Preemptions whose beneficiaries did not start on the GPUs they freed
    # (SimCluster.judge_handoffs), of ``preemptions``; jobs that waited behind a usable
    # victim more than BEHIND_VICTIM_ROUNDS rounds in a row (SimCluster.audit_waits).
    useless_preemptions: int = 0
    waited_behind_victim: int = 0
    # a few of each, for a report: (victim, its beneficiaries, signalled at) and
    # (job, its longest run of such rounds, when that run began)
    useless_examples: list[tuple[str, tuple[str, ...], float]] = field(default_factory=list)
    behind_examples: list[tuple[str, int, float]] = field(default_factory=list)


def outcome_of(job: JobState, end_s: float) -> JobOutcome:
    """The finished ``job``'s row (both replay loops)."""
    return JobOutcome(job.job_id, job.num_gpus, job.spec.submit_time_s, job.first_start_s, end_s,
                      job.spec.duration_s, job.preemptions, job.attained_gpu_s, job.executed_s, job.spec.user,
                      job.spec.partition)

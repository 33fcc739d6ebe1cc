"""The interface between the controller and a cluster manager.

A backend observes (jobs and nodes, normalized) and carries out primitive
levers. The controller turns a Plan into lever calls; observe/shadow/enforce are
properties of the executor that wraps a backend (see ``controller.service.acting.executor``),
never branches inside policies.
"""
from __future__ import annotations

import abc
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Callable, Container, Iterable, Mapping, Optional

from controller.core.levers.target import LeverRelay, LeverTarget
from controller.core.model import Node


MPS_SHARES_PER_GPU = 100  # --gres=mps:N counts shares of a GPU's SMs: 100 are one GPU's worth


class BackendUnavailable(RuntimeError):
    """The cluster manager did not answer (slurmctld down, time-out): act on nothing."""


@dataclass(frozen=True, slots=True)
class ObservedJob:
    """A job as the cluster manager reports it. Times are epoch seconds."""

    job_id: str
    user: str
    partition: str  # may be "a,b": the partitions the user allowed
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, REQUEUED, ...
    reason: str
    gpus: int
    nodes: tuple[str, ...] = ()
    gpus_by_node: tuple[tuple[str, int], ...] = ()
    submit_time_s: Optional[float] = None
    start_time_s: Optional[float] = None
    end_time_s: Optional[float] = None
    # When Slurm lets a pending job start (its BeginTime: --begin, an admin's
    # StartTime=, or the delay Slurm adds after a requeue); None: not reported
    eligible_time_s: Optional[float] = None
    time_limit_s: Optional[float] = None  # None: no limit (or unknown)
    restart_count: int = 0
    requeueable: bool = False
    batch: bool = True
    comment: str = ""
    admin_comment: str = ""  # AdminComment (Slurm operators write it; the controller adds its line)
    site_factor: Optional[int] = None
    nice: int = 0  # the job's own priority offset (a user's --nice); the Nice lever touches only 0
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    # The node count a pending job accepts (-N; --nodelist raises the minimum): fewest
    # (0/1: any) and most (0: no maximum). Running: min_nodes is the count it holds.
    min_nodes: int = 0
    max_nodes: int = 0
    mps: int = 0
    gpu_type: str = ""  # the GPU type it asked for ('' any; controller.core.model.JobSpec.gpu_type)
    # every GPU type it names, sorted; two or more (--gres=gpu:a100:4,gpu:v100:4, gpu_type
    # MIXED_TYPES) is a request the plan cannot place: it waits, never preempted for
    gpu_types: tuple[str, ...] = ()
    reservation: str = ""  # the reservation it names ('' none)
    # its QOS ('' not reported): under preemption: slurm only the jobs of preempt_qos are
    # slurmctld's to preempt (controller.service.round.contract.Contract.why_not)
    qos: str = ""
    # What a pending job asks of each node beyond GPUs (the plan preempts only for a job
    # Slurm would start on what the preemption frees): CPUs and MB of memory per node
    # (0: not asked, or not reported by this backend: not checked), the node features
    # every node must have (--constraint=a&b), --exclusive. ``unmodelled``: what of its
    # request the plan's model cannot express ('' nothing): an OR, bracket or count
    # constraint, --exclusive=user, a field the release does not report; such a job is
    # never a reason to preempt (it waits for Slurm; explain shows this text).
    cpus_per_node: int = 0
    mem_per_node_mb: int = 0
    features: tuple[str, ...] = ()
    exclusive: bool = False
    unmodelled: str = ""
    # the codes of ``unmodelled`` (UNMODELLED_REASONS below), for counting
    unmodelled_reasons: tuple[str, ...] = ()
    # A running job: the CPUs and MB of memory it holds on each node, (node, cpus, mb),
    # what its preemption frees there (0 where not reported: counted as freeing nothing).
    held_by_node: tuple[tuple[str, int, int], ...] = ()
    # what dgittins conditions on (controller.core.conditioned), with time_limit_s; empty: not reported
    account: str = ""
    name: str = ""
    signal: str = ""  # the job's --signal spec when the cluster manager reports it ("B:USR1@90"); '' unknown
    # Where this job's priority lives and which levers may name it (the backend says;
    # slurm_plugin.arrays fills it for Slurm's arrays and het jobs). ``shared_band_id``: the
    # id of the record a pending job is still listed inside of, together with other jobs
    # (Slurm: a task inside its array's pending record), which holds the band and comment
    # of all of them: a lever naming this job alone would split it out of that record, so
    # none may ('' for every other job: it has a record of its own). ``gang``: several
    # records that start together, planned as this one job (Slurm: a het job's
    # components); each part keeps its own node list, so no pin can name them all. Read
    # them through band_id, lever_id and pinnable below.
    shared_band_id: str = ""
    gang: bool = False
    # What a pending job waits for, as the backend judges its cluster manager's reason (Slurm's:
    # slurm_plugin.reasons): "resources" (it starts once resources free up: the only wait a
    # preemption may lift; every job of a backend that reports no reasons), "begin_time_after_requeue"
    # (only the start delay a requeue put on it, which the controller lifts when the plan starts
    # it), "unjudged" (the scheduler has not looked at it since its submission or last update),
    # "admin_hold", "user_hold", "begin_time" (a later start someone set) or "other" (any other
    # wait no preemption lifts). ``reason`` keeps the manager's own word, for people.
    waits_for: str = "resources"

    @property
    def band_id(self) -> str:
        """The id whose band (and comment) this job's priority lives on: the shared
        record's for a job listed inside one, else its own."""
        return self.shared_band_id or self.job_id

    @property
    def lever_id(self) -> str:
        """The id a per-job lever (band, comment, pin, move, hold, release) may name: its
        own, or '' when none may (a job inside a shared record)."""
        return "" if self.shared_band_id else self.job_id

    @property
    def pinnable(self) -> bool:
        """Whether a pin (one node list for the whole job) may name it: not a job inside a
        shared record, not a gang of parts with node lists of their own."""
        return not self.shared_band_id and not self.gang

    @property
    def gpu_equivalents(self) -> float:
        """The GPUs the job uses, in whole GPUs: its GPU count, or for a job that asks
        for MPS shares only, its shares over ``MPS_SHARES_PER_GPU`` (mps:50 is half a
        GPU). Its attained service is counted in these (GPU-seconds)."""
        return float(self.gpus) if self.gpus > 0 else self.mps / MPS_SHARES_PER_GPU


@dataclass
class Observation:
    observed_at_s: float
    jobs: list[ObservedJob]
    nodes: list[Node]
    skipped: list[str] = field(default_factory=list)  # one line per record that could not be read
    # The job ids whose absence is not "gone" (a record that failed to parse, the array
    # tasks not listed: slurm_plugin.arrays.Withheld). None: any skipped line
    # withholds every job (a backend that does not say which).
    withheld: Optional[Container[str]] = None
    # Clock evidence (controller.service.round.slurm_clock): observed_at_s is taken just
    # before the cluster manager is asked; answered_at_s just after it answered (None:
    # observed_at_s); slurm_now_s is its own clock when it answered (None: not reported).
    answered_at_s: Optional[float] = None
    slurm_now_s: Optional[float] = None

    def withholds(self, job_id: str) -> bool:
        if self.withheld is None:
            return bool(self.skipped)
        return job_id in self.withheld


class NotOffered(NotImplementedError):
    """A read this backend does not offer (``BackendReader.offers`` says so beforehand)."""


def _not_offered(read: Callable) -> Callable:
    """The default of an optional read: raises NotOffered. A backend offers the read by
    defining it (``BackendReader.offers``)."""
    def not_offered(self, *args, **kwargs):
        raise NotOffered(f"{type(self).__name__} does not offer {read.__name__}")
    not_offered.__name__, not_offered.__doc__ = read.__name__, read.__doc__
    not_offered.not_offered = True
    return not_offered


class BackendReader(abc.ABC):
    """What the service reads of a cluster manager: ``observe`` always; the optional
    reads below each raise NotOffered unless the backend defines them, and
    ``offers(name)`` says which it defines (never a getattr probe on a backend)."""

    # Called just before every command that changes the cluster; raises (LeaseLost)
    # when this process must not act any more (controller.service.acting.lease). None: no check.
    fence: Optional[Callable[[], None]] = None
    # Commands run since start, by command name (metrics); None: this backend does not count them.
    commands_run: Optional[Mapping[str, int]] = None

    @abc.abstractmethod
    def observe(self) -> Observation: ...

    def offers(self, read: str) -> bool:
        """Whether this backend offers the optional read ``read`` (one of OPTIONAL_READS):
        its class, or the instance itself (a stand-in given the read), defines it."""
        if read not in OPTIONAL_READS:
            raise ValueError(f"{read!r} is not an optional read of the backend port")
        return read in vars(self) or not getattr(getattr(type(self), read), "not_offered", False)

    @_not_offered
    def observe_jobs(self, job_ids: Iterable[str]) -> list[ObservedJob]:
        """The jobs ``job_ids`` whatever their partition (restore looks up the jobs it
        recorded that observe() did not list)."""

    @_not_offered
    def repeat_observation(self) -> Optional[Observation]:
        """The last full observation again, with the light polls' news (None: take a full one)."""

    @_not_offered
    def forget_reuse(self) -> None:
        """Drop what the backend keeps from one observation for the next (parsed records,
        the jobs built from them): the next observe() reads every record anew, so the
        round after it is a full one (controller.service.round.daemon checks the
        incremental rounds against it)."""

    @_not_offered
    def poll(self) -> frozenset:
        """A light check of the jobs' states: a change means a round is due."""

    @_not_offered
    def poll_nodes(self) -> frozenset:
        """A light check of the nodes' states (taken with ``poll``)."""

    @_not_offered
    def partition_nodes(self) -> dict[str, list[str]]:
        """Partition name -> its node names (sinfo), expanded."""

    @_not_offered
    def batch_script(self, job_id: str) -> str:
        """The job's batch script (its #SBATCH lines declare --signal)."""

    @_not_offered
    def slurm_config(self) -> str:
        """The running slurmctld's settings as `scontrol show config` prints them
        (controller.service.ops.preflight reads them)."""

    @_not_offered
    def partition_config(self) -> str:
        """The partitions' settings as `scontrol show partition` prints them (the
        preflight reads each one's PreemptMode)."""

    @_not_offered
    def qos_config(self) -> str:
        """The QOS rows as sacctmgr prints them (GraceTime, Preempt, ...)."""

    @_not_offered
    def qos_limits(self) -> tuple[str, str]:
        """(the QOS limits, the associations' default QOS), as sacctmgr prints them."""

    @_not_offered
    def qos_limit_table(self) -> str:
        """The GPU limits of the QOS (controller.service.ops.qos_gate)."""

    @_not_offered
    def priorities(self) -> dict[str, int]:
        """The cluster manager's own priority of each pending job (Slurm: ``sprio``),
        higher first; read only by ``tiresias shadow-diff``."""


OPTIONAL_READS = frozenset(name for name, member in vars(BackendReader).items()
                           if getattr(member, "not_offered", False))


class Backend(BackendReader, LeverTarget):
    """The port: a cluster manager's reads and levers (slurm_plugin.backend.SlurmBackend)."""


# Why a pending job's request is beyond the plan's model (ObservedJob.unmodelled_reasons): code ->
# what the admin reads beside a count of jobs (metric help, log, preflight; controller.service.ops.unmodelled)
UNMODELLED_REASONS: dict[str, str] = {
    "cpus": "CPUs the record does not report, or a --cpus-per-gpu form not read",
    "memory": "memory the record does not report, or a --mem-per-gpu form not read",
    "constraint": "a --constraint with OR, brackets or counts (which nodes satisfy it is Slurm's choice)",
    "exclusive": "an --exclusive mode other than the whole node (user, mcs, topo)",
    "oversubscribe": "a partition's OverSubscribe=FORCE (Slurm shares the nodes it gives)",
    "mixed_gpu_types": "GPUs of several types in one request (the plan gives a job one type)",
    "het": "a het job whose components ask for different nodes (features, partitions, GPU types)",
    "per_socket": "GPUs per socket (--gpus-per-socket: which sockets is Slurm's choice)",
    "per_task": "a per-task request the release does not report in full (--ntasks-per-gpu)",
    "unreported_request": "a field of the request the release does not report",
    "unreported_nodes": "CPUs, memory or features that no node reports",
    "qos_limits": "a QOS whose GPU limits cannot be read (sacctmgr) or are not modelled (a typed gres/gpu:TYPE)",
    "other": "another request the plan cannot express",
}


def unmodelled_fields(reasons: Iterable[tuple[str, str]]) -> dict:
    """The ObservedJob fields of a job's (code, text) reasons: ``unmodelled`` the
    texts joined for people, ``unmodelled_reasons`` the codes, in order, for counting.
    An unknown code is a programming error: it would be counted under no name."""
    pairs = list(reasons)
    unknown = [code for code, _ in pairs if code not in UNMODELLED_REASONS]
    if unknown:
        raise ValueError(f"unmodelled reason code {unknown[0]!r} is not one of {sorted(UNMODELLED_REASONS)}")
    return dict(unmodelled="; ".join(text for _, text in pairs),
                unmodelled_reasons=tuple(dict.fromkeys(code for code, _ in pairs)))


# The limits a QOS puts on its jobs and users (as sacctmgr names them), the columns after the
# QOS name in a backend's qos_limits() and qos_limit_table() text (controller.service.ops.qos_limits)
QOS_LIMIT_FIELDS = ("MaxTRESPerUser", "MaxTRESPerAccount", "MaxTRES", "MaxTRESPerNode", "MaxWall",
                    "MaxJobsPerUser", "MaxSubmitJobsPerUser", "GrpTRES", "GrpJobs", "GrpSubmitJobs", "UsageFactor")


# The states of a job this controller still tracks (the port's ObservedJob.state words).
ACTIVE_STATES = {"PENDING", "RUNNING"}
# Still holding resources or about to: neither schedulable nor finished.
TRANSIENT_STATES = {"COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"}


@lru_cache(maxsize=1 << 17)  # every round sorts every active job by it
def numeric_id(job_id: str) -> tuple:
    """Sort key: Slurm job ids by number, array tasks ("12_3") after their head."""
    head, _, tail = job_id.partition("_")
    return (int(head) if head.isascii() and head.isdigit() and len(head) <= 30 else 0, tail, job_id)


# Which pending jobs the cluster manager would start now, from the port's neutral waits_for.
# the waits a preemption may end (ObservedJob.waits_for)
STARTABLE_WAITS = frozenset({"resources", "begin_time_after_requeue"})
# slurm_wait's word for a job the scheduler has not judged yet (ObservedJob.waits_for "unjudged")
UNJUDGED = "unjudged"


def slurm_wait(job: ObservedJob) -> str:
    """What a pending ``job`` waits on that no preemption lifts, in the cluster manager's
    word (its reason; UNJUDGED for a job its scheduler has not looked at yet), or '' when
    it would start once GPUs are free."""
    if job.waits_for in STARTABLE_WAITS:
        return ""
    if job.waits_for == UNJUDGED:
        return UNJUDGED
    return job.reason or job.waits_for


# The grammar of the slurm_config() answer (the reader's text), read by preflight and restore.
def parse_show_config(text: str) -> dict[str, str]:
    """``Key = Value`` lines of `scontrol show config` as a dict (other lines, such as
    section titles and the ping line at the end, are skipped). Values are stripped."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            continue
        settings.setdefault(key, value.strip())
    return settings

"""The scheduling model shared by every policy, the simulator and the Slurm backend.

Units: times are seconds (float), service is GPU-seconds. A job is a gang of
``num_gpus`` GPUs that run all at once (all-or-nothing).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional


class InputError(ValueError):
    """Bad user input: the message is one line naming the field and the value."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What is known about a job when it is submitted.

    ``duration_s`` is the true run time on a consolidated placement. Only the
    simulated cluster and the perfect-knowledge baselines (srtf, srsf) may read it.
    """

    job_id: str
    num_gpus: int
    submit_time_s: float
    duration_s: Optional[float] = None
    skew: float = 0.0  # share of the model in its largest tensor, 0..1
    user_priority: int = 1  # larger = more urgent (multi-partition objective weight)
    partition: str = "default"
    user: str = ""
    model_name: str = ""
    # what Slurm knows at submit and dgittins conditions on (controller.core.conditioned)
    account: str = ""
    job_name: str = ""
    time_limit_s: Optional[float] = None  # wall-clock limit (None: unlimited)
    preemptable: bool = True  # False: once running, keeps its GPUs (no checkpoint contract)
    # The job's own node constraints, as Slurm holds them (controller.core.placement
    # honours them): every node of --nodelist is used, no node of --exclude is, and
    # the gang spans min_nodes..max_nodes nodes (-N N: both N; None = no bound).
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    min_nodes: Optional[int] = None
    max_nodes: Optional[int] = None
    # Where Slurm may run it at all (controller.core.placement.Eligibility): the
    # partitions it allows (() = any; a pending job may list several), the GPU type
    # it asked for ('' = any type: --gres=gpu:2; 'a100': --gres=gpu:a100:2; a MIG
    # profile such as '1g.10gb' is a type of its own; MIXED_TYPES: several types, which
    # no node fits), the reservation it names ('' = none: it may not use reserved
    # nodes; named: only that reservation's nodes).
    partitions: tuple[str, ...] = ()
    gpu_type: str = ""
    reservation: str = ""
    # What it asks of every node it uses beyond GPUs, as Slurm checks before it starts
    # it (controller.core.placement.NodeRoom): CPUs and MB of memory per node (0: nothing
    # to check), node features it must have all of (--constraint=a&b), and --exclusive
    # (no other job on its nodes); memory ``ALL_MEMORY``: the node's whole memory (--mem=0,
    # or no default where Slurm allocates memory). A running job: the CPUs and MB it holds per node,
    # (node, cpus, mb), what its preemption frees (0 where not reported: frees nothing).
    cpus_per_node: int = 0
    mem_per_node_mb: int = 0
    features: tuple[str, ...] = ()
    exclusive: bool = False
    held_by_node: tuple[tuple[str, int, int], ...] = ()
    # True when any of the four above is set (read in every placement: one attribute,
    # set by __post_init__).
    constrained: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self):
        if not (self.required_nodes or self.excluded_nodes or self.min_nodes is not None
                or self.max_nodes is not None):
            return  # the usual job (every trace's): nothing to check, stays cheap to build
        for name in ("required_nodes", "excluded_nodes"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(n, str) and n.strip() == n and n for n in value):
                raise InputError(f"job {self.job_id}: {name} value {value!r} must be a list of node names")
            object.__setattr__(self, name, tuple(value))
        both = sorted(set(self.required_nodes) & set(self.excluded_nodes))
        if both:
            raise InputError(f"job {self.job_id}: node {both[0]} is both required (--nodelist) and excluded")
        for name in ("min_nodes", "max_nodes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InputError(f"job {self.job_id}: {name} value {value!r} must be a whole number >= 1")
        if self.min_nodes is not None and self.max_nodes is not None and self.max_nodes < self.min_nodes:
            raise InputError(f"job {self.job_id}: max_nodes value {self.max_nodes} is below min_nodes"
                             f" {self.min_nodes}")
        if self.max_nodes is not None and len(self.required_nodes) > self.max_nodes:
            raise InputError(f"job {self.job_id}: max_nodes value {self.max_nodes} is below the"
                             f" {len(self.required_nodes)} required nodes")
        object.__setattr__(self, "constrained", True)


@dataclass(slots=True)
class JobState:
    """A job as the policy sees it in one round (the simulator keeps these live).

    ``attained_gpu_s`` is the total service, never reset (reports, accounting).
    ``queue_service_gpu_s`` is the service that places the job in the MLFQ: equal to
    ``attained_gpu_s`` until a starvation promotion resets it to zero.
    ``executed_since_promotion_s`` / ``waited_since_promotion_s`` are t_J and
    delta_J of the starvation rule.
    ``queue_level`` / ``queue_entry``: the job's place in its MLFQ queue as the last
    round left it (the queue's 0-based level and an ordinal, smaller = nearer the
    head; None = no place yet). The executor keeps them from ``Plan.positions`` and
    passes them back (controller.core.queues explains the rule).
    """

    spec: JobSpec
    index: int  # arrival order, the deterministic tie-breaker
    attained_gpu_s: float = 0.0
    queue_service_gpu_s: float = 0.0
    executed_s: float = 0.0  # wall time holding GPUs, over all runs
    executed_since_promotion_s: float = 0.0
    waited_since_promotion_s: float = 0.0
    progress_s: float = 0.0  # useful work done, in consolidated-speed seconds
    first_start_s: Optional[float] = None
    run_start_s: Optional[float] = None  # when the current (or last) run started, seconds
    running: bool = False
    placement: tuple[tuple[str, int], ...] = ()  # (node, gpus) while running
    preemptions: int = 0
    promotions: int = 0
    finish_time_s: Optional[float] = None
    queue_level: Optional[int] = None
    queue_entry: Optional[float] = None
    # Set by the engine each round: a running job the protection rules keep on its
    # GPUs (controller.core.protection); the walk treats it as non-preemptable.
    keeps_gpus: bool = False
    # Copies of spec fields read in every round's inner loops (plain attributes are
    # several times cheaper than properties there).
    job_id: str = field(init=False, repr=False)
    num_gpus: int = field(init=False, repr=False)

    def __post_init__(self):
        self.job_id = self.spec.job_id
        self.num_gpus = self.spec.num_gpus

    def remaining_s(self) -> float:
        """True remaining run time (perfect-knowledge policies only)."""
        if self.spec.duration_s is None:
            raise InputError(f"job {self.job_id}: duration unknown, a perfect-knowledge policy needs it")
        return max(self.spec.duration_s - self.progress_s, 0.0)


@dataclass(frozen=True, slots=True)
class Node:
    """A node as seen in one round: its name, GPU count and GPUs not held by jobs.

    ``partitions``: the partitions it is in (() = unknown: any job's); ``gpu_type``:
    the type of its GPUs ('' untyped, ``MIXED_TYPES`` when it has several: only jobs
    of any type use it); ``reservation``: the active reservation holding it ('' none).
    GPUs with shards or MPS shares in use are not free (the backend reports them so):
    no whole-GPU job may have them. ``gpus_mps``: those in use only through MPS shares,
    the GPUs MPS jobs may still share (controller.service.round.sharing)."""

    name: str
    gpus_total: int
    gpus_free: int
    available: bool = True  # False when down or drained: nothing new goes there
    partitions: tuple[str, ...] = ()
    gpu_type: str = ""
    reservation: str = ""
    gpus_mps: int = 0
    # What Slurm counts beyond GPUs before it starts a job here (None: not reported; a
    # job asking for it then never fits the node): CPUs and MB of memory, in all and not
    # allocated, and its active features.
    cpus_total: Optional[int] = None
    cpus_free: Optional[int] = None
    mem_total_mb: Optional[int] = None
    mem_free_mb: Optional[int] = None
    features: Optional[tuple[str, ...]] = None


ALL_MEMORY = -1  # JobSpec.mem_per_node_mb of a job given all of each node's memory (--mem=0)
MIXED_TYPES = "(mixed)"  # Node.gpu_type of a node with GPUs of several types


@dataclass
class Snapshot:
    """Everything a policy may read in one round.

    The simulator passes its live node table as ``free_by_node`` (name -> free GPUs)
    to avoid rebuilding Node objects every event; the controller leaves it None.
    """

    now_s: float
    jobs: list[JobState]  # pending and running jobs only
    nodes: list[Node]
    service: Optional["object"] = None  # a ServiceDistribution, None = nothing learned
    round_id: int = 0
    # The simulator keeps running jobs' counters lazily: the engine calls ``sync``
    # before it reads them. ``allow_fast_path`` lets it skip ordering when every
    # active job fits (every policy then runs them all); ``waiting`` and
    # ``demand_gpus`` are its cheap hints for that check. ``detailed`` asks for the
    # order and levels the controller needs; ``explain`` adds the wait reasons.
    sync: Optional[Callable[[], None]] = None
    allow_fast_path: bool = False
    detailed: bool = True
    explain: bool = True  # also build a wait reason for every waiting job (queue, explain)
    free_by_node: Optional[dict[str, int]] = None
    waiting: Optional[list[JobState]] = None
    demand_gpus: Optional[int] = None
    capacity_gpus: Optional[int] = None
    max_gpus_per_node: Optional[int] = None
    # MLFQ policies: the executor's own QueueBook (controller.core.queue_book), kept
    # across rounds; None = the engine builds one from ``jobs``.
    queue_book: Optional["object"] = None

    def __post_init__(self):
        if self.capacity_gpus is None or self.max_gpus_per_node is None:
            available = [n for n in self.nodes if n.available]
            if self.capacity_gpus is None:
                self.capacity_gpus = sum(n.gpus_total for n in available)
            if self.max_gpus_per_node is None:
                self.max_gpus_per_node = max((n.gpus_total for n in available), default=0)

    @property
    def total_gpus(self) -> int:
        return self.capacity_gpus

    def free_gpus_by_node(self) -> dict[str, int]:
        """A fresh, mutable copy of free GPUs per available node."""
        if self.free_by_node is not None:
            return dict(self.free_by_node)
        return {n.name: n.gpus_free for n in self.nodes if n.available}

    def waiting_jobs(self) -> list[JobState]:
        return self.waiting if self.waiting is not None else [j for j in self.jobs if not j.running]

    def demand(self) -> int:
        return self.demand_gpus if self.demand_gpus is not None else sum(j.num_gpus for j in self.jobs)


# Published skew values (spec/scheduling.md): VGG and AlexNet hold 61-77% of the
# model in one tensor; ResNet/Inception/GoogleNet 3.6-14.6%. Used when a trace
# names the model but gives no measured skew.
MODEL_SKEW = {
    "vgg11": 0.70, "vgg16": 0.72, "vgg19": 0.73, "vgg": 0.70, "alexnet": 0.773,
    "resnet50": 0.10, "resnet101": 0.08, "resnet152": 0.06, "resnet": 0.10,
    "inception3": 0.05, "inception4": 0.036, "googlenet": 0.146,
}


def skew_for_model(model_name: str) -> float:
    """Published skew for a model family, 0 when unknown."""
    name = model_name.strip().lower()
    if name in MODEL_SKEW:
        return MODEL_SKEW[name]
    for prefix in ("vgg", "alexnet", "resnet", "inception", "googlenet"):
        if name.startswith(prefix):
            return MODEL_SKEW.get(prefix, MODEL_SKEW.get(prefix + "3", 0.0))
    return 0.0

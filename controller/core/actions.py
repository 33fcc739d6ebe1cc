"""The levers a round pulls, as typed actions.

The engine's plan (controller.core.plan) says what should run; these say what is
changed in the cluster manager to get there: a job's priority band, a node pin,
a partition, an MPS share, a checkpoint signal, a requeue, the AdminComment line.
Each carries the decision id it is logged under and a reason; ``cause_id`` names the
decision that made it necessary (a requeue cites its preemption, a pin's expiry the
start that pinned it), so ``tiresias explain JOBID --story`` can follow the chain.

Executors apply them: controller.service.executor to a Backend (observe and shadow
through a read-only wrapper), the simulator to its simulated cluster. Pure data:
nothing here does I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Union


@dataclass(frozen=True)
class SetBand:
    """Give a pending job this SiteFactor (its priority band; Slurm's age keeps FIFO inside)."""

    decision_id: str
    job_id: str
    site_factor: int
    reason: str
    cause_id: str = ""
    kind: ClassVar[str] = "band"


@dataclass(frozen=True)
class PinNodes:
    """Restrict a pending job to these nodes (ReqNodeList) until ``expires_s`` (epoch s)."""

    decision_id: str
    job_id: str
    nodes: tuple[str, ...]
    expires_s: float
    reason: str
    cause_id: str = ""
    kind: ClassVar[str] = "pin"


@dataclass(frozen=True)
class UnpinNodes:
    """Clear the node list this controller set (the pin expired)."""

    decision_id: str
    job_id: str
    reason: str
    cause_id: str = ""
    kind: ClassVar[str] = "unpin"


@dataclass(frozen=True)
class ReleaseBeginTime:
    """Let a requeued job start now (Slurm holds it with a BeginTime after a requeue)."""

    decision_id: str
    job_id: str
    reason: str
    cause_id: str = ""
    kind: ClassVar[str] = "release"


@dataclass(frozen=True)
class MovePartition:
    """Move a pending job to another of the partitions its user allowed."""

    decision_id: str
    job_id: str
    from_partition: str
    to_partition: str
    reason: str
    cause_id: str = ""
    kind: ClassVar[str] = "move"


@dataclass(frozen=True)
class SetMpsShare:
    """Set a pending MPS job's share of a GPU (percent of its SMs, its tier)."""

    decision_id: str
    job_id: str
    percent: int
    reason: str
    cause_id: str = ""
    kind: ClassVar[str] = "share"


@dataclass(frozen=True)
class Signal:
    """Send a running job its declared checkpoint signal (``batch_only``: to the batch shell)."""

    decision_id: str
    job_id: str
    signal_name: str
    batch_only: bool
    reason: str
    cause_id: str = ""
    kind: ClassVar[str] = "signal"


@dataclass(frozen=True)
class Requeue:
    """Requeue a running job; ``cause_id`` is the preemption (or decision) that asked for it."""

    decision_id: str
    job_id: str
    reason: str
    cause_id: str
    kind: ClassVar[str] = "requeue"


@dataclass(frozen=True)
class SetAdminComment:
    """Write the job's whole AdminComment (the site's text and our bracketed line)."""

    decision_id: str
    job_id: str
    text: str
    reason: str = "the line users see in scontrol show job"
    cause_id: str = ""
    kind: ClassVar[str] = "admin_comment"


LeverAction = Union[SetBand, PinNodes, UnpinNodes, ReleaseBeginTime, MovePartition, SetMpsShare, Signal, Requeue,
                    SetAdminComment]
LEVER_ACTIONS: tuple[type, ...] = (SetBand, PinNodes, UnpinNodes, ReleaseBeginTime, MovePartition, SetMpsShare,
                                   Signal, Requeue, SetAdminComment)

"""The levers a round pulls, as typed actions.

The engine's plan (controller.core.plan) says what should run; these say what is
changed in the cluster manager to get there: a job's priority band, a node pin,
a partition, an MPS share, a checkpoint signal, a requeue, the AdminComment line.
Each carries the decision id it is logged under and a reason; ``cause_id`` names the
decision that made it necessary (a requeue cites its preemption, a pin's expiry the
start that pinned it), so ``tiresias explain JOBID --story`` can follow the chain.

Executors apply them: controller.service.acting.executor to a Backend (observe and shadow
through a read-only wrapper), the simulator to its simulated cluster. Pure data:
nothing here does I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Union


@dataclass(frozen=True)
class LeverActionBase:
    """What every lever action carries: its decision id, the job, and (keyword only)
    why and, where another decision made it necessary, that decision's id."""

    decision_id: str
    job_id: str
    reason: str = field(default="", kw_only=True)
    cause_id: str = field(default="", kw_only=True)
    kind: ClassVar[str] = ""


@dataclass(frozen=True)
class SetBand(LeverActionBase):
    """Give a pending job this SiteFactor (its priority band; Slurm's age keeps FIFO inside)."""

    site_factor: int
    kind: ClassVar[str] = "band"


@dataclass(frozen=True)
class PinNodes(LeverActionBase):
    """Restrict a pending job to these nodes (ReqNodeList) until ``expires_s`` (epoch s)."""

    nodes: tuple[str, ...]
    expires_s: float
    kind: ClassVar[str] = "pin"


@dataclass(frozen=True)
class UnpinNodes(LeverActionBase):
    """Clear the node list this controller set (the pin expired)."""

    kind: ClassVar[str] = "unpin"


@dataclass(frozen=True)
class ReleaseBeginTime(LeverActionBase):
    """Let a requeued job start now (Slurm holds it with a BeginTime after a requeue)."""

    kind: ClassVar[str] = "release"


@dataclass(frozen=True)
class MovePartition(LeverActionBase):
    """Move a pending job to another of the partitions its user allowed."""

    from_partition: str
    to_partition: str
    kind: ClassVar[str] = "move"


@dataclass(frozen=True)
class SetMpsShare(LeverActionBase):
    """Set a pending MPS job's share of a GPU (percent of its SMs, its tier)."""

    percent: int
    kind: ClassVar[str] = "share"


@dataclass(frozen=True)
class HoldJob(LeverActionBase):
    """Hold a pending job (Slurm: ``scontrol hold``) that the GPU-sharing policy admits
    on no GPU now: without it Slurm starts the job on a GPU the policy refused."""

    kind: ClassVar[str] = "hold"


@dataclass(frozen=True)
class ReleaseHold(LeverActionBase):
    """Release the hold this controller set (a GPU admits the job now)."""

    kind: ClassVar[str] = "release_hold"


@dataclass(frozen=True)
class Signal(LeverActionBase):
    """Send a running job its declared checkpoint signal (``batch_only``: to the batch shell)."""

    signal_name: str
    batch_only: bool
    kind: ClassVar[str] = "signal"


@dataclass(frozen=True)
class Requeue(LeverActionBase):
    """Requeue a running job; ``cause_id`` is the preemption (or decision) that asked for it."""

    kind: ClassVar[str] = "requeue"


@dataclass(frozen=True)
class SetAdminComment(LeverActionBase):
    """Write the job's whole AdminComment (the site's text and our bracketed line)."""

    text: str
    kind: ClassVar[str] = "admin_comment"


LeverAction = Union[SetBand, PinNodes, UnpinNodes, ReleaseBeginTime, MovePartition, SetMpsShare, Signal, Requeue,
                    SetAdminComment]
# Every lever action type: controller.core.levers.table.LEVER_ACTIONS (SetBand and the LEVERS rows).

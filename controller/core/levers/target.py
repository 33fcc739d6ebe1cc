"""What an executor acts on: ``LeverTarget``, one abstract method per row of the lever table
(controller.core.levers.table: LEVERS and BAND_LEVER), the lever half of the service's backend
port (controller.service.acting.backend.Backend) and what the simulated slurmctld implements;
``LeverRelay``, a target whose lever methods are generated from the table. Pure."""
from __future__ import annotations

import abc
from typing import Callable

from controller.core.levers.table import LEVER_NAMES


class LeverTarget(abc.ABC):
    """What an executor acts on: one method per row of controller.core.levers.table
    (LEVERS and BAND_LEVER), with the row's name and arguments."""

    @abc.abstractmethod
    def set_site_factors(self, factors: dict[str, int]) -> None:
        """Set SiteFactor for each job id (batched: one call per distinct value); an
        ArrayJobId's value is for the tasks in its pending record (ObservedJob.band_id)."""

    @abc.abstractmethod
    def pin_nodes(self, job_id: str, nodes: list[str]) -> None:
        """ReqNodeList= for a pending job; an empty list clears it."""

    @abc.abstractmethod
    def signal(self, job_id: str, signal_name: str, batch_only: bool) -> None:
        """Deliver the checkpoint signal: to the batch shell only, or to the job's
        steps (not the batch shell), as Slurm delivers a job's --signal."""

    @abc.abstractmethod
    def requeue(self, job_id: str) -> None: ...

    @abc.abstractmethod
    def release_begin_time(self, job_id: str) -> None:
        """StartTime=now after a requeue, so the job may start at once."""

    @abc.abstractmethod
    def move_partition(self, job_id: str, partition: str) -> None: ...

    @abc.abstractmethod
    def set_admin_comment(self, job_id: str, text: str) -> None:
        """Replace the job's AdminComment with ``text`` (controller.service.round.admin_comment
        builds it keeping the site's part)."""

    @abc.abstractmethod
    def set_mps_share(self, job_id: str, shares: int) -> None:
        """A pending MPS job's share per node (--gres=mps:N; 100 shares = one GPU's SMs)."""

    @abc.abstractmethod
    def hold(self, job_id: str) -> None:
        """Keep a pending job from starting until ``release_hold`` (Slurm: scontrol hold)."""

    @abc.abstractmethod
    def release_hold(self, job_id: str) -> None:
        """Undo ``hold`` (Slurm: scontrol release)."""


class LeverRelay(LeverTarget):
    """A lever target whose levers all go to one method, ``lever(name, *args)``: its
    lever methods are generated, one per table row (``__init_subclass__``), so a
    read-only or recording backend writes none by hand."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in LEVER_NAMES:
            if getattr(getattr(cls, name), "__isabstractmethod__", False):  # not yet carried out above
                setattr(cls, name, _relayed(name))
        abc.update_abstractmethods(cls)

    @abc.abstractmethod
    def lever(self, name: str, *args) -> None:
        """Carry out (or not) the lever ``name`` with the row's arguments."""


def _relayed(name: str) -> Callable[..., None]:
    def relayed(self, *args) -> None:
        return self.lever(name, *args)
    relayed.__name__ = relayed.__qualname__ = name
    relayed.__doc__ = getattr(LeverTarget, name).__doc__
    return relayed

"""What an executor acts on: ``LeverTarget``, one abstract method per row of the lever table
(controller.core.levers.table: LEVERS and BAND_LEVER, generated from the rows), the lever half of the service's backend
port (controller.service.acting.backend.Backend) and what the simulated slurmctld implements;
``LeverRelay``, a target whose lever methods are generated from the table. Pure."""
from __future__ import annotations

import abc
from typing import Callable

from controller.core.levers.table import BAND_LEVER, LEVER_NAMES, LEVERS


class LeverTarget(abc.ABC):
    """What an executor acts on: one method per row of controller.core.levers.table
    (LEVERS and BAND_LEVER), with the row's name and arguments; each an abstract method
    generated from its row (its docstring the row's ``doc``), so a new row needs none here."""


def _abstract(name: str, doc: str) -> Callable[..., None]:
    def lever(self, *args) -> None:
        raise NotImplementedError(name)
    lever.__name__ = lever.__qualname__ = name
    lever.__doc__ = doc or None
    return abc.abstractmethod(lever)


for _lever in (BAND_LEVER, *LEVERS.values()):
    if _lever.name not in LeverTarget.__dict__:
        setattr(LeverTarget, _lever.name, _abstract(_lever.name, _lever.doc))
abc.update_abstractmethods(LeverTarget)


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

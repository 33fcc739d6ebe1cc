"""The LeverBook: what the controller remembers of the levers it pulled, from round to
round, and ``settle``: what the executor really did, booked.

The planner (controller.core.levers.planner) reads the book; only ``settle`` writes the
levers' outcomes into it (a pin is booked only when the executor carried it out or
may have: applied, or failed after Slurm may have applied it all the same). The service
keeps it in its store's tables (pins with their expiry and cause: controller.service.
state.store's lever rows), the simulator in memory. Pure: no I/O.

Every family's book is held here (``LeverBook``): the bands sent, the pins, the RPC
budget, the AdminComment lines (CommentBook), the open preemptions (PreemptionBook: the
service reads them from its store's open rows each round), the victims left to
slurmctld (SlurmBook), the handoffs (HandoffBook), the partition moves' cool-downs
(MoveBook), GPU sharing's holds (SharingBook) and the lever table's families'
(``recorded``: the jobs each holds a lever on, by lever name); each class stays in its
family's module, beside its rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Protocol

from controller.core.levers.bands import RpcBudget
from controller.core.levers.handoffs import HandoffBook
from controller.core.levers.moves import MoveBook
from controller.core.levers.preemption import PreemptionBook, SlurmBook
from controller.core.levers.sharing import SharingBook
from controller.core.levers.table import LEVERS


class Outcome(Protocol):
    """What carrying one lever out gave: ``applied`` (Slurm did it), ``failed`` (tried
    and refused: Slurm may have applied it all the same); neither: not tried by design
    (observe, shadow)."""

    applied: bool
    failed: bool
    detail: str


@dataclass
class Done:
    """The executor's outcomes of one LeverPlan: the bands' one call, and each other
    lever by its decision id."""

    bands: Optional[Outcome] = None
    by_id: dict[str, Outcome] = field(default_factory=dict)

    def of(self, action) -> Optional[Outcome]:
        return self.by_id.get(action.decision_id)


@dataclass
class BookDelta:
    """What settling changed that the service persists: the pins cleared (their rows go)."""

    pins_cleared: list[str] = field(default_factory=list)


class LeverBook:
    """``bands_sent``: job id -> the SiteFactor last sent (sent again only on change);
    ``pins``: job id -> the expiry of the ReqNodeList this controller set (the store
    keeps it, written before the pin is set, so that a restarted or standby controller
    still clears it); ``pin_causes``: job id -> the start decision that pinned it (its
    expiry cites it); ``rpc``: Slurm's RPC budget as kept for the bulk levers (bands,
    then the AdminComment lines; one bucket for both); ``bands_waiting``: changed bands
    the budget held back the last round; ``comments``: the AdminComment lines' book
    (controller.core.levers.comments.CommentBook); ``preemptions``: the open preemptions
    (PreemptionBook); ``slurm``: the victims left to slurmctld (SlurmBook); ``handoffs``
    (HandoffBook); ``moves``: the partition moves' cool-downs (MoveBook); ``holds``: GPU
    sharing's holds and logged share decisions (SharingBook)."""

    def __init__(self, rpc: RpcBudget, pins: Optional[dict[str, float]] = None,
                 pin_causes: Optional[dict[str, str]] = None, comments: Any = None,
                 held: Iterable[str] = (), recorded: Optional[dict[str, dict[str, str]]] = None):
        self.bands_sent: dict[str, int] = {}
        self.pins: dict[str, float] = pins if pins is not None else {}
        self.pin_causes: dict[str, str] = pin_causes if pin_causes is not None else {}
        self.rpc = rpc
        self.bands_waiting = 0
        self.comments = comments
        self.preemptions = PreemptionBook()  # the service replaces it with its store's open rows
        self.slurm = SlurmBook()
        self.handoffs = HandoffBook()
        self.moves = MoveBook()
        self.holds = SharingBook(held)
        # the table's families' books (a row's ``plan``/``settle``), by lever name: the
        # service starts them from its store's recorded rows (RecordingBackend's)
        self.recorded: dict[str, dict[str, str]] = {name: dict(rows) for name, rows in (recorded or {}).items()}

    def settle(self, levers, done: Done) -> BookDelta:
        """Book what the executor did of ``levers`` (a LeverPlan): the bands sent when
        the call applied, the pins applied or failed (a failed pin counts as set: Slurm
        may have applied it, and a row cleared then leaves a pin no one clears; clearing
        a pin that is not there is harmless), the pins cleared unless the clearing failed
        (tried again next round), the RPCs spent."""
        delta = BookDelta()
        self.rpc.spend(levers.rpc_spent)
        self.bands_waiting = levers.bands_waiting
        for job_id in levers.bands_forgotten:
            self.bands_sent.pop(job_id, None)
        if levers.bands and done.bands is not None and done.bands.applied:
            self.bands_sent.update(levers.bands_changed)
        for pin in levers.pins():
            outcome = done.of(pin)
            if outcome is not None and (outcome.applied or outcome.failed):
                self.pins[pin.job_id] = pin.expires_s
                self.pin_causes[pin.job_id] = pin.cause_id
        for job_id in levers.pins_forgotten:
            self._drop_pin(job_id, delta)
        for unpin in levers.unpins:
            outcome = done.of(unpin)
            if outcome is None or not outcome.failed:
                self._drop_pin(unpin.job_id, delta)
        if levers.comments or levers.comment_due:
            self.comments.settle(levers.comments, levers.comment_keys, levers.comment_due,
                                 lambda action: bool(getattr(done.of(action), "applied", False)), levers.now)
        if levers.table_levers:
            by_type: dict[type, list] = {}
            for action in levers.table_levers:
                by_type.setdefault(type(action), []).append(action)
            for kind, actions in by_type.items():
                settle = LEVERS[kind].settle
                if settle is not None:
                    settle(self, actions, done)
        return delta

    def _drop_pin(self, job_id: str, delta: BookDelta) -> None:
        self.pins.pop(job_id, None)
        self.pin_causes.pop(job_id, None)
        delta.pins_cleared.append(job_id)

    def forget(self, job_id: str) -> None:
        """A job the accounts forgot (finished): its band is no longer ours to compare,
        its move cool-down and the victim left to slurmctld go with it."""
        self.bands_sent.pop(job_id, None)
        self.moves.forget(job_id)
        self.slurm.forget(job_id)
        for rows in self.recorded.values():  # the table's families' (their store rows are pruned)
            rows.pop(job_id, None)
        if self.comments is not None:
            self.comments.forget(job_id)

    def stands_until(self) -> float:
        """The earliest pin expiry (inf: none): a quiet round stands no longer."""
        return min(self.pins.values(), default=float("inf"))


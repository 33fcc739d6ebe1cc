"""Applies lever actions (controller.core.actions) to a backend: the mode lives here only.

One table, ``LEVERS`` (controller.core.levers, shared with the simulator), says which backend method carries out which action type. The
mode decides only the target the table is applied to:
- enforce: the backend itself.
- shadow: a ``ReadOnlyBackend`` (as Ray's autoscaler has a read-only provider): it
  takes the same calls, changes nothing and remembers what it would have done, in
  bounded memory, logged as counts per action kind once a round.
- observe: a ``ReadOnlyBackend`` that does not even remember.
The rest of the service never branches on the mode: it applies actions and reads
each ``LeverResult`` (applied, failed, or ``would``: not carried out by design), and
hands the bookkeeping that only makes sense for levers really pulled (an open
preemption, a pin's row) to ``when_acting``; what else depends on the mode it asks
here as a neutral question (``needs_preflight``, ``sends``, ``skips``, ``in_store``,
``is_ours``), and code with no executor asks ``acts(mode)``
(tests/test_architecture_port.py).
"""
from __future__ import annotations

import logging
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, TypeVar

from controller.core.actions import LeverAction, SetBand
from controller.core.levers.table import BAND_LEVER, LEVERS, Lever
from controller.core.model import InputError
from controller.service.acting.backend import BackendUnavailable, LeverRelay, LeverTarget
from controller.service.state.decision_log import ShadowRepeats
from controller.service.state.store import StoreError

log = logging.getLogger("tiresias.executor")

MODES = ("observe", "shadow", "enforce")  # the run modes; this module alone branches on them
SHADOW_MEMORY = 200  # would-calls kept for inspection (tests, `tiresias shadow-diff`); older ones are counted only
T = TypeVar("T")


@dataclass
class LeverResult:
    """``applied``: the backend carried it out; ``would``: it was not tried by design
    (observe/shadow), so it neither applied nor failed; ``detail``: what happened."""

    applied: bool
    detail: str
    would: bool = False

    @property
    def failed(self) -> bool:
        return not self.applied and not self.would


class ShadowMemory:
    """What a read-only backend would have done: the newest ``keep`` calls as text and
    the number of calls since start. Bounded: a shadow controller that runs for
    months keeps ``keep`` strings."""

    def __init__(self, keep: int = SHADOW_MEMORY):
        self.recent: deque[str] = deque(maxlen=keep)
        self.total = 0

    def add(self, text: str) -> None:
        self.recent.append(text)
        self.total += 1


def acts(mode: str) -> bool:
    """Whether a controller run in ``mode`` pulls levers on the cluster (enforce): what
    the slurm.conf preflight guards (enforce refuses to start on a wrong setting) and
    what restore undoes at a switch away from it. The one place a mode is compared
    outside ``LeverExecutor``: the preflight and the commands that read the store's
    last mode have no executor."""
    return mode == "enforce"


def call_text(name: str, job_id: str, args: tuple) -> str:
    return f"{name}({job_id}{''.join(', ' + repr(a) for a in args)})"


def lever_text(name: str, *args) -> str:
    """A target's lever call as logs and the shadow memory show it: the batched band
    call by its size, any other with its job id and arguments."""
    if name == BAND_LEVER.name:
        return f"{name}({len(args[0])} jobs)"
    return call_text(name, args[0], args[1:])


class ReadOnlyBackend(LeverRelay):
    """Takes every lever call and carries none out; with ``memory``, remembers them.

    Only the levers: observation and reads go to the real backend (the service's
    other modules hold it), so shadow plans from the same state as enforce."""

    def __init__(self, memory: Optional[ShadowMemory] = None):
        self.memory = memory

    def lever(self, name: str, *args) -> None:
        if self.memory is not None:
            self.memory.add(lever_text(name, *args))


class LeverExecutor:
    """``guard`` is called before every lever that reaches the backend; it raises
    (LeaseLost) when this process must not act, e.g. a standby controller's lease
    ran out (controller.service.acting.lease)."""

    def __init__(self, backend: LeverTarget, mode: str, guard: Optional[Callable[[], None]] = None,
                 memory_size: int = SHADOW_MEMORY):
        if mode not in MODES:
            raise InputError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
        self.backend = backend
        self.mode = mode
        self.guard = guard
        self.memory = ShadowMemory(memory_size)
        self.acting = acts(mode)
        self._read_only = None if self.acting else ReadOnlyBackend(self.memory if mode == "shadow" else None)
        self._repeats = ShadowRepeats()
        self._round: list[LeverAction] = []  # this round's actions, in the order applied (or not)

    @property
    def would(self) -> list[str]:
        """The newest would-calls (shadow), oldest first; at most ``memory_size``."""
        return list(self.memory.recent)

    def apply(self, action: LeverAction) -> LeverResult:
        """Carry one action out (enforce) or say what it would do.

        A failing lever (job gone, no longer pending) is logged with the job id and
        reported as not applied; BackendUnavailable propagates so the round stops."""
        lever = LEVERS[type(action)]
        args = lever.args(action)
        self._round.append(action)
        return self._carry(call_text(lever.name, action.job_id, args),
                           lambda target: lever.method(target)(action.job_id, *args), f"job {action.job_id}: {lever.name}")

    def apply_bands(self, bands: list[SetBand]) -> LeverResult:
        """All of a round's SiteFactor changes in one backend call."""
        if not bands:
            return LeverResult(True, "")
        args = BAND_LEVER.args(bands)
        self._round.extend(bands)
        return self._carry(lever_text(BAND_LEVER.name, *args), lambda target: BAND_LEVER.method(target)(*args),
                           "site factors")

    def _carry(self, text: str, call: Callable[[Any], None], what: str) -> LeverResult:
        if self._read_only is not None:
            call(self._read_only)
            log.debug("%s: would %s", self.mode, text)
            return LeverResult(False, f"{self.mode}: would {text}", would=True)
        if self.guard is not None:
            self.guard()
        try:
            call(self.backend)
        except (BackendUnavailable, StoreError):  # a lease lost mid-call (the backend's fence) stops the round
            raise
        except (RuntimeError, ValueError) as err:
            log.warning("%s failed: %s", what, err)
            return LeverResult(False, f"failed: {err}")
        return LeverResult(True, text)

    def pulled(self) -> tuple[LeverAction, ...]:
        """The round's actions so far (applied or not, in order): what end_round will return."""
        return tuple(self._round)

    def when_acting(self, bookkeeping: Callable[[], T]) -> Optional[T]:
        """Run ``bookkeeping`` (a store write that goes with levers really pulled: a
        pin's row, an open preemption) only in enforce; None otherwise."""
        return bookkeeping() if self.acting else None

    @property
    def needs_preflight(self) -> bool:
        """Whether rounds wait for the slurm.conf preflight to pass (and stop at its
        refusal): when levers reach the cluster; the others plan from what they see."""
        return self.acting

    def sends(self, action_type: type) -> bool:
        """Whether actions of ``action_type`` (a LEVERS row's, or SetBand) reach the
        cluster, rather than being said (``would``)."""
        if action_type is not SetBand and action_type not in LEVERS:
            raise ValueError(f"{action_type.__name__} is not a lever action")
        return self.acting

    def skips(self, action_type: type) -> bool:
        """Whether actions of ``action_type`` are not even planned: an informational
        lever (the LEVERS row says so: the AdminComment line) that is not sent."""
        return LEVERS[action_type].informational and not self.sends(action_type)

    def in_store(self) -> LeverResult:
        """The result of an action the service carries out in its own store (a
        promotion: the accounts are kept in every mode), as its decision reports it."""
        return LeverResult(self.logs_decisions, "store", would=not self.logs_decisions)

    def is_ours(self, logged: dict) -> bool:
        """Whether a decision-log row is a lever of this run's kind: logged in this mode,
        and pulled (enforce) or not pulled by design (shadow); a lever that failed
        (refused) is none."""
        return logged["mode"] == self.mode and (bool(logged["applied"]) or not self.acting)

    def would_text(self, what: str) -> str:
        """The detail of a decision whose levers were not pulled by design."""
        return f"{self.mode}: would {what}"

    @property
    def logs_decisions(self) -> bool:
        """False in observe: the controller only keeps accounts, and logs no decision."""
        return self.mode != "observe"

    @property
    def makes_decisions(self) -> bool:
        """Whether decisions (preemptions, moves, bands) are made and told at all: not
        where the controller only keeps accounts."""
        return self.logs_decisions

    def decisions_to_log(self, entries: Iterable[dict]) -> list[dict]:
        """The round's decision-log entries to store: all in enforce, none in observe;
        in shadow those that changed since the last round (decision_log.ShadowRepeats)."""
        if not self.logs_decisions:
            return []
        entries = list(entries)
        return entries if self.acting else self._repeats.changed(entries)

    def begin_round(self) -> None:
        """Forget the actions of a round that was cut short."""
        self._round = []

    def end_round(self, round_id: int) -> list[LeverAction]:
        """Close a round: returns its actions (applied or not, in order); shadow logs
        one line with how many of each kind it would have applied, never the actions."""
        actions, self._round = self._round, []
        if actions and self.mode == "shadow":
            counts = Counter(action.kind for action in actions)
            log.info("shadow round %d: would apply %s", round_id,
                     ", ".join(f"{kind} x{n}" for kind, n in sorted(counts.items())))
        return actions

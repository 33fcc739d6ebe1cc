"""Carries lever calls out, or only says what it would do: the mode lives here.

- enforce: calls the backend.
- shadow: logs every call it would make and changes nothing.
- observe: does nothing (the controller only keeps accounts).
Policies and the controller never branch on the mode; they call the executor.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Optional

from controller.service.backend import Backend, BackendUnavailable

log = logging.getLogger("tiresias.executor")


@dataclass
class LeverResult:
    applied: bool
    detail: str


@dataclass
class LeverExecutor:
    backend: Backend
    mode: str
    would: list[str] = field(default_factory=list)  # shadow: the calls it would have made
    # Called before every enforce-mode call; raises (LeaseLost) when this process must
    # not act, e.g. a standby controller's lease ran out (controller.service.lease).
    guard: Optional[Callable[[], None]] = None

    def call(self, lever: str, job_id: str, *args) -> LeverResult:
        """Run ``backend.<lever>(job_id, *args)`` in enforce mode; describe it otherwise.

        A failing lever (job gone, no longer pending) is logged with the job id and
        reported as not applied; BackendUnavailable propagates so the round stops.
        """
        text = f"{lever}({job_id}{''.join(', ' + repr(a) for a in args)})"
        if self.mode != "enforce":
            if self.mode == "shadow":
                self.would.append(text)
                log.info("shadow: would %s", text)
            return LeverResult(False, f"{self.mode}: would {text}")
        if self.guard is not None:
            self.guard()
        try:
            getattr(self.backend, lever)(job_id, *args)
        except BackendUnavailable:
            raise
        except (RuntimeError, ValueError) as err:
            log.warning("job %s: %s failed: %s", job_id, lever, err)
            return LeverResult(False, f"failed: {err}")
        return LeverResult(True, text)

    def set_site_factors(self, factors: dict[str, int]) -> LeverResult:
        if not factors:
            return LeverResult(True, "")
        text = f"set_site_factors({len(factors)} jobs)"
        if self.mode != "enforce":
            if self.mode == "shadow":
                self.would.append(text)
                log.info("shadow: would %s: %s", text, factors)
            return LeverResult(False, f"{self.mode}: would {text}")
        if self.guard is not None:
            self.guard()
        try:
            self.backend.set_site_factors(factors)
        except BackendUnavailable:
            raise
        except (RuntimeError, ValueError) as err:
            log.warning("site factors: %s", err)
            return LeverResult(False, f"failed: {err}")
        return LeverResult(True, text)

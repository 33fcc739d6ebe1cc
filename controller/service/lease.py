"""The controller lease of a standby pair: two ``tiresias run`` on two hosts share a
PostgreSQL store; the one holding the lease acts, the other waits and takes over
when the lease runs out (its holder died, stalled or lost the database).

Fencing, twice over:
- in the database: the store checks, holding the lease row's lock, that this
  process's epoch is still the current one in every transaction (``Store.fence``),
  so a deposed leader's writes are refused (``LeaseLost``);
- before a lever call: the leader acts only while its lease has at least a third
  of its TTL left on its own monotonic clock, measured from before the renewal
  (renewing first when less is left). A leader that was stopped (SIGSTOP) and
  resumes finds its lease over and asks the database before it touches Slurm.

Takeover takes at most TTL + poll_s after the leader's last renewal.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from typing import Callable, Optional

from controller.service.store import Fence, LeaseLost, Store, StoreError

log = logging.getLogger("tiresias.lease")


def holder_name() -> str:
    """host:pid:random: unique per process, readable in the lease row."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Lease:
    """``epoch``: the epoch held (None while standby). ``gained``: set when the lease
    was newly taken, so the controller reloads its state from the store."""

    def __init__(self, store: Store, cluster: str, ttl_s: float, holder: Optional[str] = None,
                 monotonic: Callable[[], float] = time.monotonic):
        self.store = store
        self.cluster = cluster
        self.ttl_s = float(ttl_s)
        self.holder = holder or holder_name()
        self.monotonic = monotonic
        self.epoch: Optional[int] = None
        self.valid_until = -1.0  # monotonic s
        self.gained = False

    def hold(self) -> bool:
        """Renew or try to take the lease; True when this process is the leader now."""
        asked_at = self.monotonic()
        try:
            epoch = self.store.hold_lease(self.cluster, self.holder, self.ttl_s, self.epoch)
        except StoreError as err:
            if self.epoch is not None:
                log.warning("lease not renewed (%s); acting for %.1f s more at most", err,
                            max(0.0, self.valid_until - self.monotonic()))
            return self.valid()
        if epoch is None:
            if self.epoch is not None:
                log.warning("lease of cluster %s taken by another controller: standing by", self.cluster)
            self.epoch = None
            self.store.fence = None
            return False
        if epoch != self.epoch:
            log.warning("leader of cluster %s now (lease epoch %d, holder %s)", self.cluster, epoch, self.holder)
            self.gained = True
        self.epoch = epoch
        self.store.fence = Fence(self.cluster, self.holder, epoch)
        self.valid_until = asked_at + self.ttl_s
        return True

    def valid(self, margin_s: float = 0.0) -> bool:
        return self.epoch is not None and self.monotonic() + margin_s < self.valid_until

    def guard(self) -> None:
        """Before a lever call: renew when under a third of the TTL is left; LeaseLost
        when the lease cannot be held (the round stops, nothing is touched)."""
        margin = self.ttl_s / 3
        if not self.valid(margin) and not (self.hold() and self.valid(margin)):
            raise LeaseLost(f"lease of cluster {self.cluster} not held (epoch {self.epoch}): not acting")

    def release(self) -> None:
        if self.epoch is None:
            return
        try:
            self.store.fence = None
            self.store.release_lease(self.cluster, self.holder, self.epoch)
        except StoreError as err:
            log.warning("lease not released (%s); the standby takes over after %.1f s", err, self.ttl_s)
        self.epoch = None

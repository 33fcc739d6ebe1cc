"""One controller per cluster and store, always.

SQLite (one host): the controller holds an exclusive ``flock`` on ``<db>.lock`` for
as long as it runs (``ControllerLock``); a second one started on the same store
refuses with one line naming the holder. The kernel drops the lock when the
holder dies, so there is no lease to expire and no deposed leader.

PostgreSQL: the controller lease, taken always (a standby pair is two ``tiresias
run`` on two hosts sharing the store; the one holding the lease acts, the other
waits and takes over when the lease runs out: its holder died, stalled or lost the
database). Fencing, twice over:
- in the database: the store checks, holding the lease row's lock, that this
  process's epoch is still the current one in every transaction (``Store.fence``),
  so a deposed leader's writes are refused (``LeaseLost``);
- before every Slurm command that changes something (the backend's fence hook,
  ``guard``): the leader runs it only while its lease has more than ``margin_s``
  (the command time-out + 1 s) left on its own monotonic clock, measured from
  before the renewal, renewing first when less is left. A command then ends before
  the lease it was checked against, and one ``set_site_factors`` call of many
  ``scontrol`` chunks is checked before each chunk. A leader that was stopped
  (SIGSTOP) and resumes finds its lease over and asks the database before it
  touches Slurm.

Takeover takes at most TTL + poll_s after the leader's last renewal. A leader
stopped inside a transaction holds the lease row's lock; the server ends its session
once it has sat idle in that transaction for a TTL (``Store(stalled_tx_s=)``), else
the standby's takeover would wait on that lock for as long as the leader is stopped
(seen: a SIGSTOP landing in a round's bookkeeping kept the standby out for good).
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import secrets
import socket
import time
from typing import Callable, Optional

from controller.service.state.store import Fence, LeaseLost, Store, StoreError

log = logging.getLogger("tiresias.lease")


def holder_name() -> str:
    """host:pid:random: unique per process, readable in the lease row."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Lease:
    """``epoch``: the epoch held (None while standby). ``gained``: set when the lease
    was newly taken, so the controller reloads its state from the store."""

    def __init__(self, store: Store, cluster: str, ttl_s: float, holder: Optional[str] = None,
                 monotonic: Callable[[], float] = time.monotonic, margin_s: Optional[float] = None):
        self.store = store
        self.cluster = cluster
        self.ttl_s = float(ttl_s)
        # Lease a lever command needs left when it starts (config.fence_margin()).
        self.margin_s = self.ttl_s / 3 if margin_s is None else float(margin_s)
        if self.margin_s >= self.ttl_s:
            raise ValueError(f"lease margin {self.margin_s:g} s must be below its TTL {self.ttl_s:g} s")
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
        """Just before a Slurm command that changes something: renew when no more than
        ``margin_s`` is left; LeaseLost when the lease cannot be held (the round stops,
        the command does not run)."""
        margin = self.margin_s
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


class ControllerLock:
    """The exclusive ``flock`` on ``<db>.lock`` a controller holds on a SQLite store
    while it runs. ``acquire`` raises StoreError (one line, naming the holder's pid)
    when another process holds it."""

    def __init__(self, db_path: str):
        self.path = db_path + ".lock"
        self._fd: Optional[int] = None

    def acquire(self) -> "ControllerLock":
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as err:
            raise StoreError(f"controller lock {self.path}: cannot open: {err.strerror or err}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StoreError(f"another controller (pid {holder}) already runs on this store ({self.path} is "
                                 "locked): one controller per cluster and store; not starting") from None
            raise StoreError(f"controller lock {self.path}: {err.strerror or err}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def single_controller(store: Store, config) -> Optional[ControllerLock]:
    """What keeps a second controller off this store: the flock on a SQLite file
    (held until the process ends), None for PostgreSQL (the lease, taken by the
    Controller) and for an in-memory store."""
    return ControllerLock(store.path).acquire() if store.is_sqlite and store.path else None

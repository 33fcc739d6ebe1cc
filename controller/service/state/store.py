"""The controller's persistent state: per-job attained service, finished-job service
samples, the decision log, open preemptions, collected usage records, round ids,
the levers set on jobs (for restore) and each cluster's last mode.

One ``Store`` wraps one SQLAlchemy engine (SQLite by default, PostgreSQL works
too); it is the one facade the service and the commands use. It is composed of
parts split by what they keep, each module declaring its own tables:
- engine.py: the engine, the transactions (every public method runs in its own
  transaction, or in the caller's inside ``with store.transaction():``) and the
  lease fence (a deposed leader's writes are refused: ``LeaseLost``);
- migrations.py: the schema version, its upgrades and the backup before them;
- jobs.py: each job's service (``JobRecord``), the service samples, usage records;
- decision_rows.py: the decision log;
- lever_rows.py: the levers set on Slurm jobs (open preemptions, pins, handoffs, what
  restore undoes);
- clusters.py: round ids, the standby pair's lease, the last mode.
No module outside controller/service/state/ writes SQL. Units: times are epoch
seconds, service GPU-seconds.
"""
from __future__ import annotations

from typing import Optional

from controller.service.state.clusters import ClusterRows
from controller.service.state.decision_rows import DecisionRows
from controller.service.state.engine import (
    ACCESS, DEFAULT_URL, Fence, LeaseLost, StoreBusy, StoreEngine, StoreError,
)
from controller.service.state.jobs import JOB_FIELDS, JobRecord, JobRows
from controller.service.state.lever_rows import LeverRows, PendingPreemption
from controller.service.state.migrations import SCHEMA_VERSION, SchemaVersions, backup_sqlite

__all__ = [
    "ACCESS", "DEFAULT_URL", "JOB_FIELDS", "SCHEMA_VERSION", "Fence", "JobRecord", "LeaseLost",
    "PendingPreemption", "Store", "StoreBusy", "StoreError", "backup_sqlite",
]


class Store(JobRows, DecisionRows, LeverRows, ClusterRows, SchemaVersions, StoreEngine):
    """Persistent controller state over SQLAlchemy; see the module docstring.

    ``busy_timeout_s`` bounds how long a call waits for another process's lock
    before raising ``StoreBusy``. ``stalled_tx_s`` (PostgreSQL): the server ends a
    session of ours that sits inside a transaction doing nothing for longer, so a
    process stopped mid-transaction (SIGSTOP, a frozen VM) does not keep the lease
    row locked, and the standby blocked forever, once its lease is over.
    ``access``: one of ``ACCESS`` (controller.service.state.engine).
    """

    def __init__(self, url: str = DEFAULT_URL, busy_timeout_s: float = 5.0, echo: bool = False,
                 access: str = "write", stalled_tx_s: Optional[float] = None):
        StoreEngine.__init__(self, url, busy_timeout_s, echo, access, stalled_tx_s)
        self._start_dirty_tracking()
        self._open()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

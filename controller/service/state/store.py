"""The controller's persistent state: per-job attained service, finished-job service
samples, the decision log, open preemptions, collected usage records, round ids,
the levers set on jobs (for restore) and each cluster's last mode.

One ``Store`` wraps one SQLAlchemy engine (SQLite by default, PostgreSQL works
too). Every public method runs in its own transaction, or in the caller's when it
is inside ``with store.transaction():`` (the controller's round bookkeeping), so a
crash or a lock never leaves half a round written. With ``fence`` set (a standby
pair on PostgreSQL, see controller.service.acting.lease), every transaction first checks,
holding the lease row's lock, that this process still holds the lease at its epoch:
a deposed leader's writes are refused (``LeaseLost``). Units: times are epoch
seconds, service GPU-seconds.

One module on purpose (about 700 lines): every table, the schema upgrades, the
transaction and fencing rules live together, so that no other module writes SQL.
"""
from __future__ import annotations

import json
import operator
import os
import sqlite3
import threading
import time
import urllib.parse
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Iterable, Iterator, Optional

from sqlalchemy import (
    Boolean, Column, Float, Index, Integer, MetaData, String, Table, Text,
    bindparam, create_engine, event, inspect, or_, select, update,
)
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import (
    ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError, OperationalError, SQLAlchemyError,
)

from controller.core.model import InputError
from controller.service.state.secrets import redact_url

SCHEMA_VERSION = 6  # 2: job_service.queue_level/queue_entry (the MLFQ place); 3: service_samples.censored;
# 4: the decision that caused a decision (decision_log.cause_id), an open preemption's and a pin's decision;
# 5: service_samples.user/account/job_name/num_gpus (dgittins' keys); 6: handoffs.brake (what a failed
# handoff waits on)
DEFAULT_URL = "sqlite:////var/lib/tiresias/tiresias.db"
# How a process opens the store: "read" (acct, queue, explain, report...: the current
# schema only, nothing written, never migrated), "write" (the controller and the
# commands that record something: creates a new database, refuses an older schema),
# "migrate" (`tiresias migrate`: upgrades an older schema), "inspect" (reads the
# version only, `tiresias migrate --check`).
ACCESS = ("read", "write", "migrate", "inspect")


class StoreError(RuntimeError):
    """The database failed; the message is one line naming the database."""


class StoreBusy(StoreError):
    """Another process held the database lock for longer than the busy timeout."""


class LeaseLost(StoreError):
    """This process no longer holds the controller lease: nothing was written."""


@dataclass(frozen=True)
class Fence:
    """The lease this process must still hold for its writes to commit."""

    cluster: str
    holder: str
    epoch: int


metadata = MetaData()

schema_meta = Table(
    "schema_meta", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(256), nullable=False),
)

job_service = Table(
    "job_service", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("job_id", String(128), primary_key=True),
    Column("user", String(128), nullable=False, default=""),
    Column("partition", String(128), nullable=False, default=""),
    Column("num_gpus", Integer, nullable=False),
    Column("submit_time_s", Float, nullable=False),
    Column("first_start_s", Float),
    Column("attained_gpu_s", Float, nullable=False),
    Column("queue_service_gpu_s", Float, nullable=False),
    Column("executed_s", Float, nullable=False),
    Column("executed_since_promotion_s", Float, nullable=False),
    Column("waited_since_promotion_s", Float, nullable=False),
    Column("last_observed_s", Float),
    Column("last_running", Boolean, nullable=False),
    Column("restart_count", Integer, nullable=False),
    Column("preemptions", Integer, nullable=False),
    Column("promotions", Integer, nullable=False),
    Column("moves", Integer, nullable=False),
    Column("skew", Float, nullable=False),
    Column("level", Integer, nullable=False),
    Column("state", String(32), nullable=False),
    Column("finished_s", Float),
    Column("end_state", String(64)),
    Column("queue_level", Integer),
    Column("queue_entry", Float),
)

service_samples = Table(
    "service_samples", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("job_id", String(128), primary_key=True),
    Column("gpu_s", Float, nullable=False),
    Column("finished_s", Float, nullable=False),
    # True: the job was cut short (cancelled, timed out, node failure): its service is
    # a lower bound of what it needed, a right-censored sample (Kaplan-Meier).
    Column("censored", Boolean, nullable=False, default=False),
    # what Slurm knew of the job at submit (dgittins conditions on it; '' unknown)
    Column("user", String(128)),
    Column("account", String(128)),  # the account, else the partition
    Column("job_name", String(256)),
    Column("num_gpus", Integer),
    Index("ix_service_samples_finished", "cluster", "finished_s"),
)

decision_log = Table(
    "decision_log", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(128), nullable=False),
    Column("round_id", Integer, nullable=False),
    Column("now_s", Float, nullable=False),
    Column("mode", String(32), nullable=False),
    Column("decision_id", String(128), nullable=False),
    Column("job_id", String(128), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("reason", Text, nullable=False),
    Column("applied", Boolean, nullable=False),
    Column("detail", Text),
    Column("cause_id", String(512)),  # the decision(s) that caused this one, comma-separated; NULL: none
    Index("ix_decision_log_job", "cluster", "job_id"),
)

preemptions = Table(
    "preemptions", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(128), nullable=False),
    Column("job_id", String(128), nullable=False),
    Column("signalled_at_s", Float, nullable=False),
    Column("restart_count", Integer, nullable=False),
    Column("outcome", String(64)),  # NULL while the preemption is in progress
    Column("finished_s", Float),
    Column("decision_id", String(128)),  # the preemption decision; the requeue cites it
)
# At most one open preemption per job: a restarted controller sees it and does not
# signal/requeue a second time. Partial unique indexes exist in SQLite and PostgreSQL.
Index(
    "uq_preemptions_open", preemptions.c.cluster, preemptions.c.job_id, unique=True,
    sqlite_where=preemptions.c.outcome.is_(None), postgresql_where=preemptions.c.outcome.is_(None),
)

usage_records = Table(
    "usage_records", metadata,
    Column("record_id", String(256), primary_key=True),
    Column("fields_json", Text, nullable=False),
    Column("added_s", Float, nullable=False),
)

round_counters = Table(
    "round_counters", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("last_round_id", Integer, nullable=False),
)

# The controller lease of a standby pair: one row per cluster. ``epoch`` grows by one
# at every change of holder; ``expires_s`` is on the database's clock, so the hosts'
# clocks never have to agree.
leases = Table(
    "leases", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("holder", String(256), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("expires_s", Float, nullable=False),
)

# ReqNodeList pins this controller set, with their expiry, so that a restarted or
# standby controller still clears them (written before the pin is set).
pins = Table(
    "pins", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("job_id", String(128), primary_key=True),
    Column("expires_s", Float, nullable=False),
    Column("decision_id", String(128)),  # the start that pinned the job (its expiry cites it)
)

# Handoffs (controller.service.round.handoff): the job a preemption made room for, watched
# until it starts, and, once it did not start in time, what must change before a
# preemption is made for it again (controller.core.levers.handoffs.Brake). Kept here so that
# a restarted or standby controller does not signal again for a job whose handoff is
# pending or failed.
handoffs = Table(
    "handoffs", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("job_id", String(128), primary_key=True),
    Column("signalled_s", Float, nullable=False),
    Column("victims", Text, nullable=False),  # comma-separated job ids
    Column("blocked_until_s", Float),  # schema < 6: a failed handoff's end of block; not written since
    Column("brake", Text),  # a failed handoff's brake (JSON, Brake.to_json); NULL while pending
)

# The levers on Slurm jobs that ``tiresias restore`` undoes (controller.service.acting.restore):
# one row per job and lever ("site_factor", "pin", "admin_comment"), written before the
# lever is carried out; ``value`` is what was set (the SiteFactor, the pinned nodes
# comma-joined; "ours" for an AdminComment line, whose text restore reads from Slurm).
# A row goes when restore has reset the lever
# (or found the job gone) or, for a pin, when the controller cleared it itself.
levers_set = Table(
    "levers_set", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("job_id", String(128), primary_key=True),
    Column("lever", String(32), primary_key=True),
    Column("value", Text, nullable=False),
    Column("set_s", Float, nullable=False),
)

# The mode each cluster's controller last started in: a start in shadow/observe after
# enforce runs restore (the documented way back leaves nothing behind).
controller_modes = Table(
    "controller_modes", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("mode", String(32), nullable=False),
    Column("since_s", Float, nullable=False),
)


@dataclass(slots=True)
class JobRecord:
    """One job's persisted service. Times in epoch seconds, service in GPU-seconds.

    ``attained_gpu_s`` is never reset; ``queue_service_gpu_s`` is reset by a
    starvation promotion. ``restart_count`` is the last Slurm restart count seen;
    ``preemptions`` counts the requeues this controller did.
    """

    job_id: str
    num_gpus: int
    submit_time_s: float
    user: str = ""
    partition: str = ""
    first_start_s: Optional[float] = None
    attained_gpu_s: float = 0.0
    queue_service_gpu_s: float = 0.0
    executed_s: float = 0.0
    executed_since_promotion_s: float = 0.0
    waited_since_promotion_s: float = 0.0
    last_observed_s: Optional[float] = None
    last_running: bool = False
    restart_count: int = 0
    preemptions: int = 0
    promotions: int = 0
    moves: int = 0
    skew: float = 0.0
    level: int = 0
    state: str = "PENDING"
    finished_s: Optional[float] = None
    end_state: Optional[str] = None
    queue_level: Optional[int] = None  # the MLFQ place (controller.core.queues): a restart keeps the order
    queue_entry: Optional[float] = None


JOB_FIELDS = tuple(f.name for f in fields(JobRecord))
_record_values = operator.attrgetter(*JOB_FIELDS)  # a JobRecord's fields as one tuple, in JOB_FIELDS order
# executemany: SET takes the columns each parameter row names besides the key.
_UPDATE_JOB_BY_KEY = update(job_service).where(job_service.c.cluster == bindparam("key_cluster"),
                                               job_service.c.job_id == bindparam("key_job_id"))


@dataclass(frozen=True)
class PendingPreemption:
    """A preemption signalled but not yet seen through (requeue or job end)."""

    job_id: str
    signalled_at_s: float
    restart_count: int
    decision_id: str = ""  # the preemption decision (the requeue cites it)


class Store:
    """Persistent controller state over SQLAlchemy; see the module docstring.

    ``busy_timeout_s`` bounds how long a call waits for another process's lock
    before raising ``StoreBusy``. ``stalled_tx_s`` (PostgreSQL): the server ends a
    session of ours that sits inside a transaction doing nothing for longer, so a
    process stopped mid-transaction (SIGSTOP, a frozen VM) does not keep the lease
    row locked, and the standby blocked forever, once its lease is over.
    """

    def __init__(self, url: str = DEFAULT_URL, busy_timeout_s: float = 5.0, echo: bool = False,
                 access: str = "write", stalled_tx_s: Optional[float] = None):
        if access not in ACCESS:
            raise ValueError(f"store access {access!r} is not one of {', '.join(ACCESS)}")
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise InputError(f"store url: cannot parse {redact_url(url)!r} (expected e.g. {DEFAULT_URL})") from None
        self.url = parsed
        self.access = access
        self.read_only = access in ("read", "inspect")
        self.busy_timeout_s = float(busy_timeout_s)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite:
            self.name = parsed.database or ":memory:"
        else:
            self.name = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() not in ("sqlite", "postgresql"):
            raise InputError(f"store url: backend {parsed.get_backend_name()!r} not supported (sqlite or postgresql)")
        self.path = parsed.database if self.is_sqlite and parsed.database not in (None, "", ":memory:") else None

        connect_args: dict[str, Any] = {}
        options: dict[str, Any] = {}
        if self.is_sqlite:
            connect_args["timeout"] = self.busy_timeout_s
            if self.path is not None and self.read_only:
                options["creator"] = self._read_only_sqlite
            elif self.path is not None:
                _create_private_file(self.path)
        else:
            # A row/table lock held elsewhere fails after the same bound as SQLite's.
            connect_args["options"] = f"-c lock_timeout={int(self.busy_timeout_s * 1000)}" + (
                " -c default_transaction_read_only=on" if self.read_only else "") + (
                f" -c idle_in_transaction_session_timeout={max(1, int(stalled_tx_s * 1000))}"
                if stalled_tx_s else "")
            connect_args["connect_timeout"] = max(1, int(self.busy_timeout_s))
            # psycopg2 sends an executemany UPDATE (save_jobs) in pages, not a row per round trip.
            options["executemany_mode"] = "values_plus_batch"
        try:
            self.engine = create_engine(parsed, connect_args=connect_args, echo=echo, **options)
        except (NoSuchModuleError, ArgumentError, ImportError) as exc:
            raise InputError(f"store url {self.name}: {_one_line(exc)}") from None
        if self.is_sqlite and not self.read_only:
            event.listen(self.engine, "connect", _sqlite_on_connect)
        self.fence: Optional[Fence] = None
        self._bound = threading.local()  # .conn: the open transaction of transaction(); .on_commit: its hooks
        # (cluster, job id) -> the job_service row as this process last committed or loaded
        # it: save_jobs writes only records that differ (dirty tracking). Updated only
        # after a commit, so a rolled-back write is written again.
        self._committed_rows: dict[tuple[str, str], tuple] = {}
        self._committed_lock = threading.Lock()
        self._open()

    def _read_only_sqlite(self) -> sqlite3.Connection:
        """A connection SQLite itself keeps from writing (mode=ro): a read-only command
        cannot create, migrate or change the file, whatever code path runs."""
        if not os.path.exists(self.path):
            raise StoreError(f"database {self.name} does not exist (the controller creates it when it first starts)")
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
        return sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s, check_same_thread=False)

    # -- lifecycle ---------------------------------------------------------------

    def _open(self) -> None:
        """Check the schema version. Only ``migrate`` upgrades an older schema; ``write``
        (the controller) creates a new database but refuses an older one; ``read`` opens
        only the current version and changes nothing; ``inspect`` only reads the version."""
        found = self._stored_version()
        self.found_version = found
        if self.access == "inspect":
            self.schema_version = found
            return
        if found is None:
            if self.read_only:
                raise StoreError(f"database {self.name} holds no tiresias schema yet (the controller creates it "
                                 "when it first starts)")
            try:
                with self._tx() as conn:
                    metadata.create_all(conn)
                    _insert_ignore(conn, schema_meta, [{"key": "schema_version", "value": str(SCHEMA_VERSION)}],
                                   ["key"])
            except StoreError as err:
                # another process (the controller and a command opened at once) created the
                # schema between our look and our create: theirs stands, read it
                if "already exists" not in str(err):
                    raise
            found = self._version_once_created()
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"database {self.name}: schema version {found} is newer than this controller's {SCHEMA_VERSION}"
            )
        if found < SCHEMA_VERSION:
            if self.access != "migrate":
                raise StoreError(f"database {self.name}: schema version {found} is older than this version's "
                                 f"{SCHEMA_VERSION}: run `tiresias migrate` (it backs the database up first)")
            self._upgrade(found)
            found = SCHEMA_VERSION
        self.schema_version = int(found)

    def _version_once_created(self) -> int:
        """The schema version, waiting (up to ``busy_timeout_s``) for the process that
        is creating the schema to commit its version row: SQLite commits each CREATE
        TABLE on its own, so a racing opener may see the tables before that row."""
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            found = self._stored_version()
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise StoreError(f"database {self.name}: another process created the schema but wrote no "
                                 f"schema_version within {self.busy_timeout_s:g} s")
            time.sleep(0.05)

    def _stored_version(self) -> Optional[int]:
        """The schema version the database records; None when it holds no schema yet."""
        with self._tx() as conn:
            if not inspect(conn).has_table("schema_meta"):
                return None
            found = conn.execute(select(schema_meta.c.value).where(schema_meta.c.key == "schema_version")
                                 ).scalar_one_or_none()
        return None if found is None else int(found)

    # Columns added since version 1, by the version that added them. Old rows get
    # NULL places (each job re-enters its queue once, in the order it entered it) and
    # uncensored samples (version 2 recorded only completed jobs).
    _ADDED_COLUMNS = (
        (2, "job_service", "queue_level", "INTEGER"),
        (2, "job_service", "queue_entry", "FLOAT"),
        (3, "service_samples", "censored", "BOOLEAN NOT NULL DEFAULT FALSE"),
        (4, "decision_log", "cause_id", "VARCHAR(512)"),
        (4, "preemptions", "decision_id", "VARCHAR(128)"),
        (4, "pins", "decision_id", "VARCHAR(128)"),
        (5, "service_samples", "user", "VARCHAR(128)"),
        (5, "service_samples", "account", "VARCHAR(128)"),
        (5, "service_samples", "job_name", "VARCHAR(256)"),
        (5, "service_samples", "num_gpus", "INTEGER"),
        (6, "handoffs", "brake", "TEXT"),
    )

    def _upgrade(self, found: int) -> None:
        """Bring an older database to SCHEMA_VERSION in one transaction (the tables
        added since ``found`` are created, the columns added)."""
        with self._tx() as conn:
            metadata.create_all(conn)
            inspector = inspect(conn)
            for version, table, column, kind in self._ADDED_COLUMNS:
                present = {c["name"] for c in inspector.get_columns(table)}
                if version > found and column not in present:
                    conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            conn.execute(update(schema_meta).where(schema_meta.c.key == "schema_version")
                         .values(value=str(SCHEMA_VERSION)))

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Every store call inside the block joins one transaction: all or nothing."""
        if getattr(self._bound, "conn", None) is not None:
            yield  # already inside one
            return
        with self._tx() as conn:
            self._bound.conn = conn
            try:
                yield
            finally:
                self._bound.conn = None

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """One transaction (or the open one of ``transaction()``); database errors
        become one-line StoreBusy/StoreError; a lost lease is LeaseLost."""
        bound = getattr(self._bound, "conn", None)
        if bound is not None:
            yield bound
            return
        on_commit: list = []
        self._bound.on_commit = on_commit
        try:
            with self.engine.begin() as conn:
                if self.fence is not None:
                    self._check_fence(conn, self.fence)
                yield conn
            for hook in on_commit:
                hook()
        except (InputError, StoreError):
            raise
        except DBAPIError as exc:
            if _is_lock_error(exc):
                raise StoreBusy(
                    f"database {self.name} is locked by another process "
                    f"(waited {self.busy_timeout_s:g} s); nothing was written"
                ) from None
            raise StoreError(f"database {self.name}: {_one_line(exc.orig or exc)}") from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"database {self.name}: {_one_line(exc)}") from exc
        finally:
            self._bound.on_commit = None

    def _after_commit(self, hook) -> None:
        """Run ``hook()`` once the open transaction commits (never if it rolls back)."""
        self._bound.on_commit.append(hook)

    # -- job service --------------------------------------------------------------

    def load_jobs(self, cluster: str, include_finished: bool = True) -> dict[str, JobRecord]:
        """Every stored job of ``cluster`` by job id (finished ones unless excluded)."""
        query = select(job_service).where(job_service.c.cluster == cluster)
        if not include_finished:
            query = query.where(job_service.c.finished_s.is_(None))
        with self._tx() as conn:
            rows = conn.execute(query).mappings().all()
        records = {row["job_id"]: _row_to_record(row) for row in rows}
        with self._committed_lock:
            self._committed_rows.update(((cluster, job_id), _record_values(record))
                                        for job_id, record in records.items())
        return records

    def save_jobs(self, cluster: str, records: Iterable[JobRecord]) -> int:
        """Upsert those of these records that differ from what this process last
        committed or loaded, in one transaction; returns how many were written."""
        changed: dict[tuple[str, str], tuple] = {}
        new_rows = []  # not committed by this process yet: upserted whole
        updates: dict[tuple[bool, ...], list[tuple]] = {}  # which fields changed -> the records' values
        committed_row = self._committed_rows.get
        for record in records:
            job_id = record.job_id if type(record.job_id) is str else str(record.job_id)
            key = (cluster, job_id)
            if key in changed:
                continue  # listed twice (running, and read whole): written once
            old = committed_row(key)
            values = _record_values(record)
            if old == values:
                continue
            changed[key] = values
            if old is None:
                row = dict(zip(JOB_FIELDS, values))
                row.update(cluster=cluster, job_id=key[1], last_running=bool(row["last_running"]))
                new_rows.append(row)
                continue
            # Most rounds change a job's clocks only (last_observed_s and one or four
            # service/wait sums): updating those columns costs a fraction of the upsert.
            updates.setdefault(tuple(map(operator.ne, old, values)), []).append(values)
        if not changed:
            return 0
        with self._tx() as conn:
            if new_rows:
                _upsert(conn, job_service, new_rows, ["cluster", "job_id"], list(JOB_FIELDS[1:]))
            for mask, group in updates.items():
                _update_job_rows(conn, cluster, tuple(name for name, differs in zip(JOB_FIELDS, mask) if differs),
                                 group)
            self._after_commit(lambda: self._remember(changed))
        return len(changed)

    def _remember(self, rows: dict[tuple[str, str], tuple]) -> None:
        with self._committed_lock:
            self._committed_rows.update(rows)

    def _forget(self, cluster: str, job_id: str) -> None:
        """The row was written another way: the next save_jobs writes the record whole."""
        with self._committed_lock:
            self._committed_rows.pop((cluster, job_id), None)

    def known_job_ids(self, cluster: str, job_ids: Iterable[str]) -> set[str]:
        """Those of ``job_ids`` that have a row (active or finished) in ``cluster``."""
        wanted = [str(j) for j in job_ids]
        found: set[str] = set()
        with self._tx() as conn:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                found.update(conn.execute(select(job_service.c.job_id).where(
                    job_service.c.cluster == cluster, job_service.c.job_id.in_(chunk))).scalars())
        return found

    def mark_finished(
        self, cluster: str, job_id: str, finished_s: float, end_state: str, total_service_gpu_s: float
    ) -> None:
        """Close a job: state DONE, its end state and final total service (GPU-s)."""
        row = asdict(JobRecord(job_id=str(job_id), num_gpus=0, submit_time_s=finished_s))
        row.update(
            cluster=cluster, state="DONE", finished_s=finished_s, end_state=end_state,
            attained_gpu_s=total_service_gpu_s, last_running=False,
        )
        self._forget(cluster, str(job_id))
        with self._tx() as conn:
            # An unknown job still gets a row so its end is not lost.
            _upsert(
                conn, job_service, [row], ["cluster", "job_id"],
                ["state", "finished_s", "end_state", "attained_gpu_s", "last_running"],
            )

    # -- service samples ------------------------------------------------------------

    def add_service_sample(
        self, cluster: str, job_id: str, gpu_s: float, finished_s: Optional[float] = None, censored: bool = False,
        features: tuple = ("", "", "", None),
    ) -> bool:
        """Record an ended job's total service (GPU-s) once; False if already there.
        ``censored``: the job was cut short, so it needed at least this much;
        ``features``: (user, account or partition, job name, GPUs) as Slurm knew them."""
        user, account, job_name, num_gpus = features
        row = {"cluster": cluster, "job_id": str(job_id), "gpu_s": float(gpu_s),
               "finished_s": time.time() if finished_s is None else float(finished_s), "censored": bool(censored),
               "user": user, "account": account, "job_name": job_name, "num_gpus": num_gpus}
        with self._tx() as conn:
            return _insert_ignore(conn, service_samples, [row], ["cluster", "job_id"]) > 0

    def service_samples(self, cluster: str, since_s: Optional[float] = None) -> list[float]:
        """Service (GPU-s) of jobs of ``cluster`` finished at or after ``since_s``."""
        query = select(service_samples.c.gpu_s).where(service_samples.c.cluster == cluster)
        if since_s is not None:
            query = query.where(service_samples.c.finished_s >= since_s)
        with self._tx() as conn:
            return [float(v) for v in conn.execute(query.order_by(service_samples.c.finished_s)).scalars()]

    def service_samples_censored(self, cluster: str) -> tuple[list[float], list[bool]]:
        """Every sample of ``cluster`` (GPU-s) and whether each is censored, oldest first."""
        query = (select(service_samples.c.gpu_s, service_samples.c.censored)
                 .where(service_samples.c.cluster == cluster).order_by(service_samples.c.finished_s))
        with self._tx() as conn:
            rows = conn.execute(query).all()
        return [float(r[0]) for r in rows], [bool(r[1]) for r in rows]

    def service_samples_featured(self, cluster: str) -> list[tuple]:
        """Every sample of ``cluster``, oldest first: (GPU-s, censored, user, account or
        partition, job name, GPUs), as ``learn_conditioned`` reads them."""
        c = service_samples.c
        query = (select(c.gpu_s, c.censored, c.user, c.account, c.job_name, c.num_gpus)
                 .where(c.cluster == cluster).order_by(c.finished_s))
        with self._tx() as conn:
            return [(float(r[0]), bool(r[1]), r[2], r[3], r[4], r[5]) for r in conn.execute(query).all()]

    # -- decision log -----------------------------------------------------------------

    def log_decisions(
        self, cluster: str, round_id: int, now_s: float, mode: str, actions: Iterable[Any],
        applied: Optional[bool] = None,
    ) -> int:
        """Append one round's actions. ``applied`` defaults to False in shadow/observe
        mode and True otherwise; a dict action may carry its own ``applied``/``detail``."""
        default_applied = mode not in ("shadow", "observe") if applied is None else bool(applied)
        rows = []
        for action in actions:
            item = dict(action) if isinstance(action, dict) else _action_to_dict(action)
            rows.append({
                "cluster": cluster, "round_id": int(round_id), "now_s": float(now_s), "mode": mode,
                "decision_id": str(item["decision_id"]), "job_id": str(item["job_id"]),
                "kind": str(item["kind"]), "reason": str(item.get("reason", "")),
                "applied": bool(item.get("applied", default_applied)), "detail": item.get("detail"),
                "cause_id": item.get("cause_id") or None,
            })
        if rows:
            with self._tx() as conn:
                conn.execute(decision_log.insert(), rows)
        return len(rows)

    def prune_decisions(self, cluster: str, *, now_s: float, max_age_s: float = 0.0, max_rows: int = 0) -> int:
        """Delete ``cluster``'s decisions older than ``max_age_s`` (by their round time) and
        all but the newest ``max_rows``; 0 disables either bound. Returns rows deleted."""
        deleted = 0
        with self._tx() as conn:
            if max_age_s > 0:
                deleted += conn.execute(decision_log.delete().where(
                    decision_log.c.cluster == cluster, decision_log.c.now_s < now_s - max_age_s)).rowcount
            if max_rows > 0:
                boundary = conn.execute(
                    select(decision_log.c.id).where(decision_log.c.cluster == cluster)
                    .order_by(decision_log.c.id.desc()).offset(int(max_rows)).limit(1)).scalar()
                if boundary is not None:
                    deleted += conn.execute(decision_log.delete().where(
                        decision_log.c.cluster == cluster, decision_log.c.id <= boundary)).rowcount
        return max(deleted, 0)

    def decisions(self, cluster: str, job_id: Optional[str] = None, limit: int = 50) -> list[dict]:
        """Logged decisions of ``cluster`` (of one job if given), newest first."""
        query = select(decision_log).where(decision_log.c.cluster == cluster)
        if job_id is not None:
            query = query.where(decision_log.c.job_id == str(job_id))
        query = query.order_by(decision_log.c.id.desc()).limit(int(limit))
        with self._tx() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    def decisions_caused_by(self, cluster: str, decision_ids: Iterable[str], limit: int = 1000) -> list[dict]:
        """Logged decisions of ``cluster`` that cite one of these ids as a cause,
        oldest first (at most ``limit``; a CLI query, not indexed)."""
        wanted = {str(d) for d in decision_ids}
        if not wanted:
            return []
        query = (select(decision_log).where(decision_log.c.cluster == cluster,
                                            or_(*[decision_log.c.cause_id.contains(d) for d in sorted(wanted)]))
                 .order_by(decision_log.c.id).limit(int(limit)))
        with self._tx() as conn:
            rows = [dict(row) for row in conn.execute(query).mappings()]
        return [r for r in rows if wanted & set((r["cause_id"] or "").split(","))]  # r1.2 is not r1.23

    def decisions_by_id(self, cluster: str, decision_ids: Iterable[str]) -> list[dict]:
        """Logged decisions of ``cluster`` with these ids, oldest first (a shadow
        decision repeated in later rounds is one row per round it was logged)."""
        wanted = sorted({str(d) for d in decision_ids})
        if not wanted:
            return []
        query = (select(decision_log).where(decision_log.c.cluster == cluster, decision_log.c.decision_id.in_(wanted))
                 .order_by(decision_log.c.id))
        with self._tx() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    # -- preemptions ---------------------------------------------------------------------

    def begin_preemption(self, cluster: str, job_id: str, signalled_at_s: float, restart_count: int,
                         decision_id: str = "") -> bool:
        """Open a preemption (``decision_id``: the decision that made it); False when
        one is already open for this job."""
        row = {"cluster": cluster, "job_id": str(job_id), "signalled_at_s": float(signalled_at_s),
               "restart_count": int(restart_count), "decision_id": str(decision_id) or None}
        try:
            with self._tx() as conn:
                conn.execute(preemptions.insert(), [row])
        except StoreError as exc:
            if isinstance(exc.__cause__, IntegrityError):
                return False
            raise
        return True

    def pending_preemptions(self, cluster: str) -> list[PendingPreemption]:
        """Preemptions of ``cluster`` still in progress, oldest first."""
        query = (select(preemptions.c.job_id, preemptions.c.signalled_at_s, preemptions.c.restart_count,
                        preemptions.c.decision_id)
                 .where(preemptions.c.cluster == cluster, preemptions.c.outcome.is_(None))
                 .order_by(preemptions.c.signalled_at_s, preemptions.c.id))
        with self._tx() as conn:
            return [PendingPreemption(r.job_id, float(r.signalled_at_s), int(r.restart_count), r.decision_id or "")
                    for r in conn.execute(query)]

    def finish_preemption(self, cluster: str, job_id: str, outcome: str, finished_s: Optional[float] = None) -> bool:
        """Close the open preemption of a job with ``outcome``; False if none was open."""
        stmt = (update(preemptions)
                .where(preemptions.c.cluster == cluster, preemptions.c.job_id == str(job_id),
                       preemptions.c.outcome.is_(None))
                .values(outcome=str(outcome), finished_s=time.time() if finished_s is None else finished_s))
        with self._tx() as conn:
            return conn.execute(stmt).rowcount > 0

    # -- usage records ---------------------------------------------------------------------

    def add_usage_record(self, record_id: str, fields: dict) -> bool:
        """Store a node-spool usage record once; False if ``record_id`` is already there."""
        row = {"record_id": str(record_id), "fields_json": json.dumps(fields, sort_keys=True, default=str),
               "added_s": time.time()}
        with self._tx() as conn:
            return _insert_ignore(conn, usage_records, [row], ["record_id"]) > 0

    def usage_record(self, record_id: str) -> Optional[dict]:
        """The fields of one stored usage record, None when unknown."""
        with self._tx() as conn:
            found = conn.execute(
                select(usage_records.c.fields_json).where(usage_records.c.record_id == str(record_id))
            ).scalar_one_or_none()
        return None if found is None else json.loads(found)

    # The epilog's record_id begins with the cluster's name ("tc/101/gpu1/0"), so the
    # records of one cluster are found without a column of their own.
    def usage_records(self, cluster: str, since_s: Optional[float] = None) -> list[dict]:
        """The usage records of ``cluster`` stored at ``since_s`` or later, oldest first."""
        query = select(usage_records.c.fields_json).where(
            usage_records.c.record_id.startswith(f"{cluster}/", autoescape=True))
        if since_s is not None:
            query = query.where(usage_records.c.added_s >= since_s)
        with self._tx() as conn:
            rows = conn.execute(query.order_by(usage_records.c.added_s, usage_records.c.record_id)).scalars()
            return [json.loads(text) for text in rows]

    def prune_usage_records(self, cluster: str, *, before_s: float) -> int:
        """Delete ``cluster``'s usage records stored before ``before_s``; returns how many."""
        with self._tx() as conn:
            return conn.execute(usage_records.delete().where(
                usage_records.c.record_id.startswith(f"{cluster}/", autoescape=True),
                usage_records.c.added_s < before_s)).rowcount or 0

    # -- rounds ---------------------------------------------------------------------------

    def next_round_id(self, cluster: str) -> int:
        """A new round id for ``cluster``: 1, 2, 3... persisted across restarts."""
        with self._tx() as conn:
            _upsert(conn, round_counters, [{"cluster": cluster, "last_round_id": 1}], ["cluster"],
                    increment={"last_round_id": round_counters.c.last_round_id + 1})
            return int(conn.execute(
                select(round_counters.c.last_round_id).where(round_counters.c.cluster == cluster)
            ).scalar_one())

    # -- controller lease (standby pair) --------------------------------------------------

    def hold_lease(self, cluster: str, holder: str, ttl_s: float, epoch: Optional[int]) -> Optional[int]:
        """Take or renew the controller lease of ``cluster`` for ``ttl_s`` seconds.

        Renewed when ``holder`` holds it at ``epoch`` (even just expired: nobody wrote
        since); taken with epoch + 1 when it expired or was released; None while
        another holder's lease runs. Returns the epoch now held. Never fenced.
        """
        fence, self.fence = self.fence, None
        try:
            with self._tx() as conn:
                now = _db_now(conn)
                row = conn.execute(select(leases).where(leases.c.cluster == cluster).with_for_update()).first()
                if row is None:
                    _insert_ignore(conn, leases, [{"cluster": cluster, "holder": holder, "epoch": 1,
                                                   "expires_s": now + ttl_s}], ["cluster"])
                    row = conn.execute(select(leases).where(leases.c.cluster == cluster).with_for_update()).first()
                    return 1 if row.holder == holder else None
                if row.holder == holder and row.epoch == epoch:
                    conn.execute(update(leases).where(leases.c.cluster == cluster).values(expires_s=now + ttl_s))
                    return int(epoch)
                if row.expires_s > now:
                    return None
                conn.execute(update(leases).where(leases.c.cluster == cluster)
                             .values(holder=holder, epoch=row.epoch + 1, expires_s=now + ttl_s))
                return int(row.epoch) + 1
        finally:
            self.fence = fence

    def release_lease(self, cluster: str, holder: str, epoch: int) -> None:
        """End the lease now (a clean shutdown), so the standby need not wait out the TTL."""
        with self._tx() as conn:
            conn.execute(update(leases).where(leases.c.cluster == cluster, leases.c.holder == holder,
                                              leases.c.epoch == epoch).values(expires_s=0.0))

    def lease(self, cluster: str) -> Optional[dict]:
        """The lease row of ``cluster`` (holder, epoch, expires_s) or None."""
        with self._tx() as conn:
            row = conn.execute(select(leases).where(leases.c.cluster == cluster)).mappings().first()
        return dict(row) if row is not None else None

    @staticmethod
    def _check_fence(conn: Connection, fence: Fence) -> None:
        # FOR UPDATE: a takeover (hold_lease) waits for this transaction to end, so a
        # write that passed this check commits before any newer epoch exists.
        row = conn.execute(select(leases.c.holder, leases.c.epoch).where(leases.c.cluster == fence.cluster)
                           .with_for_update()).first()
        if row is None or row.holder != fence.holder or row.epoch != fence.epoch:
            held = f"{row.holder} epoch {row.epoch}" if row is not None else "nobody"
            raise LeaseLost(f"lease of cluster {fence.cluster} lost (epoch {fence.epoch}; now {held}): "
                            "nothing written")

    # -- pins -------------------------------------------------------------------------------

    def set_pin(self, cluster: str, job_id: str, expires_s: float, decision_id: str = "") -> None:
        """Record a pin this controller sets (``decision_id``: the start that pinned it)."""
        with self._tx() as conn:
            _upsert(conn, pins, [{"cluster": cluster, "job_id": str(job_id), "expires_s": float(expires_s),
                                  "decision_id": str(decision_id) or None}],
                    ["cluster", "job_id"], ["expires_s", "decision_id"])

    def clear_pin(self, cluster: str, job_id: str) -> None:
        with self._tx() as conn:
            conn.execute(pins.delete().where(pins.c.cluster == cluster, pins.c.job_id == str(job_id)))

    def load_pins(self, cluster: str) -> dict[str, float]:
        """Job id -> expiry (epoch s) of the pins this controller set and has not cleared."""
        with self._tx() as conn:
            return {r.job_id: float(r.expires_s) for r in conn.execute(select(pins).where(pins.c.cluster == cluster))}

    # -- handoffs ---------------------------------------------------------------------------

    def save_handoff(self, cluster: str, job_id: str, signalled_s: float, victims: Iterable[str],
                     brake: Optional[str] = None) -> None:
        """A watched handoff (``brake`` None) or a failed one (``brake``: what must change
        before a preemption is made for the job again, as text)."""
        row = {"cluster": cluster, "job_id": str(job_id), "signalled_s": float(signalled_s),
               "victims": ",".join(victims), "blocked_until_s": None, "brake": brake}
        with self._tx() as conn:
            _upsert(conn, handoffs, [row], ["cluster", "job_id"], ["signalled_s", "victims", "blocked_until_s",
                                                                     "brake"])

    def clear_handoff(self, cluster: str, job_id: str) -> None:
        with self._tx() as conn:
            conn.execute(handoffs.delete().where(handoffs.c.cluster == cluster, handoffs.c.job_id == str(job_id)))

    def load_handoffs(self, cluster: str) -> list[tuple[str, float, tuple[str, ...], Optional[str]]]:
        """(job id, signalled_s, victims, brake or None while pending) of every stored
        handoff; a failed one an older schema recorded (a time, no brake) reads as "{}"."""
        with self._tx() as conn:
            rows = conn.execute(select(handoffs).where(handoffs.c.cluster == cluster)).all()
        return [(r.job_id, float(r.signalled_s), tuple(v for v in r.victims.split(",") if v),
                 r.brake if r.brake is not None else (None if r.blocked_until_s is None else "{}")) for r in rows]

    def pin_decisions(self, cluster: str) -> dict[str, str]:
        """Job id -> the decision that pinned it, for the pins that recorded one."""
        with self._tx() as conn:
            return {r.job_id: r.decision_id for r in conn.execute(select(pins).where(pins.c.cluster == cluster))
                    if r.decision_id}

    # -- levers set (what restore undoes) -----------------------------------------------------

    def record_levers(self, cluster: str, lever: str, values: dict[str, str], now_s: float) -> None:
        """Job id -> the value this controller sets now for ``lever`` (upserted)."""
        rows = [{"cluster": cluster, "job_id": str(job_id), "lever": lever, "value": str(value),
                 "set_s": float(now_s)} for job_id, value in values.items()]
        if rows:
            with self._tx() as conn:
                _upsert(conn, levers_set, rows, ["cluster", "job_id", "lever"], ["value", "set_s"])

    def forget_levers(self, cluster: str, lever: str, job_ids: Iterable[str]) -> None:
        """Drop the rows of ``lever`` for these jobs (reset, or the job is gone)."""
        wanted = [str(j) for j in job_ids]
        with self._tx() as conn:
            for start in range(0, len(wanted), 500):
                conn.execute(levers_set.delete().where(
                    levers_set.c.cluster == cluster, levers_set.c.lever == lever,
                    levers_set.c.job_id.in_(wanted[start:start + 500])))

    def levers(self, cluster: str) -> dict[str, dict[str, str]]:
        """Lever -> {job id: value set} of every lever still recorded for ``cluster``."""
        with self._tx() as conn:
            rows = conn.execute(select(levers_set.c.lever, levers_set.c.job_id, levers_set.c.value)
                                .where(levers_set.c.cluster == cluster)).all()
        out: dict[str, dict[str, str]] = {}
        for lever, job_id, value in rows:
            out.setdefault(lever, {})[job_id] = value
        return out

    def prune_levers_of_finished(self, cluster: str) -> int:
        """Drop the lever rows of jobs the accounts closed (they ended): nothing to undo."""
        finished = select(job_service.c.job_id).where(job_service.c.cluster == cluster,
                                                      job_service.c.finished_s.is_not(None))
        with self._tx() as conn:
            return max(conn.execute(levers_set.delete().where(
                levers_set.c.cluster == cluster, levers_set.c.job_id.in_(finished))).rowcount, 0)

    # -- controller mode ----------------------------------------------------------------------

    def last_mode(self, cluster: str) -> Optional[str]:
        """The mode ``cluster``'s controller last started in (None: never recorded)."""
        with self._tx() as conn:
            return conn.execute(select(controller_modes.c.mode)
                                .where(controller_modes.c.cluster == cluster)).scalar_one_or_none()

    def record_mode(self, cluster: str, mode: str, now_s: float) -> None:
        with self._tx() as conn:
            _upsert(conn, controller_modes, [{"cluster": cluster, "mode": mode, "since_s": float(now_s)}],
                    ["cluster"], ["mode", "since_s"])


# -- helpers ------------------------------------------------------------------------------


def backup_sqlite(path: str, version: Optional[int]) -> str:
    """A consistent copy of the SQLite store (the backup API: a copy taken while the
    WAL holds commits is still whole) next to it, mode 0600; returns its path. The
    way back from an upgrade: stop the controller, put the copy in place."""
    target = f"{path}.v{version}.{time.strftime('%Y%m%dT%H%M%S')}.bak"
    _create_private_file(target)
    try:
        source = sqlite3.connect(f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro", uri=True)
        try:
            copy = sqlite3.connect(target)
            try:
                source.backup(copy)
            finally:
                copy.close()
        finally:
            source.close()
    except sqlite3.Error as exc:
        raise StoreError(f"database {path}: backup to {target} failed: {exc}") from None
    return target


def _create_private_file(path: str) -> None:
    """Create the SQLite file (and its directory) readable by this user only: job
    records are the service user's, what others may see is served by Slurm. SQLite
    gives its -wal and -shm files the database file's mode."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise InputError(f"store url: cannot create directory {parent}: {exc.strerror}") from None
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise InputError(f"store url: cannot create {path}: {exc.strerror}") from None


def _db_now(conn: Connection) -> float:
    """The database server's clock, epoch seconds (one clock for every lease holder)."""
    if conn.dialect.name == "postgresql":
        return float(conn.exec_driver_sql("SELECT extract(epoch FROM clock_timestamp())").scalar_one())
    return float(conn.exec_driver_sql("SELECT (julianday('now') - 2440587.5) * 86400.0").scalar_one())


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # WAL: readers never wait for the writer. The busy timeout itself comes from the
    # driver's ``timeout`` connect argument.
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()


def _dialect_insert(conn: Connection, table: Table):
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif conn.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:  # pragma: no cover - rejected in Store.__init__
        raise StoreError(f"no upsert for dialect {conn.dialect.name}")
    return insert(table)


_UPDATE_SQL: dict[tuple[str, tuple[str, ...]], tuple[str, Optional[Callable]]] = {}
_ROW_INDEX = {"key_cluster": 0, "key_job_id": 1, **{name: 2 + i for i, name in enumerate(JOB_FIELDS)}}


def _update_job_rows(conn: Connection, cluster: str, columns: tuple[str, ...], group: list[tuple]) -> None:
    """UPDATE ``columns`` of these rows (JobRecord value tuples) in one executemany, in
    the driver's own SQL compiled once per column set: SQLAlchemy's parameter handling
    per row cost more than the write itself (thousands of rows a round). The values
    are plain floats, ints, strings, booleans and None, which both drivers take as is."""
    cached = _UPDATE_SQL.get((conn.dialect.name, columns))
    if cached is None:
        compiled = _UPDATE_JOB_BY_KEY.compile(dialect=conn.dialect, column_keys=list(columns))
        pick = operator.itemgetter(*(_ROW_INDEX[name] for name in compiled.positiontup)) \
            if compiled.positional else None
        cached = _UPDATE_SQL[(conn.dialect.name, columns)] = (compiled.string, pick)
    sql, pick = cached
    if pick is not None:
        params = [pick((cluster, str(values[0]), *values)) for values in group]
    else:
        at = [(name, _ROW_INDEX[name] - 2) for name in columns]
        params = [{"key_cluster": cluster, "key_job_id": str(values[0]), **{name: values[i] for name, i in at}}
                  for values in group]
    conn.exec_driver_sql(sql, params)


def _upsert(conn: Connection, table: Table, rows: list[dict], keys: list[str],
            update_columns: Optional[list[str]] = None, increment: Optional[dict] = None) -> None:
    stmt = _dialect_insert(conn, table)
    set_ = {c: stmt.excluded[c] for c in (update_columns or [])}
    set_.update(increment or {})
    conn.execute(stmt.on_conflict_do_update(index_elements=keys, set_=set_), rows)


def _insert_ignore(conn: Connection, table: Table, rows: list[dict], keys: list[str]) -> int:
    stmt = _dialect_insert(conn, table).on_conflict_do_nothing(index_elements=keys)
    return max(conn.execute(stmt, rows).rowcount, 0)


def _row_to_record(row: Any) -> JobRecord:
    values = {name: row[name] for name in JOB_FIELDS}
    values["last_running"] = bool(values["last_running"])
    return JobRecord(**values)


def _action_to_dict(action: Any) -> dict:
    item = {"decision_id": action.decision_id, "job_id": action.job_id, "kind": action.kind,
            "reason": action.reason}
    placement = getattr(action, "placement", None)
    if placement:
        item["detail"] = "placement " + ",".join(f"{node}:{gpus}" for node, gpus in placement)
    return item


def _is_lock_error(exc: DBAPIError) -> bool:
    orig = exc.orig
    if getattr(orig, "pgcode", None) in ("55P03", "40P01"):  # lock_not_available, deadlock
        return True
    text = str(orig).lower()
    return isinstance(exc, OperationalError) and ("database is locked" in text or "database is busy" in text)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

"""The store's engine and its transactions: how a ``Store`` opens its database and
runs every call in one transaction, and the fence a standby pair's writes pass.

Every public method of the store runs in its own transaction, or in the caller's when
it is inside ``with store.transaction():`` (the controller's round bookkeeping), so a
crash or a lock never leaves half a round written. With ``fence`` set (a standby pair
on PostgreSQL, see controller.service.acting.lease), every transaction first checks,
holding the lease row's lock, that this process still holds the lease at its epoch: a
deposed leader's writes are refused (``LeaseLost``). The table modules beside this one
(jobs, decision_rows, lever_rows, clusters, migrations) add their tables to ``metadata``
and their methods to ``Store`` (controller.service.state.store); no module outside
state/ writes SQL.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, create_engine, event, select
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError, SQLAlchemyError

from controller.core.model import InputError
from controller.service.state.secrets import redact_url

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


class StoreEngine:
    """One SQLAlchemy engine and the transaction rules; the base of ``Store``.

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
                create_private_file(self.path)
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

    def _read_only_sqlite(self) -> sqlite3.Connection:
        """A connection SQLite itself keeps from writing (mode=ro): a read-only command
        cannot create, migrate or change the file, whatever code path runs."""
        if not os.path.exists(self.path):
            raise StoreError(f"database {self.name} does not exist (the controller creates it when it first starts)")
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
        return sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s, check_same_thread=False)

    def close(self) -> None:
        self.engine.dispose()

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


def create_private_file(path: str) -> None:
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


def db_now(conn: Connection) -> float:
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


# The upsert statements built so far, by dialect, table, keys, columns and increments: a
# statement built anew each call made its own ``excluded`` columns, and the engine's
# statement cache kept hundreds of them (10 KB per job at 2,400 jobs, most of what the
# controller held).
_UPSERTS: dict[tuple, Any] = {}


def upsert(conn: Connection, table: Table, rows: list[dict], keys: list[str],
           update_columns: Optional[list[str]] = None, increment: Optional[dict] = None) -> None:
    key = (conn.dialect.name, table.name, tuple(keys), tuple(update_columns or ()),
           tuple((name, str(expr)) for name, expr in (increment or {}).items()))
    statement = _UPSERTS.get(key)
    if statement is None:
        stmt = _dialect_insert(conn, table)
        set_ = {c: stmt.excluded[c] for c in (update_columns or [])}
        set_.update(increment or {})
        statement = _UPSERTS[key] = stmt.on_conflict_do_update(index_elements=keys, set_=set_)
    conn.execute(statement, rows)


def insert_ignore(conn: Connection, table: Table, rows: list[dict], keys: list[str]) -> int:
    stmt = _dialect_insert(conn, table).on_conflict_do_nothing(index_elements=keys)
    return max(conn.execute(stmt, rows).rowcount, 0)


def _is_lock_error(exc: DBAPIError) -> bool:
    orig = exc.orig
    if getattr(orig, "pgcode", None) in ("55P03", "40P01"):  # lock_not_available, deadlock
        return True
    text = str(orig).lower()
    return isinstance(exc, OperationalError) and ("database is locked" in text or "database is busy" in text)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

"""The schema's version and its upgrades: how a ``Store`` finds, creates or upgrades
the tables its neighbours declare (engine, jobs, decision_rows, lever_rows, clusters),
and the backup `tiresias migrate` takes first."""
from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from typing import Optional

from sqlalchemy import inspect, select, update

# The table modules are imported for their tables: create_all and the upgrade see the whole schema.
import controller.service.state.clusters  # noqa: F401
import controller.service.state.decision_rows  # noqa: F401
import controller.service.state.jobs  # noqa: F401
import controller.service.state.lever_rows  # noqa: F401
from controller.service.state.engine import StoreError, create_private_file, insert_ignore, metadata, schema_meta

SCHEMA_VERSION = 6  # 2: job_service.queue_level/queue_entry (the MLFQ place); 3: service_samples.censored;
# 4: the decision that caused a decision (decision_log.cause_id), an open preemption's and a pin's decision;
# 5: service_samples.user/account/job_name/num_gpus (dgittins' keys); 6: handoffs.brake (what a failed
# handoff waits on)


class SchemaVersions:
    """The schema-version methods of ``Store`` (a part of it: ``self`` is the store)."""

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
                    insert_ignore(conn, schema_meta, [{"key": "schema_version", "value": str(SCHEMA_VERSION)}],
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


def backup_sqlite(path: str, version: Optional[int]) -> str:
    """A consistent copy of the SQLite store (the backup API: a copy taken while the
    WAL holds commits is still whole) next to it, mode 0600; returns its path. The
    way back from an upgrade: stop the controller, put the copy in place."""
    target = f"{path}.v{version}.{time.strftime('%Y%m%dT%H%M%S')}.bak"
    create_private_file(target)
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


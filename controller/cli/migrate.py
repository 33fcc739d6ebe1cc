"""Upgrade the store's schema to this version's, after a backup.

The controller (``tiresias run``) refuses to start on an older schema and the
read-only commands (acct, queue, explain, report...) never change it: an upgrade
happens here only, when the admin asks. SQLite: a copy of the database is written
next to it first (``<db>.v<old version>.<time>.bak``, mode 0600). PostgreSQL: back the
database up with ``pg_dump`` first (this command says how), then pass ``--backed-up``.
The way back (downgrade): stop the controller, put the backup in place (SQLite: copy
the .bak file over the database; PostgreSQL: ``pg_restore`` the dump), start the
older version. ``--check`` prints the schema version and changes nothing.
"""
from __future__ import annotations

import argparse
import sys

from controller.service.ops.config import DEFAULT_PATH, load


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=f"YAML settings (default {DEFAULT_PATH} if present)")
    p.add_argument("--database-url", metavar="URL", help="store URL (overrides the config)")
    p.add_argument("--check", action="store_true",
                   help="print the database's schema version and this version's; change nothing (exit 1: upgrade "
                        "needed)")
    p.add_argument("--backed-up", action="store_true", help="PostgreSQL: the database was dumped (pg_dump) first")


def run(args) -> int:
    """Exit 0: up to date or upgraded; 1: --check found an upgrade due, the store cannot
    be read, or PostgreSQL without --backed-up (nothing changed)."""
    from controller.service.state.store import SCHEMA_VERSION, Store, StoreError, backup_sqlite

    config = load(args.config, {"database_url": args.database_url})
    try:
        with Store(config.store_url(), access="inspect") as store:
            found, name, path = store.found_version, store.name, store.path
    except StoreError as err:
        print(f"tiresias migrate: {err}", file=sys.stderr)
        return 1
    shown = "none (a new database)" if found is None else str(found)
    if args.check:
        due = found is not None and found < SCHEMA_VERSION
        print(f"database {name}: schema version {shown}; this version's is {SCHEMA_VERSION}"
              f"{': upgrade due (tiresias migrate)' if due else ''}")
        return 1 if due else 0
    if found is not None and found >= SCHEMA_VERSION:
        print(f"database {name}: schema version {found}: nothing to do")
        return 0
    if found is not None and path is None and not args.backed_up:
        print(f"tiresias migrate: back the database up first: pg_dump --format=custom --file=tiresias-v{found}.dump "
              f"'{name}' (the way back: pg_restore --clean --dbname='{name}' tiresias-v{found}.dump), then run "
              "tiresias migrate --backed-up", file=sys.stderr)
        return 1
    try:
        if found is not None and path is not None:
            print(f"backup: {backup_sqlite(path, found)} (the way back: stop the controller, copy it over {path})")
        with Store(config.store_url(), access="migrate") as store:
            print(f"database {name}: schema version {shown} -> {store.schema_version}")
    except StoreError as err:
        print(f"tiresias migrate: {err}", file=sys.stderr)
        return 1
    return 0

"""Collect the nodes' usage spools (epilog records) into the store.

Each node's epilog appends JSON lines to ``<spool_dir>/usage-<node>.jsonl`` under an
exclusive flock (prolog/tiresias_prolog.py ``append_record``). Collection takes the
same lock per file, stores every complete line with ``Store.add_usage_record``
(idempotent by ``record_id``), and only when the whole file was stored renames it into
``<spool_dir>/processed/``. So a controller that is down, or a store that fails, only
delays collection; nothing is deleted, and a record collected twice is stored once.

A last line without its newline is a write cut short (a crashed epilog). It is left
in place and the file is not rotated; the epilog's next append ends the fragment with
a newline, after which the fragment counts as one bad line (kept in the rotated file
for inspection) and the file rotates normally.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from typing import Any

log = logging.getLogger("tiresias.spool")

PROCESSED_DIR = "processed"


def collect_spool(spool_dir: str, store: Any) -> tuple[int, int, int]:
    """Store every complete record of every spool file; returns
    ``(added, duplicates, bad_lines)``. Store errors propagate, leaving the file as it was."""
    added = duplicates = bad_lines = 0
    try:
        names = sorted(os.listdir(spool_dir))
    except FileNotFoundError:
        return 0, 0, 0
    for name in names:
        if name.startswith(".") or not name.endswith(".jsonl"):
            continue
        file_added, file_dups, file_bad = _collect_file(spool_dir, name, store)
        added += file_added
        duplicates += file_dups
        bad_lines += file_bad
    return added, duplicates, bad_lines


def _collect_file(spool_dir: str, name: str, store: Any) -> tuple[int, int, int]:
    path = os.path.join(spool_dir, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, OSError) as exc:
        log.warning("spool %s: cannot open: %s", path, exc)
        return 0, 0, 0
    added = duplicates = bad = 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # appenders wait; they re-open after a rotation
        info = os.fstat(fd)
        try:
            current = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return 0, 0, 0  # another collector rotated it
        if (current.st_dev, current.st_ino) != (info.st_dev, info.st_ino):
            return 0, 0, 0
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
        complete, newline, torn_tail = data.rpartition(b"\n")
        lines = complete.split(b"\n") if newline else []
        if not newline:
            torn_tail = data
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            record = _parse(line)
            if record is None:
                bad += 1
                log.warning("spool %s line %d is not a usage record; kept in the rotated file", path, number)
                continue
            if store.add_usage_record(record["record_id"], record):
                added += 1
            else:
                duplicates += 1
        if torn_tail:
            log.info("spool %s ends in an unfinished line (%d bytes); left for the next collection",
                     path, len(torn_tail))
            return added, duplicates, bad
        if data:
            _rotate(spool_dir, name)
        return added, duplicates, bad
    finally:
        os.close(fd)


def _parse(line: bytes):
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("record_id"), str) or not record["record_id"]:
        return None
    return record


def _rotate(spool_dir: str, name: str) -> None:
    """Rename a fully stored file into processed/ (never delete), and make it durable."""
    processed = os.path.join(spool_dir, PROCESSED_DIR)
    os.makedirs(processed, mode=0o755, exist_ok=True)
    target = os.path.join(processed, f"{name[:-len('.jsonl')]}.{time.time_ns()}.{os.getpid()}.jsonl")
    os.rename(os.path.join(spool_dir, name), target)
    for directory in (processed, spool_dir):
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

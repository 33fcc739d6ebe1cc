"""The store password: read from a file only its owner can read, never printed.

A PostgreSQL ``database_url`` may carry a password (``postgresql://user:pw@host/db``).
The config may instead name ``database_password_file``: a file of one line, mode
0600 or 0400 (no group or other access), read when the store is opened. Whatever its
source, the password is shown as ``***`` in ``tiresias show-config`` and in every
log line (``redact_url``, ``RedactingFilter``).
"""
from __future__ import annotations

import logging
import os
import re
import stat
from typing import Iterable, Optional

from controller.core.model import InputError

MAX_PASSWORD_BYTES = 4096
MASK = "***"
# user:password@ in a URL sqlalchemy cannot parse (the password must not leak via the error)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)([^@\s]*)(@)")


def url_password(url: str) -> Optional[str]:
    """The password in a store URL, or None."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).password
    except (ArgumentError, ValueError):
        found = _URL_PASSWORD.search(url)
        return found.group(2) if found and found.group(2) else None


def redact_url(url: str) -> str:
    """The URL with its password (if any) as ***; safe to print or log."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3) if m.group(2) else m.group(0), url)
    return parsed.render_as_string(hide_password=True) if parsed.password else url


def read_password_file(path: str, key: str = "database_password_file") -> str:
    """The password in ``path`` (first line, without its newline). InputError naming the
    key and the path when the file is not a regular file, grants its group or others
    any access (someone else could read it), cannot be read, or is empty."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        raise InputError(f"key '{key}': {path!r}: cannot open: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)  # the file opened, not a name that may have been swapped since
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"key '{key}': {path!r} is not a regular file")
        if info.st_mode & 0o077:
            raise InputError(f"key '{key}': {path!r} has mode {stat.S_IMODE(info.st_mode):04o}: only its owner may "
                             f"read it (chmod 600)")
        raw = os.read(fd, MAX_PASSWORD_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_PASSWORD_BYTES:
        raise InputError(f"key '{key}': {path!r} is larger than {MAX_PASSWORD_BYTES} bytes, not a password file")
    lines = raw.decode("utf-8", errors="strict").splitlines() if raw else []
    if not lines or not lines[0]:
        raise InputError(f"key '{key}': {path!r} is empty (expected the password on its first line)")
    return lines[0]


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` set (quoted as a URL needs)."""
    from sqlalchemy.engine import make_url

    return make_url(url).set(password=password).render_as_string(hide_password=False)


class RedactingFilter(logging.Filter):
    """Replaces each secret by *** in a record's message and traceback text, so that
    no handler it is attached to ever writes one."""

    def __init__(self, secrets: Iterable[str]):
        super().__init__()
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def _clean(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        cleaned = self._clean(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._clean(record.exc_text)
        if record.stack_info:
            record.stack_info = self._clean(record.stack_info)
        return True


def install_log_redaction(secrets: Iterable[str], logger: Optional[logging.Logger] = None) -> RedactingFilter:
    """Attach one RedactingFilter to every handler of ``logger`` (default: the root
    logger, where every tiresias.* record ends up)."""
    target = logger or logging.getLogger()
    redactor = RedactingFilter(secrets)
    for handler in target.handlers:
        handler.addFilter(redactor)
    return redactor

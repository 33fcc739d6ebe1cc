"""A throwaway PostgreSQL server for tests: initdb in a temp dir, start on
127.0.0.1 at a free high port, create a database, yield its URL, stop, delete.

``TIRESIAS_TEST_PG_URL`` set: use that server instead. When the server cannot be
started the tests skip, except under ``CI=true`` where they fail.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator, Optional

import pytest

PG_DB_NAME = "tiresias_test"
PG_SUPERUSER = "postgres"
# How long the last start took, seconds (reported by the test session).
startup_s: Optional[float] = None


class PgUnavailable(RuntimeError):
    """The PostgreSQL server could not be installed or started."""


def find_pg_bin() -> Optional[str]:
    """Directory holding initdb and pg_ctl, newest Debian version first, else PATH."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    for directory in candidates:
        if os.access(os.path.join(directory, "initdb"), os.X_OK) and os.access(os.path.join(directory, "pg_ctl"), os.X_OK):
            return directory
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return os.path.dirname(os.path.realpath(initdb))
    return None


def _version_key(path: str) -> float:
    try:
        return float(path.split("/")[-2])
    except ValueError:
        return 0.0


def install_postgres() -> None:
    """apt-get install postgresql (root on Debian/Ubuntu only)."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PgUnavailable("initdb/pg_ctl not found and cannot apt-get install postgresql (not root or no apt)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"]
    if subprocess.run(cmd, env=env, capture_output=True, timeout=900).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=300)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise PgUnavailable(f"apt-get install postgresql failed: {done.stderr.strip().splitlines()[-1:]}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_user() -> Optional[str]:
    """The OS user to run the server as: None = ourselves; root must hand over."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise PgUnavailable("running as root and no 'postgres' OS user exists for initdb")


def _run(cmd: list[str], user: Optional[str], timeout: float) -> None:
    done = subprocess.run(cmd, user=user, capture_output=True, text=True, timeout=timeout,
                          cwd="/", env=dict(os.environ, LC_ALL="C", LANG="C"))
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise PgUnavailable(f"{os.path.basename(cmd[0])} failed: {' | '.join(tail)}")


@contextmanager
def pg_server() -> Iterator[str]:
    """Start a private server; yields a SQLAlchemy URL to a fresh database."""
    global startup_s
    started = time.monotonic()
    bin_dir = find_pg_bin()
    if bin_dir is None:
        install_postgres()
        bin_dir = find_pg_bin()
        if bin_dir is None:
            raise PgUnavailable("postgresql installed but initdb/pg_ctl still not found")
    user = _server_user()
    root = tempfile.mkdtemp(prefix="tiresias-pg-")
    data, sockets, log = os.path.join(root, "data"), os.path.join(root, "sock"), os.path.join(root, "server.log")
    os.makedirs(sockets)
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (root, sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    port = _free_port()
    pg_ctl = os.path.join(bin_dir, "pg_ctl")
    running = False
    try:
        _run([os.path.join(bin_dir, "initdb"), "-D", data, "-U", PG_SUPERUSER, "-A", "trust",
              "-E", "UTF8", "--no-sync", "--no-instructions"], user, 120)
        options = (f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        _run([pg_ctl, "-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start"], user, 90)
        running = True
        _run([os.path.join(bin_dir, "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", PG_SUPERUSER,
              PG_DB_NAME], user, 60)
        startup_s = time.monotonic() - started
        print(f"\n[pg_server] PostgreSQL ({bin_dir}) up on 127.0.0.1:{port} in {startup_s:.2f} s",
              file=sys.stderr)
        yield f"postgresql+psycopg2://{PG_SUPERUSER}@127.0.0.1:{port}/{PG_DB_NAME}"
    finally:
        if running:
            subprocess.run([pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"], user=user,
                           capture_output=True, timeout=60, cwd="/")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """SQLAlchemy URL of a real PostgreSQL database for this test session."""
    given = os.environ.get("TIRESIAS_TEST_PG_URL")
    if given:
        yield given
        return
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        _unavailable("psycopg2 is not installed (pip install psycopg2-binary)")
    try:
        server = pg_server()
        url = server.__enter__()
    except (PgUnavailable, OSError, subprocess.SubprocessError) as exc:
        _unavailable(f"cannot start PostgreSQL: {exc}")
    try:
        yield url
    finally:
        server.__exit__(None, None, None)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)

"""Shared pytest fixtures for tests that need the local Slurm test cluster.

Import the fixtures into a test module (``from tests.slurm_fixtures import
slurm_cluster, submit_as``). The cluster is started with
``containers/slurm-cluster.sh up``; when that fails the tests are skipped with
the reason, except under CI (``CI=true``) where they fail.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = REPO_ROOT / "containers" / "slurm-cluster.sh"
CLUSTER_UP_TIMEOUT_S = 600  # includes apt-get install on a fresh host


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.5,
             seen: Callable[[], object] | None = None):
    """Poll until ``predicate()`` is truthy and return that value; on time-out fail
    naming ``what`` and, if given, what ``seen()`` shows then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    last = f"; last seen: {seen()}" if seen is not None else ""
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}{last}")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Slurm test cluster unavailable under CI: {reason}")
    pytest.skip(f"Slurm test cluster unavailable: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster() -> Path:
    """Make sure the local test cluster is up; returns the script path."""
    if os.geteuid() != 0:
        _unavailable("needs root (installs packages, starts daemons)")
    if shutil.which("bash") is None:
        _unavailable("bash not found")
    started = time.monotonic()
    try:
        proc = subprocess.run(["bash", str(CLUSTER_SCRIPT), "up"], capture_output=True, text=True,
                              timeout=CLUSTER_UP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _unavailable(f"'slurm-cluster.sh up' did not finish in {CLUSTER_UP_TIMEOUT_S} s")
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        _unavailable(f"'slurm-cluster.sh up' exited {proc.returncode}:\n{tail}")
    print(f"slurm cluster ready in {time.monotonic() - started:.1f} s")
    return CLUSTER_SCRIPT


@pytest.fixture
def submit_as(slurm_cluster) -> Callable[[str, str], str]:
    """``submit_as(user, args) -> job_id``: run ``sbatch --parsable ARGS`` as USER
    in a temporary directory that USER owns (job output lands there)."""
    made: list[str] = []

    def submit(user: str, args: str) -> str:
        workdir = tempfile.mkdtemp(prefix=f"tiresias-{user}-")
        made.append(workdir)
        shutil.chown(workdir, user=user, group=user)
        command = f"cd {shlex.quote(workdir)} && sbatch --parsable {args}"
        proc = subprocess.run(["su", user, "-c", command], capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch as {user} failed ({proc.returncode}): {proc.stderr.strip()}")
        # --parsable prints "jobid" or "jobid;cluster".
        return proc.stdout.strip().split(";", 1)[0]

    yield submit
    for workdir in made:
        shutil.rmtree(workdir, ignore_errors=True)


def isolated_instance(name: str, keep: bool, extra_env: dict | None = None):
    """Generator for a module fixture: an isolated Slurm instance
    (``TIRESIAS_CLUSTER_INSTANCE``) up for the module; afterwards its jobs' working
    directories are removed and, unless ``keep``, the instance is stopped and its
    files deleted. Unavailable: a failure under CI=true, a skip otherwise."""
    from bench.slurm_harness import Instance, cluster_script

    if os.geteuid() != 0:
        _unavailable("needs root (starts daemons, submits as alice/bob)")
    try:
        proc = cluster_script(name, "up", extra_env=extra_env)
    except subprocess.TimeoutExpired:
        _unavailable(f"'TIRESIAS_CLUSTER_INSTANCE={name} slurm-cluster.sh up' did not finish in time")
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        _unavailable(f"'TIRESIAS_CLUSTER_INSTANCE={name} slurm-cluster.sh up' ({extra_env or {}}) exited "
                     f"{proc.returncode}:\n{tail}")
    instance = Instance(name)
    yield instance
    instance.cleanup()
    if not keep:
        cluster_script(name, "down", timeout_s=120)
        for path in (f"/etc/slurm-{name}", f"/var/spool/slurmctld-{name}", f"/var/spool/slurmd-{name}",
                     f"/var/log/slurm-{name}"):
            shutil.rmtree(path, ignore_errors=True)


def unavailable(reason: str) -> None:
    """A test's own missing prerequisite (a client library, an interpreter its job's
    user may run): a skip, a failure under CI=true (as for the cluster itself)."""
    _unavailable(reason)

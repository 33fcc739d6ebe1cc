"""Shared pytest fixtures for tests that need the local Slurm test cluster.

Import the fixtures into a test module (``from tests.slurm_fixtures import
slurm_cluster, submit_as``). The cluster is started with
``containers/slurm-cluster.sh up``; when that fails the tests are skipped with
the reason, except under CI (``CI=true``) where they fail.

Tests on an isolated instance (their own slurmctld, see ``isolated_instance``) name
it with ``cluster = instance_fixture(PREFIX)`` and import ``iso`` and ``run``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import zlib
from pathlib import Path
from typing import Callable

import pytest

from bench.slurm_harness import ControllerProcess, Instance, cluster_script, write_config
from controller.service.state.lever_rows import preemptions
from controller.service.state.store import Store

REPO_ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = REPO_ROOT / "containers" / "slurm-cluster.sh"
CLUSTER_UP_TIMEOUT_S = 600  # includes apt-get install on a fresh host
# The job states of a job that has not ended yet.
ACTIVE = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "SUSPENDED"}


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


def _sbatch(user: str, workdir: str, args: str, env: str = "") -> str:
    """``ENV sbatch --parsable ARGS`` as USER in WORKDIR; the job id."""
    command = f"cd {shlex.quote(workdir)} && {env}sbatch --parsable {args}"
    proc = subprocess.run(["su", user, "-c", command], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"sbatch as {user} failed ({proc.returncode}): {proc.stderr.strip()}")
    # --parsable prints "jobid" or "jobid;cluster".
    return proc.stdout.strip().split(";", 1)[0]


def sbatch_in(instance: Instance, user: str, workdir: str, args: str, env: str = "") -> str:
    """``sbatch --parsable ARGS`` as USER in WORKDIR on an isolated instance; ``env``:
    sbatch's own environment (``SBATCH_SIGNAL=B:USR1``). The job id."""
    return _sbatch(user, workdir, args, env=f"{env} SLURM_CONF={shlex.quote(instance.conf)} ".lstrip())


@pytest.fixture
def submit_as(slurm_cluster) -> Callable[[str, str], str]:
    """``submit_as(user, args) -> job_id``: run ``sbatch --parsable ARGS`` as USER
    in a temporary directory that USER owns (job output lands there)."""
    made: list[str] = []

    def submit(user: str, args: str) -> str:
        workdir = tempfile.mkdtemp(prefix=f"tiresias-{user}-")
        made.append(workdir)
        shutil.chown(workdir, user=user, group=user)
        return _sbatch(user, workdir, args)

    yield submit
    for workdir in made:
        shutil.rmtree(workdir, ignore_errors=True)


def isolated_instance(name: str, keep: bool, extra_env: dict | None = None):
    """Generator for a module fixture: an isolated Slurm instance
    (``TIRESIAS_CLUSTER_INSTANCE``) up for the module; afterwards its jobs' working
    directories are removed and, unless ``keep``, the instance is stopped and its
    files deleted. Unavailable: a failure under CI=true, a skip otherwise."""
    if os.geteuid() != 0:
        _unavailable("needs root (starts daemons, submits as alice/bob)")
    extra_env = {**instance_ports(name), **(extra_env or {})}
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


def instance_ports(name: str) -> dict[str, str]:
    """Under pytest-xdist, each worker's instances in a port range of their own (a
    slurmctld and its four slurmd take ten ports): the script's default, derived from the
    name alone, could give two workers' instances the same ports. A worker runs one
    module, so one instance, at a time (tests/conftest.py groups each module on one
    worker). Without xdist the script's default stands."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return {}
    return {"TIRESIAS_CLUSTER_PORT_BASE": str(20000 + 400 * int(worker[2:]) + 10 * (zlib.crc32(name.encode()) % 40))}


def unavailable(reason: str) -> None:
    """A test's own missing prerequisite (a client library, an interpreter its job's
    user may run): a skip, a failure under CI=true (as for the cluster itself)."""
    _unavailable(reason)


def instance_fixture(prefix: str = "", *, name: str | None = None, env: str = "TIRESIAS_TEST_INSTANCE",
                     keep: bool | None = None, extra_env: dict | None = None):
    """The module fixture ``cluster`` (``cluster = instance_fixture("ta")``): the
    isolated instance ``name``, else the one ``env`` names, else PREFIX+pid (one per
    test session: the suite may run in several checkouts at once, and a shared
    instance would let one session's cleanup cancel another's jobs). Kept afterwards
    when ``env`` names one, unless ``keep`` says otherwise."""
    named = os.environ.get(env)
    instance_name = name or named or f"{prefix}{os.getpid()}"
    keep_it = bool(named) if keep is None else keep

    @pytest.fixture(scope="module", name="cluster")
    def cluster():
        """The isolated instance, up for the module."""
        yield from isolated_instance(instance_name, keep=keep_it, extra_env=extra_env)

    return cluster


@pytest.fixture
def iso(cluster):
    """The instance with no job before and after the test."""
    cluster.cancel_all()
    yield cluster
    cluster.cancel_all()


class Run:
    """One ``tiresias run`` process at a time on an isolated instance, with its own
    store, and helpers to look at both."""

    def __init__(self, instance: Instance, tmp: Path):
        self.instance = instance
        self.tmp = tmp
        self.url = f"sqlite:///{tmp}/tiresias.db"
        self.procs: list[ControllerProcess] = []

    def start(self, mode: str = "enforce", **settings) -> ControllerProcess:
        config = write_config(self.tmp / "tiresias.yaml", self.url, self.instance.name, mode=mode, **settings)
        proc = ControllerProcess(self.instance, config, self.tmp / "controller.log", mode=mode).start()
        self.procs.append(proc)
        return proc

    def log_text(self) -> str:
        return file_text(self.tmp / "controller.log")

    def record(self, job_id: str):
        with Store(self.url) as store:
            return store.load_jobs(self.instance.name, include_finished=True).get(job_id)

    def decisions(self, job_id: str | None = None) -> list[dict]:
        with Store(self.url) as store:
            return store.decisions(self.instance.name, job_id=job_id, limit=100000)

    def preemption_rows(self) -> list[dict]:
        with Store(self.url) as store, store._tx() as conn:
            return [dict(r) for r in conn.execute(preemptions.select()).mappings()]

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.stop()


@pytest.fixture
def run(iso, tmp_path):
    """A ``Run`` on ``iso``; its processes stopped afterwards (the log printed when one died)."""
    r = Run(iso, tmp_path)
    yield r
    r.stop_all()
    if any(p.proc is not None and p.proc.returncode not in (0, None, -signal.SIGKILL) for p in r.procs):
        print(r.log_text()[-3000:])


def all_finished(instance: Instance, ids) -> bool:
    jobs = instance.squeue()
    return all(jobs[j]["job_state"] not in ACTIVE for j in ids)


def attained(run: Run, job_id: str) -> float:
    """The job's attained GPU-seconds in the run's store (0 before the controller saw it)."""
    record = run.record(job_id)
    return record.attained_gpu_s if record is not None else 0.0


def file_text(path: Path) -> str:
    """A job's output file, "" while there is none yet."""
    return path.read_text() if path.exists() else ""


def output_of(workdir: str, job_id: str) -> str:
    """The job's ``%j.out`` in WORKDIR, "" while there is none yet."""
    return file_text(Path(workdir) / f"{job_id}.out")

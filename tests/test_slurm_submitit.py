"""A real submitit client on real Slurm (issue 18, item 3): a ``Checkpointable`` job
(tests/clients/submitit_job.py, submitted by submitit as alice) declares submitit's own
``--signal=USR2@15`` to its steps. bob's three long jobs (outside the contract) fill
the rest of the cluster; bob's short job makes `tiresias run --mode enforce` preempt
alice's job: submitit checkpoints on the signal, requeues it itself, the job resumes
from its checkpoint (its count continues) and finishes. submitit comes from the test
extra (pyproject.toml). PyTorch Lightning: tests/test_slurm_lightning.py.
"""
from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm_fixtures import unavailable, wait_for
from tests.test_slurm_controller import all_finished, attained, cluster, iso, run  # noqa: F401  (pytest fixtures)
from tests.test_slurm_startable import reasons

pytestmark = pytest.mark.slurm

CLIENT = Path(__file__).resolve().parent / "clients" / "submitit_job.py"
STEPS = 30


def user_python(user: str) -> str:
    """An interpreter USER may run, of this one's minor version (cloudpickle sends the
    job's code by value: both ends must read the same bytecode)."""
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, "/usr/bin/python3"):
        probe = subprocess.run(["su", user, "-c", f"{shlex.quote(candidate)} -c 'import sys; print(sys.version[:4])'"],
                               capture_output=True, text=True, timeout=30)
        if probe.returncode == 0 and probe.stdout.strip().startswith(want):
            return candidate
    unavailable(f"no Python {want} that {user} may run")


def client_path(workdir: Path) -> str:
    """A PYTHONPATH folder with only submitit and what it imports, copied from this venv
    (which the job's user may not be able to read, e.g. a checkout under /root)."""
    lib = workdir / "lib"
    lib.mkdir()
    for name in ("submitit", "cloudpickle", "typing_extensions"):
        spec = importlib.util.find_spec(name)
        if spec is None:
            unavailable(f"{name} is not installed (pip install -e '.[test]')")
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        if source.is_dir():
            shutil.copytree(source, lib / source.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, lib / source.name)
    return str(lib)


def submit_with_submitit(instance, user: str, steps: int) -> tuple[str, Path]:
    workdir = Path(instance.workdir(user))
    env = f"SLURM_CONF={shlex.quote(instance.conf)} PYTHONPATH={shlex.quote(client_path(workdir))}"
    command = (f"cd {shlex.quote(str(workdir))} && {env} {shlex.quote(user_python(user))} "
               f"{shlex.quote(str(CLIENT))} {shlex.quote(str(workdir / 'jobs'))} {steps}")
    proc = subprocess.run(["su", user, "-c", command], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1], workdir


def test_a_submitit_checkpointable_job_is_preempted_resumes_from_its_checkpoint_and_finishes(iso, run):
    run.start(preempt_grace_s=3.0)
    job, workdir = submit_with_submitit(iso, "alice", STEPS)
    wait_for(lambda: iso.squeue()[job]["job_state"] == "RUNNING", 30, "the submitit job to start",
             seen=lambda: reasons(iso, [job]))
    longs = [iso.submit("bob", 4, 600, f"long{k}", extra="--no-requeue")[0] for k in range(3)]
    wait_for(lambda: attained(run, job) > 40, 60, "the submitit job to reach queue 2")
    short, _ = iso.submit("bob", 4, 5, "short")
    log = workdir / "jobs" / "steps.log"
    wait_for(lambda: all_finished(iso, [job, short]), 150, "both jobs to finish", interval_s=1,
             seen=lambda: (reasons(iso, [job, short, *longs]), log.read_text() if log.exists() else ""))
    jobs = iso.squeue()
    assert (jobs[job]["job_state"], jobs[short]["job_state"]) == ("COMPLETED", "COMPLETED"), reasons(iso, [job, short])
    assert jobs[job]["restart_cnt"] >= 1
    preempts = [d for d in run.decisions() if d["kind"] == "preempt" and d["applied"]]
    assert [d["job_id"] for d in preempts] == [job], preempts
    assert "USR2@15" in preempts[0]["detail"], preempts[0]
    lines = log.read_text().splitlines()
    starts = [int(line.split("=")[1]) for line in lines if line.startswith("start ")]
    assert starts[0] == 0 and len(starts) >= 2 and starts[1] > 0, lines  # resumed from its checkpoint
    assert lines[-1] == f"finished done={STEPS}", lines
    after = [(d["kind"], d["applied"], d["reason"], d["detail"]) for d in run.decisions(job) if d["kind"] != "band"]
    print(f"submitit job {job}: starts at steps {starts}; decisions: {after}")

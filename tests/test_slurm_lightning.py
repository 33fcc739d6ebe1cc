"""A real PyTorch Lightning job on real Slurm (issue 18, item 3): Lightning's own
``SLURMEnvironment(auto_requeue=True)`` under ``srun``, ``#SBATCH --signal=SIGUSR1@90``
(tests/clients/lightning_job.sbatch, as Lightning's SLURM docs write it), submitted by
alice. bob's three long jobs (outside the contract) fill the rest of the cluster; bob's
short job makes `tiresias run --mode enforce` preempt alice's job: Lightning saves its
HPC checkpoint on the signal and requeues the job itself, the next run resumes from
that checkpoint's step and finishes. torch (the CPU build this machine keeps on disk,
``torch==2.13.0``) and lightning come from the ``clients`` extra (pyproject.toml); in a
release root, whose Python has no torch wheel, the job runs on the host's Python with the
host venv's packages (containers/release-root.sh lends both).
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm_fixtures import unavailable, wait_for
from tests.test_slurm_controller import all_finished, attained, cluster, iso, run  # noqa: F401  (pytest fixtures)
from tests.test_slurm_startable import reasons
from tests.test_slurm_submitit import user_python

pytestmark = pytest.mark.slurm

CLIENTS = Path(__file__).resolve().parent / "clients"
STEPS = 40


def client_interpreter() -> tuple[str | None, Path]:
    """The Python that runs the Lightning job (None: this one) and the site-packages
    that hold torch and lightning for it. In a release root, torch exists only for the
    host's Python (containers/release-root.sh mounts it and names both)."""
    if importlib.util.find_spec("lightning") is not None and importlib.util.find_spec("torch") is not None:
        import torch

        return None, Path(torch.__file__).resolve().parents[1]
    python, site = os.environ.get("TIRESIAS_CLIENT_PYTHON"), os.environ.get("TIRESIAS_CLIENT_SITE")
    if python and site and (Path(site) / "torch").is_dir() and (Path(site) / "lightning").is_dir():
        return python, Path(site)
    if sys.version_info[:2] != (3, 11):
        # Only reached in a root whose host has no Python of its venv's version to lend
        # (release-root.sh mounts it when it has): not a pass, and said so.
        pytest.skip(f"no torch for Python {sys.version_info.major}.{sys.version_info.minor} "
                    "and no host interpreter lent by release-root.sh")
    unavailable("torch and lightning are not installed (pip install -e '.[test,clients]')")


def readable_site_packages(user: str, site: Path) -> str:
    """SITE as USER can read it: itself, or (a checkout USER cannot enter) a copy kept
    in /var/tmp for the next run."""
    probe = subprocess.run(["su", user, "-c", f"test -r {shlex.quote(str(site / 'torch' / '__init__.py'))}"],
                           timeout=30)
    if probe.returncode == 0:
        return str(site)
    version = next(site.glob("torch-*.dist-info")).name.removeprefix("torch-").removesuffix(".dist-info")
    copy = Path(f"/var/tmp/tiresias-client-site-{version}")
    if not (copy / ".complete").exists():
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(site, copy, symlinks=True)
        subprocess.run(["chmod", "-R", "a+rX", str(copy)], check=True)
        (copy / ".complete").touch()
    return str(copy)


def submit_lightning(instance, user: str, steps: int) -> tuple[str, Path]:
    workdir = Path(instance.workdir(user))
    for name in ("lightning_job.py", "lightning_job.sbatch"):
        shutil.copy(CLIENTS / name, workdir / name)
    subprocess.run(["chown", "-R", f"{user}:{user}", str(workdir)], check=True)
    python, site = client_interpreter()
    env = {"SLURM_CONF": instance.conf, "PYTHONPATH": readable_site_packages(user, site),
           "PYTHON": python or user_python(user),
           "CLIENT_DIR": str(workdir), "STEPS": str(steps)}
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = (f"cd {shlex.quote(str(workdir))} && {exports} sbatch --parsable --gres=gpu:4 -N 1 -n 1 "
               f"-o {shlex.quote(str(workdir / 'lightning-%j.out'))} lightning_job.sbatch")
    proc = subprocess.run(["su", user, "-c", command], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0], workdir


def test_a_lightning_job_is_preempted_saves_requeues_itself_resumes_and_finishes(iso, run):
    run.start(preempt_grace_s=3.0)
    job, workdir = submit_lightning(iso, "alice", STEPS)
    log = workdir / "steps.log"
    output = workdir / f"lightning-{job}.out"
    wait_for(lambda: log.exists(), 90, "the Lightning job to start training",
             seen=lambda: (reasons(iso, [job]), output.read_text()[-2000:] if output.exists() else ""))
    longs = [iso.submit("bob", 4, 600, f"long{k}", extra="--no-requeue")[0] for k in range(3)]
    wait_for(lambda: attained(run, job) > 40, 60, "the Lightning job to reach queue 2")
    short, _ = iso.submit("bob", 4, 5, "short")
    wait_for(lambda: all_finished(iso, [job, short]), 240, "both jobs to finish", interval_s=1,
             seen=lambda: (reasons(iso, [job, short, *longs]), log.read_text() if log.exists() else "",
                           output.read_text()[-2000:] if output.exists() else ""))
    jobs = iso.squeue()
    out = output.read_text() if output.exists() else ""
    assert (jobs[job]["job_state"], jobs[short]["job_state"]) == ("COMPLETED", "COMPLETED"), (
        reasons(iso, [job, short]), out[-3000:])
    assert jobs[job]["restart_cnt"] >= 1, out[-3000:]
    preempts = [d for d in run.decisions() if d["kind"] == "preempt" and d["applied"]]
    assert [d["job_id"] for d in preempts] == [job], preempts
    assert "USR1@90" in preempts[0]["detail"], preempts[0]  # its own signal, from its #SBATCH line
    lines = log.read_text().splitlines()
    starts = [int(line.split("=")[1]) for line in lines if line.startswith("start ")]
    assert starts[0] == 0 and len(starts) >= 2 and starts[1] > 0, (lines, out[-3000:])  # from its HPC checkpoint
    assert lines[-1] == f"finished step={STEPS}", lines
    assert list(workdir.glob("hpc_ckpt_*.ckpt")), sorted(p.name for p in workdir.iterdir())
    after = [(d["kind"], d["applied"], d["reason"], d["detail"]) for d in run.decisions(job) if d["kind"] != "band"]
    print(f"Lightning job {job}: starts at steps {starts}; decisions: {after}")

"""Het jobs on real Slurm (issue 35, item 7): an isolated instance whose nodes g1, g2
have the feature a100 and g3, g4 v100, every node full of bob's demoted 4-GPU jobs.
A het job whose components ask for different features (``#SBATCH hetjob``) was planned
as one 8-GPU gang under its leader's --constraint=a100: the two a100 jobs were preempted
and the het job still could not start (its v100 component). Now it is unmodelled
(code ``het``) and preempts nobody; a plain job then gets its one victim.

Run under the instance's lock: ``flock /tmp/slurm-sj.lock pytest -m slurm tests/test_slurm_het.py``.
"""
from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.slurm_fixtures import attained, instance_fixture, iso, run, wait_for  # noqa: F401  (pytest fixtures)
from tests.test_slurm_resources import control_preempts_one, preempts_nobody, running

pytestmark = pytest.mark.slurm

cluster = instance_fixture("sj", extra_env={"TIRESIAS_INSTANCE_CONF_EXTRA": (
    "NodeName={inst}g1 Features=a100; NodeName={inst}g2 Features=a100; "
    "NodeName={inst}g3 Features=v100; NodeName={inst}g4 Features=v100")})

HET_SCRIPT = """#!/bin/bash
#SBATCH -J het --requeue --output=%j.out
#SBATCH -N 1 --gres=gpu:4 --constraint=a100
#SBATCH hetjob
#SBATCH -N 1 --gres=gpu:4 --constraint=v100
sleep 5
"""


def submit_het(iso, user: str) -> str:
    workdir = iso.workdir(user)
    script = Path(workdir) / "het.sh"
    script.write_text(HET_SCRIPT)
    subprocess.run(["chown", user, str(script)], check=True)
    command = f"cd {shlex.quote(workdir)} && SLURM_CONF={shlex.quote(iso.conf)} sbatch --parsable het.sh"
    proc = subprocess.run(["su", user, "-c", command], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";", 1)[0]


def test_a_het_job_whose_components_need_different_features_preempts_nobody(iso, run):
    features = iso.run(["sinfo", "-h", "-N", "-o", "%N %f"]).stdout
    assert f"{iso.name}g1 a100" in features and f"{iso.name}g4 v100" in features, features
    run.start(preempt_grace_s=3.0)
    victims = [iso.submit("bob", 4, 600, f"gpu{k}")[0] for k in range(4)]
    wait_for(lambda: running(iso, victims), 30, "bob's jobs to start")
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 60, "bob's jobs to reach queue 2")
    het = submit_het(iso, "alice")
    from slurm_plugin.backend import SlurmBackend
    [gang] = [j for j in SlurmBackend(env={"SLURM_CONF": iso.conf}).observe().jobs if j.job_id == het]
    assert gang.het_job_id == het and gang.gpus == 8 and "het" in gang.unmodelled_reasons, gang
    assert "--constraint" in gang.unmodelled
    preempts_nobody(iso, run, victims, [het])
    control, _ = iso.submit("alice", 4, 5, "control", extra="--time=10")
    control_preempts_one(iso, run, control, victims)

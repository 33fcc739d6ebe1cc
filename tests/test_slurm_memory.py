"""Memory on real Slurm (issue 28, item 2): on an instance where memory is a consumable
resource (TIRESIAS_INSTANCE_MEMORY=1: CR_Core_Memory, DefMemPerCPU=1000, 16000 MB
nodes), a job whose --mem no preemption frees (8000 MB, or --mem=0: all of a node's) costs nobody a preemption, and one whose
--mem a victim frees makes exactly one job yield (control: the plan knows each node's
free memory, it does not merely give up on memory it cannot see).
"""
from __future__ import annotations

import pytest

from tests.slurm_fixtures import attained, instance_fixture, iso, run, wait_for  # noqa: F401  (pytest fixtures)
from tests.test_slurm_resources import control_preempts_one, preempts_nobody, running

pytestmark = pytest.mark.slurm

cluster = instance_fixture("tm", extra_env={"TIRESIAS_INSTANCE_MEMORY": "1"})


def test_a_job_whose_memory_no_victim_frees_preempts_nobody(iso, run):
    conf = iso.run(["scontrol", "show", "config"]).stdout
    assert "CR_CORE_MEMORY" in conf.upper().replace(" ", ""), conf[:2000]
    run.start(preempt_grace_s=3.0)
    # Every node: a job outside the contract holding 1 GPU and 12000 of its 16000 MB,
    # then a checkpointable 3-GPU job (1 CPU: 1000 MB by DefMemPerCPU). 3000 MB free.
    kept = [iso.submit("bob", 1, 600, f"mem{k}", extra=f"--no-requeue --mem=12000 -w {iso.name}g{k + 1}")[0]
            for k in range(4)]
    wait_for(lambda: running(iso, kept), 30, "bob's 12000 MB jobs to start")
    victims = [iso.submit("bob", 3, 600, f"gpu{k}")[0] for k in range(4)]
    wait_for(lambda: running(iso, victims), 30, "bob's 3-GPU jobs to start")
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 60, "bob's 3-GPU jobs to reach queue 2")
    # 3 GPUs and 8000 MB: a victim frees its 3 GPUs and 1000 MB, so 4000 MB at most
    big, _ = iso.submit("alice", 3, 5, "big", extra="--mem=8000")
    # --mem=0: all of a node's memory, which no node can give while a kept job holds some
    whole, _ = iso.submit("alice", 3, 5, "whole", extra="--mem=0")
    preempts_nobody(iso, run, victims, [big, whole])
    # Control: 3500 MB fits in the 4000 MB one victim leaves: exactly one yields.
    control, _ = iso.submit("alice", 3, 5, "control", extra="--mem=3500 --time=10")
    control_preempts_one(iso, run, control, victims)

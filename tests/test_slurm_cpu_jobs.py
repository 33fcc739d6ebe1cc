"""A CPU-only job in a partition it shares with GPU jobs, on real Slurm (issue 18,
item 5): it starts as it would without the controller.

bob's four 4-GPU jobs take every GPU and every CPU (-c 8; outside the contract, so
nobody is preempted); alice submits a CPU-only job (-c 8, no GPU), then a 4-GPU job.
When bob's short job ends, one node frees. Without the controller Slurm starts the
CPU job (same priority, submitted first). With `tiresias run --mode enforce` the GPU
job gets queue 1's SiteFactor band; the old controller left the CPU job at 0, so the
GPU job took the node and the CPU job waited for the next one. Now the CPU job gets
the same band: its priority is not below the GPU job's and its wait is not longer.
"""
from __future__ import annotations

import shlex
import subprocess

import pytest

from tests.slurm_fixtures import wait_for
from tests.test_slurm_controller import cluster, iso, run  # noqa: F401  (pytest fixtures)
from tests.test_slurm_startable import reasons

pytestmark = pytest.mark.slurm

SLACK_S = 3  # one or two scheduling passes (sched_interval=2)


def submit_cpu_job(instance, user: str, cpus: int, work_s: int) -> str:
    """A job of ``cpus`` CPUs and no GPU that sleeps ``work_s`` seconds."""
    workdir = instance.workdir(user)
    command = (f"cd {shlex.quote(workdir)} && SLURM_CONF={shlex.quote(instance.conf)} sbatch --parsable -J cpu "
               f"-n 1 -c {cpus} --output=%j.out --wrap {shlex.quote(f'sleep {work_s}')}")
    proc = subprocess.run(["su", user, "-c", command], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";", 1)[0]


def cpu_job_behind_a_loaded_gpu_cluster(instance, banded=lambda jobs: True) -> dict:
    """The scenario above; the CPU job's wait and both jobs' priorities and starts.
    ``banded(squeue)``: true once the controller has set the pending jobs' bands."""
    short, _ = instance.submit("bob", 4, 15, "short", extra="-c 8 --no-requeue")
    longs = [instance.submit("bob", 4, 600, f"long{k}", extra="-c 8 --no-requeue")[0] for k in range(3)]
    wait_for(lambda: all(j["job_state"] == "RUNNING" for i, j in instance.squeue().items() if i in [short, *longs]),
             30, "bob's jobs to start", seen=lambda: reasons(instance, [short, *longs]))
    cpu = submit_cpu_job(instance, "alice", 8, 5)
    gpu, _ = instance.submit("alice", 4, 20, "gpu", extra="-c 8")
    wait_for(lambda: banded(instance.squeue()), 15, "the controller's bands", seen=lambda: reasons(instance, [cpu, gpu]))
    jobs = instance.squeue()
    assert jobs[short]["job_state"] == "RUNNING", "bob's short job ended before the priorities were read"
    priority = {"cpu": jobs[cpu]["priority"], "gpu": jobs[gpu]["priority"]}
    wait_for(lambda: instance.squeue()[cpu]["job_state"] != "PENDING", 60, "the CPU job to start",
             seen=lambda: reasons(instance, [cpu, gpu, short]))
    jobs = instance.squeue()
    result = {"priority": priority, "cpu_wait_s": jobs[cpu]["start_time"] - jobs[cpu]["submit_time"],
              "gpu_state": jobs[gpu]["job_state"], "gpu_start": jobs[gpu]["start_time"],
              "cpu_start": jobs[cpu]["start_time"]}
    instance.cancel_all()
    return result


def test_a_cpu_only_job_starts_as_it_would_without_the_controller(iso, run):
    stock = cpu_job_behind_a_loaded_gpu_cluster(iso)
    assert stock["gpu_state"] == "PENDING", stock  # the baseline: Slurm alone starts the CPU job first
    run.start()
    gpu_banded = lambda jobs: any(j["name"] == "gpu" and j["job_state"] == "PENDING" and j["priority"] >= 100000
                                  for j in jobs.values())
    tiresias = cpu_job_behind_a_loaded_gpu_cluster(iso, gpu_banded)
    print(f"CPU-only job: stock {stock}, controller {tiresias}")
    assert tiresias["priority"]["cpu"] >= tiresias["priority"]["gpu"], tiresias
    assert tiresias["gpu_state"] == "PENDING" or tiresias["gpu_start"] >= tiresias["cpu_start"], tiresias
    assert tiresias["cpu_wait_s"] <= stock["cpu_wait_s"] + SLACK_S, (stock, tiresias)

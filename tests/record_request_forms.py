"""Record every form of a GPU request as Slurm writes it (issue 35, item 3), on a real
isolated instance shaped like a site's (TIRESIAS_INSTANCE_SITE=1: gNAME[1-2] gpu:v100:4,
NAME[3-4] gpu:a100:4, 8 CPUs and 16000 MB each) with the settings most GPU sites add:
CR_Core_Memory, DefCpuPerGPU=2, DefMemPerGPU=1000.

    PYTHONPATH=$PWD .venv/bin/python tests/record_request_forms.py tests/fixtures/slurm/22.05
    TIRESIAS_OTHER_SUITE=trixie bash containers/release-root.sh shell \\
        'bash containers/slurm-cluster.sh up && PYTHONPATH=$PWD /opt/tiresias-venv/bin/python \\
         tests/record_request_forms.py tests/fixtures/slurm/24.11'

A CPU-only job as bob holds every node (--exclusive) while alice submits one job per
form (``-J FORM``), so each is pending and has been through the scheduler (Slurm fills
the partition's JobDefaults into a job only when it tests it against one); a held job
(``held``, never tested) shows a record without them. Written into OUTDIR:

  request_forms_pending.json / .txt   squeue --json --states=all / scontrol show job -o, every form pending
  request_forms_running.json / .txt   the same once bob's job is cancelled (the forms that fit run)
  request_forms_config.txt            scontrol show config's JobDefaults line and show partition -o
  request_forms_RECORDED              the release, and each form's sbatch options
  request_forms_memory.txt            what Slurm needs free to start a GPU job with --mem beside
                                      DefMemPerGPU (probe_memory: whether each probe started)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.slurm_harness import Instance, cluster_script  # noqa: E402

CONF_EXTRA = "SelectTypeParameters=CR_Core_Memory; DefCpuPerGPU=2; DefMemPerGPU=1000"
# form -> sbatch options; the first ones are the ones that must fit when the blocker leaves
FORMS = {
    "per_socket": "--gpus-per-socket=1 --sockets-per-node=2 --cpus-per-gpu=1",
    "ntasks_per_gpu": "--ntasks-per-gpu=2 -n 4",
    "ntasks_per_gpu_count": "--ntasks-per-gpu=1 --gpus=2",
    "per_task": "-n 2 --gpus-per-task=1",
    "per_task_typed": "-p urgent -n 2 --gpus-per-task=a100:1",
    "plain": "--gres=gpu:2",
    "mem_small": "--gres=gpu:1 --mem=500",
    "typed": "-p urgent --gres=gpu:a100:1",
    "gpus": "--gpus=3",
    "gpus_typed": "-p urgent --gpus=a100:2",
    "per_node": "--gpus-per-node=2",
    "cpus_per_gpu": "--gres=gpu:2 --cpus-per-gpu=3",
    "mem_per_gpu": "--gres=gpu:2 --mem-per-gpu=2000",
    "mem": "--gres=gpu:2 --mem=3000",
    "held": "-H --gres=gpu:2",
}


def sbatch(instance: Instance, user: str, workdir: str, args: str) -> str:
    command = (f"cd {workdir} && SLURM_CONF={instance.conf} sbatch --parsable --requeue -t 60 "
               f"{args} --wrap 'sleep 600'")
    proc = subprocess.run(["su", user, "-c", command], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise SystemExit(f"sbatch {args} as {user} failed: {proc.stderr.strip()}")
    return proc.stdout.strip().split(";")[0]


def jobs_now(instance: Instance) -> list[dict]:
    return json.loads(instance.run(["squeue", "--json", "--states=all"]).stdout)["jobs"]


def wait(what: str, predicate, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)


def state(job: dict) -> str:
    value = job["job_state"]
    return value if isinstance(value, str) else value[0]


def remove_instance(name: str) -> None:
    """Stop the instance and delete its state: each recording starts from job ids of its own."""
    cluster_script(name, "down", timeout_s=120)
    for path in (f"/etc/slurm-{name}", f"/var/spool/slurmctld-{name}", f"/var/spool/slurmd-{name}",
                 f"/var/log/slurm-{name}"):
        shutil.rmtree(path, ignore_errors=True)


def main(out: Path, name: str = "gdrec") -> None:
    out.mkdir(parents=True, exist_ok=True)
    remove_instance(name)
    env = {"TIRESIAS_INSTANCE_SITE": "1", "TIRESIAS_INSTANCE_CONF_EXTRA": CONF_EXTRA}
    up = cluster_script(name, "up", extra_env=env)
    if up.returncode != 0:
        raise SystemExit(f"instance {name} did not start:\n{up.stdout[-2000:]}{up.stderr[-2000:]}")
    instance = Instance(name)
    try:
        instance.cancel_all()
        dirs = {}
        for user in ("alice", "bob"):
            dirs[user] = instance.workdir(user)
        blocker = sbatch(instance, "bob", dirs["bob"], "-N 4 --exclusive -J blocker")
        wait("the blocker to run", lambda: any(j["name"] == "blocker" and state(j) == "RUNNING"
                                               for j in jobs_now(instance)))
        ids = {form: sbatch(instance, "alice", dirs["alice"], f"-J {form} {args}") for form, args in FORMS.items()}
        # every form but the held one tested by the scheduler: its JobDefaults filled in
        wait("the scheduler to test every form", lambda: all(
            j["cpus_per_tres"] for j in jobs_now(instance) if j["name"] in FORMS and j["name"] != "held"))
        time.sleep(2)
        record(instance, out, "pending")
        instance.run(["scancel", blocker])
        wait("the forms that fit to run", lambda: sum(
            state(j) == "RUNNING" for j in jobs_now(instance) if j["name"] in FORMS) >= 5)
        time.sleep(3)
        record(instance, out, "running")
        defaults = [line for line in instance.run(["scontrol", "show", "config"]).stdout.splitlines()
                    if line.startswith(("JobDefaults", "SelectTypeParameters", "DefMemPer"))]
        partitions = instance.run(["scontrol", "show", "partition", "-o"]).stdout
        (out / "request_forms_config.txt").write_text("\n".join(defaults) + "\n" + partitions)
        (out / "request_forms_memory.txt").write_text(probe_memory(instance, dirs))
        release = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True).stdout.strip()
        lines = [f"Recorded by tests/record_request_forms.py on {release}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
                 f"instance: TIRESIAS_INSTANCE_SITE=1 TIRESIAS_INSTANCE_CONF_EXTRA='{CONF_EXTRA}'",
                 "bob's blocker: -N 4 --exclusive; each form as alice, sbatch -J FORM --requeue -t 60 OPTIONS:"]
        lines += [f"  {form:22} job {ids[form]:>8}  {args}" for form, args in FORMS.items()]
        (out / "request_forms_RECORDED").write_text("\n".join(lines) + "\n")
    finally:
        instance.cancel_all()
        instance.cleanup()
        if not os.environ.get("KEEP"):
            remove_instance(name)
    print(f"[record_request_forms] wrote {out}")


# (sbatch options, MB the per-GPU default asks, MB --mem asks) on a node with 2000 MB
# free (bob holds 14000 of its 16000 MB), 3 GPUs and 6 CPUs free: which Slurm starts
MEMORY_PROBES = (
    ("--gres=gpu:3 --mem=1000", 3000, 1000),
    ("--gres=gpu:2 --mem=1000", 2000, 1000),
    ("--gres=gpu:2 --mem=3000", 2000, 3000),
    ("--gres=gpu:2", 2000, 0),
    ("--gres=gpu:3", 3000, 0),
)


def probe_memory(instance: Instance, dirs: dict) -> str:
    """Whether Slurm starts a job with --mem beside DefMemPerGPU=1000 where only --mem,
    or only the per-GPU default, fits in a node's free memory: one line per probe."""
    instance.cancel_all()
    node = f"{instance.name}g1"
    holder = sbatch(instance, "bob", dirs["bob"], f"-J holder --gres=gpu:1 --mem=14000 -w {node}")
    wait("the 14000 MB job to run", lambda: any(j["name"] == "holder" and state(j) == "RUNNING"
                                                for j in jobs_now(instance)))
    lines = [f"{node}: 16000 MB, bob's job {holder} holds 14000 MB and 1 GPU: 2000 MB, 3 GPUs, 6 CPUs free"]
    for args, per_gpu_mb, mem_mb in MEMORY_PROBES:
        job = sbatch(instance, "alice", dirs["alice"], f"-J probe {args} -w {node}")
        time.sleep(4)
        found = next(j for j in jobs_now(instance) if str(j["job_id"]) == job)
        lines.append(f"sbatch {args:28} (DefMemPerGPU x GPUs {per_gpu_mb} MB, --mem {mem_mb} MB): {state(found)} "
                     f"{found.get('state_reason')}")
        instance.run(["scancel", job])
        wait("the probe to leave", lambda: all(state(j) not in ("RUNNING", "PENDING", "COMPLETING")
                                               for j in jobs_now(instance) if str(j["job_id"]) == job))
    instance.run(["scancel", holder])
    return "\n".join(lines) + "\n"


def record(instance: Instance, out: Path, phase: str) -> None:
    (out / f"request_forms_{phase}.json").write_text(instance.run(["squeue", "--json", "--states=all"]).stdout)
    (out / f"request_forms_{phase}.txt").write_text(instance.run(["scontrol", "show", "job", "-o"]).stdout)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: record_request_forms.py OUTDIR")
    main(Path(sys.argv[1]))

"""Driving an isolated Slurm test instance: bring it up, submit checkpointing jobs
as ordinary users, run ``tiresias run`` as a real subprocess, read job state.

Shared by tests/test_slurm_controller.py and bench/ab_slurm.py. The instance is
``TIRESIAS_CLUSTER_INSTANCE=NAME containers/slurm-cluster.sh up``; every client
command here runs with that instance's ``SLURM_CONF``, never the default cluster's.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from slurm_plugin.parse_jobs import parse_squeue_record

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = ROOT / "containers" / "slurm-cluster.sh"
DEFAULT_INSTANCE = "tiresiastest"

def _plain(value):
    """23.02+ numbers ({set, infinite, number}) as 22.05 writes them: the number, or
    None when unset or infinite (22.05's null = UNLIMITED)."""
    if isinstance(value, dict):
        if set(value) == {"set", "infinite", "number"}:
            return value["number"] if value["set"] and not value["infinite"] else None
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def plain_squeue_records(text: str) -> dict[str, dict]:
    """``squeue --json`` records by job id, in 22.05's spelling on every release, for
    the tests and benches that read raw fields: numbers unwrapped, ``job_state`` the
    base state ("PENDING", where 24.11 lists ["PENDING", "REQUEUED"]) as the
    controller's parser reads it, TRES ``gres/gpu:2`` as ``gres:gpu:2``."""
    records = {}
    for raw in json.loads(text).get("jobs", []):
        record = _plain(raw)
        record["job_state"] = parse_squeue_record(raw).state
        for key in ("tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task"):
            if isinstance(record.get(key), str):
                record[key] = record[key].replace("gres/", "gres:")
        records[str(record["job_id"])] = record
    return records


# A job that does WORK seconds of "work" (one sleep per second), checkpoints the
# count after every second (temp file + rename, so a kill never leaves half a
# file), resumes from the checkpoint on restart, logs the checkpoint signal and
# exits on TERM (what `scontrol requeue` sends) so the job can be requeued. It traps
# USR1 in the batch shell, so it declares B:USR1 (the preemption contract: only jobs
# that declare their checkpoint signal are preempted).
JOB_SCRIPT = r"""#!/bin/bash
#SBATCH --signal=B:USR1@3
# The traps come first: a signal before them ends bash (Slurm may send --signal
# up to 60 s early, i.e. right at the start of a short job; @3: its own lead time
# is no longer than the harness's preempt_grace_s, so the grace stays 3 s).
trap 'checkpoint; echo "got USR1 $(date +%s.%N) done=$done_s"' USR1
trap 'checkpoint; echo "got TERM $(date +%s.%N) done=$done_s"; exit 143' TERM
WORK=${1:?work seconds}
CKPT="$PWD/ckpt.$SLURM_JOB_ID"
done_s=0
checkpoint() { echo "$done_s" > "$CKPT.tmp" && mv -f "$CKPT.tmp" "$CKPT"; }
[ -f "$CKPT" ] && done_s=$(cat "$CKPT")
echo "start $(date +%s.%N) job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-0} resume=$done_s"
while [ "$done_s" -lt "$WORK" ]; do
    sleep 1 & pid=$!
    while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done  # a trap interrupts wait, runs, and we wait on
    done_s=$((done_s + 1))
    checkpoint
done
echo "done $(date +%s.%N) job=$SLURM_JOB_ID work=$done_s restart=${SLURM_RESTART_COUNT:-0}"
"""


def instance_conf(instance: str) -> str:
    return f"/etc/slurm-{instance}/slurm.conf"


def cluster_script(instance: str, action: str, timeout_s: float = 600,
                   extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TIRESIAS_CLUSTER_INSTANCE": instance, **(extra_env or {})}
    env.pop("SLURM_CONF", None)
    return subprocess.run(["bash", str(CLUSTER_SCRIPT), action], capture_output=True, text=True,
                          timeout=timeout_s, env=env)


class CommandFailed(subprocess.CalledProcessError):
    """A command of an instance that exited non-zero, said with what it printed (a
    CalledProcessError's message has no stderr); still a SubprocessError, which the
    callers that wait out a restarting slurmctld catch."""

    def __str__(self) -> str:
        return f"{' '.join(self.cmd)} exited {self.returncode}: {(self.stderr or self.output or '').strip()}"


@dataclass
class Instance:
    """One isolated cluster instance; every command gets its SLURM_CONF."""

    name: str = DEFAULT_INSTANCE
    workdirs: list[str] = field(default_factory=list)

    @property
    def conf(self) -> str:
        return instance_conf(self.name)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": self.conf}

    def up(self) -> subprocess.CompletedProcess:
        return cluster_script(self.name, "up")

    def run(self, argv: list[str], timeout_s: float = 30, check: bool = True) -> subprocess.CompletedProcess:
        """``argv`` against this instance; with ``check``, a non-zero exit raises
        CommandFailed."""
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=self.env)
        if check and proc.returncode != 0:
            raise CommandFailed(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc

    def squeue(self) -> dict[str, dict]:
        """Every job slurmctld knows (finished ones for MinJobAge), by id: squeue's
        records in 22.05's spelling (plain_squeue_records)."""
        return plain_squeue_records(self.run(["squeue", "--json", "--states=all"], timeout_s=30).stdout)

    def show_jobs(self) -> dict[str, dict[str, str]]:
        """``scontrol show job -o`` as {job id: {Key: value}}."""
        out = self.run(["scontrol", "show", "job", "-o"], timeout_s=30).stdout
        jobs = {}
        for line in out.splitlines():
            fields: dict[str, str] = {}
            for token in line.split():
                key, sep, value = token.partition("=")
                if sep:
                    fields[key] = value
            if "JobId" in fields:
                jobs[fields["JobId"]] = fields
        return jobs

    def cancel_all(self, wait_s: float = 60) -> None:
        """Cancel every job and wait until no job holds a node."""
        self.run(["scancel", "--full", "-u", "alice"], check=False)
        self.run(["scancel", "--full", "-u", "bob"], check=False)
        self.run(["scancel", "-u", "alice"], check=False)
        self.run(["scancel", "-u", "bob"], check=False)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            states = {j["job_state"] for j in self.squeue().values()}
            if not states & {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "SUSPENDED"}:
                nodes = self.run(["sinfo", "-h", "-N", "-o", "%t"], check=False).stdout.split()
                if nodes and all(n == "idle" for n in nodes):
                    return
            time.sleep(0.5)
        raise RuntimeError(f"jobs still active {wait_s} s after scancel")

    def workdir(self, user: str) -> str:
        path = tempfile.mkdtemp(prefix=f"tiresias-{self.name}-{user}-")
        shutil.chown(path, user=user, group=user)
        os.chmod(path, 0o755)
        script = Path(path) / "job.sh"
        script.write_text(JOB_SCRIPT)
        shutil.chown(script, user=user, group=user)
        script.chmod(0o755)
        self.workdirs.append(path)
        return path

    def submit(self, user: str, gpus: int, work_s: int, name: str = "t", workdir: Optional[str] = None,
               extra: str = "", gpu_type: str = "") -> tuple[str, str]:
        """sbatch the checkpointing job as USER (``gpu_type``: --gres=gpu:TYPE:N);
        returns (job id, its working directory)."""
        workdir = workdir or self.workdir(user)
        nodes = max(1, -(-gpus // 4))
        per_node = gpus // nodes if gpus % nodes == 0 else None
        if per_node is None:
            raise ValueError(f"{gpus} GPUs do not split evenly over {nodes} nodes of 4")
        gres = f"gpu:{gpu_type}:{per_node}" if gpu_type else f"gpu:{per_node}"
        args = (f"--parsable -J {shlex.quote(name)} -N {nodes} --gres={gres} -n {nodes} "
                f"--output=%j.out --open-mode=append --requeue {extra} ./job.sh {int(work_s)}")
        command = f"cd {shlex.quote(workdir)} && SLURM_CONF={shlex.quote(self.conf)} sbatch {args}"
        proc = subprocess.run(["su", user, "-c", command], capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch as {user} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout.strip().split(";", 1)[0], workdir

    def cleanup(self) -> None:
        for path in self.workdirs:
            shutil.rmtree(path, ignore_errors=True)
        self.workdirs.clear()


def write_config(path: Path, database_url: str, cluster: str, mode: str = "enforce", **settings) -> Path:
    """The controller's YAML for a test/benchmark run: small thresholds and grace so
    that jobs demote and preemptions finish within seconds."""
    import yaml

    data = {"mode": mode, "database_url": database_url, "cluster": cluster, "queues_gpu_s": [40.0],
            "preempt_grace_s": 3.0, "preempt_min_runtime_s": 2.0, "interval_s": 1.0, "poll_s": 0.5,
            "site_factor_band": 100000, "log_level": "INFO", **settings}
    path.write_text(yaml.safe_dump(data))
    return path


# `tiresias run` exactly as installed; the same module (controller.cli.run) behind a
# one-command parser when the full CLI cannot be built, e.g. while another
# subcommand's module is missing from a shared working tree.
_CLI_RUN = [sys.executable, "-m", "controller.cli.main", "run"]
_DIRECT_RUN = [sys.executable, "-c",
               "import argparse, sys; from controller.cli import run as cmd_run; p = argparse.ArgumentParser(prog='tiresias run');"
               " cmd_run.add_arguments(p); sys.exit(cmd_run.run(p.parse_args(sys.argv[1:])))"]
_entry: Optional[list[str]] = None


def controller_entry() -> list[str]:
    global _entry
    if _entry is None:
        probe = subprocess.run([*_CLI_RUN, "--help"], cwd=str(ROOT), capture_output=True, text=True, timeout=60)
        _entry = _CLI_RUN if probe.returncode == 0 else _DIRECT_RUN
        if _entry is _DIRECT_RUN:
            print(f"note: `controller.cli.main run` unavailable ({probe.stderr.strip().splitlines()[-1:]}); "
                  "running controller.cli.run directly", file=sys.stderr)
    return _entry


class ControllerProcess:
    """``python -m controller.cli.main run`` as a child process with the instance's SLURM_CONF."""

    def __init__(self, instance: Instance, config_path: Path, log_path: Path, mode: str = "enforce",
                 interval_s: float = 1.0, poll_s: float = 0.5):
        self.instance = instance
        self.argv = [*controller_entry(), "--config", str(config_path),
                     "--mode", mode, "--interval-s", f"{interval_s:g}", "--poll-s", f"{poll_s:g}"]
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "ControllerProcess":
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.argv, cwd=str(ROOT), env=self.instance.env, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def log_text(self) -> str:
        try:
            return self.log_path.read_text()
        except OSError:
            return ""

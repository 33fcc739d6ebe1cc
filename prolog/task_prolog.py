#!/usr/bin/python3 -I
"""Tiresias TaskProlog: ``export NAME=value`` lines that Slurm puts into each task's
environment. Installed as ``TaskProlog=/etc/slurm/tiresias/task_prolog``; runs as the
job's user, loads the shared node code from the installed prolog next to it.

For a job whose prolog started (or reused) its GPU's MPS daemon it prints
  export CUDA_MPS_PIPE_DIRECTORY=<run_dir>/gpu<IDX>/pipe
  export CUDA_MPS_LOG_DIRECTORY=<run_dir>/gpu<IDX>/log
  export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<tier>
(the tier, which replaces a Slurm percentage that is not an allowed tier). For a job
that asked for MPS but got none it prints ``export TIRESIAS_MPS=unavailable`` (the job
runs unshared-quota: see the prolog's failure policy). For every job with a private
state directory it prints ``export TIRESIAS_CHECKPOINT_MARKER=<run_dir>/jobs/<jobid>.d/checkpoint``,
the file the checkpoint helpers touch and the epilog detects. Otherwise nothing.
Never fails the task: errors print nothing and exit 0.
"""
from __future__ import annotations

import os
import stat
import sys


def load_node_module():
    """Same rule as the epilog's: the installed prolog next to this file, or the repo copy."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "prolog"), os.path.join(here, "tiresias_prolog.py")):
        try:
            info = os.stat(candidate)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_uid not in (0, os.geteuid()) or info.st_mode & 0o022:
            continue
        sys.dont_write_bytecode = True
        loader = importlib.machinery.SourceFileLoader("tiresias_node", candidate)
        spec = importlib.util.spec_from_loader("tiresias_node", loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module
    raise ImportError(f"tiresias node code (prolog) not found next to {here}")


def export_lines(node, env: dict, config) -> list:
    job_id = env.get("SLURM_JOB_ID", "")
    if not node.JOB_ID_RE.fullmatch(job_id):
        return []
    lines = []
    state = node.read_json(node.job_state_path(config, job_id), {})
    mps = state.get("mps") if isinstance(state, dict) else None
    if isinstance(mps, dict) and mps.get("status") == "ok" and isinstance(mps.get("gpu"), int):
        pipe, logdir = node.mps_dirs(config, mps["gpu"])
        percent = mps.get("percent")
        if not (isinstance(percent, int) and percent in config.tiers):
            percent = config.default_tier
        lines += [f"export CUDA_MPS_PIPE_DIRECTORY={pipe}", f"export CUDA_MPS_LOG_DIRECTORY={logdir}",
                  f"export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={percent}"]
    elif env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") is not None:
        lines.append("export TIRESIAS_MPS=unavailable")
    if os.path.isdir(node.job_private_dir(config, job_id)):
        lines.append(f"export TIRESIAS_CHECKPOINT_MARKER={node.checkpoint_marker_path(config, job_id)}")
    return lines


def main() -> int:
    try:
        node = load_node_module()
        config = node.load_config()
        import signal

        signal.alarm(config.timeout_s)  # default action: terminate; Slurm ignores the exit of a TaskProlog
        lines = export_lines(node, dict(os.environ), config)
        if lines:
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()
    except Exception:  # noqa: BLE001 - never break the task
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

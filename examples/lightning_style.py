#!/usr/bin/env python3
"""Lightning-style self-requeue (stdlib only; the pattern of PyTorch Lightning's
SLURMEnvironment with auto_requeue): on SIGUSR1 finish the current step, save a
checkpoint, then ask Slurm to requeue this job (``scontrol requeue $SLURM_JOB_ID``).
Slurm then ends this run and starts the job again; the next run resumes from the
checkpoint. If the requeue is refused the loop simply goes on training.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

requested = False


def on_usr1(_signum, _frame):
    global requested
    requested = True


def save(path: str, state: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def main() -> int:
    global requested
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-s", type=float, default=0.1, help="seconds of fake work per step")
    parser.add_argument("--checkpoint", default="ckpt.json")
    args = parser.parse_args()
    signal.signal(signal.SIGUSR1, on_usr1)
    state = {"step": 0}
    if os.path.exists(args.checkpoint):
        with open(args.checkpoint, encoding="utf-8") as handle:
            state = json.load(handle)
        print(f"resumed at step {state['step']}", flush=True)
    while state["step"] < args.steps:
        time.sleep(args.step_s)
        state["step"] += 1
        if requested:
            requested = False
            save(args.checkpoint, state)
            job_id = os.environ.get("SLURM_JOB_ID", "")
            print(f"checkpointed at step {state['step']}; requeueing job {job_id}", flush=True)
            done = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True)
            if done.returncode == 0:
                time.sleep(120)  # Slurm ends this run now (SIGTERM, then SIGKILL)
                return 0
            print(f"requeue refused ({done.stderr.strip()}); training on", flush=True)
    save(args.checkpoint, state)
    print(f"done at step {state['step']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A training-loop stub that survives preemption: it resumes from its checkpoint,
checkpoints atomically when the controller's signal arrives (default SIGUSR1) and
exits with the requeue-friendly code. Runs anywhere (no GPU, no Slurm needed):

    python3 examples/train_loop.py --steps 50 --checkpoint /tmp/ckpt.json &
    kill -USR1 $!          # -> "checkpointed at step N", exit code 85
    python3 examples/train_loop.py --steps 50 --checkpoint /tmp/ckpt.json   # resumes at N
"""
import argparse
import json
import os
import sys
import time

try:
    import tiresias_checkpoint as checkpoint  # pip install PATH/packaging/tiresias-checkpoint
except ImportError:  # a checkout's examples/, the helper one folder up
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import tiresias_checkpoint as checkpoint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-s", type=float, default=0.1, help="seconds of fake work per step")
    parser.add_argument("--checkpoint", default="ckpt.json")
    args = parser.parse_args()

    checkpoint.install()
    state = {"step": 0, "loss": 1.0}
    if os.path.exists(args.checkpoint):
        with open(args.checkpoint, encoding="utf-8") as handle:
            state = json.load(handle)
        print(f"resumed at step {state['step']}", flush=True)
    while state["step"] < args.steps:
        time.sleep(args.step_s)  # one training step
        state["step"] += 1
        state["loss"] *= 0.99
        if checkpoint.requested():
            checkpoint.save_atomically(args.checkpoint, json.dumps(state).encode())
            print(f"checkpointed at step {state['step']}", flush=True)
            checkpoint.exit_for_requeue()
    checkpoint.save_atomically(args.checkpoint, json.dumps(state).encode())
    print(f"done at step {state['step']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

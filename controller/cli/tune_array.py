"""`tiresias tune --slurm-array`: each round of the search as one Slurm job array.

The search itself (controller.replay.tuner) stays in the calling process; only the
replays move. Each round's candidates go into a round file in a directory the nodes
can read, one array task replays one candidate (``python -m controller.cli.tune_array
ROUND_FILE``; which one: ``SLURM_ARRAY_TASK_ID``) and writes its figures next to it,
and ``sbatch --wait`` returns when the array has ended. A replay is deterministic, so
the ranking is the local run's; what changes is where the replays run (the
cluster's nodes instead of this machine's cores), hence the wall time.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from controller.core.model import InputError
from controller.replay.traces import load_trace
from controller.replay.tuner import Setting, replay_setting

JOB_NAME = "tiresias-tune"


def _result_path(round_file: Path, task: int) -> Path:
    return round_file.with_name(f"{round_file.stem}-{task}.result.json")


class ArrayEvaluator:
    """The tuner's ``evaluate`` hook: one job array per round, the results in batch order.

    ``workdir`` must be readable and writable from the nodes (the job runs there as
    the caller); ``sbatch_args`` are passed through (partition, account, time limit)."""

    def __init__(self, trace: str, time_scale: float, workdir: str, sbatch_args: Sequence[str] = (),
                 python: str = sys.executable, sbatch: str = "sbatch", timeout_s: float = 24 * 3600.0):
        self.trace = os.path.abspath(trace)
        self.time_scale = time_scale
        self.workdir = Path(workdir).resolve()
        self.sbatch_args = list(sbatch_args)
        self.python, self.sbatch, self.timeout_s = python, sbatch, timeout_s
        self.rounds = 0
        self.array_ids: list[str] = []
        self.wall_s = 0.0  # time spent waiting for the arrays

    def __call__(self, batch: list[Setting], base: dict) -> list[tuple]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        round_file = self.workdir / f"round-{self.rounds}.json"
        self.rounds += 1
        round_file.write_text(json.dumps({
            "trace": self.trace, "time_scale": self.time_scale, "base": base,
            "settings": [[list(s.thresholds_gpu_s), s.promote_knob] for s in batch]}))
        task = shlex.join([self.python, "-m", "controller.cli.tune_array", str(round_file)])
        argv = [self.sbatch, "--parsable", "--wait", f"--array=0-{len(batch) - 1}", "-J", JOB_NAME,
                "-o", str(self.workdir / f"{round_file.stem}-%a.out"), f"--chdir={self.workdir}",
                *self.sbatch_args, "--wrap", task]
        started = time.perf_counter()
        try:
            # The project's root on the task's path: the nodes run this checkout's code.
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                                            os.environ.get("PYTHONPATH", "")]))}
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, env=env)
        except FileNotFoundError:
            raise InputError(f"--slurm-array: {self.sbatch}: command not found") from None
        except subprocess.TimeoutExpired:
            raise InputError(f"--slurm-array: the array of {round_file.name} did not end within "
                             f"{self.timeout_s:g} s") from None
        self.wall_s += time.perf_counter() - started
        array_id = proc.stdout.strip().split(";", 1)[0]
        if array_id:
            self.array_ids.append(array_id)
        results = []
        for i in range(len(batch)):
            path = _result_path(round_file, i)
            if not path.exists():
                why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
                output = self.workdir / f"{round_file.stem}-{i}.out"
                # The task's own last words (a traceback's last line) say why, where sbatch only says it failed
                try:
                    said = next((line.strip() for line in reversed(output.read_text(errors="replace").splitlines())
                                 if line.strip()), "nothing")
                except OSError:
                    said = "no output file"
                raise InputError(f"--slurm-array: task {i} of array job {array_id or '?'} wrote no result "
                                 f"(sbatch: {why}; task output {output}: {said[:300]})")
            results.append(tuple(json.loads(path.read_text())))
        return results


def run_task(round_file: Path, task: int) -> Path:
    """Replay candidate ``task`` of ``round_file``; write its figures beside it."""
    spec = json.loads(round_file.read_text())
    thresholds, knob = spec["settings"][task]
    jobs = load_trace(spec["trace"], time_scale=spec["time_scale"])
    figures = replay_setting(jobs, spec["base"], Setting(tuple(thresholds), knob))
    out = _result_path(round_file, task)
    partial = out.with_suffix(".tmp")
    partial.write_text(json.dumps(list(figures)))
    partial.replace(out)  # whole or absent: the caller never reads half a result
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1 or "SLURM_ARRAY_TASK_ID" not in os.environ:
        print("usage: python -m controller.cli.tune_array ROUND_FILE (as a task of the array "
              "`tiresias tune --slurm-array` submits)", file=sys.stderr)
        return 2
    run_task(Path(argv[0]), int(os.environ["SLURM_ARRAY_TASK_ID"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

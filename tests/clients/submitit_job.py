"""A submitit ``Checkpointable`` job written as submitit's docs show, for
tests/test_slurm_submitit.py. Run as the submitting user:

    python submitit_job.py FOLDER STEPS   # prints the Slurm job id

The job counts STEPS one-second steps on 4 GPUs of one node. On the preemption
signal (submitit's USR2, to the job's steps) submitit pickles the job object with
its count (``checkpoint``), requeues the job itself (``scontrol requeue``), and the
next run resumes from that count. Each run logs its starting count to FOLDER/steps.log.
It runs in __main__ so that cloudpickle sends the class by value (the job's Python
need not import this file).
"""
import sys
import time
from pathlib import Path

import submitit


class Counter(submitit.helpers.Checkpointable):
    def __init__(self, log: str, steps: int):
        self.log, self.steps, self.done = log, steps, 0

    def __call__(self) -> int:
        self.note(f"start done={self.done}")
        while self.done < self.steps:
            time.sleep(1)
            self.done += 1
        self.note(f"finished done={self.done}")
        return self.done

    def note(self, line: str) -> None:
        with open(self.log, "a") as out:
            out.write(line + "\n")


def main(folder: str, steps: int) -> None:
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    # 60 min: submitit takes a signal in the last 20% (or 10 min) of the limit as a time-out
    executor.update_parameters(name="submitit", timeout_min=60, nodes=1, tasks_per_node=1, gpus_per_node=4,
                               slurm_signal_delay_s=15)
    job = executor.submit(Counter(str(Path(folder) / "steps.log"), steps))
    print(job.job_id)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

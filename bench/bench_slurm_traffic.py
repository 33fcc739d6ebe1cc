"""Slurm traffic of the controller: commands sent to slurmctld per round and per minute.

The real controller (controller.service.daemon) and the real Slurm backend
(slurm_plugin.backend, parser included) run against a scripted slurmctld: a command
runner that answers ``squeue``/``sinfo``/``sprio``/``scontrol`` from an in-memory
cluster of 10,000 pending and 2,000 running GPU jobs on 1,000 nodes x 8 GPUs, in the
22.05 JSON shapes of tests/fixtures/slurm/22.05 (only slurmctld is scripted: this
measures what the controller asks, not how fast Slurm answers). Printed:
- scontrol calls in the first round (SiteFactor for every pending job, batch-script
  reads for running jobs, at most 50 per round: the next rounds read the rest), in a
  steady round (target 0) and in the round after one job starts (target <= 5), for
  dlas (SiteFactor by level and started class) beside las (a continuous policy:
  SiteFactor by rank, every pending job its own value, as all policies did before);
  preemptions are off (preempt_max_per_job 0): the scripted cluster does not requeue;
  the per-job AdminComment line is off (its writes have their own per-round budget,
  admin_comment_max_per_round: printed separately);
- Slurm commands per minute with the default poll_s and interval_s in a steady state.
Usage: python bench/bench_slurm_traffic.py [--pending 10000] [--running 2000]
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.service.config import from_mapping  # noqa: E402
from controller.service.daemon import Controller  # noqa: E402
from controller.service.store import Store  # noqa: E402
from slurm_plugin.backend import CommandResult, SlurmBackend  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "slurm" / "22.05"
GPU_SIZES = (1, 1, 2, 2, 4, 8)
SCRIPT = "#!/bin/bash\n#SBATCH --signal=B:USR1@90\n#SBATCH --requeue\nsrun python3 train.py\n"


class ScriptedSlurm:
    """An in-memory cluster answering the CLI calls the backend makes; counts them."""

    def __init__(self, pending: int, running: int, nodes: int = 1000, gpus_per_node: int = 8, seed: int = 1):
        squeue = json.loads((FIXTURES / "squeue.json").read_text())
        sinfo = json.loads((FIXTURES / "sinfo.json").read_text())
        self.meta = {k: v for k, v in squeue.items() if k != "jobs"}
        self.running_template = next(j for j in squeue["jobs"] if str(j["job_id"]) == "5")
        self.pending_template = next(j for j in squeue["jobs"] if str(j["job_id"]) == "10")
        self.node_template = sinfo["nodes"][0]
        self.sinfo_meta = {k: v for k, v in sinfo.items() if k != "nodes"}
        self.gpus_per_node = gpus_per_node
        self.nodes = {f"n{i:04d}": 0 for i in range(nodes)}  # node -> GPUs used
        self.jobs: dict[int, dict] = {}
        self.site_factors: dict[int, int] = {}
        self.calls: Counter = Counter()
        self.now = 1_000_000
        rng = random.Random(seed)
        names = list(self.nodes)
        cursor = 0
        for k in range(1, running + 1):
            gpus = min(rng.choice(GPU_SIZES), gpus_per_node)
            while self.nodes[names[cursor]] + gpus > gpus_per_node:
                cursor += 1
            node = names[cursor]
            self.nodes[node] += gpus
            self.jobs[k] = self._running(k, node, gpus, self.now - rng.randint(100, 90000))
        for k in range(running + 1, running + pending + 1):
            self.jobs[k] = self._pending(k, rng.choice(GPU_SIZES), self.now - rng.randint(0, 90000))

    def _running(self, job_id, node, gpus, start):
        record = copy.deepcopy(self.running_template)
        record.update(job_id=job_id, nodes=node, tres_per_node=f"gres:gpu:{gpus}", node_count=1, tasks=1,
                      gres_detail=[f"gpu:{gpus}(IDX:0-{gpus - 1})"], submit_time=start - 10, start_time=start,
                      end_time=start + 86400, partition="batch", user_name="alice", comment="", restart_cnt=0,
                      job_state="RUNNING", state_reason="None", requeue=True, batch_flag=True, required_nodes="",
                      excluded_nodes="")
        record["job_resources"]["allocated_nodes"] = [{"nodename": node}]
        return record

    def _pending(self, job_id, gpus, submit):
        record = copy.deepcopy(self.pending_template)
        record.update(job_id=job_id, tres_per_node=f"gres:gpu:{gpus}", node_count=1, tasks=1, submit_time=submit,
                      partition="batch", user_name="bob", comment="", restart_cnt=0, job_state="PENDING",
                      state_reason="Priority", requeue=True, batch_flag=True, required_nodes="", excluded_nodes="")
        return record

    def start_one(self) -> int:
        """The pending job with the highest SiteFactor starts on a node with room."""
        pending = [j for j, r in self.jobs.items() if r["job_state"] == "PENDING"]
        job_id = max(pending, key=lambda j: (self.site_factors.get(j, 0), -j))
        gpus = int(self.jobs[job_id]["tres_per_node"].rsplit(":", 1)[1])
        node = next(n for n, used in self.nodes.items() if used + gpus <= self.gpus_per_node)
        self.nodes[node] += gpus
        self.jobs[job_id] = self._running(job_id, node, gpus, self.now)
        return job_id

    def __call__(self, argv, timeout_s, env):
        argv = list(argv)
        if argv[:2] == ["squeue", "--json"]:
            self.calls["squeue --json"] += 1
            return CommandResult(0, json.dumps({**self.meta, "jobs": list(self.jobs.values())}), "")
        if argv[:2] == ["sinfo", "--json"]:
            self.calls["sinfo --json"] += 1
            nodes = []
            for name, used in self.nodes.items():
                node = dict(self.node_template, name=name, gres=f"gpu:{self.gpus_per_node}", gres_used=f"gpu:{used}",
                            state="mixed" if used else "idle", state_flags=[], partitions=["batch"])
                nodes.append(node)
            return CommandResult(0, json.dumps({**self.sinfo_meta, "nodes": nodes}), "")
        if argv[0] == "sprio":
            self.calls["sprio"] += 1
            return CommandResult(0, "".join(f"{j} {self.site_factors.get(j, 0)}\n" for j, r in self.jobs.items()
                                            if r["job_state"] == "PENDING"), "")
        if argv[0] == "squeue" and "-j" in argv:  # the signal lever's state check
            self.calls["squeue -h -j"] += 1
            record = self.jobs.get(int(argv[argv.index("-j") + 1]))
            return CommandResult(0, f"{record['job_state']}\n" if record else "", "")
        if argv[0] == "squeue":
            self.calls["squeue -h -o (poll)"] += 1
            return CommandResult(0, "".join(f"{j} {'R' if r['job_state'] == 'RUNNING' else 'PD'}\n"
                                            for j, r in self.jobs.items()), "")
        if argv[:3] == ["scontrol", "write", "batch_script"]:
            self.calls["scontrol write batch_script"] += 1
            return CommandResult(0, SCRIPT, "")
        if argv[:2] == ["scontrol", "update"] and argv[-1].startswith("SiteFactor="):
            self.calls["scontrol update SiteFactor"] += 1
            value = int(argv[-1].split("=", 1)[1])
            for job_id in argv[2].split("=", 1)[1].split(","):
                self.site_factors[int(job_id)] = value
            return CommandResult(0, "", "")
        self.calls[" ".join(argv[:2])] += 1
        return CommandResult(0, "", "")

    def scontrol(self) -> int:
        return sum(n for name, n in self.calls.items() if name.startswith("scontrol"))


def rounds(policy: str, pending: int, running: int, admin_comment: bool = False) -> dict:
    """Counts per round; ``admin_comment``: also write the per-job AdminComment line
    (controller.service.admin_comment: its own budget, admin_comment_max_per_round)."""
    slurm = ScriptedSlurm(pending, running)
    backend = SlurmBackend(runner=slurm)
    with tempfile.TemporaryDirectory() as tmp, Store(f"sqlite:///{tmp}/t.db") as store:
        # No preemptions (preempt_max_per_job 0): the scripted cluster does not requeue,
        # and this measures the queue's cost, not the victims' levers.
        config = from_mapping({"mode": "enforce", "policy": policy, "queues_gpu_s": [3600.0, 36000.0],
                               "preempt_max_per_job": 0, "usage_spool_dir": f"{tmp}/none",
                               "admin_comment": admin_comment})
        controller = Controller(config, backend, store, clock=lambda: float(slurm.now))
        out = {}
        for name in ("first", "warm-up", "steady", "after one start", "steady again"):
            if name == "after one start":
                slurm.start_one()
            slurm.now += 10
            slurm.calls.clear()
            controller.run_round()
            if name == "warm-up":  # the running jobs' batch scripts, a bounded number per round
                rounds_, reads = 1, slurm.calls["scontrol write batch_script"]
                while slurm.calls["scontrol write batch_script"]:
                    slurm.now += 10
                    slurm.calls.clear()
                    controller.run_round()
                    rounds_, reads = rounds_ + 1, reads + slurm.calls["scontrol write batch_script"]
                out[name] = (reads, {"rounds": rounds_})
                continue
            out[name] = (slurm.scontrol(), dict(slurm.calls))
        slurm.calls.clear()
        signature = backend.poll()
        out["poll"] = (len(signature), dict(slurm.calls))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=10000)
    parser.add_argument("--running", type=int, default=2000)
    args = parser.parse_args()
    config = from_mapping({})
    print(f"scripted slurmctld: {args.pending} pending + {args.running} running GPU jobs, 1000 nodes x 8 GPUs")
    results = {policy: rounds(policy, args.pending, args.running) for policy in ("dlas", "las")}
    print(f"{'scontrol calls per round':<26}" + "".join(f"{p:>10}" for p in results))
    for name in ("first", "steady", "after one start", "steady again"):
        print(f"  {name:<24}" + "".join(f"{results[p][name][0]:>10}" for p in results))
    warm = results["dlas"]["warm-up"]
    print(f"  (after the first round, {warm[1]['rounds']} more rounds read the remaining {warm[0]} batch scripts "
          f"of running jobs, at most 50 per round; then steady)")
    dlas = results["dlas"]
    for name in ("first", "steady", "after one start"):
        print(f"  dlas {name}: {dlas[name][1]}")
    full = sum(n for key, n in dlas["steady again"][1].items())
    poll_s, interval_s = config.poll_s, config.interval_s
    polls, fulls = 60 / poll_s, 60 / interval_s
    per_minute = polls * sum(dlas["poll"][1].values()) + fulls * full
    print(f"steady state at poll_s {poll_s:g} s, interval_s {interval_s:g} s: {polls:.0f} cheap polls "
          f"({dlas['poll'][1]}) + {fulls:.0f} full rounds of {full} command(s) "
          f"({dlas['steady again'][1]}) = {per_minute:.0f} Slurm commands per minute")
    with_comments = rounds("dlas", args.pending, args.running, admin_comment=True)
    print("with admin_comment on (default): scontrol calls per round: "
          + ", ".join(f"{name} {with_comments[name][0]}" for name in ("first", "steady", "after one start")))
    after = dlas["after one start"][0]
    print(f"targets: steady round 0 scontrol calls: {'met' if dlas['steady'][0] == 0 else 'NOT met'}; "
          f"after one start <= 5: {'met' if after <= 5 else 'NOT met'} ({after})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Slurm traffic of the controller: commands sent to slurmctld per round and per minute.

The real controller (controller.service.round.daemon) and the real Slurm backend
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
- Slurm commands per minute, per command, of the real loop (Controller.run_forever,
  driven for one virtual minute: its stop event's wait() advances the clock instead
  of sleeping) with the default poll_s and interval_s: in a steady state, and with
  one job starting and one ending every 15 s.
Usage: python bench/bench_slurm_traffic.py [--pending 10000] [--running 2000]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.service.ops.config import from_mapping  # noqa: E402
from controller.service.round.daemon import Controller  # noqa: E402
from controller.service.state.store import Store  # noqa: E402
from bench.scripted_slurm import ScriptedSlurm, VirtualTime  # noqa: E402
from slurm_plugin.backend import SlurmBackend  # noqa: E402


def controller_for(slurm: ScriptedSlurm, store: Store, tmp: str, policy: str, admin_comment: bool,
                   clock: VirtualTime) -> Controller:
    # No preemptions (preempt_max_per_job 0): the scripted cluster does not requeue,
    # and this measures the queue's cost, not the victims' levers. No RPC budget
    # (slurm_rpc_per_s 0): the commands a state costs, the first round's bands all at
    # once (bench/bench_burst.py measures the budget spreading them over rounds).
    config = from_mapping({"mode": "enforce", "policy": policy, "queues_gpu_s": [3600.0, 36000.0],
                           "preempt_max_per_job": 0, "usage_spool_dir": f"{tmp}/none",
                           "admin_comment": admin_comment, "slurm_rpc_per_s": 0.0})
    return Controller(config, SlurmBackend(runner=slurm, clock=clock), store, clock=clock)


def rounds(policy: str, pending: int, running: int, admin_comment: bool = False, minutes: bool = False) -> dict:
    """Counts per round; ``admin_comment``: also write the per-job AdminComment line
    (controller.service.round.admin_comment: its own budget, admin_comment_max_per_round);
    ``minutes``: then a minute of Controller.run_forever, steady and with changes."""
    slurm = ScriptedSlurm(pending, running)
    clock = VirtualTime(float(slurm.now))
    with tempfile.TemporaryDirectory() as tmp, Store(f"sqlite:///{tmp}/t.db") as store:
        controller = controller_for(slurm, store, tmp, policy, admin_comment, clock)
        out = {}
        for name in ("first", "warm-up", "steady", "after one start", "steady again"):
            if name == "after one start":
                slurm.start_one()
            clock.now_s += 10
            slurm.calls.clear()
            controller.run_round()
            if name == "warm-up":  # the running jobs' batch scripts, a bounded number per round
                rounds_, reads = 1, slurm.calls["scontrol write batch_script"]
                while slurm.calls["scontrol write batch_script"]:
                    clock.now_s += 10
                    slurm.calls.clear()
                    controller.run_round()
                    rounds_, reads = rounds_ + 1, reads + slurm.calls["scontrol write batch_script"]
                out[name] = (reads, {"rounds": rounds_})
                continue
            out[name] = (slurm.scontrol(), dict(slurm.calls))
        if minutes:
            out["minute steady"] = minute(controller, slurm, clock.stop_after(60.0))

            def start_and_finish():
                slurm.start_one()
                slurm.finish_one()
            out["minute changing"] = minute(controller, slurm, clock.stop_after(60.0, 15.0, start_and_finish))
    return out


def minute(controller: Controller, slurm: ScriptedSlurm, stop: threading.Event) -> tuple[int, dict]:
    """The commands of one (virtual) minute of the real loop, Controller.run_forever."""
    slurm.calls.clear()
    rounds_run = []
    real_round = controller.run_round
    controller.run_round = lambda observation=None: rounds_run.append(1) or real_round(observation)
    try:
        controller.run_forever(stop)
    finally:
        del controller.run_round  # the method again
    return len(rounds_run), dict(slurm.calls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=10000)
    parser.add_argument("--running", type=int, default=2000)
    args = parser.parse_args()
    config = from_mapping({})
    print(f"scripted slurmctld: {args.pending} pending + {args.running} running GPU jobs, 1000 nodes x 8 GPUs")
    results = {policy: rounds(policy, args.pending, args.running, minutes=policy == "dlas")
               for policy in ("dlas", "las")}
    print(f"{'scontrol calls per round':<26}" + "".join(f"{p:>10}" for p in results))
    for name in ("first", "steady", "after one start", "steady again"):
        print(f"  {name:<24}" + "".join(f"{results[p][name][0]:>10}" for p in results))
    warm = results["dlas"]["warm-up"]
    print(f"  (after the first round, {warm[1]['rounds']} more rounds read the remaining {warm[0]} batch scripts "
          f"of running jobs, at most 50 per round; then steady)")
    dlas = results["dlas"]
    for name in ("first", "steady", "after one start"):
        print(f"  dlas {name}: {dlas[name][1]}")
    print(f"Slurm commands per minute of Controller.run_forever (dlas, virtual clock; poll_s {config.poll_s:g} s, "
          f"interval_s {config.interval_s:g} s):")
    for name, label in (("minute steady", "steady state"),
                        ("minute changing", "one job starts and one ends every 15 s")):
        full_rounds, calls = dlas[name]
        print(f"  {label}: {sum(calls.values())} commands, {full_rounds} full rounds")
        for command, count in sorted(calls.items(), key=lambda item: -item[1]):
            print(f"    {count:>5}  {command}")
    with_comments = rounds("dlas", args.pending, args.running, admin_comment=True)
    print("with admin_comment on (default): scontrol calls per round: "
          + ", ".join(f"{name} {with_comments[name][0]}" for name in ("first", "steady", "after one start")))
    after = dlas["after one start"][0]
    print(f"targets: steady round 0 scontrol calls: {'met' if dlas['steady'][0] == 0 else 'NOT met'}; "
          f"after one start <= 5: {'met' if after <= 5 else 'NOT met'} ({after})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

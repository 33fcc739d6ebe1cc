"""What the handoff and wait audits cost a replay, and what they find on Philly (issue 28).

Replays the first N Philly jobs (dlas, 64 x 8 GPUs) twice in this process, with the
audits (controller.replay.cluster.SimCluster: expect, judge_handoffs, audit_waits)
turned off and on, and prints both wall times and the two figures:

- plain: one partition, one GPU type;
- kinds: Philly's virtual clusters as overlapping partitions with two GPU types. The
  nodes are shared out among the virtual clusters by their jobs' GPU-seconds
  (bench_replay_cost.node_kinds); kind i belongs to its own cluster and to the next
  one (sorted by name, a ring), so each cluster's jobs may use two kinds and each kind
  serves two clusters; kinds alternate v100 and a100, and every third job (by submit
  order) asks for its own kind's type, so it may use only that kind. A job larger
  than the nodes it may use is left out (Slurm would refuse it).

``--grace-s`` charges the controller's preemption (a grace period and a requeue delay
of that many seconds): a victim then keeps its GPUs a while, so a preemption can free
GPUs its beneficiary never gets; with 0 they change hands at once.

Usage: nice -n 19 python bench/bench_handoff_audit.py [--jobs N] [--grace-s S] [--kinds-only]
Trace: ../shared/traces/philly_pollux.csv (the Pollux artifact, Apache-2.0).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_replay_cost import node_kinds  # noqa: E402
from controller.core.engine import EngineConfig  # noqa: E402
from controller.replay.cluster import SimCluster  # noqa: E402
from controller.replay.simulator import SimConfig, Simulation  # noqa: E402
from controller.replay.traces import load_trace  # noqa: E402

TRACE = ROOT.parent / "shared" / "traces" / "philly_pollux.csv"
NODES, GPUS_PER_NODE = 64, 8
TYPES = ("v100", "a100")


def overlapping_kinds(jobs):
    """(node kinds, jobs): the clusters as a ring of overlapping partitions, two types."""
    plain = node_kinds(jobs, NODES)
    names = [parts[0] for _, parts, _ in plain]
    kinds = tuple((count, (names[i], names[(i + 1) % len(names)]), TYPES[i % 2])
                  for i, (count, _, _) in enumerate(plain))
    own = {names[i]: i for i in range(len(names))}
    typed, kept = [], []
    for number, job in enumerate(jobs):
        i = own[job.partition]
        if number % 3 == 0:
            job = dataclasses.replace(job, gpu_type=kinds[i][2])
            room = kinds[i][0] * GPUS_PER_NODE
        else:  # its own kind and the one before it in the ring
            room = (kinds[i][0] + kinds[i - 1][0]) * GPUS_PER_NODE
        typed.append(job.gpu_type != "")
        if job.num_gpus <= room:
            kept.append(job)
    return kinds, kept, sum(typed)


def replay(jobs, kinds, grace_s: float, audited: bool):
    config = SimConfig(nodes=NODES, gpus_per_node=GPUS_PER_NODE, engine=EngineConfig(policy="dlas"),
                       node_kinds=kinds, drop_oversize=True, preempt_grace_s=grace_s, requeue_delay_s=grace_s)
    saved = {name: getattr(SimCluster, name) for name in ("expect", "judge_handoffs", "audit_waits")}
    if not audited:  # the replay as it was before the audits: their three calls do nothing
        for name in saved:
            setattr(SimCluster, name, lambda *args, **kwargs: None)
    try:
        started = time.perf_counter()
        result = Simulation(config).run(jobs)
        return time.perf_counter() - started, result
    finally:
        for name, method in saved.items():
            setattr(SimCluster, name, method)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000, help="first N jobs by submit time (default 3000)")
    parser.add_argument("--grace-s", type=float, default=0.0, help="grace period and requeue delay (default 0)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each replay, the fastest kept (default 3)")
    parser.add_argument("--kinds-only", action="store_true", help="only the overlapping-kinds case, audits on")
    args = parser.parse_args()
    jobs = sorted(load_trace(str(TRACE)), key=lambda j: j.submit_time_s)[:args.jobs]
    kinds, kind_jobs, typed = overlapping_kinds(jobs)
    spec = ",".join(f"{count}:{'+'.join(parts)}:{gpu_type}" for count, parts, gpu_type in kinds)
    print(f"philly: first {args.jobs} jobs, {NODES} x {GPUS_PER_NODE} GPUs, dlas, grace and requeue delay "
          f"{args.grace_s:g} s; kinds: {len(kinds)} ({spec}), "
          f"{len(kind_jobs)} jobs ({len(jobs) - len(kind_jobs)} larger than their nodes left out, "
          f"{typed} asking for a GPU type)")
    cases = [("kinds", kind_jobs, kinds)] if args.kinds_only else [("plain", jobs, ()), ("kinds", kind_jobs, kinds)]
    for label, case_jobs, case_kinds in cases:
        timings = []
        for audited in ((True,) if args.kinds_only else (False, True)):
            # the fastest of --repeat runs: the machine's other load only ever adds time
            runs = [replay(case_jobs, case_kinds, args.grace_s, audited) for _ in range(args.repeat)]
            seconds, result = min(runs, key=lambda run: run[0])
            timings.append(seconds)
            print(f"  {label:6s} audits {'on ' if audited else 'off'} {seconds:8.2f} s (fastest of {args.repeat})  "
                  f"rounds {result.rounds:>7,}  preemptions {result.preemptions:>7,}")
        print(f"  {label}: preemptions that started nobody: {result.useless_preemptions} of {result.preemptions}; "
              f"jobs that waited behind a usable victim > 2 rounds: {result.waited_behind_victim}"
              + (f"; audits cost {timings[1] / timings[0]:.2f}x" if len(timings) == 2 else ""))
        for victim, beneficiaries, at in result.useless_examples:
            print(f"    started nobody: {victim} signalled at {at:.0f} s for {','.join(beneficiaries) or 'nobody'}")
        for job_id, rounds, since in result.behind_examples:
            print(f"    behind a victim: {job_id}, {rounds} rounds in a row from {since:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

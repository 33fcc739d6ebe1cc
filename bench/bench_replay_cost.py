"""What a finite PROMOTEKNOB, node kinds and Slurm's start order cost a replay (issue
29 item 2, issue 37 item 5).

Prints, for each trace, the CPU time of these dlas replays in this process and their
ratio to the first (target: each within 3x of the plain run), and per round:

- plain: one partition, PROMOTEKNOB inf (the default);
- knob 8: ``--promote-knob 8`` (starvation promotion: more rounds and preemptions are
  the policy's own doing, so they are printed beside the time);
- kinds: the jobs' own partitions as node kinds (Philly: its virtual clusters; a trace
  without partitions has its jobs dealt round-robin into 15), the nodes shared out
  among them in proportion to their jobs' GPU-seconds (a job larger than its
  partition's nodes is left out of every replay);
- slurm starts: ``SimConfig.slurm_starts`` (`simulate --slurm-starts`: Slurm's priority
  order starts the jobs, no time limits), and with ``--limit-h H`` also with every job's
  time limit H hours (backfill's reservations).

``--memory`` replays dlas and dgittins each in a forked child and prints its peak RSS
above the RSS at the fork (the trace is loaded before): dgittins' should stay near
dlas's and grow with the trace, not faster.

With ``--generic`` it also replays the knob-8 case in the generic loop (the engine
rebuilds every queue every round: how a finite knob replayed before issue 29) and
says how many jobs' times differ from the incremental loop's.

``--repeat R`` runs each replay R times and prints the least CPU time of the R (a
replay is deterministic: the same result each time; the least time is the one other
processes on a shared machine disturbed least, where one run wanders by +-20%).

Usage: nice -n 19 python bench/bench_replay_cost.py [--jobs N | --all] [--generic] [--no-slurm]
       [--limit-h H] [--memory] [--philly-only] [--slurm-only] [--repeat R]
(issue 37's figures: --jobs 10000 --philly-only, and --all --philly-only)
Traces: ../shared/traces (Philly via the Pollux artifact, Apache-2.0; ITP via
microsoft/elasticflow-traces, MIT).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import multiprocessing
import resource
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.core.engine import EngineConfig  # noqa: E402
from controller.replay.results import summarize  # noqa: E402
from controller.replay.simulator import SimConfig, Simulation  # noqa: E402
from controller.replay.traces import load_trace  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
# (file, nodes, GPUs per node): Philly on a quarter of its 256 x 8 (thousands waiting),
# ITP cluster04 on its own size
CASES = (("philly_pollux.csv", 64, 8), ("itp/cluster04.csv", 64, 8))
MIN_NODES_PER_KIND = 1
PHILLY_CLUSTERS = 15


def node_kinds(jobs, nodes: int) -> tuple:
    """The jobs' partitions as node kinds, nodes shared by GPU-seconds (each at least one)."""
    demand = Counter()
    for job in jobs:
        demand[job.partition] += job.num_gpus * (job.duration_s or 0.0)
    parts = sorted(demand)
    if len(parts) < 2:
        return None
    if len(parts) > nodes:
        raise SystemExit(f"{len(parts)} partitions for {nodes} nodes")
    total = sum(demand.values()) or 1.0
    share = {p: max(MIN_NODES_PER_KIND, int(nodes * demand[p] / total)) for p in parts}
    while sum(share.values()) > nodes:
        share[max(share, key=share.get)] -= 1
    for p in sorted(parts, key=lambda p: -demand[p]):
        if sum(share.values()) == nodes:
            break
        share[p] += 1
    return tuple((share[p], (p,), "") for p in parts)


REPEAT = 1  # --repeat: runs of each replay, the least CPU time printed


def replay(jobs, nodes, gpn, knob=float("inf"), kinds=(), incremental=True, policy="dlas", **options):
    """(CPU s, result) of one replay (CPU: the replay is one thread; a shared machine stretches
    wall), the least CPU s of REPEAT runs."""
    config = SimConfig(nodes=nodes, gpus_per_node=gpn, engine=EngineConfig(policy=policy, promote_knob=knob),
                       node_kinds=kinds or (), incremental=incremental, drop_oversize=True, **options)
    least, result = math.inf, None
    for _ in range(REPEAT):
        started = time.process_time()
        result = Simulation(config).run(jobs)
        least = min(least, time.process_time() - started)
    return least, result


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_child(jobs, nodes, gpn, policy, answer) -> None:
    at_fork = rss_mb()
    seconds, result = replay(jobs, nodes, gpn, policy=policy)
    answer.send((seconds, rss_mb() - at_fork, summarize(result)["avg_jct_s"]))


def peak_memory(jobs, nodes, gpn, policy):
    """(CPU s, peak RSS MB above the fork, avg JCT s) of a replay in a forked child."""
    context = multiprocessing.get_context("fork")
    mine, theirs = context.Pipe()
    child = context.Process(target=_peak_child, args=(jobs, nodes, gpn, policy, theirs))
    child.start()
    answer = mine.recv()
    child.join()
    return answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000,
                        help="first N jobs by submit time (default 3000: the node-kinds case is slow)")
    parser.add_argument("--all", action="store_true", help="every job of the trace")
    parser.add_argument("--generic", action="store_true", help="also the knob-8 case in the generic loop")
    parser.add_argument("--no-slurm", action="store_true", help="leave out the slurm-starts cases")
    parser.add_argument("--slurm-only", action="store_true", help="only the plain replay and the slurm-starts cases")
    parser.add_argument("--limit-h", type=float, default=None,
                        help="also slurm starts with every job's time limit this many hours (backfill)")
    parser.add_argument("--memory", action="store_true", help="peak RSS of dlas and dgittins, each in a child")
    parser.add_argument("--philly-only", action="store_true", help="only the Philly trace")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each replay, the least CPU time printed")
    args = parser.parse_args()
    global REPEAT
    REPEAT = max(args.repeat, 1)
    ratios = []
    for name, nodes, gpn in CASES[:1] if args.philly_only else CASES:
        jobs = sorted(load_trace(str(TRACES / name)), key=lambda j: j.submit_time_s)
        jobs = jobs if args.all else jobs[:args.jobs]
        if len({job.partition for job in jobs}) < 2:
            # no partitions in the trace: deal its jobs round-robin into as many as Philly
            # has virtual clusters, so the node-kind cost is measured on it too
            jobs = [dataclasses.replace(job, partition=f"vc{i % PHILLY_CLUSTERS:02d}") for i, job in enumerate(jobs)]
        kinds = node_kinds(jobs, nodes)
        if kinds:  # a job larger than its partition's nodes could never run there: left out of all three
            room = {parts[0]: count * gpn for count, parts, _ in kinds}
            jobs = [job for job in jobs if job.num_gpus <= room[job.partition]]
        print(f"{name}: first {len(jobs)} jobs, {nodes} x {gpn} GPUs, dlas"
              + (f", {len(kinds)} node kinds" if kinds else ", no partitions in the trace")
              + (f", least CPU s of {REPEAT} runs each" if REPEAT > 1 else ""))
        plain_s, plain = replay(jobs, nodes, gpn)
        rows = [("plain", plain_s, plain)]
        knob_s, knob = replay(jobs, nodes, gpn, knob=8.0) if not args.slurm_only else (None, None)
        if knob is not None:
            rows.append(("knob 8", knob_s, knob))
        if kinds and not args.slurm_only:
            kinds_s, kinds_result = replay(jobs, nodes, gpn, kinds=kinds)
            rows.append((f"{len(kinds)} kinds", kinds_s, kinds_result))
        if not args.no_slurm:
            slurm_s, slurm = replay(jobs, nodes, gpn, slurm_starts=True)
            rows.append(("slurm", slurm_s, slurm))
            if args.limit_h:
                limit_s, limited = replay(jobs, nodes, gpn, slurm_starts=True, time_limit_s=args.limit_h * 3600.0)
                rows.append((f"slurm {args.limit_h:g}h", limit_s, limited))
        for label, seconds, result in rows:
            summary = summarize(result)
            ratio = seconds / plain_s
            per_round = ratio * plain.rounds / max(result.rounds, 1)
            if label != "plain":
                ratios.append(ratio)
            print(f"  {label:10s} {seconds:8.2f} CPU s {ratio:6.1f}x plain ({per_round:4.1f}x per round)  "
                  f"rounds {result.rounds:>8,}  preemptions {result.preemptions:>8,}  "
                  f"promotions {result.promotions:>7,}  avg JCT {summary['avg_jct_s']:>10,.0f} s"
                  + ("  (target <= 3x)" if label != "plain" else ""))
        if args.memory:
            for policy in ("dlas", "dgittins"):
                seconds, peak, avg = peak_memory(jobs, nodes, gpn, policy)
                print(f"  memory {policy:9s} {seconds:8.2f} CPU s  peak RSS {peak:7.0f} MB above the loaded trace"
                      f"  ({peak * 1024 / max(len(jobs), 1):.1f} KB per job)  avg JCT {avg:>10,.0f} s")
        if args.generic and knob is not None:
            generic_s, generic = replay(jobs, nodes, gpn, knob=8.0, incremental=False)
            fast = [(o.job_id, o.start_s, o.end_s) for o in knob.outcomes]
            slow = [(o.job_id, o.start_s, o.end_s) for o in generic.outcomes]
            differ = sum(1 for a, b in zip(fast, slow) if a != b)
            print(f"  knob 8, generic loop {generic_s:8.2f} CPU s ({generic_s / knob_s:.1f}x the incremental one), "
                  f"preemptions {generic.preemptions:,}, avg JCT {summarize(generic)['avg_jct_s']:,.0f} s; "
                  f"{differ} of {len(fast)} jobs' times differ")
    if ratios:
        print(f"ratio to plain over all cases: {min(ratios):.1f}x .. {max(ratios):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time to plan one controller round (Engine.step) on a large synthetic snapshot.

10,000 pending and 2,000 running jobs on 1,000 nodes x 8 GPUs, policies dlas and
dgittins (with a learned service distribution of 5,000 finished jobs), placement
consolidate, the plan the controller asks for every round (order and levels for
the SiteFactor bands); the plan of `tiresias queue`/`explain`, which adds a wait
reason per waiting job, is timed too. Prints the median of several rounds per
policy. Target: < 100 ms for the controller's round.
Usage: python bench/bench_round.py [--repeat 7] [--seed 1] [--profile dlas]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.core.engine import Engine, EngineConfig  # noqa: E402
from controller.core.gittins import ServiceDistribution  # noqa: E402
from controller.core.model import JobSpec, JobState, Node, Snapshot  # noqa: E402

GPU_SIZES = (1, 1, 1, 2, 2, 4, 4, 8, 8, 16)
THRESHOLDS_GPU_S = (3600.0, 36000.0)


def build_snapshot(rng: random.Random, nodes: int = 1000, gpus_per_node: int = 8, running: int = 2000,
                   pending: int = 10000, now_s: float = 1e6, service: ServiceDistribution | None = None
                   ) -> Snapshot:
    """Running gangs packed onto nodes (consolidated), pending jobs with random history."""
    free = {f"n{i:04d}": gpus_per_node for i in range(nodes)}
    names = list(free)
    jobs: list[JobState] = []
    cursor = 0
    for k in range(running):
        gpus = rng.choice(GPU_SIZES[:-1])
        placement = []
        need = gpus
        while need:
            name = names[cursor % nodes]
            take = min(need, free[name])
            if take:
                placement.append((name, take))
                free[name] -= take
                need -= take
            if free[name] == 0 or need:
                cursor += 1
        attained = rng.expovariate(1 / 20000.0)
        spec = JobSpec(str(k + 1), gpus, now_s - rng.uniform(1e3, 1e5), skew=rng.random())
        jobs.append(JobState(spec=spec, index=k, attained_gpu_s=attained, queue_service_gpu_s=attained,
                             executed_s=attained / gpus, executed_since_promotion_s=attained / gpus,
                             first_start_s=spec.submit_time_s + rng.uniform(0, 500), running=True,
                             placement=tuple(placement)))
    for k in range(running, running + pending):
        gpus = rng.choice(GPU_SIZES)
        spec = JobSpec(str(k + 1), gpus, now_s - rng.uniform(0, 1e5), skew=rng.random())
        started = rng.random() < 0.3  # preempted before: has service and a first start
        attained = rng.expovariate(1 / 10000.0) if started else 0.0
        jobs.append(JobState(spec=spec, index=k, attained_gpu_s=attained, queue_service_gpu_s=attained,
                             executed_s=attained / gpus, waited_since_promotion_s=rng.uniform(0, 1e4),
                             first_start_s=spec.submit_time_s + 10 if started else None, running=False))
    node_list = [Node(name, gpus_per_node, free[name]) for name in names]
    return Snapshot(now_s=now_s, jobs=jobs, nodes=node_list, service=service, round_id=1)


def time_rounds(policy: str, snapshot_factory, repeat: int) -> list[float]:
    engine = Engine(EngineConfig(policy=policy, thresholds_gpu_s=THRESHOLDS_GPU_S, placement="consolidate"))
    times, cpu_times = [], []
    for _ in range(repeat):
        snapshot = snapshot_factory()
        started, started_cpu = time.perf_counter(), time.process_time()
        plan = engine.step(snapshot)
        times.append(time.perf_counter() - started)
        cpu_times.append(time.process_time() - started_cpu)
    kinds = {kind: len(plan.of_kind(kind)) for kind in ("start", "preempt", "promote")}
    print(f"  {policy:<9} actions: {kinds}, ordered jobs {len(plan.order)}, "
          f"CPU time per round: median {statistics.median(cpu_times) * 1000:.1f} ms")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policies", default="dlas,dgittins")
    parser.add_argument("--profile", metavar="POLICY", help="cProfile one round of POLICY instead")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    service = ServiceDistribution(rng.lognormvariate(8.5, 1.8) for _ in range(5000))
    base = build_snapshot(random.Random(args.seed), service=service)

    def fresh(explain: bool = False) -> Snapshot:  # the controller builds a new snapshot every round
        jobs = [JobState(spec=j.spec, index=j.index, attained_gpu_s=j.attained_gpu_s,
                         queue_service_gpu_s=j.queue_service_gpu_s, executed_s=j.executed_s,
                         executed_since_promotion_s=j.executed_since_promotion_s,
                         waited_since_promotion_s=j.waited_since_promotion_s, first_start_s=j.first_start_s,
                         running=j.running, placement=j.placement) for j in base.jobs]
        return Snapshot(now_s=base.now_s, jobs=jobs, nodes=base.nodes, service=service, round_id=1,
                        explain=explain)

    running = sum(j.running for j in base.jobs)
    print(f"snapshot: {len(base.jobs) - running} pending, {running} running, {len(base.nodes)} nodes x "
          f"{base.nodes[0].gpus_total} GPUs ({sum(n.gpus_free for n in base.nodes)} free), "
          f"{len(service)} service samples")
    if args.profile:
        import cProfile
        import pstats

        engine = Engine(EngineConfig(policy=args.profile, thresholds_gpu_s=THRESHOLDS_GPU_S))
        snapshot = fresh()
        profiler = cProfile.Profile()
        profiler.runcall(engine.step, snapshot)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)
        return 0
    worst = 0.0
    for policy in args.policies.split(","):
        times = time_rounds(policy, fresh, args.repeat)
        median_ms = statistics.median(times) * 1000
        worst = max(worst, median_ms)
        print(f"{policy:<9} round: median {median_ms:7.1f} ms  min {min(times) * 1000:7.1f} ms  "
              f"max {max(times) * 1000:7.1f} ms  ({args.repeat} rounds)")
        explained = time_rounds(policy, lambda: fresh(explain=True), args.repeat)
        print(f"{policy:<9} with wait reasons (queue/explain): median "
              f"{statistics.median(explained) * 1000:7.1f} ms")
    print(f"target < 100 ms per round: {'met' if worst < 100 else 'NOT met'} (worst median {worst:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

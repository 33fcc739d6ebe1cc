"""What the controller holds per job: the round harness of bench/bench_round.py (real
controller, Slurm backend and parser, SQLite store, the scripted slurmctld of
bench/scripted_slurm.py in a release's JSON shape), built and warmed up at a size, then
``--rounds`` changing rounds; then tracemalloc's count of the memory still allocated,
less what the scripted slurmctld holds (its jobs, built before tracing starts; its
rendered answers, allocated in its own lines or by json's encoder, which the controller
does not use for what it keeps: a real slurmctld holds those in its own process).

The answers a command returns are copied before the backend sees them, as a real
``subprocess`` run gives the controller text of its own: whatever the backend keeps of
them counts. SQLite's own cache is C memory tracemalloc does not see. Printed: KB per
job (bytes held / jobs in the queue), and the largest holders by source line.
Tracing allocations makes the build and rounds several times slower than bench_round.py.
Usage: python bench/bench_memory.py [--sizes 100000:10000:5000] [--release 22.05|26.05] [--rounds 3]
       [--top 12]
"""
from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_round import build, change, counts, one_round, warm_up  # noqa: E402
from slurm_plugin.commands import CommandResult  # noqa: E402

TARGET_KB_PER_JOB = 4.0
SCRIPTED = str(ROOT / "bench" / "scripted_slurm.py")
ENCODER = "/json/encoder.py"


def own_copy(runner):
    """The runner, with each answer's text a copy of its own (as a subprocess's)."""
    def run(argv, timeout_s, env):
        result = runner(argv, timeout_s, env)
        return CommandResult(result.returncode, "".join([result.stdout, " "])[:-1], result.stderr)
    return run


def measure(pending: int, running: int, nodes: int, release: str, rounds: int, top: int, tmp: str) -> float:
    slurm, store, controller = build(pending, running, nodes, tmp, release=release)
    tracemalloc.start(1)  # after the scripted slurmctld built its jobs; one frame: deeper ones cost minutes
    controller.backend.runner = own_copy(slurm)
    warm_up(slurm, controller)
    for _ in range(rounds):
        change(slurm)
        slurm._text("squeue")
        one_round(controller)
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    jobs = sum(counts(slurm))
    by_line: dict[str, int] = {}
    held = 0
    for trace in snapshot.traces:
        where = trace.traceback[0]
        if where.filename == SCRIPTED or where.filename.endswith(ENCODER):
            continue  # the scripted slurmctld's own state and answers (the controller decodes, never encodes, JSON)
        held += trace.size
        key = f"{Path(where.filename).relative_to(ROOT) if where.filename.startswith(str(ROOT)) else where.filename}" \
              f":{where.lineno}"
        by_line[key] = by_line.get(key, 0) + trace.size
    kb = held / 1024 / jobs
    print(f"{release} JSON, {pending:,} pending + {running:,} running on {nodes:,} nodes ({jobs:,} jobs in the queue "
          f"after {rounds} changing rounds): controller holds {held / 2**20:,.0f} MiB, {kb:.2f} KB per job "
          f"(target <= {TARGET_KB_PER_JOB:.0f}: {'MET' if kb <= TARGET_KB_PER_JOB else 'NOT MET'})")
    rooms: dict[str, int] = {}
    for key, size in by_line.items():
        room = next((name for name in ("slurm_plugin/", "controller/", "sqlalchemy/", "/json/", "dataclasses.py")
                     if name in key), "other")
        rooms[room] = rooms.get(room, 0) + size
    print("    by where allocated: " + ", ".join(f"{room.strip('/')} {size / 1024 / jobs:.2f}" for room, size in
                                                  sorted(rooms.items(), key=lambda item: -item[1])) + " KB/job")
    for key, size in sorted(by_line.items(), key=lambda item: -item[1])[:top]:
        print(f"    {size / 1024 / jobs:7.2f} KB/job  {key}")
    store.close()
    return kb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000:10000:5000", help="PENDING:RUNNING:NODES,...")
    parser.add_argument("--release", default="22.05", choices=["22.05", "26.05"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            pending, running, nodes = (int(x) for x in size.split(":"))
            measure(pending, running, nodes, args.release, args.rounds, args.top, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())

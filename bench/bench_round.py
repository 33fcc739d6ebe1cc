"""What one whole controller round costs: observe + parse, account, plan, apply, store.

The real controller (controller.service.round.daemon), Slurm backend and parser
(slurm_plugin), and a SQLite store run against the scripted slurmctld of
bench/scripted_slurm.py (22.05 JSON shapes, or 26.05's: --release), on the controller's clock: 10,000
pending + 2,000 running GPU jobs on 1,000 nodes x 8 GPUs (started 100 s to 25 h
ago: their service spreads over the queues), then 50,000 + 5,000 on 2,500 nodes.
Policy dlas (K=3), enforce mode, the default settings otherwise
(preempt_max_per_job 0: the scripted cluster does not requeue). Warm-up: three
rounds in which every job is new, gets its AdminComment line and has its batch
script read (a started controller does both 50 a round for its first minutes),
then two in which the scripted scheduler starts, by the bands set, what fits in the
GPUs left free, as slurmctld would (so the measured state has fewer pending and
more running jobs than built: printed). Then each size runs ``--repeat`` rounds of
two kinds, each as Controller.run_forever runs a round that is due: the light poll
(squeue -h -o), the observation it allows (Controller.observe), the round:
- a changing round: before it one job ends and Slurm starts what fits in its GPUs
  (what a poll that saw a change triggers): observed in full, planned;
- an unchanged round: nothing changed since the last one (the interval_s round):
  the poll shows the jobs and states of the last full observation, which is reused
  (full_observe_s bounds how long); while the last plan stands (no threshold crossing,
  promotion, protection end, pin expiry or reload due: controller.core.plan_stands)
  the round is quiet: accounts advanced and stored, no plan. How long each changing
  round's plan stood is printed: at a site of this size a round every poll_s within
  it is quiet, the first after it is planned.
Printed per phase, CPU time (time.process_time) and wall (perf_counter), median
over the rounds, and the spread (min-max) of the whole round. Phases are
exclusive (a store call inside accounting counts as store). The scripted
slurmctld's own time answering (rendering the JSON, which a real slurmctld does in
its own process) is left out. Printed per size too: RPCs per round (job ids the
levers named), the quiet share, and the slope between sizes. Targets (issue 37, CPU
median): changing round at 12k <= 200 ms, 55k <= 1 s, 110k <= 2 s, 220k <= 4 s;
slope <= 1.1 from 55k up; unchanged round at 12k <= 100 ms and quiet at every size.
Usage: python bench/bench_round.py [--repeat 5] [--sizes 10000:2000:1000,50000:5000:2500 | all]
       [--profile changing|unchanged [--sort cumulative|tottime]]  (cProfile one round of that
       kind at the first size instead; tottime shows the passes over every job)
       [--release 22.05|26.05]  (squeue --json's shape)
       [--burst 1000,10000]  (instead: a submit burst under Slurm's RPC rate limit, bench/bench_burst.py)
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scripted_slurm import ScriptedSlurm  # noqa: E402
from controller.service.ops.config import from_mapping  # noqa: E402
from controller.service.round.daemon import Controller  # noqa: E402
from controller.service.state.store import Store  # noqa: E402
from slurm_plugin.backend import SlurmBackend  # noqa: E402

SLURMCTLD = "scripted slurmctld (left out)"
# Phase -> (object path from the controller, method names). A name that a later
# version no longer has is skipped: its time then shows as "rest of the round".
PHASES = {
    "light poll": [("backend", ("poll", "poll_nodes"))],
    "observe + parse": [("backend", ("observe", "repeat_observation")), ("slurm_clock", ("localize",))],
    "account": [("accounts", ("advance", "finish_gone", "promote", "forget_finished", "place")),
                ("contract", ("begin_round", "read_qos_grace")), ("preemptions", ("to_requeue_ended",))],
    "plan: split": [("inputs", ("split",))],
    "plan: snapshot": [("inputs", ("snapshot",))],
    "plan: QOS gate": [("inputs", ("_qos_verdicts",))],
    "plan: Engine.step": [("engine", ("step",))],
    "plan: the rest": [("inputs", ("plan",))],
    "apply: bands, starts": [("levers", ("apply",))],
    "apply: preemptions": [("levers", ("preempt",))],
    "apply: comments": [("levers", ("comment",))],
    "apply: the rest": [("levers", ("run",))],
    "store": [("store", ("transaction", "save_jobs", "log_decisions", "next_round_id", "mark_finished",
                         "add_service_sample", "known_job_ids", "prune_decisions")),
              ("accounts", ("save", "save_touched"))],
    "record: notes": [("inputs", ("note_updates",)), ("executor", ("end_round", "decisions_to_log"))],
}
# issue 37's targets, CPU median of a changing round by jobs built (pending + running);
# an unchanged round at 12k <= 100 ms, and quiet at every size
TARGETS_CHANGING_S = {12_000: 0.200, 55_000: 1.0, 110_000: 2.0, 220_000: 4.0}
TARGET_UNCHANGED_S = 0.100
TARGET_SLOPE = 1.1  # log(cost ratio) / log(size ratio) of the changing round, from 55k up
ALL_SIZES = "1000:200:100,10000:2000:1000,50000:5000:2500,100000:10000:5000,200000:20000:10000"


class Phases:
    """Exclusive CPU and wall time per phase: a phase entered inside another is
    taken out of the outer one."""

    def __init__(self):
        self.cpu_s: dict[str, float] = defaultdict(float)
        self.wall_s: dict[str, float] = defaultdict(float)
        self._stack: list[list] = []  # [phase, cpu at entry, wall at entry, nested cpu, nested wall]

    def clear(self) -> None:
        self.cpu_s.clear()
        self.wall_s.clear()

    @contextmanager
    def timing(self, phase: str):
        frame = [phase, time.process_time(), time.perf_counter(), 0.0, 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            cpu, wall = time.process_time() - frame[1], time.perf_counter() - frame[2]
            self.cpu_s[phase] += cpu - frame[3]
            self.wall_s[phase] += wall - frame[4]
            if self._stack:
                self._stack[-1][3] += cpu
                self._stack[-1][4] += wall

    def wrap(self, owner, name: str, phase: str) -> None:
        method = getattr(owner, name, None)
        if method is None or not callable(method):
            return
        if name == "transaction":  # a context manager: time its block and its commit
            @contextmanager
            def timed_block(*args, **kwargs):
                with self.timing(phase), method(*args, **kwargs):
                    yield
            setattr(owner, name, timed_block)
            return

        def timed(*args, **kwargs):
            with self.timing(phase):
                return method(*args, **kwargs)
        setattr(owner, name, timed)

    def instrument(self, controller: Controller, slurm: ScriptedSlurm) -> None:
        for phase, places in PHASES.items():
            for path, names in places:
                owner = getattr(controller, path, None) if path else controller
                for name in names:
                    if owner is not None:
                        self.wrap(owner, name, phase)
        self.wrap(slurm, "_answer", SLURMCTLD)


def build(pending: int, running: int, nodes: int, tmp: str, release: str = "22.05"):
    # the controller's clock (time.time) and Slurm's agree: the jobs' service spreads over the queues
    slurm = ScriptedSlurm(pending, running, nodes=nodes, now=int(time.time()), release=release)
    store = Store(f"sqlite:///{tmp}/round-{pending}.db")
    config = from_mapping({"mode": "enforce", "policy": "dlas", "queues_gpu_s": [3600.0, 36000.0],
                           "preempt_max_per_job": 0, "usage_spool_dir": f"{tmp}/none",
                           # the CPU of a round, not Slurm's RPC budget (the burst case below)
                           "slurm_rpc_per_s": 0.0})
    controller = Controller(config, SlurmBackend(runner=slurm), store, clock=time.time)
    return slurm, store, controller


def change(slurm: ScriptedSlurm, ended: int = 1) -> None:
    """``ended`` jobs end, and Slurm's scheduler starts what fits in the GPUs they left
    (by the SiteFactor bands the controller set). Its clock is the controller's: at
    55,000 jobs the warm-up takes minutes, and a slurmctld clock left behind made every
    start look skewed."""
    slurm.now = int(time.time())
    if ended == 1:
        slurm.finish_one()
    else:
        slurm.finish_lowest(ended)
    slurm.schedule()


def one_round(controller: Controller):
    """What Controller.run_forever does when a round is due: the light poll, the
    observation it allows (full, or the last one again: Controller.observe), the round
    (a quiet one when its plan stands: Controller._quiet_round). Returns its report."""
    return controller.run_round(controller.observe(controller.backend.poll()))


def warm_up(slurm: ScriptedSlurm, controller: Controller) -> None:
    """Every job new, then the first bands and batch scripts; meanwhile every job gets
    its AdminComment line and every running job's batch script is read at once (a
    started controller writes the lines 50 a round, admin_comment_max_per_round, and
    reads 50 scripts a round, for its first minutes): the rounds measured are the
    steady state, where a line is rewritten only when it changes and a script is read
    when its job starts. Then Slurm's scheduler takes the GPUs left free."""
    comments, controller.admin_comments.max_per_round = controller.admin_comments.max_per_round, 10 ** 9
    scripts, controller.contract.reads_per_round = controller.contract.reads_per_round, 10 ** 9
    for _ in range(3):
        change(slurm)
        slurm._text("squeue")  # the scripted slurmctld renders its answer outside the timing
        one_round(controller)
    controller.admin_comments.max_per_round, controller.contract.reads_per_round = comments, scripts
    for _ in range(2):  # the GPUs its first bands left free are taken, as Slurm takes them
        change(slurm)
        slurm._text("squeue")
        one_round(controller)


def counts(slurm: ScriptedSlurm) -> tuple[int, int]:
    """(pending, running) jobs in the scripted slurmctld now."""
    states = [record["job_state"] for record in slurm.jobs.values()]
    return states.count("PENDING"), states.count("RUNNING")


def measure(pending: int, running: int, nodes: int, repeat: int, kinds: tuple[str, ...], tmp: str,
            release: str = "22.05") -> dict:
    """kind -> list of (phase -> (cpu_s, wall_s)) per round, the whole round under "round"."""
    slurm, store, controller = build(pending, running, nodes, tmp, release=release)
    warm_up(slurm, controller)
    phases = Phases()
    phases.instrument(controller, slurm)
    results: dict[str, list[dict]] = {kind: [] for kind in kinds}
    results["jobs"] = counts(slurm)
    results["stands_s"], results["quiet"] = [], []
    # a changing round then an unchanged one, ``repeat`` times; then the 1%-changed rounds,
    # then the restarts (each writes what a new controller writes: after them the old
    # controller's rounds are no longer the steady state)
    steady = [kind for kind in kinds if kind in ("changing", "unchanged")]
    order = steady * repeat + [kind for kind in kinds if kind not in steady for _ in range(repeat)]
    for kind in order:
        round_of = controller
        if kind == "changing":
            change(slurm)
        elif kind == "1% changed":  # 1% of the jobs end, and Slurm starts what fits in their GPUs
            change(slurm, ended=max((pending + running) // 100, 1))
        elif kind == "restart":  # a controller started afresh on the same store: every record read anew
            round_of = Controller(controller.config, SlurmBackend(runner=slurm), store, clock=time.time)
            phases.instrument(round_of, slurm)
        slurm._text("squeue")  # the scripted slurmctld renders its answer outside the timing
        phases.clear()
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        report = one_round(round_of)
        # one RPC per job id a lever named (scontrol update JobId=a,b,... is one RPC an id)
        results.setdefault("rpcs_" + kind, []).append(len(report.levers or ()))
        if kind == "changing":  # how long its plan stands: how long the next rounds may be quiet
            results["stands_s"].append(controller.last_plan.stands_until_s - report.observed_at_s)
        elif kind == "unchanged":
            results["quiet"].append(bool(report.skipped_reason))
        cpu = time.process_time() - started_cpu - phases.cpu_s[SLURMCTLD]
        wall = time.perf_counter() - started_wall - phases.wall_s[SLURMCTLD]
        row = {phase: (phases.cpu_s[phase], phases.wall_s[phase]) for phase in PHASES}
        row["rest of the round"] = (cpu - sum(c for c, _ in row.values()), wall - sum(w for _, w in row.values()))
        row["round"] = (cpu, wall)
        results[kind].append(row)
    store.close()
    return results


def report(title: str, rounds: list[dict], target_s: Optional[float]) -> Optional[bool]:
    cpu = [r["round"][0] for r in rounds]
    wall = [r["round"][1] for r in rounds]
    median_cpu = statistics.median(cpu)
    met = None if target_s is None else median_cpu <= target_s
    print(f"{title}: CPU median {median_cpu * 1000:.0f} ms (min {min(cpu) * 1000:.0f}, max {max(cpu) * 1000:.0f}), "
          f"wall median {statistics.median(wall) * 1000:.0f} ms (min {min(wall) * 1000:.0f}, "
          f"max {max(wall) * 1000:.0f}), {len(rounds)} rounds")
    for phase in [*PHASES, "rest of the round"]:
        print(f"    {phase:<22} CPU {statistics.median(r[phase][0] for r in rounds) * 1000:7.1f} ms   "
              f"wall {statistics.median(r[phase][1] for r in rounds) * 1000:7.1f} ms")
    if target_s is not None:
        verdict = "MET" if met else f"NOT MET (by {(median_cpu - target_s) * 1000:.0f} ms, {median_cpu / target_s:.1f}x)"
        print(f"  target CPU median <= {target_s * 1000:.0f} ms: {verdict}")
    return met


def profile(pending: int, running: int, nodes: int, tmp: str, kind: str, sort: str, release: str = "22.05") -> None:
    import cProfile
    import pstats

    slurm, store, controller = build(pending, running, nodes, tmp, release=release)
    warm_up(slurm, controller)
    if kind == "changing":
        change(slurm)
    else:
        one_round(controller)  # the round after it sees nothing new
    slurm._text("squeue")
    profiler = cProfile.Profile()
    profiler.runcall(one_round, controller)
    pstats.Stats(profiler).sort_stats(sort).print_stats(35)
    store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="10000:2000:1000,50000:5000:2500",
                        help="PENDING:RUNNING:NODES,... (8 GPUs per node), or 'all': " + ALL_SIZES)
    parser.add_argument("--profile", choices=["changing", "unchanged"],
                        help="cProfile one round of that kind at the first size instead")
    parser.add_argument("--sort", choices=["cumulative", "tottime"], default="cumulative",
                        help="--profile's order: time with callees, or in the function itself")
    parser.add_argument("--burst", default="",
                        help="N,...: instead, the submit-burst case (bench/bench_burst.py): N new jobs under "
                             "a simulated rl_enable bucket")
    parser.add_argument("--release", default="22.05", choices=["22.05", "26.05"],
                        help="the JSON shape squeue --json answers in (bench/scripted_slurm.py)")
    args = parser.parse_args()
    if args.burst:
        from bench import bench_burst
        sys.argv = [sys.argv[0], "--jobs", args.burst]
        return bench_burst.main()
    spec = ALL_SIZES if args.sizes == "all" else args.sizes
    sizes = [tuple(int(x) for x in size.split(":")) for size in spec.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        if args.profile:
            profile(*sizes[0], tmp, args.profile, args.sort, args.release)
            return 0
        verdicts, medians = [], []
        for index, (pending, running, nodes) in enumerate(sizes):
            kinds = ("changing", "unchanged", "1% changed", "restart")
            results = measure(pending, running, nodes, args.repeat, kinds, tmp, args.release)
            now_pending, now_running = results["jobs"]
            label = (f"{pending:,} pending + {running:,} running on {nodes:,} nodes ({now_pending:,} + "
                     f"{now_running:,} once Slurm started what fits)")
            changing = "one job ended, Slurm started what fits in its GPUs"
            total = pending + running
            verdicts.append(report(f"whole round, {label}, {changing}", results["changing"],
                                   TARGETS_CHANGING_S.get(total)))
            medians.append((total, statistics.median(r["round"][0] for r in results["changing"])))
            stands = sorted(results["stands_s"])
            print(f"  its plan stood (the next time-driven change) for median {statistics.median(stands):.1f} s"
                  f" (min {stands[0]:.1f}, max {stands[-1]:.1f}): rounds within it that observe nothing new are quiet")
            print(f"  RPCs (job ids updated) per round: median {statistics.median(results['rpcs_changing']):.0f}")
            verdicts.append(report(f"unchanged round, {label}", results["unchanged"],
                                   TARGET_UNCHANGED_S if total == 12_000 else None))
            quiet = results["quiet"]
            print(f"  quiet (not planned again: its plan stood): {sum(quiet)} of {len(quiet)} rounds; RPCs per "
                  f"round: median {statistics.median(results['rpcs_unchanged']):.0f}")
            verdicts.append(all(quiet))
            report(f"1% changed round ({total // 100:,} jobs ended, Slurm started what fits), {label}",
                   results["1% changed"], None)
            report(f"full round (a controller started afresh on the same store and Slurm), {label}",
                   results["restart"], None)
            share = (statistics.median(r["round"][0] for r in results["1% changed"])
                     / statistics.median(r["round"][0] for r in results["restart"]))
            target = " (target <= 0.33 at 110k)" if total == 110_000 else ""
            print(f"  1% changed / full: {share:.2f}{target}")
            if total == 110_000:
                verdicts.append(share <= 1 / 3)
        for (small, small_s), (large, large_s) in zip(medians, medians[1:]):
            slope = math.log(large_s / small_s) / math.log(large / small)
            target = f" (target <= {TARGET_SLOPE})" if small >= 55_000 else ""
            print(f"slope of the changing round, {small:,} -> {large:,} jobs: {slope:.2f}{target}")
            if small >= 55_000:
                verdicts.append(slope <= TARGET_SLOPE)
        ends = [(total, median_s) for total, median_s in medians if total >= 55_000]
        if len(ends) > 2:  # over the whole range too (each step above is a verdict of its own)
            (small, small_s), (large, large_s) = ends[0], ends[-1]
            print(f"slope of the changing round, {small:,} -> {large:,} jobs, end to end: "
                  f"{math.log(large_s / small_s) / math.log(large / small):.2f}")
        verdicts = [v for v in verdicts if v is not None]
    print(f"targets met: {sum(verdicts)} of {len(verdicts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

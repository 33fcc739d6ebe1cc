"""A/B benchmark on real Slurm: stock (multifactor + backfill) vs `tiresias run --mode enforce`.

A compressed workload from a trace (default: the 60-job trace in tests/fixtures) is submitted at its
(compressed) arrival times as alice and bob to an isolated Slurm instance
(containers/slurm-cluster.sh with TIRESIAS_CLUSTER_INSTANCE; 4 nodes x 4 GPUs),
once with the controller off and once with it enforcing. Each job does its
trace duration of "work" in one-second steps, checkpoints every second and
resumes from the checkpoint after a requeue (bench/slurm_harness.JOB_SCRIPT), so
a preemption costs the grace period, the requeue and the restart, as it would.

Prints average, median and p95 JCT, makespan and preemptions (restarts) per run
and the ratio stock / controller. Needs root. Example (about 12 minutes):

    .venv/bin/python bench/ab_slurm.py --scale 0.15 --arrival-scale 0.1

Every job asks for a 60-minute limit (--time-limit-min) and declares its checkpoint
signal (#SBATCH --signal in the harness script), as users' jobs do.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.slurm_harness import ControllerProcess, Instance, write_config  # noqa: E402
from controller.replay.traces import load_trace  # noqa: E402

DEFAULT_TRACE = ROOT / "tests" / "fixtures" / "traces" / "tiresias_60_job.csv"  # the 60-job trace, in the repo
CLUSTER_GPUS = 16


def workload(trace: Path, scale: float, arrival_scale: float, min_s: int, max_s: int, limit: int,
             start: int = 0, duration_map: str = "linear", arrival_window_s: float | None = None
             ) -> list[tuple[float, int, int]]:
    """(arrival s from start, GPUs, work s) per job, in arrival order.

    ``duration_map`` linear: duration x scale, clipped to [min_s, max_s] (squeezes a
    heavy tail flat); log: the trace's log-duration range mapped onto
    [log min_s, log max_s], which keeps the order and the heavy tail's shape.
    ``arrival_window_s`` stretches or squeezes all arrivals into that many seconds.
    """
    jobs = sorted(load_trace(trace), key=lambda j: (j.submit_time_s, j.job_id))[start:start + limit]
    first = jobs[0].submit_time_s
    span = max(jobs[-1].submit_time_s - first, 1.0)
    logs = [math.log(max(job.duration_s, 1.0)) for job in jobs]
    low, high = min(logs), max(logs)
    out = []
    for job, log_d in zip(jobs, logs):
        gpus = min(max(job.num_gpus, 1), CLUSTER_GPUS)
        if gpus > 4 and gpus % 4:
            gpus = 4 * round(gpus / 4)  # whole nodes for multi-node gangs (4 GPUs a node)
        if duration_map == "log":
            fraction = (log_d - low) / (high - low) if high > low else 0.0
            work = int(round(min_s * (max_s / min_s) ** fraction))
        else:
            work = int(round(min(max(job.duration_s * scale, min_s), max_s)))
        offset = job.submit_time_s - first
        arrival = offset / span * arrival_window_s if arrival_window_s is not None else offset * arrival_scale
        out.append((arrival, gpus, work))
    return out


def predict(jobs, settings: dict, restart_cost_s: float, config_path: Path) -> dict:
    """What the simulator expects of this A/B, as {label: summarize() figures}.

    Stock Slurm is bracketed by two policies: best-effort FIFO (fifo-skip: backfill
    that may start any later job that fits, as with unlimited time limits) and strict
    FIFO (backfill that can start nothing, as when every job asks for the same long
    limit). The controller runs as the very config file its run gets (the same
    ``write_config``), with the controller's costs (``controller_costs``: round
    interval, grace period, requeue settle, victim protection) and a restart cost on
    resume. The harness job checkpoints every second, so the work done in the grace
    period is kept (grace_work_kept)."""
    from controller.cli.simulate import controller_costs
    from controller.core.engine import EngineConfig
    from controller.core.model import JobSpec
    from controller.replay.results import summarize
    from controller.replay.simulator import SimConfig, Simulation
    from controller.service.config import load

    controller = load(str(write_config(config_path, "sqlite:///unused.db", "predict", **settings)))
    costs = controller_costs(controller)
    engine = controller.engine_config()
    specs = [JobSpec(str(i), g, a, float(w)) for i, (a, g, w) in enumerate(jobs)]
    figures = {}
    for label, engine_config in (("stock as fifo-skip", EngineConfig(policy="fifo-skip")),
                                 ("stock as fifo", EngineConfig(policy="fifo")),
                                 ("controller", engine)):
        config = SimConfig(nodes=4, gpus_per_node=4, round_interval_s=costs["round_interval_s"],
                           preempt_grace_s=costs["preempt_grace_s"], requeue_delay_s=costs["requeue_delay_s"],
                           grace_work_kept=True, preempt_resume_s=restart_cost_s, engine=engine_config)
        figures[label] = summarize(Simulation(config).run(specs))
    return figures


def describe_prediction(figures: dict, restart_cost_s: float) -> str:
    lines = [f"simulator prediction (restart {restart_cost_s:g} s on resume):"]
    for label, f in figures.items():
        lines.append(f"  {label:<19} avg JCT {f['avg_jct_s']:7.1f} s  median {f['median_jct_s']:7.1f} s  "
                     f"p95 {f['p95_jct_s']:7.1f} s  preemptions {f['preemptions']}")
    return "\n".join(lines)


def handoff_figures(url: str, cluster: str) -> str:
    """The controller run's handoffs from its decision log: how many beneficiaries
    started (and how long after their victims' signal), how many did not in time."""
    from controller.service.handoff import started_delay_s
    from controller.service.store import Store

    with Store(url) as store:
        rows = [d for d in store.decisions(cluster, limit=10**6) if d["kind"] == "handoff"]
    landed = [d for d in rows if d["applied"]]
    delays = sorted(d for d in (started_delay_s(row["detail"]) for row in landed) if d is not None)
    median = statistics.median(delays) if delays else float("nan")
    return (f"handoffs: {len(landed)} beneficiaries started, median {median:.0f} s and max "
            f"{max(delays, default=float('nan')):.0f} s after their victims' signal; {len(rows) - len(landed)} "
            f"not started within handoff_timeout_s")


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def run_once(instance: Instance, jobs, controller: bool, tmp: Path, settings: dict, timeout_s: float,
             time_limit_min: int = 60) -> dict:
    instance.cancel_all()
    proc = None
    if controller:
        config = write_config(tmp / "tiresias.yaml", f"sqlite:///{tmp}/tiresias.db", instance.name, **settings)
        proc = ControllerProcess(instance, config, tmp / "controller.log",
                                 interval_s=settings.get("interval_s", 1.0), poll_s=settings.get("poll_s", 0.5)).start()
        time.sleep(2)
    label = "controller" if controller else "stock"
    started = time.time()
    submitted: dict[str, float] = {}
    ended: dict[str, float] = {}
    states: dict[str, dict] = {}
    pending = list(jobs)
    k = 0
    while (pending or len(ended) < len(submitted)) and time.time() - started < timeout_s:
        while pending and time.time() - started >= pending[0][0]:
            _, gpus, work = pending.pop(0)
            job_id, _ = instance.submit("alice" if k % 2 == 0 else "bob", gpus, work, f"ab{k}",
                                        extra=f"--time={time_limit_min}" if time_limit_min else "")
            submitted[job_id] = time.time()
            k += 1
        try:
            current = instance.squeue()
        except Exception as err:  # a slow answer: look again next time
            print(f"  squeue failed: {err}", file=sys.stderr)
            current = {}
        for job_id in submitted:
            job = current.get(job_id)
            if job is None:
                continue
            states[job_id] = job
            if job["job_state"] not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED") \
                    and job_id not in ended:
                ended[job_id] = float(job["end_time"])
        time.sleep(1.0)
    handoffs = ""
    if proc is not None:
        proc.stop()
        handoffs = handoff_figures(f"sqlite:///{tmp}/tiresias.db", instance.name)
    unfinished = [j for j in submitted if j not in ended]
    if unfinished:
        print(f"  {label}: {len(unfinished)} jobs unfinished after {timeout_s:.0f} s: cancelled", file=sys.stderr)
        instance.cancel_all()
    jct = [ended[j] - submitted[j] for j in submitted if j in ended]
    completed = sum(1 for j in ended if states[j]["job_state"] == "COMPLETED")
    return {
        "label": label, "jobs": len(submitted), "completed": completed, "unfinished": len(unfinished),
        "avg": statistics.mean(jct), "median": statistics.median(jct), "p95": p95(jct),
        "makespan": max(ended.values()) - min(submitted.values()),
        "preemptions": sum(int(states[j].get("restart_cnt") or 0) for j in submitted),
        "wall": time.time() - started, "handoffs": handoffs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--instance", default="tiresiasab")
    parser.add_argument("--scale", type=float, default=0.15, help="job duration multiplier")
    parser.add_argument("--arrival-scale", type=float, default=0.1, help="arrival time multiplier")
    parser.add_argument("--min-s", type=int, default=10)
    parser.add_argument("--max-s", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--queues", default="150", help="queues_gpu_s, comma-separated GPU-s")
    parser.add_argument("--grace-s", type=float, default=3.0)
    parser.add_argument("--min-runtime-s", type=float, default=2.0)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per run")
    parser.add_argument("--only", choices=("stock", "controller"))
    parser.add_argument("--start", type=int, default=0, help="first trace job (in arrival order) to use")
    parser.add_argument("--duration-map", choices=("linear", "log"), default="linear")
    parser.add_argument("--arrival-window-s", type=float, default=None,
                        help="squeeze all arrivals into this many seconds (instead of --arrival-scale)")
    parser.add_argument("--restart-cost-s", type=float, default=3.0,
                        help="restart seconds (Slurm start + job start-up) charged on resume by the prediction; "
                             "the grace period and requeue settle come from the controller's config")
    parser.add_argument("--promote-knob", type=float, default=float("inf"),
                        help="starvation promotion (PROMOTEKNOB; inf = off)")
    parser.add_argument("--time-limit-min", type=int, default=60,
                        help="every job's --time, in minutes, as users give it (0 = none: UNLIMITED)")
    parser.add_argument("--predict-only", action="store_true", help="print the simulator's prediction and stop")
    args = parser.parse_args()

    jobs = workload(args.trace, args.scale, args.arrival_scale, args.min_s, args.max_s, args.jobs,
                    start=args.start, duration_map=args.duration_map, arrival_window_s=args.arrival_window_s)
    work = sum(g * w for _, g, w in jobs)
    print(f"workload: {len(jobs)} jobs from {args.trace.name}, work {min(w for *_, w in jobs)}-"
          f"{max(w for *_, w in jobs)} s, GPUs {sorted({g for _, g, _ in jobs})}, arrivals over "
          f"{jobs[-1][0]:.0f} s, {work / CLUSTER_GPUS:.0f} s of whole-cluster work")
    settings = {"queues_gpu_s": [float(q) for q in args.queues.split(",")], "preempt_grace_s": args.grace_s,
                "preempt_min_runtime_s": args.min_runtime_s, "interval_s": args.interval_s,
                "poll_s": min(0.5, args.interval_s), "promote_knob": args.promote_knob}
    with tempfile.TemporaryDirectory(prefix="tiresias-ab-predict-") as tmp:
        predicted = predict(jobs, settings, args.restart_cost_s, Path(tmp) / "tiresias.yaml")
    print(describe_prediction(predicted, args.restart_cost_s), flush=True)
    if args.predict_only:
        return 0
    instance = Instance(args.instance)
    up = instance.up()
    if up.returncode != 0:
        print(up.stdout + up.stderr, file=sys.stderr)
        return 1
    results = []
    try:
        for controller in (False, True):
            if args.only and args.only != ("controller" if controller else "stock"):
                continue
            with tempfile.TemporaryDirectory(prefix="tiresias-ab-") as tmp:
                result = run_once(instance, jobs, controller, Path(tmp), settings, args.timeout_s,
                                  args.time_limit_min)
            results.append(result)
            print(f"{result['label']:<11} done in {result['wall']:.0f} s", flush=True)
    finally:
        instance.cancel_all()
        instance.cleanup()
    print(f"\nsettings: {settings}")
    print(f"{'run':<11} {'jobs':>4} {'done':>4} {'avg JCT':>8} {'median':>8} {'p95':>8} {'makespan':>9} {'preempt':>7}")
    for r in results:
        print(f"{r['label']:<11} {r['jobs']:>4} {r['completed']:>4} {r['avg']:>8.1f} {r['median']:>8.1f} "
              f"{r['p95']:>8.1f} {r['makespan']:>9.1f} {r['preemptions']:>7}")
    if len(results) == 2:
        stock, ctl = results
        print(f"{'stock/ctl':<11} {'':>4} {'':>4} {stock['avg'] / ctl['avg']:>8.2f} "
              f"{stock['median'] / ctl['median']:>8.2f} {stock['p95'] / ctl['p95']:>8.2f} "
              f"{stock['makespan'] / ctl['makespan']:>9.2f}")
    for r in results:
        if r["handoffs"]:
            print(r["handoffs"])
    ctl = next((r for r in results if r["label"] == "controller"), None)
    if ctl is not None:
        predicted_avg = predicted["controller"]["avg_jct_s"]
        print(f"simulator predicted the controller's avg JCT {predicted_avg:.1f} s, measured {ctl['avg']:.1f} s: "
              f"{(predicted_avg - ctl['avg']) / ctl['avg']:+.1%}")
    if len(results) == 2:
        stock, ctl = results
        checks = [("avg JCT >= 2x better", stock["avg"] / ctl["avg"] >= 2.0),
                  ("median JCT >= 2.3x better", stock["median"] / ctl["median"] >= 2.3),
                  ("p95 within 10% of stock", ctl["p95"] <= 1.1 * stock["p95"]),
                  ("every job finished", all(r["completed"] == r["jobs"] for r in results)),
                  ("prediction within 10% on avg JCT", abs(predicted["controller"]["avg_jct_s"] - ctl["avg"])
                   <= 0.1 * ctl["avg"])]
        print("targets: " + "; ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
import shutil
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


def predict(jobs, settings: dict, restart_cost_s: float, config_path: Path, results: dict | None = None,
            time_limit_min: int = 60, launch_s: float = 0.0) -> dict:
    """What the simulator expects of this A/B, as {label: summarize() figures}.

    Stock Slurm is bracketed by two policies: best-effort FIFO (fifo-skip: backfill
    that may start any later job that fits, as with unlimited time limits) and strict
    FIFO (backfill that can start nothing, as when every job asks for the same long
    limit). The controller runs as the very config file its run gets (the same
    ``write_config``), with the controller's costs (``controller_costs``: round
    interval, grace period, requeue settle, victim protection) and a restart cost on
    resume. The harness job checkpoints every second, so the work done in the grace
    period is kept (grace_work_kept); a victim that ends inside its grace period is
    requeued all the same (the controller's preempt_requeue_ended). "controller" is the
    plan as Slurm carries it out (SlurmOrder: bands, then backfill that reserves nodes
    for a waiting job, with every job's ``time_limit_min``; rounds at every event, as
    slurmctld schedules); "controller as planned" the engine's own starts on the
    controller's round grid, as if Slurm started every job the plan starts.
    Every job holds its GPUs ``launch_s`` longer than its work (slurmd's launch of the
    batch script and its exit: Slurm's start-to-end is that much longer than the work),
    and the controller charges that time as service too.
    ``results``, if given, gets each label's SimResult (per-job starts and ends, for
    --per-job)."""
    from controller.cli.simulate import controller_costs
    from controller.core.engine import EngineConfig
    from controller.core.model import JobSpec
    from controller.replay.results import summarize
    from controller.replay.simulator import SimConfig, Simulation
    from controller.service.ops.config import load

    controller = load(str(write_config(config_path, "sqlite:///unused.db", "predict", **settings)))
    costs = controller_costs(controller)
    engine = controller.engine_config()
    # -N as the harness submits it (slurm_harness.Instance.submit): ceil(GPUs / 4) nodes, the
    # same GPUs on each, so an 8-GPU job needs two whole nodes, never 4+1+3
    specs = [JobSpec(str(i), g, a, float(w) + launch_s, min_nodes=-(-g // 4), max_nodes=-(-g // 4))
             for i, (a, g, w) in enumerate(jobs)]
    figures = {}
    limit_s = time_limit_min * 60.0 if time_limit_min else None
    for label, engine_config, slurm_order in (("stock as fifo-skip", EngineConfig(policy="fifo-skip"), False),
                                              ("stock as fifo", EngineConfig(policy="fifo"), False),
                                              ("controller as planned", engine, False),
                                              ("controller", engine, True)):
        # With Slurm starting the jobs, rounds are event-driven: slurmctld schedules on every
        # submit and job end, not on the controller's 1 s grid (measured: five jobs started
        # 0.3 s after an 8-GPU job's end; on the grid each such hop cost ~0.5 s, and the
        # chains of them added 10-25 s to the later jobs of a contended run). The
        # controller's own signals and releases then come up to a round (interval_s) early.
        # (SimConfig.slurm_starts: controller.replay.slurm_order, as `tiresias simulate
        # --like-controller CONFIG --slurm-starts` replays it.)
        config = SimConfig(nodes=4, gpus_per_node=4,
                           round_interval_s=None if slurm_order else costs["round_interval_s"],
                           slurm_starts=slurm_order, time_limit_s=limit_s,
                           preempt_grace_s=costs["preempt_grace_s"], requeue_delay_s=costs["requeue_delay_s"],
                           grace_work_kept=True, requeue_ended_in_grace=costs["requeue_ended_in_grace"],
                           preempt_resume_s=restart_cost_s, engine=engine_config)
        result = Simulation(config).run(specs)
        if results is not None:
            results[label] = result
        figures[label] = summarize(result)
    return figures


def describe_prediction(figures: dict, restart_cost_s: float) -> str:
    lines = [f"simulator prediction (restart {restart_cost_s:g} s on resume):"]
    for label, f in figures.items():
        lines.append(f"  {label:<21} avg JCT {f['avg_jct_s']:7.1f} s  median {f['median_jct_s']:7.1f} s  "
                     f"p95 {f['p95_jct_s']:7.1f} s  preemptions {f['preemptions']}")
    return "\n".join(lines)


def handoff_figures(url: str, cluster: str) -> str:
    """The controller run's handoffs from its decision log: how many beneficiaries
    started (and how long after their victims' signal), how many did not in time."""
    from controller.service.round.handoff import started_delay_s
    from controller.service.state.store import Store

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
             time_limit_min: int = 60, keep_log: Path | None = None) -> dict:
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
    order: list[tuple[str, str, float]] = []  # (job id, its workdir, planned arrival), in submit order
    ended: dict[str, float] = {}
    states: dict[str, dict] = {}
    pending = list(jobs)
    k = 0
    while (pending or len(ended) < len(submitted)) and time.time() - started < timeout_s:
        while pending and time.time() - started >= pending[0][0]:
            arrival, gpus, work = pending.pop(0)
            job_id, workdir = instance.submit("alice" if k % 2 == 0 else "bob", gpus, work, f"ab{k}",
                                        extra=f"--time={time_limit_min}" if time_limit_min else "")
            submitted[job_id] = time.time()
            order.append((job_id, workdir, arrival))
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
            # A job's end is its last one: a job that ended inside its grace period is
            # requeued all the same (the controller's preempt_requeue_ended) and ends again
            # when it runs again, so an end seen before a requeue does not count.
            if job["job_state"] in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED"):
                ended.pop(job_id, None)
            else:
                ended[job_id] = float(job["end_time"])
        time.sleep(1.0)
    handoffs = ""
    if proc is not None:
        proc.stop()
        if keep_log is not None and (tmp / "controller.log").exists():
            shutil.copyfile(tmp / "controller.log", keep_log)
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
        "per_job": per_job_records(order, started, submitted, ended, states),
    }


def per_job_records(order, started: float, submitted: dict, ended: dict, states: dict) -> list[dict]:
    """Each job's measured times, seconds from the run's start (host clock): planned
    arrival, sbatch returned, Slurm's submit/start/end, and from the job's own output
    every start (with resumed work), checkpoint signal, TERM and done."""
    records = []
    for k, (job_id, workdir, arrival) in enumerate(order):
        state = states.get(job_id, {})
        events = []
        try:
            lines = (Path(workdir) / f"{job_id}.out").read_text().splitlines()
        except OSError:
            lines = []
        for line in lines:
            words = line.split()
            if len(words) >= 3 and words[0] in ("start", "done", "got"):
                # "start T job=.. restart=.. resume=..", "done T ...", "got USR1|TERM T done=.."
                got = words[0] == "got"
                kind, stamp, rest = (words[1], words[2], words[3:]) if got else (words[0], words[1], words[2:])
                try:
                    events.append((kind, round(float(stamp) - started, 3), " ".join(rest)))
                except ValueError:
                    pass
        records.append({"k": k, "job_id": job_id, "arrival_s": arrival,
                        "submitted_s": round(submitted[job_id] - started, 3),
                        "slurm_submit_s": (state.get("submit_time") or 0) - started,
                        "slurm_start_s": (state.get("start_time") or 0) - started,
                        "end_s": (ended[job_id] - started) if job_id in ended else None,
                        "restarts": int(state.get("restart_cnt") or 0), "state": state.get("job_state"),
                        "events": events})
    return records


def compare_per_job(measured: list[dict], predicted, jobs) -> str:
    """Measured vs simulated per job: first start after arrival, JCT, preemptions."""
    sim = {o.job_id: o for o in predicted.outcomes}
    lines = [f"{'k':>3} {'gpus':>4} {'work':>4} {'arr':>6} | {'sub':>6} {'wait':>6} {'jct':>6} {'rs':>2} | "
             f"{'s.wait':>6} {'s.jct':>6} {'s.p':>3} | {'d.jct':>6}  events"]
    diffs = []
    for r in measured:
        o = sim.get(str(r["k"]))
        _, gpus, work = jobs[r["k"]]
        starts = [t for kind, t, _ in r["events"] if kind == "start"]
        first = starts[0] if starts else float("nan")
        jct = r["end_s"] - r["submitted_s"] if r["end_s"] is not None else float("nan")
        s_wait = o.start_s - o.submit_s if o else float("nan")
        s_jct = o.jct_s if o else float("nan")
        ev = " ".join(f"{kind[0]}{t:.1f}" for kind, t, _ in r["events"])
        if not math.isnan(s_jct - jct):
            diffs.append(s_jct - jct)
        lines.append(f"{r['k']:>3} {gpus:>4} {work:>4} {r['arrival_s']:>6.1f} | {r['submitted_s']:>6.1f} "
                     f"{first - r['submitted_s']:>6.1f} {jct:>6.1f} {r['restarts']:>2} | {s_wait:>6.1f} {s_jct:>6.1f} "
                     f"{(o.preemptions if o else -1):>3} | {s_jct - jct:>+6.1f}  {ev}")
    if diffs:
        lines.append(f"per job, predicted - measured JCT: median {statistics.median(diffs):+.1f} s, mean |d| "
                     f"{statistics.mean(abs(d) for d in diffs):.1f} s, within 5 s: {sum(abs(d) <= 5 for d in diffs)}"
                     f"/{len(diffs)}, within 20 s: {sum(abs(d) <= 20 for d in diffs)}/{len(diffs)}, "
                     f"range {min(diffs):+.1f}..{max(diffs):+.1f} s")
    return "\n".join(lines)


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
    parser.add_argument("--restart-cost-s", type=float, default=0.5,
                        help="restart seconds (Slurm start + job start-up) charged on resume by the prediction; "
                             "the grace period and requeue settle come from the controller's config (measured: a "
                             "requeued harness job's script started 0.27 s after the controller released its "
                             "BeginTime, and resumed from its checkpoint at once)")
    parser.add_argument("--launch-s", type=float, default=0.25,
                        help="seconds a job holds its GPUs beyond its work, charged by the prediction (measured: "
                             "Slurm's end - start minus the work over the never-preempted jobs of three controller "
                             "runs, 0.45 s, 0.24 s and 0.07 s, 0.25 s over all 167; Slurm's times are whole "
                             "seconds; the script's own start-to-done is work + 0.12 s)")
    parser.add_argument("--promote-knob", type=float, default=float("inf"),
                        help="starvation promotion (PROMOTEKNOB; inf = off)")
    parser.add_argument("--time-limit-min", type=int, default=60,
                        help="every job's --time, in minutes, as users give it (0 = none: UNLIMITED)")
    parser.add_argument("--predict-only", action="store_true", help="print the simulator's prediction and stop")
    parser.add_argument("--per-job", type=Path, default=None, metavar="FILE.json",
                        help="write each job's measured times (and the controller prediction's per job) to FILE "
                             "and print them side by side")
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
    sim_results: dict = {}
    with tempfile.TemporaryDirectory(prefix="tiresias-ab-predict-") as tmp:
        predicted = predict(jobs, settings, args.restart_cost_s, Path(tmp) / "tiresias.yaml", sim_results,
                            args.time_limit_min, args.launch_s)
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
                                  args.time_limit_min,
                                  args.per_job.with_suffix(".controller.log") if args.per_job else None)
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
    if ctl is not None and args.per_job is not None:
        import json

        sim = sim_results["controller"]
        args.per_job.write_text(json.dumps({
            "jobs": jobs, "settings": settings, "measured": ctl["per_job"],
            "predicted": [vars(o) for o in sim.outcomes]}, indent=1, default=str))
        print(compare_per_job(ctl["per_job"], sim, jobs))
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

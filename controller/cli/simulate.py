"""Replay a job trace against a simulated GPU cluster under one or more policies.

With no --trace, a seeded synthetic workload (the published job-type table) is
generated and fifo, dlas, dgittins and srsf are compared.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from controller.cli import argtypes
from controller.cli.out_paths import check_output_dir, write_error
from controller.cli.progress import progress_for
from controller.core.engine import EngineConfig
from controller.partitions.priority_file import read_expression_text
from controller.replay.traces import load_service_distribution
from controller.core.model import InputError
from controller.replay.results import bin_table, comparison_table, handoff_line, summarize, write_outputs
from controller.replay.run_config import parse_node_kinds
from controller.replay.simulator import SimConfig, Simulation
from controller.replay.slurmctld import SlurmQos

DEFAULT_POLICIES = "fifo,dlas,dgittins,srsf"
DEFAULT_SYNTHETIC_JOBS = 600
DEFAULT_NODES, DEFAULT_GPUS_PER_NODE = 8, 8


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("workload")
    src.add_argument("--trace", metavar="FILE", help="job trace (Tiresias, ITP, Philly, Muri or tiresias-slurm CSV)")
    src.add_argument("--jobs", type=argtypes.positive_int, default=DEFAULT_SYNTHETIC_JOBS,
                     help=f"synthetic workload size (default {DEFAULT_SYNTHETIC_JOBS})")
    src.add_argument("--seed", type=argtypes.seed, default=1, help="synthetic workload seed (default 1)")
    src.add_argument("--load", type=argtypes.positive_float, default=1.2,
                     help="synthetic offered load as a fraction of the cluster (default 1.2)")
    src.add_argument("--users", type=argtypes.non_negative_int, default=8,
                     help="synthetic users, each with 3 job names of their own typical time, submitting sweeps "
                          "(default 8; 0: the job-type table alone, one job at a time, no users)")
    src.add_argument("--time-scale", type=argtypes.positive_float, default=1.0,
                     help="multiply every duration and submit time (compress a trace)")
    src.add_argument("--drop-oversize", action="store_true",
                     help="drop jobs larger than the cluster (counted in the output) instead of failing")
    cl = p.add_argument_group("cluster")
    cl.add_argument("--nodes", type=argtypes.nodes, default=DEFAULT_NODES)
    cl.add_argument("--gpus-per-node", type=argtypes.gpus_per_node, default=DEFAULT_GPUS_PER_NODE)
    cl.add_argument("--node-kinds", type=parse_node_kinds, default=(), metavar="N:PART[+PART][:TYPE],...",
                    help="the nodes' partitions and GPU types, e.g. 2:batch:v100,2:batch+urgent:a100 (sets"
                         " --nodes; a trace's partition and gpu_type columns then decide where a job may run)")
    sch = p.add_argument_group("scheduling")
    sch.add_argument("--policy", default=DEFAULT_POLICIES, help=f"comma-separated policies (default {DEFAULT_POLICIES})")
    sch.add_argument("--queues", type=argtypes.thresholds, default=(3600.0,), metavar="T1,T2,...",
                     help="MLFQ thresholds in GPU-seconds, increasing (default 3600: K=2)")
    sch.add_argument("--promote-knob", type=argtypes.knob, default=math.inf,
                     help="PROMOTEKNOB for starvation promotion (default inf: off)")
    sch.add_argument("--round-interval-s", type=argtypes.seconds, default=None,
                     help="plan on a fixed period, like the controller (default: on every event)")
    sch.add_argument("--quantum-s", type=argtypes.quantum_seconds, default=60.0,
                     help="re-plan period for las/gittins/timeshare in event mode (default 60)")
    sch.add_argument("--preempt-cost-s", type=argtypes.non_negative_float, default=None,
                     help="pause + resume seconds charged per preemption (default 0)")
    sch.add_argument("--preempt-pause-s", type=argtypes.non_negative_float, default=0.0)
    sch.add_argument("--preempt-resume-s", type=argtypes.non_negative_float, default=0.0)
    sch.add_argument("--like-controller", metavar="CONFIG.yaml",
                     help="charge what the controller with this config costs: its interval_s as the round "
                          "interval, preempt_grace_s, requeue_settle_s as the requeue delay, "
                          "preempt_min_runtime_s and preempt_max_per_job (flags given explicitly win)")
    sch.add_argument("--preempt-grace-s", type=argtypes.non_negative_seconds, default=None,
                     help="a victim keeps its GPUs this long after the checkpoint signal, like the "
                          "controller's preempt_grace_s (default 0)")
    sch.add_argument("--requeue-delay-s", type=argtypes.non_negative_seconds, default=None,
                     help="a requeued victim may start again only after this long (the controller's "
                          "requeue_settle_s + BeginTime release; default 0)")
    sch.add_argument("--preempt-min-runtime-s", type=argtypes.non_negative_seconds, default=None,
                     help="never preempt a job whose current run is younger than this (default 0)")
    sch.add_argument("--preempt-max-per-job", type=argtypes.non_negative_int, default=None,
                     help="never preempt one job more often than this (default: no limit)")
    sch.add_argument("--slurm-starts", action="store_true",
                     help="Slurm starts the jobs, not the plan: priority order, and backfill reserving nodes for "
                          "a waiting job (controller.replay.slurm_order); the plan still preempts, unless "
                          "--like-controller's config says preemption: slurm: then slurmctld picks the victims "
                          "(controller.replay.slurm_preemption); a round at every event, as slurmctld schedules")
    sch.add_argument("--time-limit-min", type=argtypes.non_negative_float, default=None,
                     help="with --slurm-starts: every job's --time, which backfill reserves by (default: none)")
    sch.add_argument("--slurm-release", type=argtypes.slurm_release, default=None, metavar="MAJOR.MINOR",
                     help="with --like-controller and preemption: slurm: the Slurm release, e.g. 22.05 (before "
                          "24.05 a victim that ends in its grace is not requeued; default: a current release)")
    sch.add_argument("--placement", choices=("consolidate", "spread", "count"), default="consolidate",
                     help="consolidate skewed jobs (default), spread everything, or count GPUs only")
    sch.add_argument("--pack-limit", type=argtypes.unit_float, default=0.5, help="PACKLIMIT skew (default 0.5)")
    sch.add_argument("--spread-speed", type=argtypes.unit_float, default=0.6,
                     help="speed of a skewed job placed across extra nodes (default 0.6)")
    sch.add_argument("--priority-file", metavar="FILE",
                     help="expression of policy 'learned' (see tiresias learn); default: the published example")
    sch.add_argument("--service-samples", metavar="FILE",
                     help="Gittins service distribution (one column of GPU-seconds); default: learned during the replay")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    out.add_argument("--out", metavar="DIR", help="write per-job CSVs, bins.csv, summary.json and jct_cdf.png")
    out.add_argument("--bin-small-gpus", type=argtypes.positive_int, default=None,
                     help="largest 'small' job in GPUs (default: GPUs per node)")
    out.add_argument("--bin-short-s", type=argtypes.seconds, default=4 * 3600.0,
                     help="shortest 'long' job in seconds (default 14400)")
    out.add_argument("--quiet", action="store_true",
                     help="no progress on stderr (bar on a terminal after 1 s, else a line every 30 s)")
    out.add_argument("--no-progress", action="store_true", help=argparse.SUPPRESS)  # old name of --quiet
    out.add_argument("--levers", metavar="FILE.csv",
                     help="with --like-controller and one policy: also replay the controller's round and write "
                          "every lever it would pull, round by round (bands, pins, unpins, BeginTime releases, "
                          "signals, requeues) and the starts Slurm's priority order then makes")
    out.add_argument("--actual", action="store_true",
                     help="also show what Slurm really did (a trace from `tiresias trace export`): "
                          "row 'actual (Slurm)', JSON key 'actual', dashed CDF line")


def _workload(args):
    if args.trace:
        from controller.replay.traces import load_trace

        return load_trace(args.trace, time_scale=args.time_scale), args.trace
    from controller.replay.synthetic import generate

    jobs = generate(args.jobs, seed=args.seed, total_gpus=args.nodes * args.gpus_per_node,
                    gpus_per_node=args.gpus_per_node, load=args.load, time_scale=args.time_scale, users=args.users)
    return jobs, f"synthetic ({args.jobs} jobs, seed {args.seed}, load {args.load:g}, {args.users} users)"


def _load_actuals(args):
    """--actual: the trace's recorded Slurm outcomes, or None when not asked for."""
    if not getattr(args, "actual", False):
        return None
    if not args.trace:
        raise InputError("actual: needs --trace with a trace from `tiresias trace export`")
    from controller.replay.traces import load_actuals

    actuals = load_actuals(args.trace, time_scale=args.time_scale)
    if not actuals:
        raise InputError(f"actual: trace {args.trace} has no actual_start_s/actual_end_s columns "
                         f"(export one with `tiresias trace export`)")
    return actuals


# How long after the QOS GraceTime slurmctld requeues a preempted job (it requeues at a
# later scheduling attempt, not at the grace's end): measured 10-11 s with GraceTime 10
# and 30 on 22.05, 24.11 and 26.05 (docs/slurm-preemption.md, fact 3).
SLURM_REQUEUE_LAG_S = 10.0
# From 24.05 slurmctld requeues a job that ends, whatever its exit, while it is in its
# preemption grace ("assume the job completed on signal": proc_req.c
# _slurm_rpc_complete_batch_script, GRACE_PREEMPT); 22.05 and 23.x let it end (TIMEOUT
# or COMPLETED). docs/slurm-preemption.md, fact 7.
SLURM_REQUEUES_ENDED_IN_GRACE_FROM = (24, 5)


def controller_costs(config, slurm_release: tuple[int, int] | None = None) -> dict:
    """What a controller with this service Config (controller.service.ops.config) costs, as
    SimConfig/EngineConfig keyword values: rounds every interval_s, a victim holds its
    GPUs for preempt_grace_s, then waits requeue_settle_s before its BeginTime is
    released (at a round), and the engine's victim protection; ``requeue_ended_in_grace``
    (SimConfig): a victim that ends inside its grace period is requeued all the same
    (preempt_requeue_ended), and ends only when it runs again.

    ``preemption: slurm``: slurmctld signals and requeues. preempt_grace_s and
    preempt_min_runtime_s then stand for the QOS's GraceTime and PreemptExemptTime (the
    admin sets them alike), and the victim keeps its GPUs SLURM_REQUEUE_LAG_S beyond the
    grace; Slurm has no per-job cap, and requeues a job that ended in its grace from
    24.05 on (``slurm_release`` (major, minor); None: a current release)."""
    if config.preemption == "slurm":
        requeues_ended = slurm_release is None or tuple(slurm_release) >= SLURM_REQUEUES_ENDED_IN_GRACE_FROM
        return {"round_interval_s": config.interval_s,
                "preempt_grace_s": config.preempt_grace_s + SLURM_REQUEUE_LAG_S,
                "requeue_delay_s": config.requeue_settle_s, "preempt_min_runtime_s": config.preempt_min_runtime_s,
                "preempt_max_per_job": None, "requeue_ended_in_grace": requeues_ended}
    return {"round_interval_s": config.interval_s, "preempt_grace_s": config.preempt_grace_s,
            "requeue_delay_s": config.requeue_settle_s, "preempt_min_runtime_s": config.preempt_min_runtime_s,
            "preempt_max_per_job": config.preempt_max_per_job,
            "requeue_ended_in_grace": bool(config.preempt_requeue_ended)}


def _costs(args) -> dict:
    """The cost settings: explicit flags, else --like-controller's config, else none."""
    base = {"round_interval_s": None, "preempt_grace_s": 0.0, "requeue_delay_s": 0.0,
            "preempt_min_runtime_s": 0.0, "preempt_max_per_job": None, "requeue_ended_in_grace": False}
    if getattr(args, "like_controller", None):
        from controller.service.ops.config import load

        base.update(controller_costs(load(args.like_controller), getattr(args, "slurm_release", None)))
    for name in base:
        value = getattr(args, name, None)
        if value is not None:
            base[name] = value
    return base


def slurm_preemption_of(args):
    """``--like-controller`` with ``preemption: slurm`` and ``--slurm-starts``: slurmctld
    chooses the victims (controller.replay.slurm_preemption), the undeclared jobs' QOS
    preempting nobody (requeue,within alone: docs/slurm-preemption.md's setup); else None."""
    if not (getattr(args, "like_controller", None) and getattr(args, "slurm_starts", False)):
        return None
    from controller.service.ops.config import load

    return SlurmQos() if load(args.like_controller).preemption == "slurm" else None


def run(args) -> int:
    if args.node_kinds:
        args.nodes = sum(count for count, _, _ in args.node_kinds)
    if args.out:
        check_output_dir(args.out)  # before the replay: a bad --out must not cost the run
    costs = _costs(args)
    slurm_preemption = slurm_preemption_of(args)
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    if not policies:
        raise InputError(f"policy value {args.policy!r} names no policy")
    repeated = next((name for number, name in enumerate(policies) if name in policies[:number]), None)
    if repeated:  # the same replay twice, and its --out files would overwrite each other
        raise InputError(f"policy value {args.policy!r} names {repeated!r} twice")
    pause, resume = args.preempt_pause_s, args.preempt_resume_s
    if args.preempt_cost_s is not None:
        pause, resume = args.preempt_cost_s, 0.0
    if getattr(args, "levers", None) and not (getattr(args, "like_controller", None) and len(policies) == 1):
        raise InputError(f"levers: {args.levers} needs --like-controller CONFIG.yaml and one --policy")
    service = load_service_distribution(args.service_samples) if args.service_samples else None
    # Validate every policy before the first (possibly long) replay.
    engine_configs = [EngineConfig(policy=name, thresholds_gpu_s=args.queues, promote_knob=args.promote_knob,
                                   placement=args.placement, pack_limit=args.pack_limit, quantum_s=args.quantum_s,
                                   priority_expression=read_expression_text(args.priority_file),
                                   preempt_min_runtime_s=costs["preempt_min_runtime_s"],
                                   preempt_max_per_job=costs["preempt_max_per_job"])
                      for name in policies]
    jobs, source = _workload(args)
    if not jobs:
        raise InputError(f"trace {source}: no jobs")
    if args.trace and not args.json:  # an exported trace: the cluster its history shows (controller.cli.trace)
        from controller.cli.trace import replay_notes

        for line in replay_notes(args.trace, jobs, args.nodes * args.gpus_per_node, args.time_scale):
            print(line, file=sys.stderr)
    actuals = _load_actuals(args)
    results, summaries, bins, timings = [], [], [], {}
    small = args.bin_small_gpus or args.gpus_per_node
    # One report over all policies (unit: jobs replayed) so that the ETA covers the whole run.
    progress = progress_for(args, "simulate", "jobs", total=len(jobs) * len(engine_configs))
    for number, engine_config in enumerate(engine_configs):
        slurm_starts = bool(getattr(args, "slurm_starts", False))
        limit_min = getattr(args, "time_limit_min", None)
        config = SimConfig(nodes=args.nodes, gpus_per_node=args.gpus_per_node, engine=engine_config,
                           node_kinds=args.node_kinds,
                           round_interval_s=None if slurm_starts else costs["round_interval_s"],
                           slurm_starts=slurm_starts, time_limit_s=limit_min * 60.0 if limit_min else None,
                           requeue_ended_in_grace=costs["requeue_ended_in_grace"],
                           preempt_pause_s=pause, preempt_resume_s=resume,
                           preempt_grace_s=costs["preempt_grace_s"], requeue_delay_s=costs["requeue_delay_s"],
                           spread_speed=args.spread_speed, service=service, drop_oversize=args.drop_oversize)
        note = f"policy {engine_config.policy}"

        def report(fraction: float, offset: int = number * len(jobs), note: str = note) -> None:
            progress(offset + fraction * len(jobs), note=note)

        started = time.perf_counter()
        result = Simulation(config, progress=report, slurm_preemption=slurm_preemption).run(jobs)
        report(1.0)
        timings[engine_config.policy] = time.perf_counter() - started
        results.append(result)
        summaries.append(summarize(result))
        bins.extend(bin_table(result, small, args.bin_short_s))
    progress.close()
    levers = _write_levers(args, config, jobs) if getattr(args, "levers", None) else None
    actual, actual_curve = None, None
    if actuals is not None:
        from slurm_plugin.history_shape import actual_jcts, actual_summary

        dropped_ids = set(results[0].dropped_oversize)
        actual = actual_summary(jobs, actuals, args.nodes * args.gpus_per_node, exclude=dropped_ids)
        actual_curve = {"actual": list(actual_jcts(jobs, actuals, exclude=dropped_ids)[1])}
    if args.out:
        try:
            write_outputs(Path(args.out), results, summaries, bins,
                          title=f"JCT CDF: {Path(source).name if args.trace else source}, "
                                f"{args.nodes}x{args.gpus_per_node} GPUs", extra_curves=actual_curve)
        except OSError as err:
            raise write_error("--out", args.out, err) from None
    if args.json:
        doc = {"workload": source, "nodes": args.nodes, "gpus_per_node": args.gpus_per_node,
               "jobs_in": len(jobs), "summaries": summaries, "bins": bins}
        if actual is not None:
            doc["actual"] = actual
        if levers is not None:
            doc["levers"] = levers
        print(json.dumps(doc, sort_keys=True))
        return 0
    print(f"workload: {source}; cluster: {args.nodes} nodes x {args.gpus_per_node} GPUs; "
          f"placement {args.placement}; queues {','.join(f'{t:g}' for t in args.queues)} GPU-s")
    print(comparison_table(summaries + ([actual] if actual is not None else [])))
    if actual is not None:
        print(f"actual (Slurm): {actual['jobs']} jobs with a recorded start and end; 'preempt' = requeues")
    dropped = summaries[0]["dropped_oversize"]
    if dropped:
        print(f"dropped {dropped} job(s) larger than the cluster (--drop-oversize)")
    for s in summaries:  # a policy that preempted, or could have: did its preemptions pay off
        if s["preemptions"] or s["waited_behind_victim"]:
            print(handoff_line(s))
    if pause + resume > 0:
        for s in summaries:
            print(f"{s['policy']}: {s['preemptions']} preemptions cost {s['preemption_overhead_s']:.0f} s in all")
    if len(summaries) > 1:
        base = summaries[0]
        ratios = ", ".join(f"{s['policy']} {base['avg_jct_s'] / s['avg_jct_s']:.2f}x"
                           for s in summaries[1:] if s["avg_jct_s"] > 0)
        print(f"average JCT of {base['policy']} / policy: {ratios}")
    if args.out:
        print(f"wrote {args.out}/: jobs_<policy>.csv, bins.csv, summary.json, jct_cdf.png")
    if levers is not None:
        print(f"wrote {args.levers}: {levers['rounds']} rounds; "
              + ", ".join(f"{kind} x{n}" for kind, n in sorted(levers["actions"].items())))
    return 0


def _write_levers(args, config: SimConfig, jobs) -> dict:
    """--levers: the lever replay (controller.replay.lever_replay) with the
    --like-controller config's lever settings; one CSV row per action or start."""
    import csv
    from collections import Counter

    from controller.core.levers.table import action_row
    from controller.replay.lever_replay import LeverSettings, replay_levers
    from controller.service.ops.config import load

    service_config = load(args.like_controller)
    settings = LeverSettings(service_config.site_factor_band, service_config.pin_expiry_s,
                             service_config.requeue_settle_s, service_config.handoff_timeout_s,
                             slurm_rpc_per_s=service_config.slurm_rpc_per_s,
                             slurm_rpc_burst=service_config.slurm_rpc_burst)
    replay = replay_levers(config, jobs, settings)
    counts: Counter = Counter()
    try:
        with open(args.levers, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["round", "time_s", "decision_id", "kind", "job_id", "value", "cause_id"])
            for number, (actions, starts, at) in enumerate(zip(replay.levers, replay.starts, replay.round_times_s), 1):
                rows = [action_row(a) for a in actions] + [("", "start", j, nodes, "") for j, nodes in starts]
                for decision_id, kind, job_id, value, cause_id in rows:
                    counts[kind] += 1
                    value = ",".join(value) if isinstance(value, tuple) else ("" if value is None else value)
                    writer.writerow([number, f"{at:g}", decision_id, kind, job_id, value, cause_id])
    except OSError as err:
        raise write_error("--levers", args.levers, err) from None
    note = levers_cut_short(replay)
    if note:  # the CSV is cut short: say so rather than let it pass for the whole trace
        print(f"tiresias simulate: {note}", file=sys.stderr)
    return {"rounds": len(replay.levers), "actions": dict(counts), "unfinished_jobs": replay.unfinished_jobs}


def levers_cut_short(replay) -> str:
    """One line when the lever replay stopped at its round limit with jobs unfinished, else ''."""
    if not replay.unfinished_jobs:
        return ""
    return (f"--levers stopped at {len(replay.levers):,} rounds with {replay.unfinished_jobs} job(s) not finished; "
            "the CSV covers only those rounds (a longer --round-interval-s covers more of the trace)")

"""PNG figures of a cluster's jobs: the JCT CDF, queue length over time and GPU
utilization over time; from the controller's store or from a 'tiresias simulate
--out' directory (--from DIR, every policy in it unless --policy).

The inputs keep submit, first start, end and total run time per job, not every
run: a preempted job's run time is spread evenly between its first start and its
end (exact for jobs never preempted; the GPU-seconds and job-seconds of waiting
under the curves are exact either way). See controller.cli.reports.occupancy_series.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from controller.cli import argtypes

from controller.cli import acct as cmd_acct

from controller.cli import reports
from controller.service.ops.config import DEFAULT_PATH, load
from controller.core.model import InputError
from controller.replay.results import plot_jct_cdf
from controller.service.state.secrets import redact_url


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", required=True, help="directory for the PNG files (created)")
    p.add_argument("--from", dest="from_dir", metavar="SIMDIR", help="a 'tiresias simulate --out' directory")
    p.add_argument("--policy", metavar="P", help="with --from: only this policy (default: every jobs_<P>.csv)")
    p.add_argument("--config", metavar="FILE", help=f"YAML settings (default {DEFAULT_PATH} if present)")
    p.add_argument("--database-url", metavar="URL", help="store URL (overrides the config)")
    p.add_argument("--cluster", metavar="NAME", help="cluster name in the store (overrides the config)")
    p.add_argument("--capacity-gpus", type=argtypes.positive_int, metavar="N",
                   help="cluster GPUs, for utilization in %% (default: from summary.json; store: busy GPUs only)")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _time_axis(span_s: float) -> tuple[float, str]:
    """Divisor and unit that keep the x axis readable."""
    if span_s <= 2 * 3600:
        return 60.0, "minutes"
    if span_s <= 3 * 86400:
        return 3600.0, "hours"
    return 86400.0, "days"


def _save(fig, path: Path) -> None:
    if not fig.texts:
        fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    _plt().close(fig)


def plot_over_time(path: Path, series: dict[str, tuple[list[float], list[float]]], origin_s: float, title: str,
                   ylabel: str, xlabel_origin: str, capacity: Optional[float] = None, note: str = "") -> None:
    """Step lines of ``series`` (name -> (times, values)), x relative to ``origin_s``."""
    plt = _plt()
    span = max((t[-1] - origin_s for t, _ in series.values() if t), default=0.0)
    divisor, unit = _time_axis(span)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for name, (times, values) in series.items():
        if not times:
            continue
        x = (np.asarray(times) - origin_s) / divisor
        ax.step(x, values, where="post", label=name, linewidth=1.4)
    if capacity is not None:
        ax.axhline(capacity, color="grey", linestyle="--", linewidth=1, label=f"capacity ({capacity:g})")
    ax.set_xlabel(f"time since {xlabel_origin} ({unit})")
    ax.set_ylabel(ylabel)
    top = max((max(v) for _, v in series.values() if v), default=1.0)
    ax.set_ylim(0, max(top, capacity or 0, 1.0) * 1.18)  # headroom for the legend
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="upper right", ncol=min(len(series), 4), framealpha=0.9)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="dimgrey", ha="left", va="bottom")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
    _save(fig, path)


def _load(args) -> tuple[dict[str, list[reports.JobRow]], dict[str, Optional[int]], str, bool]:
    """(policy or source name -> rows, name -> capacity GPUs, label, simulated)."""
    if args.from_dir:
        csvs = reports.simulation_csvs(args.from_dir)
        runs, capacities = {}, {}
        for policy in reports.pick_policies(csvs, args.policy, args.from_dir, single=False):
            rows = reports.rows_from_simulation(csvs[policy])
            runs[policy] = rows
            capacities[policy] = args.capacity_gpus or reports.simulated_capacity_gpus(args.from_dir, policy, rows)
        return runs, capacities, f"simulation {Path(args.from_dir).name}", True
    if args.policy:
        raise InputError("--policy needs --from SIMDIR (a simulator output directory)")
    config = load(args.config, {"database_url": args.database_url, "cluster": args.cluster})
    store = cmd_acct.open_store(config.store_url())
    if store is None:
        return {}, {}, f"{redact_url(config.database_url)} (the database does not exist yet)", False
    with store:
        records = store.load_jobs(config.cluster)
        name = store.name
    rows = reports.rows_from_store(records.values(), config.placement, config.pack_limit)
    label = f"cluster {config.cluster}"
    return ({label: rows} if rows else {}), {label: args.capacity_gpus}, f"{name} (cluster {config.cluster})", False


def run(args) -> int:
    runs, capacities, label, simulated = _load(args)
    if not runs:
        print(f"no jobs recorded in {label}: nothing to plot")
        return 0
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"--out {args.out}: cannot create the directory ({err.strerror})") from None
    now = time.time()
    all_rows = [r for rows in runs.values() for r in rows]
    origin = min(r.submit_s for r in all_rows if r.submit_s is not None)
    horizon = max([r.end_s or r.last_seen_s or (origin if simulated else now) for r in all_rows] + [origin])
    origin_text = "trace start" if simulated else f"first submit ({reports.format_timestamp(origin)})"
    written = []

    finished = {name: [r.jct_s for r in rows if r.jct_s is not None] for name, rows in runs.items()}
    path = out / "jct_cdf.png"
    n_finished = sum(len(v) for v in finished.values())
    plot_jct_cdf(path, finished, f"JCT CDF: {label}, {n_finished} finished job(s)")
    written.append(path)

    queue, busy = {}, {}
    for name, rows in runs.items():
        times, pending, busy_gpus = reports.occupancy_series(rows, horizon)
        queue[name] = (times, pending)
        capacity = capacities.get(name)
        # The even spread of a preempted job's run time can put more GPUs "busy" at
        # once than exist; a cluster never does, so clip at its capacity.
        busy[name] = (times, [100.0 * min(b, capacity) / capacity for b in busy_gpus] if capacity else busy_gpus)
    preempted = sum(1 for r in all_rows if r.preemptions)
    note = (f"approx.: the run time of {preempted} preempted job(s) is spread evenly between first start and end"
            if preempted else "")
    path = out / "queue_length.png"
    plot_over_time(path, queue, origin, f"Pending jobs over time: {label}", "jobs pending", origin_text, note=note)
    written.append(path)

    path = out / "gpu_utilization.png"
    known = [c for c in capacities.values() if c]
    if known and len(known) == len(capacities):
        plot_over_time(path, busy, origin, f"GPU utilization over time: {label}",
                       f"GPUs busy (% of {known[0]}{'' if len(set(known)) == 1 else ' or more'})", origin_text,
                       note=note + ("; clipped at 100%" if note else ""))
    else:
        plot_over_time(path, busy, origin, f"Busy GPUs over time: {label}", "GPUs busy", origin_text, note=note)
    written.append(path)
    for name, rows in runs.items():
        unfinished = sum(1 for r in rows if r.jct_s is None)
        if unfinished:
            print(f"{name}: {unfinished} job(s) not finished: left out of the JCT CDF, counted up to their "
                  "last observation", file=sys.stderr)
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0

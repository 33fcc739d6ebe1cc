"""Figures of a simulated run: JCT statistics, per-bin tables, CSV and PNG outputs."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

from controller.replay.simulator import JobOutcome, SimResult

BINS = ("SS", "SL", "LS", "LL")  # (small|large GPUs)(short|long duration), Tiresias Table 3


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else 0.0


def summarize(result: SimResult) -> dict:
    """The side-by-side figures of one policy's run (seconds, ratios 0..1)."""
    outcomes = result.outcomes
    jct = np.array([o.jct_s for o in outcomes], dtype=float)
    queueing = np.array([o.queueing_s for o in outcomes], dtype=float)
    if outcomes:
        first_submit = min(o.submit_s for o in outcomes)
        makespan = max(o.end_s for o in outcomes) - first_submit
        busy_gpu_s = sum(o.num_gpus * o.executed_s for o in outcomes)
        utilization = busy_gpu_s / (result.capacity_gpus * makespan) if makespan > 0 else 0.0
    else:
        makespan = utilization = 0.0
    return {
        "policy": result.policy,
        "jobs": len(outcomes),
        "avg_jct_s": float(jct.mean()) if jct.size else 0.0,
        "median_jct_s": _percentile(jct, 50),
        "p95_jct_s": _percentile(jct, 95),
        "max_jct_s": float(jct.max()) if jct.size else 0.0,
        "avg_queueing_s": float(queueing.mean()) if queueing.size else 0.0,
        "makespan_s": float(makespan),
        "preemptions": result.preemptions,
        "preemption_overhead_s": float(result.preemption_overhead_s),
        "promotions": result.promotions,
        "gpu_utilization": float(utilization),
        "dropped_oversize": len(result.dropped_oversize),
        "rounds": result.rounds,
        # of "preemptions": those whose beneficiaries did not start on the GPUs they freed
        "useless_preemptions": result.useless_preemptions,
        "waited_behind_victim": result.waited_behind_victim,
    }


def handoff_line(summary: dict) -> str:
    """The two figures of the handoff and wait audits (controller.replay.cluster.SimCluster
    judge_handoffs, audit_waits) as one line of simulate's summary."""
    return (f"{summary['policy']}: preemptions that started nobody: {summary['useless_preemptions']} of "
            f"{summary['preemptions']}; jobs that waited behind a usable victim > 2 rounds: "
            f"{summary['waited_behind_victim']}")


def bin_of(outcome: JobOutcome, small_max_gpus: int, short_max_s: float) -> str:
    size = "S" if outcome.num_gpus <= small_max_gpus else "L"
    length = "S" if outcome.duration_s < short_max_s else "L"
    return size + length


def bin_table(result: SimResult, small_max_gpus: int, short_max_s: float) -> list[dict]:
    """Average and p95 JCT per bin (SS, SL, LS, LL)."""
    rows = []
    for name in BINS:
        jct = np.array([o.jct_s for o in result.outcomes if bin_of(o, small_max_gpus, short_max_s) == name])
        rows.append({"policy": result.policy, "bin": name, "jobs": int(jct.size),
                     "avg_jct_s": float(jct.mean()) if jct.size else 0.0, "p95_jct_s": _percentile(jct, 95)})
    return rows


def format_duration(seconds: float) -> str:
    """Compact human form: 42s, 12.5m, 3.20h, 2.1d."""
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.2f}h"
    return f"{seconds / 86400:.1f}d"


def format_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    rows = [list(map(str, r)) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    for row in rows:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def comparison_table(summaries: list[dict]) -> str:
    headers = ["policy", "jobs", "avg JCT", "median", "p95", "max", "avg queue", "makespan", "preempt", "GPU util"]
    rows = [[s["policy"], s["jobs"], format_duration(s["avg_jct_s"]), format_duration(s["median_jct_s"]),
             format_duration(s["p95_jct_s"]), format_duration(s["max_jct_s"]), format_duration(s["avg_queueing_s"]),
             format_duration(s["makespan_s"]), s["preemptions"], f"{100 * s['gpu_utilization']:.1f}%"]
            for s in summaries]
    return format_table(headers, rows)


JOB_CSV_FIELDS = ["job_id", "user", "partition", "num_gpus", "submit_s", "start_s", "end_s", "duration_s", "jct_s",
                  "queueing_s", "preemptions", "attained_gpu_s"]


def write_job_csv(path: Path, result: SimResult) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(JOB_CSV_FIELDS)
        for o in result.outcomes:
            writer.writerow([o.job_id, o.user, o.partition, o.num_gpus, f"{o.submit_s:.3f}", f"{o.start_s:.3f}",
                             f"{o.end_s:.3f}", f"{o.duration_s:.3f}", f"{o.jct_s:.3f}", f"{o.queueing_s:.3f}",
                             o.preemptions, f"{o.attained_gpu_s:.3f}"])


def plot_jct_cdf(path: Path, curves: dict[str, Sequence[float]], title: str) -> None:
    """One CDF line per policy (plus optional 'actual'), log-scaled JCT axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for name, values in curves.items():
        x = np.sort(np.asarray(values, dtype=float))
        if not x.size:
            continue
        y = np.arange(1, x.size + 1) / x.size
        ax.step(np.maximum(x, 1.0), y, where="post", label=name,
                linestyle="--" if name == "actual" else "-", linewidth=1.6)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def write_outputs(out_dir: Path, results: list[SimResult], summaries: list[dict], bins: list[dict],
                  title: str, extra_curves: Optional[dict[str, Sequence[float]]] = None) -> list[Path]:
    """Per-job CSV per policy, the bin table, a summary JSON and the JCT CDF PNG."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for result in results:
        path = out_dir / f"jobs_{result.policy}.csv"
        write_job_csv(path, result)
        written.append(path)
    path = out_dir / "bins.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["policy", "bin", "jobs", "avg_jct_s", "p95_jct_s"],
                                lineterminator="\n")
        writer.writeheader()
        for row in bins:
            writer.writerow({**row, "avg_jct_s": f"{row['avg_jct_s']:.3f}", "p95_jct_s": f"{row['p95_jct_s']:.3f}"})
    written.append(path)
    path = out_dir / "summary.json"
    path.write_text(json.dumps({"summaries": summaries}, indent=2, sort_keys=True) + "\n")
    written.append(path)
    curves = {r.policy: [o.jct_s for o in r.outcomes] for r in results}
    curves.update(extra_curves or {})
    path = out_dir / "jct_cdf.png"
    plot_jct_cdf(path, curves, title)
    written.append(path)
    return written

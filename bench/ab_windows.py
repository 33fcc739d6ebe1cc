"""How typical is the A/B's workload? The simulator's verdict on every window of a trace.

`bench/ab_slurm.py` runs one 48-job window of a trace on real Slurm (about 10 minutes
an arm). This bench slides the same window over whole traces and prints, for each
start, the simulator's prediction (the same `predict` the A/B prints: the
controller's config and costs, stock as best-effort and as strict FIFO), then how
many windows meet the A/B targets: average JCT >= 2x and median >= 2.3x better than
stock, p95 within 10%. A window chosen for the real A/B can then be placed in that
distribution instead of standing alone.

With ``--tune-on-previous`` the threshold is chosen as an admin would with
`tiresias tune`: on history. Each window gets the candidate threshold (from
``--candidates``; a huge one means one queue, i.e. FIFO with backfill) that gave the
best predicted average JCT on the window before it, and is judged with it.
``--references`` also replays each window with no preemption cost at all (dlas, same
threshold) and with clairvoyant SRTF, against the same stock: is a window lost to
the policy or to what preempting costs?

    .venv/bin/python bench/ab_windows.py ../shared/traces/itp/cluster0{2,4,7}.csv --step 25
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ab_slurm import predict, workload  # noqa: E402
from controller.core.policies import STOCK_POLICIES  # noqa: E402
from controller.replay.traces import load_trace  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", type=Path, nargs="+")
    parser.add_argument("--jobs", type=int, default=48)
    parser.add_argument("--step", type=int, default=25, help="jobs between window starts")
    parser.add_argument("--arrival-window-s", type=float, default=40.0)
    parser.add_argument("--min-s", type=int, default=10)
    parser.add_argument("--max-s", type=int, default=300)
    parser.add_argument("--queues", default="40")
    parser.add_argument("--promote-knob", type=float, default=float("inf"))
    parser.add_argument("--tune-on-previous", action="store_true",
                        help="each window uses the threshold that did best on the previous window")
    parser.add_argument("--candidates", default="40,80,160,320,640,1280,1000000",
                        help="thresholds (GPU-s) --tune-on-previous chooses from")
    parser.add_argument("--heavy-cv", type=float, default=2.0,
                        help="a window whose jobs' GPU-seconds have at least this coefficient of variation "
                             "counts as heavy-tailed in the summary")
    parser.add_argument("--references", action="store_true",
                        help="also cost-free dlas and clairvoyant srtf against the same stock (average JCT)")
    parser.add_argument("--stock", choices=STOCK_POLICIES, default="fifo-skip",
                        help="which stock model the ratios are against (fifo-skip: the kinder one)")
    args = parser.parse_args()
    settings = {"queues_gpu_s": [float(q) for q in args.queues.split(",")], "preempt_grace_s": 3.0,
                "preempt_min_runtime_s": 2.0, "interval_s": 1.0, "poll_s": 0.5, "promote_knob": args.promote_knob}
    candidates = [float(q) for q in args.candidates.split(",")]

    def best_threshold(jobs, tmp: Path) -> float:
        """The candidate with the lowest predicted controller average JCT on these jobs."""
        scores = {}
        for q in candidates:
            scores[q] = predict(jobs, {**settings, "queues_gpu_s": [q]}, 3.0, tmp / "tune.yaml")["controller"]["avg_jct_s"]
        return min(scores, key=scores.get)

    def reference_ratios(jobs, stock_avg: float, thresholds: list[float]) -> tuple[float, float]:
        """Stock / policy average JCT for dlas with no cost at all and for clairvoyant srtf."""
        from controller.core.engine import EngineConfig
        from controller.core.model import JobSpec
        from controller.replay.results import summarize
        from controller.replay.simulator import SimConfig, Simulation

        specs = [JobSpec(str(i), g, a, float(w)) for i, (a, g, w) in enumerate(jobs)]
        out = []
        for engine in (EngineConfig(policy="dlas", thresholds_gpu_s=tuple(thresholds)), EngineConfig(policy="srtf")):
            result = summarize(Simulation(SimConfig(nodes=4, gpus_per_node=4, engine=engine)).run(specs))
            out.append(stock_avg / result["avg_jct_s"])
        return out[0], out[1]

    references = []
    rows = []
    print(f"{'trace':<14} {'start':>5} {'work s':>6} {'CV':>5} {'avg x':>6} {'median x':>8} {'p95 x':>6} {'preempt':>7}  targets")
    with tempfile.TemporaryDirectory(prefix="tiresias-ab-windows-") as tmp:
        for trace in args.traces:
            total = len(load_trace(trace))
            previous = None
            for start in range(0, total - args.jobs + 1, args.step):
                jobs = workload(trace, 0.15, 0.1, args.min_s, args.max_s, args.jobs, start=start,
                                duration_map="log", arrival_window_s=args.arrival_window_s)
                window_settings = settings
                if args.tune_on_previous:
                    if previous is None:  # no history yet: this window only serves as the next one's
                        previous = jobs
                        continue
                    window_settings = {**settings, "queues_gpu_s": [best_threshold(previous, Path(tmp))]}
                    previous = jobs
                figures = predict(jobs, window_settings, 3.0, Path(tmp) / "tiresias.yaml")
                stock, ctl = figures[f"stock as {args.stock}"], figures["controller"]
                ratios = (stock["avg_jct_s"] / ctl["avg_jct_s"], stock["median_jct_s"] / ctl["median_jct_s"],
                          stock["p95_jct_s"] / ctl["p95_jct_s"])
                met = (ratios[0] >= 2.0, ratios[1] >= 2.3, ratios[2] >= 1 / 1.1)
                sizes = [g * w for _, g, w in jobs]  # GPU-seconds: how heavy the window's tail is
                cv = statistics.pstdev(sizes) / statistics.mean(sizes)
                rows.append((ratios, met, cv))
                if args.references:
                    references.append(reference_ratios(jobs, stock["avg_jct_s"], window_settings["queues_gpu_s"]))
                work = sum(sizes) / 16
                print(f"{trace.stem:<14} {start:>5} {work:>6.0f} {cv:>5.2f} {ratios[0]:>6.2f} {ratios[1]:>8.2f} {ratios[2]:>6.2f} "
                      f"{ctl['preemptions']:>7}  {'all met' if all(met) else ''}"
                      f"{'  queues ' + str(window_settings['queues_gpu_s']) if args.tune_on_previous else ''}",
                      flush=True)
    if rows:
        heavy = [r for r, _, cv in rows if cv >= args.heavy_cv]
        light = [r for r, _, cv in rows if cv < args.heavy_cv]
        for label, group in ((f"heavy-tailed (GPU-s CV >= {args.heavy_cv:g})", heavy),
                             (f"light-tailed (CV < {args.heavy_cv:g})", light)):
            if group:
                print(f"{label}: {len(group)} windows, average JCT ratio median "
                      f"{statistics.median(r[0] for r in group):.2f}, >= 2x in {sum(r[0] >= 2 for r in group)}, "
                      f"behind stock in {sum(r[0] < 1 for r in group)}")
        rows = [(r, m) for r, m, _ in rows]
        n = len(rows)
        print(f"\n{n} windows of {args.jobs} jobs, against stock as {args.stock}: average JCT ratio median "
              f"{statistics.median(r[0] for r, _ in rows):.2f} (>= 2x in {sum(m[0] for _, m in rows)}), median JCT ratio "
              f"median {statistics.median(r[1] for r, _ in rows):.2f} (>= 2.3x in {sum(m[1] for _, m in rows)}), p95 "
              f"within 10% in {sum(m[2] for _, m in rows)}; all three in {sum(all(m) for _, m in rows)} of {n}; "
              f"controller behind stock on average JCT in {sum(r[0] < 1 for r, _ in rows)} (by more than 10% in "
              f"{sum(r[0] < 0.9 for r, _ in rows)}; ahead by more than 10% in {sum(r[0] > 1.1 for r, _ in rows)})")
        if references:
            for label, column in (("dlas with no preemption cost", 0), ("clairvoyant srtf", 1)):
                values = [ref[column] for ref in references]
                print(f"{label}: average JCT ratio median {statistics.median(values):.2f}, >= 2x in "
                      f"{sum(v >= 2 for v in values)}, behind stock in {sum(v < 1 for v in values)} of {len(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

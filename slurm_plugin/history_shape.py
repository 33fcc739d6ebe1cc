"""What a sacct history shows beyond its trace: the cluster it ran on (nodes, GPUs per node,
GPU types, partitions, the peak of GPUs in use at once) with the ``simulate`` cluster flags
that replay it (:func:`history_shape`), and the actual JCTs the replay is compared with
(:func:`actual_jcts`, :func:`actual_summary`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from controller.core.model import JobSpec
from slurm_plugin.accounting import id_key, one_gpu_type
from slurm_plugin.grammar import SlurmParseError, expand_hostlist

ACTUAL_LABEL = "actual (Slurm)"


@dataclass
class HistoryShape:
    """The cluster a history ran on, as far as its jobs show it. GPU counts are whole
    GPUs; ``gpus_per_node`` is the most GPUs one node had in use at once (a lower
    bound on its size; 0 when the history names no nodes)."""

    jobs: int
    nodes: list[str]
    gpus_per_node: int
    node_kinds: list[tuple[int, tuple[str, ...], str]]  # (count, partitions, GPU type), as simulate --node-kinds
    gpu_types: dict[str, int]  # type ('' untyped) -> jobs
    partitions: dict[str, int]  # partition -> jobs
    peak_gpus: int
    held: list[tuple[float, float, int]]  # (from, to, GPUs) per job: the time it held its GPUs

    def suggested_flags(self) -> str:
        """The ``simulate`` cluster flags that replay this history."""
        if not self.nodes:
            # no NodeList: the smallest cluster of 8-GPU nodes (or the largest job's size) that held the peak
            largest = max((g for _, _, g in self.held), default=1)
            per_node = min(largest, 8)
            return f"--nodes {max(-(-self.peak_gpus // per_node), 1)} --gpus-per-node {per_node}"
        if len(self.node_kinds) > 1 or any(kind[2] for kind in self.node_kinds):
            kinds = ",".join(f"{count}:{'+'.join(parts)}" + (f":{gpu_type}" if gpu_type else "")
                             for count, parts, gpu_type in self.node_kinds)
            return f"--node-kinds {kinds} --gpus-per-node {self.gpus_per_node}"
        return f"--nodes {len(self.nodes)} --gpus-per-node {self.gpus_per_node}"

    def lines(self) -> list[str]:
        """What the history shows, for stderr."""
        def counted(items: dict[str, int]) -> str:
            return ", ".join(f"{name or 'untyped'} ({n} jobs)" for name, n in sorted(items.items(),
                                                                                     key=lambda kv: (-kv[1], kv[0])))
        shown = ",".join(self.nodes[:8]) + (",..." if len(self.nodes) > 8 else "")
        nodes = (f"{len(self.nodes)} ({shown}), up to {self.gpus_per_node} GPUs in use on one node"
                 if self.nodes else "not recorded (no NodeList)")
        return [f"history: {self.jobs} GPU job(s); nodes: {nodes}",
                f"  GPU types: {counted(self.gpu_types)}",
                f"  partitions: {counted(self.partitions)}",
                f"  peak: {self.peak_gpus} GPUs in use at once",
                f"  replay it on: {self.suggested_flags()}"]

    def capacity_warning(self, capacity_gpus: int) -> Optional[str]:
        """A line when the history had more GPUs in use at once than ``capacity_gpus``,
        with the number of job starts that went past it; else None."""
        if self.peak_gpus <= capacity_gpus:
            return None
        in_use, starts = 0, 0
        for _, delta in _usage_events(self.held):
            in_use += delta
            if delta > 0 and in_use > capacity_gpus:
                starts += 1
        return (f"warning: the history had up to {self.peak_gpus} GPUs in use at once, more than the replay "
                f"cluster's {capacity_gpus}: {starts} job start(s) went past it (the replay queues them longer; "
                f"replay it on {self.suggested_flags()})")


def _usage_events(held: Sequence[tuple[float, float, int]]) -> list[tuple[float, int]]:
    # at one instant an end frees GPUs before a start takes them, as Slurm hands them over
    events = [(t0, g) for t0, _, g in held] + [(t1, -g) for _, t1, g in held]
    events.sort(key=lambda e: (e[0], e[1]))
    return events


def _peak(held: Sequence[tuple[float, float, int]]) -> int:
    in_use = peak = 0
    for _, delta in _usage_events(held):
        in_use += delta
        peak = max(peak, in_use)
    return peak


def history_shape(jobs: Sequence[JobSpec], actuals: dict[str, dict[str, Any]]) -> HistoryShape:
    """The cluster ``jobs`` ran on, from their recorded start, end and nodes.

    A job holds its GPUs for its duration up to its actual end. A requeued job
    with a recorded ``last_start_s`` holds them in its last run, on its nodes, and
    for the rest of its duration from its first start (exact for one requeue; the
    earlier runs of several requeues count as one stretch); without it, as one
    stretch ending at its end, on no node (its node list is the last run's only).
    Its GPUs count evenly on each of its nodes. A node's partitions and GPU type
    are those of the jobs that ran on it."""
    held, on_node = [], {}
    node_parts: dict[str, set[str]] = {}
    node_types: dict[str, set[str]] = {}
    gpu_types: dict[str, int] = {}
    partitions: dict[str, int] = {}
    for job in jobs:
        gpu_types[job.gpu_type] = gpu_types.get(job.gpu_type, 0) + 1
        partitions[job.partition] = partitions.get(job.partition, 0) + 1
        rec = actuals.get(job.job_id) or {}
        start, end = rec.get("actual_start_s"), rec.get("actual_end_s")
        if start is None or end is None:
            continue
        last_start = rec.get("last_start_s") if rec.get("requeues") else start
        if last_start is None:  # requeued, its last run unknown: one stretch, on no node
            held.append((max(start, end - (job.duration_s or 0.0)), end, job.num_gpus))
            continue
        if job.duration_s is not None:
            last_start = max(last_start, end - job.duration_s)
            earlier_s = job.duration_s - (end - last_start)
            if last_start > start and earlier_s > 0:
                held.append((start, min(start + earlier_s, last_start), job.num_gpus))
        held.append((last_start, end, job.num_gpus))
        try:
            names = expand_hostlist(rec.get("node_list") or "")
        except SlurmParseError:
            names = []
        for name in names:
            on_node.setdefault(name, []).append((last_start, end, -(-job.num_gpus // len(names))))
            node_parts.setdefault(name, set()).add(job.partition)
            node_types.setdefault(name, set()).add(job.gpu_type)
    nodes = sorted(on_node, key=id_key)
    kinds: dict[tuple[tuple[str, ...], str], int] = {}
    for name in nodes:
        key = (tuple(sorted(node_parts[name])), one_gpu_type(node_types[name]))
        kinds[key] = kinds.get(key, 0) + 1
    return HistoryShape(jobs=len(jobs), nodes=nodes,
                        gpus_per_node=max((_peak(on_node[n]) for n in nodes), default=0),
                        node_kinds=[(count, parts, gpu_type) for (parts, gpu_type), count in kinds.items()],
                        gpu_types=gpu_types, partitions=partitions, peak_gpus=_peak(held), held=held)


# --------------------------------------------------------------------------- actual figures
def actual_jcts(jobs: Sequence[JobSpec], actuals: dict[str, dict[str, Any]],
                exclude: Iterable[str] = ()) -> tuple[list[JobSpec], np.ndarray, np.ndarray]:
    """(jobs, JCTs, queueing delays) in seconds of the jobs whose actual start and end are known.

    JCT = actual end - submit; queueing = first actual start - submit."""
    skip = set(exclude)
    kept, jct, queue = [], [], []
    for job in jobs:
        rec = actuals.get(job.job_id)
        if job.job_id in skip or not rec or rec.get("actual_start_s") is None or rec.get("actual_end_s") is None:
            continue
        kept.append(job)
        jct.append(rec["actual_end_s"] - job.submit_time_s)
        queue.append(max(rec["actual_start_s"] - job.submit_time_s, 0.0))
    return kept, np.array(jct, dtype=float), np.array(queue, dtype=float)


def actual_summary(jobs: Sequence[JobSpec], actuals: dict[str, dict[str, Any]], capacity_gpus: int,
                   exclude: Iterable[str] = ()) -> dict:
    """What Slurm really achieved, with the keys of ``results.summarize`` (seconds, 0..1).

    ``preemptions`` is the number of requeues; utilization uses ``capacity_gpus``
    (the simulated cluster) and the trace durations (run times)."""
    kept, jct, queue = actual_jcts(jobs, actuals, exclude)
    if kept:
        first = min(j.submit_time_s for j in kept)
        makespan = max(actuals[j.job_id]["actual_end_s"] for j in kept) - first
        busy = sum(j.num_gpus * (j.duration_s or 0.0) for j in kept)
        util = busy / (capacity_gpus * makespan) if makespan > 0 and capacity_gpus > 0 else 0.0
    else:
        makespan = util = 0.0
    pct = (lambda q: float(np.percentile(jct, q))) if jct.size else (lambda q: 0.0)
    return {
        "policy": ACTUAL_LABEL, "jobs": len(kept),
        "avg_jct_s": float(jct.mean()) if jct.size else 0.0, "median_jct_s": pct(50), "p95_jct_s": pct(95),
        "max_jct_s": float(jct.max()) if jct.size else 0.0,
        "avg_queueing_s": float(queue.mean()) if queue.size else 0.0, "makespan_s": float(makespan),
        "preemptions": int(sum(actuals[j.job_id].get("requeues") or 0 for j in kept)),
        "preemption_overhead_s": 0.0, "promotions": 0, "gpu_utilization": float(util),
        "dropped_oversize": 0, "rounds": 0,
    }

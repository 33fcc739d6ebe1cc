"""Which running jobs a plan may not preempt now: one rule for the controller and the simulator.

A running job keeps its GPUs (the walk passes over it, as over a job without a
checkpoint contract) when it is not preemptable (``JobSpec.preemptable`` False),
when its current run started less than ``min_runtime_s`` seconds ago, or when it
was already preempted ``max_per_job`` times. The engine applies it to every
running job before its walk (``EngineConfig.preempt_min_runtime_s`` /
``preempt_max_per_job``), so the simulator predicts what the controller does.
"""
from __future__ import annotations

import math
from typing import Optional

from controller.core.model import JobState


def protection(job: JobState, now_s: float, min_runtime_s: float = 0.0,
               max_per_job: Optional[int] = None) -> str:
    """Why the running ``job`` must not be preempted at ``now_s`` (seconds), or ''."""
    if not job.spec.preemptable:
        return "not preemptable"
    return why_protected(job.run_start_s, job.preemptions, now_s, min_runtime_s, max_per_job)


def why_protected(run_start_s: Optional[float], preemptions: int, now_s: float, min_runtime_s: float,
                  max_per_job: Optional[int]) -> str:
    """The time and count rules alone (the service checks its checkpoint contract itself).
    ``run_start_s`` None (start unknown) counts as not protected by the run time."""
    if min_runtime_s > 0 and run_start_s is not None:
        ran = now_s - run_start_s
        if ran < min_runtime_s:
            return f"ran {ran:.0f}s < preempt_min_runtime_s {min_runtime_s:g}"
    if max_per_job is not None and preemptions >= max_per_job:
        return f"already preempted {preemptions} times (preempt_max_per_job)"
    return ""


def run_time_over_s(run_start_s: float, min_runtime_s: float) -> float:
    """The earliest time (seconds) from which ``why_protected`` no longer protects a run
    that started at ``run_start_s`` by its run time: ``run_start_s + min_runtime_s``, to
    the float, so that a simulator waking there sees the protection over (the plain
    sum can round to a time where ``now - run_start_s`` is still just below it)."""
    over = run_start_s + min_runtime_s
    while over - run_start_s < min_runtime_s:
        over = math.nextafter(over, math.inf)
    while math.nextafter(over, -math.inf) - run_start_s >= min_runtime_s:
        over = math.nextafter(over, -math.inf)
    return over


def mark_protected(jobs, now_s: float, min_runtime_s: float, max_per_job: Optional[int]) -> None:
    """Set ``JobState.keeps_gpus`` on every running job the rules protect (the walk reads it)."""
    for job in jobs:
        if job.running:
            job.keeps_gpus = bool(protection(job, now_s, min_runtime_s, max_per_job))
        else:
            job.keeps_gpus = False


def pinned(job: JobState) -> bool:
    """A running job the walk may not preempt (no checkpoint contract, or protected by
    the rules above): it keeps its GPUs whatever the order. Every walk (the engine's,
    the queue book's) sets such jobs' GPUs aside first."""
    return job.running and (job.keeps_gpus or not job.spec.preemptable)


def may_preempt(job: JobState, preemptive: bool) -> bool:
    """The victim rule: a running job may lose its GPUs to the walk only under a
    preemptive policy and when it is not pinned."""
    return preemptive and job.running and not pinned(job)


def needed_victims(victims: list[JobState], placements, base_free: dict[str, int], free_gpus) -> list[JobState]:
    """The victims whose GPUs a placed newcomer really uses; the others keep running.

    The walk counts GPUs, not nodes: a gang it selects may then find no placement (its
    own --nodelist/-N, consolidation), and the victims chosen for it would be preempted
    for nothing, their GPUs left to backfill (lower-priority jobs). Per node, the
    newcomers' GPUs (``placements``: their slots) beyond what was free before any victim
    left (``base_free``) are the need; victims there (in walk order) are kept while the
    need is covered. A kept victim's GPUs are taken back out of ``free_gpus`` (a
    FreeGpus: they were counted free; the need shows they are not used), so backfill
    cannot use them either."""
    used: dict[str, int] = {}
    for slots in placements:
        for node, gpus in slots:
            used[node] = used.get(node, 0) + gpus
    # only the nodes with a need are kept (a need covered leaves): a victim is needed
    # when it holds one of them
    need: dict[str, int] = {}
    for node, gpus in used.items():
        left = gpus - base_free.get(node, 0)
        if left > 0:
            need[node] = left
    needed: list[JobState] = []
    for job in victims:
        # one pass: the victim is needed at its first node with a need, and its GPUs
        # cover the needs there and on its later nodes (its earlier nodes have none)
        placement = job.placement
        used_here = False
        for node, gpus in placement:
            left = need.get(node)
            if left is not None:
                used_here = True
                if left > gpus:
                    need[node] = left - gpus
                else:
                    del need[node]
        if used_here:
            needed.append(job)
        else:
            for node, gpus in placement:
                if node in free_gpus.free:
                    free_gpus.take(node, gpus)
    return needed

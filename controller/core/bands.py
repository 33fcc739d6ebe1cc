"""SiteFactor bands from the plan: how the plan's order becomes Slurm's priority order.

Pure: the service (controller.service.starts) sends only the values that changed,
the simulator can start jobs in the same order.
"""
from __future__ import annotations

from typing import Container, Mapping

from controller.core.actions import SetBand


def site_factors(order: list[str], levels: Mapping[str, int], pending: Container[str], started: Container[str],
                 queue_count: int, band: int, by_level: bool = True) -> dict[str, int]:
    """Job id -> SiteFactor for the ``pending`` jobs of ``order`` (highest priority first).

    MLFQ policies (``by_level``): band (K - level) x width, plus half a band for jobs
    that ran before (``started``: a level is FIFO by first start, never started jobs
    after); inside that Slurm's own age order decides. So a value changes only when a
    job changes level or starts for the first time: Slurm traffic grows with changes,
    not with the queue. Continuous policies: the band minus the rank in the plan
    order (every job its own value). ``queue_count`` is K; levels are 0-based."""
    rank_in_level: dict[int, int] = {}
    factors: dict[str, int] = {}
    for job_id in order:
        if job_id not in pending:
            continue
        level = levels.get(job_id, 0)
        if by_level:
            factors[job_id] = (queue_count - level) * band + (band // 2 if job_id in started else 0)
            continue
        rank = rank_in_level.get(level, 0)
        rank_in_level[level] = rank + 1
        factors[job_id] = (queue_count - level) * band + max(band - 1 - rank, 0)
    return factors


def band_actions(round_id: int, factors: Mapping[str, int], levels: Mapping[str, int]) -> list[SetBand]:
    """One SetBand per job of ``factors`` (the values to send), ids ``r<round>.b<n>``."""
    return [SetBand(f"r{round_id}.b{number}", job_id, value, reason=f"queue {levels.get(job_id, 0) + 1}: SiteFactor {value}")
            for number, (job_id, value) in enumerate(factors.items(), 1)]

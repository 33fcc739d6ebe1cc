"""SiteFactor bands from the plan: how the plan's order becomes Slurm's priority order.

Pure: the service (controller.service.round.starts) sends only the values that changed,
the simulator can start jobs in the same order.
"""
from __future__ import annotations

import bisect
import math
from typing import Callable, Container, Iterable, Mapping, Optional, Sequence

from controller.core.actions import SetBand
from controller.core.policies.base import LEVEL_TOLERANCE_GPU_S
from controller.core.ids import decision_id


def site_factors(order: list[str], levels: Mapping[str, int], pending: Container[str], started: Container[str],
                 queue_count: int, band: int, by_level: bool = True,
                 indices: Optional[Mapping[str, float]] = None, running_banded: bool = False) -> dict[str, int]:
    """Job id -> SiteFactor for the ``pending`` jobs of ``order`` (highest priority first).

    MLFQ policies (``by_level``): band (K - level) x width, plus half a band for jobs
    that ran before (``started``: a level is FIFO by first start, never started jobs
    after); inside that Slurm's own age order decides. So a value changes only when a
    job changes level or starts for the first time: Slurm traffic grows with changes,
    not with the queue. ``indices`` (dgittins: the plan's Gittins index per job): a
    job with an index > 0 gets its band plus ``index_offset`` instead
    of the half band, so Slurm starts a level's jobs by index; the value is the job's
    own (not its rank), so it changes only when its index does (a distribution
    refresh, or the job's service). Continuous policies: the band minus the rank in the plan
    order (every job its own value). ``queue_count`` is K; levels are 0-based.

    ``running_banded`` (``preemption: slurm``: running jobs sit at their band's top,
    running_site_factors): every offset inside a band stays within the lower half
    plus one (pending_width), so that a pending job plus Slurm's own factors never
    passes a running job of its own level (NO_CROSS_GAP); a dgittins index or a
    continuous rank then spreads over that half."""
    width = pending_width(band) if running_banded else band
    rank_in_level: dict[int, int] = {}
    factors: dict[str, int] = {}
    for job_id in order:
        if job_id not in pending:
            continue
        level = levels.get(job_id, 0)
        if by_level:
            index = indices.get(job_id, 0.0) if indices is not None else 0.0
            if index > 0:
                factors[job_id] = (queue_count - level) * band + index_offset(index, width)
            else:
                factors[job_id] = (queue_count - level) * band + (band // 2 if job_id in started else 0)
            continue
        rank = rank_in_level.get(level, 0)
        rank_in_level[level] = rank + 1
        factors[job_id] = (queue_count - level) * band + max(width - 1 - rank, 0)
    return factors


def pending_width(band: int) -> int:
    """The width of a band a pending job's offset may use when running jobs are banded
    (offsets 0 .. band // 2): above it, up to the running jobs' band - 1, is what
    preflight leaves Slurm's own weighted factors (their weights add up to less than
    band // 2). So every pending job of a level stays at least no_cross_gap below the
    level's running jobs."""
    return band // 2 + 1


def no_cross_gap(band: int) -> int:
    """The least SiteFactor gap between a running job and a pending job that must not
    preempt it (``preemption: slurm``; preempt/qos preempts only for a strictly
    higher priority): Slurm's own factors add at most band // 2 - 1 to the pending
    job (preflight), so a gap of that keeps it at most level with the running job."""
    return band // 2 - 1


def non_gpu_site_factor(band: int) -> int:
    """``preemption: slurm``: the SiteFactor of a pending CPU-only or MPS job that may
    preempt through slurmctld (its QOS is one whose jobs preempt preempt_qos's): the
    lowest queue's band, more than no_cross_gap below every running GPU job's band
    (the lowest is 2 x band - 1). Such a job is in no plan: at queue 1's band (what
    it gets otherwise, Starts.cpu_bands) it outranked a running queue-2 job by one, and
    slurmctld could requeue an 8-GPU job to start it."""
    return band


def kept_site_factor(queue_count: int, band: int) -> int:
    """The SiteFactor of a running job slurmctld must not preempt: the top of the band
    above queue 1's, above every pending job (running_site_factors' ``kept``)."""
    return (queue_count + 2) * band - 1


def running_site_factors(levels: Mapping[str, int], running: Iterable[str], queue_count: int,
                         band: int, kept: Iterable[str] = ()) -> dict[str, int]:
    """Job id -> SiteFactor of the ``running`` jobs when slurmctld preempts
    (``preemption: slurm``): the top of their level's band, (K - level + 1) x width - 1.

    slurmctld's preempt/qos lets a pending job preempt a running one only with a
    strictly higher priority (WITHIN, PRIORITY), so a running job's priority must follow
    its level as the pending jobs' do. The top of the band puts it above every pending
    job of its own level (those get at most half a band plus Slurm's weighted factors,
    which preflight keeps under half a band): jobs of one level never preempt each other,
    as Tiresias's FIFO within a queue says; a pending job of a higher level (a band up)
    outranks it. The value changes only when the job changes level.

    ``kept`` (running jobs slurmctld must not preempt: no checkpoint it honours) get the
    top of the band above queue 1's, (K + 2) x width - 1: above every pending job, so
    no pending job has the strictly higher priority it needs."""
    factors = {job_id: (queue_count - levels.get(job_id, 0)) * band + band - 1 for job_id in running}
    factors.update({job_id: kept_site_factor(queue_count, band) for job_id in kept})
    return factors


def shared_levels(service_gpu_s: Mapping[str, float], thresholds_gpu_s: Sequence[float],
                  by_level: bool = True) -> dict[str, int]:
    """Job id -> 0-based MLFQ level of the pending jobs that use a share of a GPU (MPS)
    and so are never in the plan, by their attained service ``service_gpu_s`` in
    GPU-seconds of GPU-equivalents (an mps:50 job that ran 100 s attained 50), as the
    MLFQ places a GPU job by its service (controller.core.policies.base); 0 for every
    job when the policy has no levels (``by_level`` False)."""
    if not by_level:
        return {job_id: 0 for job_id in service_gpu_s}
    return {job_id: bisect.bisect_right(thresholds_gpu_s, service + LEVEL_TOLERANCE_GPU_S)
            for job_id, service in service_gpu_s.items()}


def shared_site_factors(levels: Mapping[str, int], started: Container[str], queue_count: int, band: int,
                        by_level: bool = True) -> dict[str, int]:
    """Job id -> SiteFactor of the pending jobs of ``levels`` (shared_levels): their
    level's band, plus half a band for those that ran before (``started``) when the
    policy has levels, as site_factors gives a planned job of that level. Left at 0
    they would wait below every GPU job and every CPU job; no GPU job yields for them
    (they are not in the plan)."""
    return {job_id: (queue_count - level) * band + (band // 2 if by_level and job_id in started else 0)
            for job_id, level in levels.items()}


INDEX_DECADES = 9.0  # indices from 1e-9 (a job of ~30 GPU-years) to 1 per GPU-s fill the band


def index_offset(index: float, band: int) -> int:
    """1..band-1, increasing with the index, on a log scale (a larger index: sooner)."""
    share = min(max((math.log10(index) + INDEX_DECADES) / INDEX_DECADES, 0.0), 1.0) if index > 0 else 0.0
    return 1 + int(share * (band - 2))


def array_bands(factors: Mapping[str, int], arrays: Mapping[str, str],
                levels: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(job id -> SiteFactor, ArrayJobId -> level): ``factors`` with the pending tasks
    still inside an array's pending record (``arrays``: task id -> ArrayJobId) folded
    into one value per array, set on the ArrayJobId, since a value sent to a task's own
    id would split it off its array. The array's value is the highest of its tasks'
    (the task the plan ranks first is the one Slurm starts next; such tasks never ran,
    so they share a level anyway), its level that task's (``levels``)."""
    folded: dict[str, int] = {}
    array_levels: dict[str, int] = {}
    for job_id, value in factors.items():
        array_id = arrays.get(job_id)
        if not array_id:
            folded[job_id] = value
        elif array_id not in array_levels or value > folded[array_id]:
            folded[array_id] = value
            array_levels[array_id] = levels.get(job_id, 0)
    return folded, array_levels


def band_actions(round_id: int, factors: Mapping[str, int], levels: Mapping[str, int],
                 arrays: Container[str] = ()) -> list[SetBand]:
    """One SetBand per job of ``factors`` (the values to send), ids ``r<round>.b<n>``;
    ``arrays``: the ArrayJobIds among them (array_bands)."""
    return [SetBand(decision_id(round_id, "band", number), job_id, value,
                    reason=f"queue {levels.get(job_id, 0) + 1}: SiteFactor {value}"
                    + (f" for the pending tasks in array {job_id}'s record" if job_id in arrays else ""))
            for number, (job_id, value) in enumerate(factors.items(), 1)]


def changed_bands(factors: Mapping[str, int], sent: Mapping[str, int],
                  current: Callable[[str], Optional[int]]) -> dict[str, int]:
    """The SiteFactors to send: those that differ from what was sent last and from the
    job's ``current`` value (what the cluster manager reports)."""
    return {j: v for j, v in factors.items() if sent.get(j) != v and current(j) != v}


class RpcBudget:
    """Slurm's RPC rate limit (``SlurmctldParameters=rl_enable``: a bucket per user of
    30 tokens refilled 2 a second by default, one token per RPC, and the controller's
    Operator user is not exempt) as the controller keeps it for its bulk levers, the
    SiteFactor bands and the AdminComment lines: ``per_s`` tokens a second, at most
    ``burst`` at once. ``scontrol update JobId=a,b,c ...`` is one command but one RPC
    per id, so every id costs a token. Time is the round's ``now`` (no clock), so the
    simulator, replaying the controller's rounds, holds back what the controller does.
    ``per_s`` 0: no budget (every update goes at once)."""

    def __init__(self, per_s: float, burst: int):
        if per_s < 0 or burst < 0:
            raise ValueError(f"RPC budget: per_s {per_s!r} and burst {burst!r} must be >= 0")
        self.per_s = per_s
        self.burst = burst
        self.tokens = float(burst)
        self.at_s: Optional[float] = None

    def allowance(self, now: float) -> float:
        """The RPCs that may go now (inf without a budget); the bucket refilled up to ``now``."""
        if not self.per_s:
            return math.inf
        if self.at_s is not None and now > self.at_s:
            self.tokens = min(float(self.burst), self.tokens + (now - self.at_s) * self.per_s)
        if self.at_s is None or now > self.at_s:
            self.at_s = now
        return math.floor(max(self.tokens, 0.0))

    def spend(self, rpcs: int) -> None:
        self.tokens -= rpcs


def band_urgency(job_id: str, value: int, current: Optional[int], starts: Container[str],
                 running: Container[str]) -> int:
    """0: a job the plan starts (Slurm must see it first); 1: a band that must not
    wait: a running job's (``preemption: slurm``: below its band a pending job may
    preempt it) or one that falls (a stale higher value lets Slurm start, or preempt
    for, the job ahead of its turn); 2: a band that rises (late, the job only waits
    below its place a little longer, as before the controller raised it)."""
    if job_id in starts:
        return 0
    if job_id in running or (current is not None and value < current):
        return 1
    return 2


def bands_in_budget(changed: Mapping[str, int], current: Callable[[str], Optional[int]], starts: Container[str],
                    running: Container[str], allowance: float) -> tuple[dict[str, int], int]:
    """(the bands to send this round, how many wait for a later one): at most
    ``allowance`` ids (one RPC each), the most urgent first (band_urgency), in
    ``changed``'s order within one urgency (the plan's order). What waits is sent again
    next round, as changed_bands still finds it changed; both executors call this."""
    if len(changed) <= allowance:
        return dict(changed), 0
    ranked = sorted(changed, key=lambda j: band_urgency(j, changed[j], current(j), starts, running))
    chosen = ranked[:max(int(allowance), 0)]
    return {job_id: changed[job_id] for job_id in chosen}, len(changed) - len(chosen)

"""SiteFactor bands from the plan: how the plan's order becomes Slurm's priority order.

Pure: the service (controller.service.round.levers) sends only the values that changed,
the simulator can start jobs in the same order.
"""
from __future__ import annotations

import bisect
import math
from collections import ChainMap
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
    it gets otherwise, cpu_bands) it outranked a running queue-2 job by one, and
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


# -- the bands family of the lever planner (controller.core.levers.planner) ------------------
# Moved from controller.service.round.levers.Levers: the service and the simulator plan the
# round's bands here, from the view (controller.core.levers.view) and the book's bands sent.

def in_preempt_qos(job, cfg) -> bool:
    """Whether slurmctld may preempt this job by priority: it runs in preempt_qos (or
    its QOS is not reported)."""
    return job.qos in ("", cfg.preempt_qos)


def gpu_site_factors(plan, view, cfg) -> dict[str, int]:
    """The pending jobs' SiteFactors (site_factors); when slurmctld preempts
    (``preemption: slurm``) the running jobs' in the plan too (running_site_factors), so
    that Slurm's priority rule picks victims in the plan's order, and
    ``view.kept_from_slurm`` a band above every pending job, so that it never picks them."""
    observed = view.gpu
    pending = {j for j, job in observed.items() if job.state == "PENDING"}
    factors = site_factors(plan.order, plan.levels, pending, view.started_once, cfg.queue_count,
                           cfg.site_factor_band, cfg.by_level, plan.keys if cfg.by_index else None,
                           running_banded=cfg.slurm_preempts)
    if cfg.slurm_preempts:
        running = [j for j, job in observed.items() if job.state == "RUNNING" and j in plan.levels
                   and job.lever_id]
        factors.update(running_site_factors(plan.levels, running, cfg.queue_count, cfg.site_factor_band,
                                            [j for j in running if j in view.kept_from_slurm]))
        # every other running job of the QOS (not planned): slurmctld must not pick it
        # by a band that follows no plan
        kept = kept_site_factor(cfg.queue_count, cfg.site_factor_band)
        factors.update({j: kept for j, job in observed.items() if job.state == "RUNNING" and j not in factors
                        and in_preempt_qos(job, cfg)})
    return factors


def slurm_non_gpu_bands(view, cfg) -> dict[str, int]:
    """``preemption: slurm``: the CPU-only and MPS jobs, which no plan holds. A pending
    one whose QOS lets it preempt preempt_qos's jobs (``view.may_preempt``; all when not
    given) gets the lowest queue's band, below every running GPU job's
    (non_gpu_site_factor): slurmctld would otherwise requeue a GPU job the plan keeps for
    it. A running one in preempt_qos (it asked for the QOS itself) gets the band above
    every pending job: preempting it was no plan's choice. The others keep cpu_bands'
    and shared_bands' values."""
    band = cfg.site_factor_band
    low = non_gpu_site_factor(band)
    kept = kept_site_factor(cfg.queue_count, band)
    may_preempt = view.may_preempt
    factors: dict[str, int] = {}
    for jobs in (view.cpu_pending, view.shared, view.cpu_running):
        for job_id, job in jobs.items():
            if job.state == "PENDING" and (may_preempt is None or may_preempt(job)):
                factors[job_id] = low
            elif job.state == "RUNNING" and in_preempt_qos(job, cfg):
                factors[job_id] = kept
    return factors


def cpu_bands(cpu_pending: Iterable[str], cfg) -> dict[str, int]:
    """SiteFactor of the pending jobs that ask for no GPU: queue 1's band.

    Left at 0 they would sit below every GPU job (whose bands start at one band,
    100,000 by default) and starve in a partition they share with GPU jobs. A job
    with no GPU service is where least-attained-service puts any new job: queue 1;
    inside that band Slurm's own factors (age, fairshare, QOS) order it against
    the GPU jobs there, as without the controller, and it never waits behind a
    lower queue. It takes no GPU, so no GPU job yields for it (it is not in the plan)."""
    top = cfg.queue_count * cfg.site_factor_band
    return {job_id: top for job_id in cpu_pending}


def shared_bands(view, cfg) -> tuple[dict[str, int], dict[str, int]]:
    """(job id -> SiteFactor, job id -> level) of the pending MPS jobs (shares, no whole
    GPU): the band of the queue their attained service puts them in, counted in
    GPU-equivalents (shares / 100 x seconds run: the accounts keep an MPS job's service
    so), half a band more had they run before, as a GPU job of that queue
    (shared_site_factors). Left at 0 they waited below every CPU job. A job without a
    record yet has no service."""
    service = {}
    for job_id, job in view.shared.items():
        if job.state == "PENDING":
            value = view.shared_service(job_id)
            service[job_id] = value if value is not None else 0.0
    if not service:
        return {}, {}
    levels = shared_levels(service, cfg.thresholds_gpu_s, cfg.by_level)
    return shared_site_factors(levels, view.started_once, cfg.queue_count, cfg.site_factor_band,
                               cfg.by_level), levels


def plan_bands(plan, view, sent: Mapping[str, int], allowance: float, cfg
               ) -> tuple[list[SetBand], dict[str, int], int, list[str]]:
    """The round's SiteFactor changes: (the SetBand actions, job id -> value sent, how
    many changed bands the RPC budget holds back, the ids no longer banded whose entry
    in ``sent`` is forgotten). Queue level -> band, plan order within the band; the
    pending CPU-only jobs (never in the plan) queue 1's band (cpu_bands), the pending
    MPS jobs their own queue's (shared_bands); ``allowance``: the RPCs the budget lets go."""
    observed, cpu_pending, shared, cpu_running = view.gpu, view.cpu_pending, view.shared, view.cpu_running
    factors = gpu_site_factors(plan, view, cfg)
    factors.update(cpu_bands(cpu_pending, cfg))
    shared_factors, levels = shared_bands(view, cfg)
    factors.update(shared_factors)
    if cfg.slurm_preempts:
        factors.update(slurm_non_gpu_bands(view, cfg))
    levels = ChainMap(levels, plan.levels) if levels else plan.levels
    # the pending tasks still inside an array's record: one value, on the ArrayJobId
    # (a lever on a task's own id would split it off: controller.service.round.arrays)
    arrays: dict[str, str] = {}  # task id -> ArrayJobId
    array_now: dict[str, Optional[int]] = {}  # ArrayJobId -> its record's SiteFactor as observed
    for jobs in (observed, cpu_pending, shared):
        for job_id, job in jobs.items():
            if job.band_id != job_id:
                arrays[job_id] = job.band_id
                array_now[job.band_id] = job.site_factor
    if arrays:
        factors, array_levels = array_bands(factors, arrays, levels)
        levels = ChainMap(array_levels, levels)
    # a CPU job started or gone (GPU jobs: forgotten with their records)
    gone = [job_id for job_id in sent.keys() - observed.keys() - cpu_pending.keys() - shared.keys()
            - cpu_running.keys() - array_now.keys()]

    def current(j: str) -> Optional[int]:
        return array_now[j] if j in array_now else \
            (observed.get(j) or cpu_pending.get(j) or shared.get(j) or cpu_running[j]).site_factor
    changed = changed_bands(factors, sent, current)
    for job_id in view.unjudged:  # first seen unjudged: Slurm's judgement first (RoundInput.first_seen_unjudged)
        changed.pop(job_id, None)
    # Slurm sets an ArrayJobId's value on every record of the array: its pending
    # tasks with records of their own (requeued) get theirs again, after it
    moved = {j for j in changed if j in array_now}
    for job_id, value in factors.items() if moved else ():
        head, _, task = job_id.partition("_")
        if task and head in moved:
            changed.setdefault(job_id, value)
    # within Slurm's RPC budget, most urgent first (as the simulator)
    waiting = 0
    if len(changed) > allowance:  # (the sets only when the budget holds some back)
        running = {j for jobs in (observed, cpu_running) for j, job in jobs.items() if job.state == "RUNNING"}
        changed, waiting = bands_in_budget(changed, current, {a.job_id for a in plan.of_kind("start")}, running,
                                           allowance)
    return band_actions(plan.round_id, changed, levels, array_now.keys()), changed, waiting, gone

"""Getting the plan's jobs started in Slurm: SiteFactor bands for the pending queue,
node pins (ReqNodeList) for consolidation, and the release of a requeued job's BeginTime.

Slurm's own scheduler still starts the jobs: the bands make its priority order the
plan's order, a pin makes it place a skew-sensitive job where the plan placed it. The
pending tasks still inside a job array's record share one band, set on the
ArrayJobId, and are never pinned (slurm_plugin.arrays).
"""
from __future__ import annotations

import math
from collections import ChainMap
from typing import Callable, Container, Optional

from controller.core.levers.bands import (array_bands, band_actions, kept_site_factor, non_gpu_site_factor,
                                   running_site_factors, shared_levels, shared_site_factors, site_factors)
from controller.core.levers.bands import RpcBudget, bands_in_budget, changed_bands
from controller.core.levers.preemption import strategy_for
from controller.core.levers.starts import pin_for_start, release_for_start, unpin_expired
from controller.core.plan import Plan
from controller.service.round.accounting import Accounts
from controller.service.acting.backend import ObservedJob
from controller.service.ops.config import Config
from controller.service.acting.executor import LeverExecutor
from controller.service.ops.report import RoundReport, entry


class Starts:
    """``pins``: job id -> expiry (epoch s) of the ReqNodeList this controller set, kept
    in the store (written before the pin is set) so that a restarted or standby
    controller still clears it; ``pin_causes``: job id -> the start decision that
    pinned it (its expiry cites it); ``site_factors_set``: job id -> the SiteFactor
    last set (sent again only on change)."""

    @property
    def strategy(self):
        """Who carries out the plan's victims (controller.core.levers.preemption.strategy_for)."""
        return strategy_for(self.config.preemption)

    def __init__(self, config: Config, executor: LeverExecutor, accounts: Accounts, by_level: bool = True,
                 by_index: bool = False):
        self.config = config
        self.executor = executor
        self.accounts = accounts
        self.hold: set[str] = set()  # job ids no band is written to this round (the controller's)
        self.by_level = by_level
        self.by_index = by_index  # dgittins: inside a level by the plan's index (core.bands)
        self.store = accounts.store
        self.pins: dict[str, float] = self.store.load_pins(config.cluster)
        self.pin_causes: dict[str, str] = self.store.pin_decisions(config.cluster)
        self.site_factors_set: dict[str, int] = {}
        # Slurm's RPC rate limit as kept for the bulk levers (bands here, then the
        # AdminComment lines: controller.service.round.admin_comment); one bucket for both
        self.rpc = RpcBudget(config.slurm_rpc_per_s, config.slurm_rpc_burst)
        self.bands_waiting = 0  # changed bands the budget held back this round (sent in a later one)

    def apply(self, plan: Plan, observed: dict[str, ObservedJob], now: float, report: RoundReport,
              cpu_pending: dict[str, ObservedJob] | None = None, requeueing: Container[str] = (),
              shared: dict[str, ObservedJob] | None = None, kept_from_slurm: Container[str] = (),
              cpu_running: dict[str, ObservedJob] | None = None,
              may_preempt: Optional[Callable[[ObservedJob], bool]] = None) -> None:
        """``requeueing``: jobs that ended inside their grace period and are requeued
        this round; they keep their pin (Slurm keeps the ReqNodeList on requeue).
        ``shared``: the jobs that ask for MPS shares and no whole GPU (never in the
        plan; the pending ones get a band, see shared_bands). ``kept_from_slurm``: under
        ``preemption: slurm``, the running jobs slurmctld must not preempt
        (Contract.why_not_slurms; see site_factors). ``cpu_running`` (only under
        ``preemption: slurm``): the running CPU-only jobs; ``may_preempt``: whether a
        job's QOS lets it preempt preempt_qos's jobs (see slurm_non_gpu_bands)."""
        cfg = self.config
        # 1. SiteFactor bands: queue level -> band, plan order within the band; the
        # pending CPU-only jobs (never in the plan) queue 1's band (see cpu_bands), the
        # pending MPS jobs their own queue's (see shared_bands).
        cpu_pending = cpu_pending or {}
        shared = shared or {}
        factors = self.site_factors(plan, observed, kept_from_slurm)
        factors.update(self.cpu_bands(cpu_pending))
        shared_factors, levels = self.shared_bands(shared)
        factors.update(shared_factors)
        cpu_running = cpu_running or {}
        if self.strategy.running_banded:
            factors.update(self.slurm_non_gpu_bands(cpu_pending, cpu_running, shared, may_preempt))
        levels = ChainMap(levels, plan.levels) if levels else plan.levels
        # the pending tasks still inside an array's record: one value, on the ArrayJobId
        # (a lever on a task's own id would split it off: slurm_plugin.arrays)
        arrays: dict[str, str] = {}  # task id -> ArrayJobId
        array_now: dict[str, int | None] = {}  # ArrayJobId -> its record's SiteFactor as observed
        for jobs in (observed, cpu_pending, shared):
            for job_id, job in jobs.items():
                if job.array_record:
                    arrays[job_id] = job.array_record
                    array_now[job.array_record] = job.site_factor
        if arrays:
            factors, array_levels = array_bands(factors, arrays, levels)
            levels = ChainMap(array_levels, levels)
        for job_id in (self.site_factors_set.keys() - observed.keys() - cpu_pending.keys() - shared.keys()
                       - cpu_running.keys() - array_now.keys()):
            del self.site_factors_set[job_id]  # a CPU job started or gone (GPU jobs: forget)
        def current(j: str) -> int | None:
            return array_now[j] if j in array_now else \
                (observed.get(j) or cpu_pending.get(j) or shared.get(j) or cpu_running[j]).site_factor
        changed = changed_bands(factors, self.site_factors_set, current)
        for job_id in self.hold:  # first seen unjudged: Slurm's judgement first (Controller.first_seen_unjudged)
            changed.pop(job_id, None)
        # Slurm sets an ArrayJobId's value on every record of the array: its pending
        # tasks with records of their own (requeued) get theirs again, after it
        moved = {j for j in changed if j in array_now}
        for job_id, value in factors.items() if moved else ():
            head, _, task = job_id.partition("_")
            if task and head in moved:
                changed.setdefault(job_id, value)
        # within Slurm's RPC budget, most urgent first (controller.core.levers, as the simulator)
        # (observe and shadow send nothing: no RPC to budget, every band they would set is told)
        allowance = self.executor.when_acting(lambda: self.rpc.allowance(now))
        allowance = math.inf if allowance is None else allowance
        if len(changed) > allowance:  # (the sets only when the budget holds some back)
            running = {j for jobs in (observed, cpu_running) for j, job in jobs.items() if job.state == "RUNNING"}
            changed, self.bands_waiting = bands_in_budget(changed, current, {a.job_id for a in plan.of_kind("start")},
                                                          running, allowance)
        else:
            self.bands_waiting = 0
        self.rpc.spend(len(changed))
        result = self.executor.apply_bands(band_actions(plan.round_id, changed, levels, array_now.keys()))
        if result.applied:
            self.site_factors_set.update(changed)
        # 2. starts: pins for consolidation, release a requeued job's BeginTime
        # (controller.core.levers decides both, as for the simulator)
        for action in plan.of_kind("start"):
            job = observed[action.job_id]
            details, levers = [], []
            skew = self.accounts.records[job.job_id].skew
            # a het job's components each have their own node list; a task inside its
            # array's record would be split off by a pin
            pin, why_not = pin_for_start(action, skew=skew, pack_limit=cfg.pack_limit,
                                         consolidate=cfg.placement == "consolidate" and not job.het_job_id
                                         and not job.array_record,
                                         required_nodes=job.required_nodes, excluded_nodes=job.excluded_nodes,
                                         pinned_here=job.job_id in self.pins, expires_s=now + cfg.pin_expiry_s)
            if why_not:
                details.append(why_not)
            elif job.array_record and cfg.placement == "consolidate" and skew > cfg.pack_limit:
                details.append(f"not pinned: a pending task of array {job.array_record} (a pin would split it "
                               "off the array's record)")
            if pin is not None:
                # Written ahead: a crash between the row and the pin leaves a row to clear.
                self.executor.when_acting(lambda: self.store.set_pin(cfg.cluster, pin.job_id, pin.expires_s,
                                                                     pin.cause_id))
                outcome = self.executor.apply(pin)
                details.append(outcome.detail)
                levers.append(outcome.applied)
                if outcome.applied or outcome.failed:
                    # A failed pin keeps its row and counts as set: Slurm may have applied
                    # it all the same (an update that answered an error while slurmctld
                    # restarted), and a row cleared then left a pin no one clears (the
                    # chaos test's "stale pin"); clearing a pin that is not there is harmless.
                    self.pins[job.job_id] = pin.expires_s
                    self.pin_causes[job.job_id] = pin.cause_id
            # never a BeginTime the user or an admin set; a task in its array's record never
            # ran (and a release naming it would split it off)
            if job.waits_for == "begin_time_after_requeue" and not job.array_record:
                # Unknown when it stopped (this process started after the requeue):
                # count the settle time from now rather than risk the relaunch.
                stopped = self.accounts.stopped_at.setdefault(job.job_id, now)
                release, kept = release_for_start(action, stopped, now, cfg.requeue_settle_s)
                if release is not None:
                    outcome = self.executor.apply(release)
                    details.append(outcome.detail)
                    levers.append(outcome.applied)
                else:
                    details.append(kept)
            # A start is a decision: Slurm's scheduler starts the job (its SiteFactor band
            # puts it first); "applied" only when a lever for it was carried out here.
            details.insert(0, "decision: left to Slurm's scheduler (SiteFactor band)")
            report.applied.append(entry(action, applied=any(levers), detail="; ".join(details)))
        # 3. expired pins: cleared once the job waits past the expiry (a requeued job
        # must not keep the nodes it was pinned to); forgotten when the job is gone.
        # The clearing is a decision of its own, citing the start that pinned the job.
        expired = 0
        for job_id, expiry in list(self.pins.items()):
            job = observed.get(job_id)
            if job is None or (job.state not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING")
                               and job_id not in requeueing):
                self._drop_pin(job_id)
            elif job.state == "PENDING" and now >= expiry:
                expired += 1
                unpin = unpin_expired(plan.round_id, expired, job_id, expiry, now, self.pin_causes.get(job_id, ""))
                outcome = self.executor.apply(unpin)
                report.applied.append(entry(unpin, applied=outcome.applied, detail=outcome.detail))
                if not outcome.failed:  # a failed clearing keeps the pin known: tried again next round
                    self._drop_pin(job_id)

    def _drop_pin(self, job_id: str) -> None:
        self.pins.pop(job_id, None)
        self.pin_causes.pop(job_id, None)
        self.executor.when_acting(lambda: self.store.clear_pin(self.config.cluster, job_id))

    def site_factors(self, plan: Plan, observed: dict[str, ObservedJob],
                     kept_from_slurm: Container[str] = ()) -> dict[str, int]:
        """The pending jobs' SiteFactors (controller.core.levers.bands.site_factors); when
        slurmctld preempts (``preemption: slurm``) the running jobs' in the plan too
        (controller.core.levers.bands.running_site_factors), so that Slurm's priority rule
        picks victims in the plan's order, and ``kept_from_slurm`` a band above every
        pending job, so that it never picks them."""
        pending = {j for j, job in observed.items() if job.state == "PENDING"}
        queue_count = len(self.config.queues_gpu_s) + 1
        factors = site_factors(plan.order, plan.levels, pending, self.accounts.started_once, queue_count,
                               self.config.site_factor_band, self.by_level, plan.keys if self.by_index else None,
                               running_banded=self.strategy.running_banded)
        if self.strategy.running_banded:
            running = [j for j, job in observed.items() if job.state == "RUNNING" and j in plan.levels
                       and not job.array_record]
            factors.update(running_site_factors(plan.levels, running, queue_count, self.config.site_factor_band,
                                                [j for j in running if j in kept_from_slurm]))
            # every other running job of the QOS (not planned): slurmctld must not pick it
            # by a band that follows no plan
            kept = kept_site_factor(queue_count, self.config.site_factor_band)
            factors.update({j: kept for j, job in observed.items() if job.state == "RUNNING" and j not in factors
                            and self.in_preempt_qos(job)})
        return factors

    def in_preempt_qos(self, job: ObservedJob) -> bool:
        """Whether slurmctld may preempt this job by priority: it runs in preempt_qos (or
        its QOS is not reported)."""
        return job.qos in ("", self.config.preempt_qos)

    def slurm_non_gpu_bands(self, cpu_pending: dict[str, ObservedJob], cpu_running: dict[str, ObservedJob],
                            shared: dict[str, ObservedJob],
                            may_preempt: Optional[Callable[[ObservedJob], bool]]) -> dict[str, int]:
        """``preemption: slurm``: the CPU-only and MPS jobs, which no plan holds. A
        pending one whose QOS lets it preempt preempt_qos's jobs (``may_preempt``; all
        when not given) gets the lowest queue's band, below every running GPU job's
        (controller.core.levers.bands.non_gpu_site_factor): slurmctld would otherwise requeue
        a GPU job the plan keeps for it. A running one in preempt_qos (it asked for
        the QOS itself) gets the band above every pending job: preempting it was no
        plan's choice. The others keep Starts.cpu_bands' and shared_bands' values."""
        band = self.config.site_factor_band
        low = non_gpu_site_factor(band)
        kept = kept_site_factor(len(self.config.queues_gpu_s) + 1, band)
        factors: dict[str, int] = {}
        for jobs in (cpu_pending, shared, cpu_running):
            for job_id, job in jobs.items():
                if job.state == "PENDING" and (may_preempt is None or may_preempt(job)):
                    factors[job_id] = low
                elif job.state == "RUNNING" and self.in_preempt_qos(job):
                    factors[job_id] = kept
        return factors

    def cpu_bands(self, cpu_pending: dict[str, ObservedJob]) -> dict[str, int]:
        """SiteFactor of the pending jobs that ask for no GPU: queue 1's band.

        Left at 0 they would sit below every GPU job (whose bands start at one band,
        100,000 by default) and starve in a partition they share with GPU jobs. A job
        with no GPU service is where least-attained-service puts any new job: queue 1;
        inside that band Slurm's own factors (age, fairshare, QOS) order it against
        the GPU jobs there, as without the controller, and it never waits behind a
        lower queue. It takes no GPU, so no GPU job yields for it (it is not in the plan)."""
        top = (len(self.config.queues_gpu_s) + 1) * self.config.site_factor_band
        return {job_id: top for job_id in cpu_pending}

    def shared_bands(self, shared: dict[str, ObservedJob]) -> tuple[dict[str, int], dict[str, int]]:
        """(job id -> SiteFactor, job id -> level) of the pending jobs of ``shared``
        (MPS shares, no whole GPU): the band of the queue their attained service puts
        them in, counted in GPU-equivalents (shares / 100 x seconds run: the accounts
        keep an MPS job's service so), half a band more had they run before, as a GPU
        job of that queue (controller.core.levers.bands.shared_site_factors). Left at 0 they
        waited below every CPU job. A job without a record yet has no service."""
        records = self.accounts.records
        service = {}
        for job_id, job in shared.items():
            if job.state == "PENDING":
                record = records.get(job_id)
                service[job_id] = record.queue_service_gpu_s if record is not None else 0.0
        if not service:
            return {}, {}
        levels = shared_levels(service, self.config.queues_gpu_s, self.by_level)
        return shared_site_factors(levels, self.accounts.started_once, len(self.config.queues_gpu_s) + 1,
                                   self.config.site_factor_band, self.by_level), levels

    def forget(self, job_id: str) -> None:
        self.site_factors_set.pop(job_id, None)

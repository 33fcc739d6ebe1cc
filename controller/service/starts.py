"""Getting the plan's jobs started in Slurm: SiteFactor bands for the pending queue,
node pins (ReqNodeList) for consolidation, and the release of a requeued job's BeginTime.

Slurm's own scheduler still starts the jobs: the bands make its priority order the
plan's order, a pin makes it place a skew-sensitive job where the plan placed it.
"""
from __future__ import annotations

from controller.core.actions import PinNodes, ReleaseBeginTime, UnpinNodes
from controller.core.bands import band_actions, site_factors
from controller.core.placement import COUNT_NODE
from controller.core.plan import Plan
from controller.service.accounting import Accounts
from controller.service.backend import ObservedJob
from controller.service.config import Config
from controller.service.executor import LeverExecutor
from controller.service.report import RoundReport, entry


class Starts:
    """``pins``: job id -> expiry (epoch s) of the ReqNodeList this controller set, kept
    in the store (written before the pin is set) so that a restarted or standby
    controller still clears it; ``pin_causes``: job id -> the start decision that
    pinned it (its expiry cites it); ``site_factors_set``: job id -> the SiteFactor
    last set (sent again only on change)."""

    def __init__(self, config: Config, executor: LeverExecutor, accounts: Accounts, by_level: bool = True):
        self.config = config
        self.executor = executor
        self.accounts = accounts
        self.by_level = by_level
        self.store = accounts.store
        self.pins: dict[str, float] = self.store.load_pins(config.cluster)
        self.pin_causes: dict[str, str] = self.store.pin_decisions(config.cluster)
        self.site_factors_set: dict[str, int] = {}

    def apply(self, plan: Plan, observed: dict[str, ObservedJob], now: float, report: RoundReport) -> None:
        cfg = self.config
        # 1. SiteFactor bands: queue level -> band, plan order within the band.
        factors = self.site_factors(plan, observed)
        changed = {j: v for j, v in factors.items() if self.site_factors_set.get(j) != v
                   and observed[j].site_factor != v}
        result = self.executor.apply_bands(band_actions(plan.round_id, changed, plan.levels))
        if result.applied:
            self.site_factors_set.update(changed)
        # 2. starts: pins for consolidation, release a requeued job's BeginTime
        for action in plan.of_kind("start"):
            job = observed[action.job_id]
            details, levers = [], []
            nodes = sorted(node for node, _ in action.placement if node != COUNT_NODE)
            sensitive = cfg.placement == "consolidate" and self.accounts.records[job.job_id].skew > cfg.pack_limit
            # The job's own --nodelist/--exclude win: a pin would overwrite (and its
            # expiry later clear) the user's node list, or name a node they excluded.
            own_nodes = bool(job.required_nodes) and job.job_id not in self.pins
            excluded = sorted(set(nodes) & set(job.excluded_nodes))
            if sensitive and nodes and (own_nodes or excluded):
                details.append("not pinned: the job's own " + ("--nodelist" if own_nodes else
                               f"--exclude of {','.join(excluded)}") + " is kept")
            elif sensitive and nodes and sorted(job.required_nodes) != nodes:
                pin = PinNodes(f"{action.decision_id}.pin", job.job_id, tuple(nodes), now + cfg.pin_expiry_s,
                               reason=f"skew {self.accounts.records[job.job_id].skew:.2f} > PACKLIMIT {cfg.pack_limit:g}: "
                               "placed where the plan placed it", cause_id=action.decision_id)
                # Written ahead: a crash between the row and the pin leaves a row to clear.
                self.executor.when_acting(lambda: self.store.set_pin(cfg.cluster, pin.job_id, pin.expires_s,
                                                                     pin.cause_id))
                outcome = self.executor.apply(pin)
                details.append(outcome.detail)
                levers.append(outcome.applied)
                if outcome.applied:
                    self.pins[job.job_id] = pin.expires_s
                    self.pin_causes[job.job_id] = pin.cause_id
                elif outcome.failed and job.job_id not in self.pins:
                    self.store.clear_pin(cfg.cluster, job.job_id)
            if job.reason == "BeginTime" and job.restart_count > 0:
                # Not at once: slurmd refuses to relaunch a job whose previous run it is
                # still tearing down (epilog) and the job then FAILS ("already killed").
                # Unknown when it stopped (this process started after the requeue):
                # count the settle time from now rather than risk the relaunch.
                stopped = self.accounts.stopped_at.setdefault(job.job_id, now)
                if now - stopped >= cfg.requeue_settle_s:
                    outcome = self.executor.apply(ReleaseBeginTime(
                        f"{action.decision_id}.release", job.job_id,
                        reason=f"requeued {now - stopped:.0f}s ago: settled", cause_id=action.decision_id))
                    details.append(outcome.detail)
                    levers.append(outcome.applied)
                else:
                    details.append(f"BeginTime kept {cfg.requeue_settle_s - (now - stopped):.0f}s more: "
                                   "the previous run is still being torn down")
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
            if job is None or job.state not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING"):
                self._drop_pin(job_id)
            elif job.state == "PENDING" and now >= expiry:
                expired += 1
                unpin = UnpinNodes(f"r{plan.round_id}.u{expired}", job_id,
                                   reason=f"pin expired {now - expiry:.0f}s ago and the job waits",
                                   cause_id=self.pin_causes.get(job_id, ""))
                outcome = self.executor.apply(unpin)
                report.applied.append(entry(unpin, applied=outcome.applied, detail=outcome.detail))
                self._drop_pin(job_id)

    def _drop_pin(self, job_id: str) -> None:
        self.pins.pop(job_id, None)
        self.pin_causes.pop(job_id, None)
        self.executor.when_acting(lambda: self.store.clear_pin(self.config.cluster, job_id))

    def site_factors(self, plan: Plan, observed: dict[str, ObservedJob]) -> dict[str, int]:
        """The pending jobs' SiteFactors (controller.core.bands.site_factors)."""
        records = self.accounts.records
        pending = {j for j, job in observed.items() if job.state == "PENDING"}
        started = {j for j in pending if j in records and records[j].first_start_s is not None}
        return site_factors(plan.order, plan.levels, pending, started, len(self.config.queues_gpu_s) + 1,
                            self.config.site_factor_band, self.by_level)

    def forget(self, job_id: str) -> None:
        self.site_factors_set.pop(job_id, None)

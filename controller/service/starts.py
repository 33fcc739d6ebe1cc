"""Getting the plan's jobs started in Slurm: SiteFactor bands for the pending queue,
node pins (ReqNodeList) for consolidation, and the release of a requeued job's BeginTime.

Slurm's own scheduler still starts the jobs: the bands make its priority order the
plan's order, a pin makes it place a skew-sensitive job where the plan placed it.
"""
from __future__ import annotations

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
    controller still clears it; ``site_factors_set``: job id -> the SiteFactor last
    set (sent again only on change)."""

    def __init__(self, config: Config, executor: LeverExecutor, accounts: Accounts, by_level: bool = True):
        self.config = config
        self.executor = executor
        self.accounts = accounts
        self.by_level = by_level
        self.store = accounts.store
        self.pins: dict[str, float] = self.store.load_pins(config.cluster)
        self.site_factors_set: dict[str, int] = {}

    def apply(self, plan: Plan, observed: dict[str, ObservedJob], now: float, report: RoundReport) -> None:
        cfg = self.config
        # 1. SiteFactor bands: queue level -> band, plan order within the band.
        factors = self.site_factors(plan, observed)
        changed = {j: v for j, v in factors.items() if self.site_factors_set.get(j) != v
                   and observed[j].site_factor != v}
        result = self.executor.set_site_factors(changed)
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
                enforce = cfg.mode == "enforce"
                if enforce:
                    self.store.set_pin(cfg.cluster, job.job_id, now + cfg.pin_expiry_s)
                outcome = self.executor.call("pin_nodes", job.job_id, nodes)
                details.append(outcome.detail)
                levers.append(outcome.applied)
                if outcome.applied:
                    self.pins[job.job_id] = now + cfg.pin_expiry_s
                elif enforce and job.job_id not in self.pins:
                    self.store.clear_pin(cfg.cluster, job.job_id)
            if job.reason == "BeginTime" and job.restart_count > 0:
                # Not at once: slurmd refuses to relaunch a job whose previous run it is
                # still tearing down (epilog) and the job then FAILS ("already killed").
                # Unknown when it stopped (this process started after the requeue):
                # count the settle time from now rather than risk the relaunch.
                stopped = self.accounts.stopped_at.setdefault(job.job_id, now)
                if now - stopped >= cfg.requeue_settle_s:
                    outcome = self.executor.call("release_begin_time", job.job_id)
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
        for job_id, expiry in list(self.pins.items()):
            job = observed.get(job_id)
            if job is None or job.state not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING"):
                self._drop_pin(job_id)
            elif job.state == "PENDING" and now >= expiry:
                self.executor.call("pin_nodes", job_id, [])
                self._drop_pin(job_id)

    def _drop_pin(self, job_id: str) -> None:
        self.pins.pop(job_id, None)
        if self.config.mode == "enforce":
            self.store.clear_pin(self.config.cluster, job_id)

    def site_factors(self, plan: Plan, observed: dict[str, ObservedJob]) -> dict[str, int]:
        """Pending jobs only. MLFQ policies (``by_level``): band (K - level) x width, plus
        half a band for jobs that ran before (a level is FIFO by first start, never
        started jobs after); inside that Slurm's own age order decides. So a value
        changes only when a job changes level or starts for the first time: Slurm
        traffic grows with changes, not with the queue. Continuous policies: the band
        minus the rank in the plan order (every job its own value)."""
        band = self.config.site_factor_band
        levels = len(self.config.queues_gpu_s) + 1
        records = self.accounts.records
        rank_in_level: dict[int, int] = {}
        factors: dict[str, int] = {}
        for job_id in plan.order:
            job = observed.get(job_id)
            if job is None or job.state != "PENDING":
                continue
            level = plan.levels.get(job_id, 0)
            if self.by_level:
                started = job_id in records and records[job_id].first_start_s is not None
                factors[job_id] = (levels - level) * band + (band // 2 if started else 0)
                continue
            rank = rank_in_level.get(level, 0)
            rank_in_level[level] = rank + 1
            factors[job_id] = (levels - level) * band + max(band - 1 - rank, 0)
        return factors

    def forget(self, job_id: str) -> None:
        self.site_factors_set.pop(job_id, None)

"""Preemption as a small persisted state machine: signal, grace period, requeue.

Only jobs the contract allows (controller.service.round.contract: requeueable and declared
how they checkpoint) are touched. A preemption is opened in the store once its
signal was delivered and closed when the job was requeued (or ended, or requeued
itself), so a killed and restarted controller never requeues a job twice and still
counts the preemption toward preempt_max_per_job. A signal that fails opens
nothing: the job is not requeued; it is tried again in later rounds while the plan
still wants it, up to preempt_signal_attempts, then left alone. (A crash between a
delivered signal and its row can only repeat the signal, never skip it.)
Rows are opened only when the executor pulls levers (``when_acting``); a read-only
executor (observe, shadow) only says what it would do. Each requeue cites the
preemption decision that caused it (kept on the open row).

The grace period is the job's own (``grace_for``: the larger of preempt_grace_s and
its ``--signal=...@T`` lead time, never past its time limit). A job that ends while
its grace runs (a checkpoint handler that exits 0 on the signal ends COMPLETED) is
requeued all the same (``preempt_requeue_ended``; Slurm requeues a finished batch job
while slurmctld still holds its record, MinJobAge), so a preemption never truncates it.

The rule is pure (controller.core.levers.preemption, planned by the lever planner's
phases); controller.service.round.levers plans and carries it out; this module loads the
book from the store's open rows, builds the view (the contract's reads) and persists
each transition.
"""
from __future__ import annotations

import time
from typing import Callable, Container

from controller.core.checkpoint_signal import grace_s
from controller.core.levers.preemption import ENDED_IN_GRACE, PreemptionBook, RequeueSettings, VictimView, \
    ended_in_grace, needs_grace, strategy_for
from controller.core.plan import Plan
from controller.core.protection import why_protected
from controller.service.round import levers
from controller.service.round.accounting import Accounts
from controller.service.acting.backend import ObservedJob
from controller.service.ops.config import Config
from controller.service.round.contract import Contract
from controller.service.acting.executor import LeverExecutor
from controller.service.ops.report import RoundReport
from controller.service.state.store import Store

__all__ = ["ENDED_IN_GRACE", "Preemptions"]


class Preemptions:
    def __init__(self, config: Config, store: Store, executor: LeverExecutor, accounts: Accounts,
                 contract: Contract, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.config = config
        self.store = store
        self.executor = executor
        self.accounts = accounts
        self.contract = contract
        self.settings = RequeueSettings(config.preempt_requeue_ended, config.interval_s)

    @property
    def strategy(self):
        """Who carries out the plan's victims (controller.core.levers.preemption.strategy_for)."""
        return strategy_for(self.config.preemption)

    def book(self) -> PreemptionBook:
        """The open preemptions, as the store keeps them (read in every mode)."""
        return PreemptionBook(self.store.pending_preemptions(self.config.cluster))

    def acting_book(self) -> PreemptionBook:
        """The open preemptions the levers go on from: the store's in enforce, none otherwise."""
        return self.executor.when_acting(self.book) or PreemptionBook()

    def leaving(self) -> set[str]:
        """Job ids signalled and not yet requeued: their GPUs are neither free nor plannable."""
        return self.book().leaving()

    def to_requeue_ended(self, observed: dict[str, ObservedJob]) -> set[str]:
        """Signalled jobs that ended inside their grace period: ``advance`` requeues
        them this round, so the accounts must not close them (their record, its
        attained service and no service sample of a cut-short run, goes on)."""
        return {row.job_id for row in self.acting_book().open.values()
                if row.job_id in observed and self._ended_in_grace(observed[row.job_id], row.signalled_at_s)}

    def grace_for(self, job: ObservedJob, signalled_at_s: float) -> float:
        """The job's grace period (core.checkpoint_signal.grace_s with its declared signal)."""
        ends_by = (job.start_time_s + job.time_limit_s
                   if job.start_time_s is not None and job.time_limit_s is not None else None)
        signal = self.contract.declared_signals.get(job.job_id)
        if signal is None and job.state == "RUNNING":
            signal = self.contract.declared(job)
        return grace_s(self.config.preempt_grace_s, signal, signalled_at_s, ends_by)

    def protected(self, job: ObservedJob, now: float) -> str:
        """Why a running job must not be preempted now, or ''."""
        cfg = self.config
        why_not = self.contract.why_not(job)
        if why_not:
            return why_not
        # the engine's own rule (it plans no such victim); checked again here because
        # the start time or the count may have changed since the plan was made.
        # An unknown start time counts as a run that just started.
        run_start = job.start_time_s if job.start_time_s is not None else now
        preemptions = self.strategy.counted_preemptions(self.accounts.records[job.job_id].preemptions,
                                                        job.restart_count)
        return why_protected(run_start, preemptions, now, cfg.preempt_min_runtime_s, cfg.preempt_max_per_job)

    def victim_view(self, job: ObservedJob, now: float) -> VictimView:
        """What the contract says of one victim now (may read its batch script)."""
        why_not = self.protected(job, now)
        if why_not:
            return VictimView(why_not)
        signal = self.contract.declared(job)
        grace = self.grace_for(job, now)
        if signal is None:
            return VictimView("", grace_s=grace)
        return VictimView("", signal.name, signal.batch_only, signal.describe(), grace)

    def begin(self, plan: Plan, observed: dict[str, ObservedJob], now: float, report: RoundReport,
              kept: Container[str] = ()) -> None:
        """Signal the plan's victims now, but those in ``kept`` (the round's lever module
        does it: controller.service.round.levers.begin_preemptions)."""
        levers.begin_preemptions(levers.planner_for(self.config), self, plan, observed, now, report, kept)

    def advance(self, observed: dict[str, ObservedJob], now: float, report: RoundReport) -> None:
        """Requeue signalled jobs whose grace period is over; close what resolved itself
        (controller.service.round.levers.advance_preemptions)."""
        levers.advance_preemptions(levers.planner_for(self.config), self, observed, now, report)

    def open(self, job: ObservedJob, now: float, decision_id: str) -> bool:
        """Open the preemption's row (its signal delivered): False when one is open already."""
        return self.store.begin_preemption(self.config.cluster, job.job_id, now, job.restart_count,
                                           decision_id=decision_id)

    def graces(self, book: PreemptionBook, observed: dict[str, ObservedJob]) -> dict[str, float]:
        """The grace of each open row's job the requeue rule reads (needs_grace)."""
        return {row.job_id: self.grace_for(observed[row.job_id], row.signalled_at_s)
                for row in book.open.values() if needs_grace(observed.get(row.job_id), row, self.settings)}

    def finish(self, job_id: str, now: float) -> None:
        """Close a preemption whose job left (uncounted)."""
        self.store.finish_preemption(self.config.cluster, job_id, "finished", now)

    def _ended_in_grace(self, job: ObservedJob, signalled_at_s: float) -> bool:
        """The job ended by itself after the signal and before its grace ran out."""
        if not self.config.preempt_requeue_ended or job.state not in ENDED_IN_GRACE:
            return False
        return ended_in_grace(job, signalled_at_s, self.grace_for(job, signalled_at_s), self.settings)

    def close_requeued(self, job_id: str, now: float) -> None:
        """Close the preemption and count it in the job's record in one transaction,
        so preempt_max_per_job holds across a crash right after."""
        with self.store.transaction():
            if self.store.finish_preemption(self.config.cluster, job_id, "requeued", now):
                self.accounts.count_preemption(job_id)
                record = self.accounts.records.get(job_id)
                if record is not None:
                    self.store.save_jobs(self.config.cluster, [record])

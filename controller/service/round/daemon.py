"""The controller loop: observe -> account -> plan -> apply, every interval and on change.

One round, in run_round: read the cluster (backend.observe), advance the accounts
(controller.service.round.accounting), let the engine plan (controller.core.engine), then
apply: starts (controller.service.round.starts), the preemption state machine
(controller.service.round.preemption), partition moves (controller.service.round.partition_moves)
and GPU sharing (controller.service.round.sharing). Every decision goes to the store's log.

Crash consistency: the round's accounts (service advanced, ended jobs closed with
their service samples, the round id) commit in one transaction before anything is
done in Slurm, and its decisions with the accounts again in one at the end; an
action's intent (an open preemption, a pin) commits before the action. When a
transaction fails, the in-memory state is dropped and reloaded from the store
before the next round, exactly as after a restart, so no round acts on state the
store does not hold. With ``standby`` (controller.service.acting.lease) only the lease
holder runs rounds, and it reloads from the store whenever it gains the lease.
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import fields, replace
from typing import Callable, Mapping, Optional

from controller.core.engine import Engine
from controller.core.conditioned import learn_conditioned
from controller.core.gittins import ServiceDistribution
from controller.core.inputs import shorten
from controller.core.actions import SetAdminComment, SetBand
from controller.core.model import InputError, JobSpec, JobState, Snapshot
from controller.core.placement import set_aside
from controller.core.plan import Plan
from controller.core.policies import PolicyContext
from controller.service.round.admin_comment import AdminComments
from controller.service.round.accounting import ACTIVE_STATES, Accounts
from controller.service.acting.backend import Backend, BackendUnavailable, Observation, ObservedJob
from controller.service.ops.config import Config
from controller.service.round.contract import Contract
from controller.service.state.decision_log import PRUNE_EVERY_S
from controller.service.acting.executor import LeverExecutor
from controller.service.round.handoff import Handoffs
from controller.service.ops.heap import Heap
from controller.service.acting.lease import Lease
from controller.service.round.partition_moves import PartitionMover
from controller.service.round.preemption import Preemptions
from controller.core.levers.preemption import SlurmBook
from controller.service.ops.preflight import Pending
from controller.service.ops.qos_gate import QosGate, wait_text as qos_wait_text
from controller.service.ops.report import LogOnce, RoundReport, entry
from controller.service.acting.restore import HOLD, RecordingBackend, log_report, on_start, restore
from controller.service.round.sharing import GpuSharing
from controller.service.round.slurm_clock import SlurmClock
from controller.service.state.spool import collect_spool
from controller.service.ops import logs
from controller.service.round.startable import UNJUDGED, add_waiting, slurm_wait
from controller.service.round.starts import Starts
from controller.service.state.store import Store, StoreError
from controller.service.round.submit_order import SubmitOrder
from controller.service.ops.unmodelled import Census, CensusLog, census



log = logging.getLogger("tiresias.controller")


class PreflightRefused(RuntimeError):
    """Enforce mode's preflight, run late (slurmctld answered after the start), found
    a wrong slurm.conf setting: the controller acts on nothing and stops."""


class Controller:
    def __init__(self, config: Config, backend: Backend, store: Store, clock: Callable[[], float] = time.time,
                 metrics=None, preflight: Optional[Pending] = None):
        """``preflight``: the slurm.conf check that could not run at start (slurmctld
        did not answer, controller.service.ops.preflight.at_start): tried again before
        every round; enforce runs no round (acts on nothing) until it has run and
        passed, and stops (``preflight_refused``) when it refuses."""
        self.config = config
        self.backend = backend
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.engine = Engine(config.engine_config())
        self.lease: Optional[Lease] = None
        if config.standby or not (store.is_sqlite or store.read_only):  # PostgreSQL: the lease, always
            self.lease = Lease(store, config.cluster, config.lease_ttl(), margin_s=config.fence_margin())
            backend.fence = self.lease.guard  # checked just before every Slurm command that acts
        # The executor acts through a RecordingBackend, so the store knows every lever
        # `tiresias restore` must undo (controller.service.acting.restore).
        self.executor = LeverExecutor(RecordingBackend(backend, store, config.cluster, clock), config.mode,
                                      guard=self.lease.guard if self.lease else None)
        self._log_once = LogOnce(log)
        self._failures_seen: set[str] = set()
        self._decisions_pruned_at = -math.inf
        self._usage_pruned_at = -math.inf
        self._stale = True
        if self.lease is None:
            self._load_state()
        self.service: Optional[ServiceDistribution] = None
        self.service_loaded_at = -math.inf
        self.last_plan: Optional[Plan] = None
        self.last_observation: Optional[Observation] = None
        self._outage_since: Optional[float] = None
        self.preflight = preflight
        self.preflight_refused = False
        self.slurm_clock = SlurmClock(log)  # Slurm's job times on this controller's clock
        self.usage_collected_at = -math.inf
        self._usage_failing = False
        self._calls_mark: dict[str, int] = {}  # backend.commands_run when the current round began
        self.heap = Heap()  # one full garbage collection an hour (controller.service.ops.heap)
        self._specs: dict[str, tuple] = {}  # job id -> (ObservedJob, account key, JobSpec) of the last snapshot
        # Slurm shows reason None after any `scontrol update` of a pending job until its
        # next scheduling pass (controller.service.round.startable): a job this controller
        # updated (band, AdminComment, pin) while Slurm said it waited only for GPUs still
        # does, so its own update does not cost it a round (seen: the preemption came a
        # round later, sometimes two, than the round that first saw the job).
        self._startable_seen: set[str] = set()  # pending jobs last seen with a startable reason
        self._updated: set[str] = set()  # pending jobs this controller updated since
        # The light poll's answer taken just before the last full observation, and when
        # that observation was made (controller clock): see observe().
        self._full_signature: Optional[frozenset] = None
        self._full_nodes: Optional[frozenset] = None  # backend.poll_nodes() taken just before it
        self._full_at = -math.inf
        # Quiet rounds (see _quiet_round): the observation observe() last repeated, and
        # until when the last planned round stands (-inf: plan the next round).
        self._repeated: Optional[Observation] = None
        self._stands_until = -math.inf
        # the last plan's pending jobs whose request it cannot express (metrics, explain),
        # said in the log at most every LOG_EVERY_S
        self.unmodelled = Census()
        self.unmodelled_log = CensusLog(log)
        if config.preempt_undeclared and self.executor.makes_decisions:
            log.warning("preempt_undeclared is on: requeueable jobs that declared no checkpoint signal are "
                        "preempted too (requeued without a signal; they lose the work since their last checkpoint)")

    def _load_state(self) -> None:
        """(Re)build the per-job state from the store: at start, after a failed
        transaction, and when this process gains the standby lease."""
        config, store = self.config, self.store
        self.accounts = Accounts(store, config.cluster, self.metrics, self._log_once, gone_credit_s=config.poll_s)
        self.records = self.accounts.records  # job id -> JobRecord (the same dict)
        self.submit_order = SubmitOrder()  # the snapshot's arrival order of the records' jobs
        self.starts = Starts(config, self.executor, self.accounts, by_level=self.engine.policy.discretized,
                             by_index=self.engine.policy.bands_by_index)
        self.handoffs = Handoffs(config, store)
        self.contract = Contract(config, self.backend, self._log_once)
        # the GPU limits of pending jobs' QOS; a backend that does not offer both reads: none checked
        backend = self.backend
        self.qos_gate = QosGate(backend.qos_limit_table if backend.offers("qos_limit_table") else None,
                                backend.partition_config if backend.offers("partition_config") else None,
                                self._log_once)
        self.preemptions = Preemptions(config, store, self.executor, self.accounts, self.contract, clock=self.clock)
        self.slurm_book = SlurmBook()  # preemption: slurm: the victims left to slurmctld, the bands they cite
        self.mover = PartitionMover(config, self.backend, store, self.executor, self.accounts, self._log_once)
        # the holds a previous run set (recorded by RecordingBackend) are still ours to release
        self.sharing = GpuSharing(config, self.executor, self._log_once,
                                  held=store.levers(config.cluster).get(HOLD, {}))
        self.admin_comments = AdminComments(config.admin_comment_refresh_s, config.admin_comment_max_per_round,
                                            self.starts.rpc)  # the bands' RPC budget, what they left
        # Pending jobs first seen this round at reason None (Slurm has not judged them yet):
        # no band or comment is written to them this round, so that Slurm's first
        # judgement, not the None our update would cause, is what the next round reads
        # (26.05 judges a job a pass after its submission: with the update at first sight
        # its preemption came two rounds after it, not one). Starts and the comments read it.
        self.first_seen_unjudged: set[str] = set()
        self.starts.hold = self.admin_comments.hold = self.first_seen_unjudged  # one set, refilled each round
        self._stale = False

    # -- the loop -----------------------------------------------------------------------
    def run_forever(self, stop: Optional[threading.Event] = None) -> None:
        """Poll every poll_s with the backend's light change check (backend.poll());
        observe fully and run a round only when its answer changed, interval_s passed
        or the state in memory is stale. A backend without poll() is observed every
        poll_s instead (its jobs' states are the signature). With a standby lease,
        only while holding it (tried every poll_s)."""
        stop = stop or threading.Event()
        last_signature = None
        next_full = -math.inf
        poll = self.backend.poll if self.backend.offers("poll") else None

        def due(signature) -> bool:
            return signature != last_signature or started >= next_full or self._stale

        mode_noted = False
        while not stop.is_set():
            started = self.clock()
            if self.lease is not None and not self.lease.hold():
                last_signature = None
                stop.wait(self.config.poll_s)
                continue
            if not mode_noted:
                mode_noted = self.note_mode()
                if not mode_noted:
                    stop.wait(self.config.poll_s)
                    continue
            if not self.preflight_passed():
                if self.preflight_refused:
                    break
                stop.wait(self.config.poll_s)
                continue
            try:
                signature = self._from_backend(poll) if callable(poll) else None
                if signature is not None and not due(signature):
                    stop.wait(max(0.0, self.config.poll_s - (self.clock() - started)))
                    continue
                observation = self.observe(signature)
            except BackendUnavailable:
                stop.wait(self.config.poll_s)
                continue
            except Exception as err:  # noqa: BLE001 - nothing Slurm returns may stop the controller
                self._round_failed("observation", err)
                stop.wait(self.config.poll_s)
                continue
            if signature is None:  # no light check: the full observation is the check
                signature = frozenset((j.job_id, j.state, j.restart_count) for j in observation.jobs)
            if due(signature):
                try:
                    self.run_round(observation)
                    # The poll's answer from before the observation: a change in between
                    # makes the next poll differ, so it costs one more round, never a miss.
                    last_signature = signature
                    next_full = started + self.config.interval_s
                except BackendUnavailable as err:
                    self._note_outage(err)
                    self._count_failed_round()  # the outage counts once, each round it cut short too
                except StoreError as err:
                    # What the round wrote is all or nothing per transaction; its state
                    # in memory is reloaded from the store before the next round.
                    log.error("round skipped: %s", err)
                    self._count_failed_round()
                except Exception as err:  # noqa: BLE001 - a record or a bug of ours fails one round, not all
                    # (the config was checked at start; a bad one never gets here)
                    self._round_failed("round", err)
            stop.wait(max(0.0, self.config.poll_s - (self.clock() - started)))
        if self.config.restore_on_stop and not self.preflight_refused:  # refused at start, it would not either
            self._restore_on_stop()
        if self.lease is not None:
            self.lease.release()

    def note_mode(self) -> bool:
        """Before the first round: a start in shadow/observe after enforce restores
        every lever the controller set (controller.service.acting.restore). False: not done
        (Slurm or the store did not answer), tried again next poll."""
        try:
            if on_start(self.backend, self.store, self.config.cluster, self.config.mode, self.clock()) is not None:
                self._stale = True  # its pins are cleared: reload them from the store
        except (BackendUnavailable, StoreError) as err:
            self._log_once(f"mode switch: restore not done yet (retrying every poll): {_one_line(err)}")
            return False
        except Exception as err:  # noqa: BLE001 - odd data or a bug: the rounds go on, the next start retries
            self._round_failed("restore at the mode switch", err)
        return True

    def preflight_passed(self) -> bool:
        """Whether rounds may run: True once the preflight has run and passed (or ran
        at start), and always in shadow and observe (which act on nothing; their
        pending preflight is still tried, to log its findings). A pending one is tried
        now; one that refuses sets ``preflight_refused`` (the loop stops)."""
        pending = self.preflight
        if pending is not None:
            outcome = pending.attempt()
            if outcome is None:  # slurmctld still does not answer
                return not self.executor.needs_preflight
            self.preflight = None
            self.preflight_refused = not outcome
        return not self.preflight_refused

    def _restore_on_stop(self) -> None:
        """restore_on_stop: a clean stop (SIGTERM, the stop event) leaves Slurm's own
        order behind; a standby that does not hold the lease leaves it to the holder."""
        if self.lease is not None and not self.lease.hold():
            return
        try:
            log_report(restore(self.backend, self.store, self.config.cluster))
        except Exception as err:  # noqa: BLE001 - Slurm down, store locked, a bug: the stop goes on
            log.error("restore on stop not done: %s; run `tiresias restore`", _one_line(err))

    def _slurm_calls_since_mark(self) -> Optional[dict[str, int]]:
        """Commands the backend ran since the last mark (None: it does not count them)."""
        counts = self.backend.commands_run
        if not isinstance(counts, Mapping):
            return None
        since = {name: n - self._calls_mark.get(name, 0) for name, n in counts.items()}
        self._calls_mark = dict(counts)
        return {name: n for name, n in since.items() if n}

    def observe(self, signature=None) -> Observation:
        """The round's observation. ``signature``: the light poll's answer just taken
        (backend.poll()). When it is the answer taken just before the last full
        observation, no more than full_observe_s ago, nothing the poll shows changed
        since: the backend's repeat_observation() (that observation at the current
        time, with the levers this controller applied since laid over it) stands in
        for reading squeue --json and sinfo --json again, the round's largest cost
        when nothing changed. The jobs' pending reasons are in the poll, the nodes'
        states in backend.poll_nodes() (taken with it, before the full observation
        and before each reuse); what neither shows (a comment, a time limit) is read
        by the next full observation, within full_observe_s. A change between that
        poll and the full observation makes the next poll differ: one more full
        observation, never a change missed."""
        repeat = self.backend.repeat_observation if self.backend.offers("repeat_observation") else None
        poll_nodes = self.backend.poll_nodes if self.backend.offers("poll_nodes") else None
        now = self.clock()
        reusing = self.config.full_observe_s > 0 and callable(repeat) and signature is not None
        nodes = self._from_backend(poll_nodes) if reusing and callable(poll_nodes) else None
        if (reusing and signature == self._full_signature and nodes == self._full_nodes and not self._stale
                and now - self._full_at < self.config.full_observe_s):
            observation = repeat()
            if observation is not None:
                self._mark_polls()
                observation = self.slurm_clock.localize(observation, fresh=False)
                self._repeated = observation
                return observation
        observation = self._observe()
        self._full_signature, self._full_nodes, self._full_at = signature, nodes, now
        return observation

    def _mark_polls(self) -> None:
        calls = self._slurm_calls_since_mark()  # polls that found nothing to do: not a round's cost
        if calls and self.metrics is not None:
            self.metrics.observe_slurm_calls(calls, in_round=False)

    def _observe(self) -> Observation:
        self._mark_polls()
        observation = self._from_backend(self.backend.observe)
        for line in observation.skipped:
            self._log_once(f"skipped record: {line}")
        return self.slurm_clock.localize(observation)  # Slurm's times on this controller's clock, from here on

    def _from_backend(self, read: Callable[[], object]):
        """``read()`` (observe or poll); an outage is noted once, and its end too."""
        try:
            answer = read()
        except BackendUnavailable as err:
            self._note_outage(err)
            raise
        if self._outage_since is not None:
            log.warning("cluster manager answers again after %.0f s", self.clock() - self._outage_since)
            self._outage_since = None
        return answer

    def _note_outage(self, err: Exception) -> None:
        if self._outage_since is None:
            self._outage_since = self.clock()
            log.warning("cluster manager unavailable, acting on nothing until it answers: %s", err)
            if self.metrics is not None:  # one outage, however many polls and rounds it lasts
                self.metrics.observe_outage()

    # -- one round ------------------------------------------------------------------------
    def run_round(self, observation: Optional[Observation] = None) -> RoundReport:
        """One round; a StoreError (LeaseLost included) stops it and marks the state in
        memory stale, so the next round starts from what the store holds. In enforce
        mode with the preflight still pending (``preflight_passed``) it raises
        BackendUnavailable (not run: slurmctld has not answered it yet) or
        PreflightRefused, before anything is observed."""
        if self.executor.needs_preflight and (self.preflight is not None or self.preflight_refused) \
                and not self.preflight_passed():
            if self.preflight_refused:
                raise PreflightRefused("the slurm.conf preflight found a wrong setting: enforce refuses to act")
            raise BackendUnavailable("the slurm.conf preflight has not run yet (slurmctld did not answer "
                                     "scontrol show config): enforce acts on nothing until it has")
        if self.lease is not None:
            if not self.lease.hold():  # renewed at every round: a long round does not outlive it
                raise StoreError(f"cluster {self.config.cluster}: standing by (another controller holds the lease)")
            if self.lease.gained:
                self._stale, self.lease.gained = True, False
        try:
            if self._stale:
                self._load_state()
                self._stands_until = -math.inf  # the last plan was made from the state just dropped
            with self.heap.round(self.clock()):  # no garbage collection inside a round
                return self._round(observation)
        except StoreError:
            self._stale = True
            raise
        except BackendUnavailable:
            raise
        except Exception:
            self._stale = True  # cut short by odd data or a bug: the next round starts from the store
            raise

    def _round_failed(self, what: str, err: Exception) -> None:
        """One line per failure; the traceback once per distinct error (for a bug report)."""
        line = f"{what} failed: {type(err).__name__}: {_one_line(err)}; state reloaded from the store next round"
        if line in self._failures_seen:
            log.error("%s", line)
        else:
            self._failures_seen.add(line)
            log.error("%s", line, exc_info=err)
        self._count_failed_round()

    def _count_failed_round(self) -> None:
        """tiresias_failed_rounds_total: every round begun and not completed, whatever
        cut it short (the store, Slurm, odd data, a bug); the heartbeat
        (tiresias_last_round_timestamp_seconds) moves only with a completed round."""
        if self.metrics is not None:
            self.metrics.observe_failed_round()

    def _round(self, observation: Optional[Observation]) -> RoundReport:
        started = time.perf_counter()
        # observe
        observation = observation or self._observe()
        now = observation.observed_at_s
        if observation is self._repeated and now < self._stands_until:
            return self._quiet_round(observation, started)
        self._stands_until = -math.inf  # until this round has planned and applied
        # the GPU jobs, the pending CPU-only jobs (their SiteFactor band: Starts.cpu_bands)
        # and the MPS-only jobs (accounted in GPU-equivalents, banded: Starts.shared_bands;
        # never planned), in one pass
        observed: dict[str, ObservedJob] = {}
        cpu_pending: dict[str, ObservedJob] = {}
        shared: dict[str, ObservedJob] = {}
        cpu_running: dict[str, ObservedJob] = {}  # preemption: slurm: banded when in preempt_qos
        strategy = self.preemptions.strategy  # who carries out the plan's victims (core.levers.preemption)
        running_banded = strategy.running_banded
        for job in observation.jobs:
            if job.gpus > 0:
                observed[job.job_id] = job
            elif job.mps > 0:
                shared[job.job_id] = job
            elif job.state == "PENDING":
                cpu_pending[job.job_id] = job
            elif running_banded and job.state == "RUNNING":
                cpu_running[job.job_id] = job
        accounted = {**observed, **shared} if shared else observed
        # account: one transaction, committed before anything is done in Slurm
        self.contract.begin_round()
        self.contract.read_qos_grace(now)
        self.accounts.advance(accounted, now)
        with self.store.transaction():
            # ended inside their grace period: requeued this round (Preemptions.advance),
            # so neither closed by the accounts nor unpinned by the starts
            requeueing = self.preemptions.to_requeue_ended(observed)
            self.accounts.finish_gone(accounted, observation, now, requeueing)
            self.accounts.save()
            round_id = self.store.next_round_id(self.config.cluster)
        self._refresh_service(now)
        # plan
        leaving = self.preemptions.leaving()
        plan = self._plan(observed, observation, now, round_id, leaving)
        self.unmodelled_log.note(self.unmodelled, now)
        self.accounts.place(plan.levels, plan.positions)
        # apply: every lever through the executor, which alone knows the mode
        self.executor.begin_round()
        report = RoundReport(round_id, now, plan)
        for action in plan.of_kind("promote"):  # the store's, in every mode: the accounts are kept even in observe
            self.accounts.promote(action.job_id)
            kept = self.executor.in_store()
            report.applied.append(entry(action, applied=kept.applied, detail=kept.detail))
        self.handoffs.check(observed, now, report, self.preemptions.grace_for, observation.nodes, self._spec_of)
        kept_from_slurm = strategy.kept_running(observed, lambda job: self.preemptions.protected(job, now))
        self.starts.apply(plan, observed, now, report, cpu_pending, requeueing, shared, kept_from_slurm,
                          cpu_running, self.contract.may_preempt_slurms)
        # preemption: slurm: slurmctld chooses, signals and requeues by the bands (running
        # jobs' too, Starts.site_factors): the plan's victims are what the controller
        # expects of it, citing the bands sent; its requeues are logged when observed
        self.slurm_book.note_bands(self.executor.pulled())
        report.applied.extend(strategy.requeues_seen(observed, self.slurm_book, round_id))
        report.applied.extend(strategy.left_to_slurm(plan, observed, self.slurm_book,
                                                   self.executor.sends(SetBand)))
        if strategy.own_victims(plan):  # the controller's own: signal, grace, requeue
            kept = self.handoffs.kept(plan, observed, leaving)  # the handoff rule: no preemption repeated in vain
            for action in plan.of_kind("preempt"):
                if action.job_id in kept:
                    report.applied.append(entry(action, applied=False,
                                                detail=f"kept running: {kept[action.job_id]}"))
            self.preemptions.begin(plan, observed, now, report, kept)
            self.handoffs.expect(plan, report, now)
        self.preemptions.advance(observed, now, report)  # also those opened before a switch to slurm
        self.mover.apply(plan, observed, observation.nodes, now, report, pinned=set(self.starts.pins))
        self.sharing.apply(observation, report)
        self._write_admin_comments(plan, observed, now)
        # record: the accounts (promotions, preemption counts) and the decisions together
        with self.store.transaction():
            self.accounts.save_touched()
            self.store.log_decisions(self.config.cluster, round_id, now, self.executor.mode,
                                     self.executor.decisions_to_log(report.applied))
        report.levers = self.executor.end_round(round_id)
        self._note_updates(report.levers, observed)
        logs.log_decisions(log, report.applied, round_id)
        self._prune_decisions(now)
        forgotten = self.accounts.forget_finished()
        self.submit_order.forget(forgotten)
        for job_id in forgotten:
            self.starts.forget(job_id)
            self.mover.forget(job_id)
            self.slurm_book.forget(job_id)
            self.contract.forget(job_id)
            self.admin_comments.forget(job_id)
        self._collect_usage(now)
        self.last_plan = plan
        self.last_observation = observation
        self._stands_until = self._round_stands_until(plan, report, now, leaving)
        if self.metrics is not None:
            self.metrics.observe_round(self, plan, report, time.perf_counter() - started,
                                       slurm_calls=self._slurm_calls_since_mark())
        return report

    def _round_stands_until(self, plan: Plan, report: RoundReport, now: float, leaving: set[str]) -> float:
        """Until when a round that observes nothing new would repeat this one: the
        plan's own time (controller.core.plan_stands: the next threshold crossing,
        promotion, protection end), and the service's clocks: a pin's expiry, the
        next service-distribution reload. A round that acted, or left work for the
        next (a preemption or handoff under way, batch scripts still to read, bands
        Slurm's RPC budget held back), and
        the layers planned from the clock (partition moves, GPU sharing) do not
        stand. (A failed lever makes the backend observe in full: no repeat.) The
        AdminComment lines are written in quiet rounds too, when due."""
        cfg = self.config
        if (report.applied or leaving or self.handoffs.watching or self.starts.bands_waiting
                or self.contract.reads_left <= 0 or cfg.partition_moves or cfg.gpu_sharing):
            return -math.inf
        until = plan.stands_until_s
        pins = self.starts.pins
        if pins:
            until = min(until, min(pins.values()))
        if self.engine.policy.uses_service_distribution:
            until = min(until, self.service_loaded_at + cfg.service_refresh_s)
        return until

    def _quiet_round(self, observation: Observation, started: float) -> RoundReport:
        """A round that observes nothing new before the last planned one's time is up
        (_round_stands_until): the accounts advance and are stored, as in every round;
        planning would give the last plan again and applying it would change nothing,
        so neither is done. The report carries the last plan, and no decision."""
        now = observation.observed_at_s
        observed = {job.job_id: job for job in observation.jobs if job.gpus > 0}
        self.accounts.advance(observed, now, quiet=True)
        with self.store.transaction():
            self.accounts.save(quiet=True)
            round_id = self.store.next_round_id(self.config.cluster)
        report = RoundReport(round_id, now, self.last_plan, skipped_reason="nothing new: the last plan stands")
        self.unmodelled_log.note(self.unmodelled, now)  # the last plan's, which stands
        comments = self.admin_comments
        if comments.backlog or now >= comments.next_refresh_s():  # lines due: as a planned round writes them
            self.executor.begin_round()
            self._write_admin_comments(self.last_plan, observed, now)
            report.levers = self.executor.end_round(round_id)
            self._note_updates(report.levers, observed)
        self._prune_decisions(now)
        self._collect_usage(now)
        self.last_observation = observation
        if self.metrics is not None:
            self.metrics.observe_round(self, self.last_plan, report, time.perf_counter() - started,
                                       slurm_calls=self._slurm_calls_since_mark())
        return report

    def _write_admin_comments(self, plan: Plan, observed: dict[str, ObservedJob], now: float) -> None:
        """Information, not a decision: a read-only executor (observe, shadow) skips it."""
        if self.config.admin_comment and not self.executor.skips(SetAdminComment):
            self.admin_comments.apply(plan, observed, lambda job_id: self.records[job_id].attained_gpu_s,
                                      self._queue_count(), lambda job: not self.preemptions.protected(job, now),
                                      self.executor, now)

    def _prune_decisions(self, now: float) -> None:
        """Decision-log retention (decision_log_max_age_s / _max_rows), hourly."""
        config = self.config
        if now - self._decisions_pruned_at < PRUNE_EVERY_S or not (
                config.decision_log_max_age_s or config.decision_log_max_rows):
            return
        self._decisions_pruned_at = now
        try:
            deleted = self.store.prune_decisions(config.cluster, now_s=now, max_age_s=config.decision_log_max_age_s,
                                                 max_rows=config.decision_log_max_rows)
        except StoreError as err:  # retried in an hour; the log only grows meanwhile
            log.warning("decision log not pruned: %s", err)
            return
        if deleted:
            log.info("decision log: %d old decision(s) deleted", deleted)

    def _queue_count(self) -> int:
        """K of the MLFQ, or 0 for a policy without queues (its levels mean nothing)."""
        return len(self.config.queues_gpu_s) + 1 if self.engine.policy.discretized else 0

    def preview(self) -> tuple[Plan, Observation]:
        """A read-only round for ``queue`` and ``explain``: the plan the controller
        would make now, from Slurm's state and the stored accounts; writes nothing."""
        observation = self._observe()
        if self._stale:
            self._load_state()
        observed = {job.job_id: job for job in observation.jobs if job.gpus > 0}
        self.accounts.advance(observed, observation.observed_at_s)
        self._refresh_service(observation.observed_at_s)
        self.contract.read_qos_grace(observation.observed_at_s)
        return self._plan(observed, observation, observation.observed_at_s, 0, self.preemptions.leaving(),
                          explain=True), observation

    def _plan(self, observed: dict[str, ObservedJob], observation: Observation, now: float, round_id: int,
              leaving: set[str], explain: bool = False) -> Plan:
        """The engine's plan of the jobs Slurm could start, with the jobs that wait on
        Slurm (controller.service.round.startable) added after them: ordered and banded,
        never a reason to preempt."""
        snapshot, waiting, reasons = self._snapshot(observed, observation, now, round_id, leaving, explain=explain)
        # pending jobs a QOS GPU limit keeps from starting even after every preemption the
        # plan could make under that QOS wait on Slurm (controller.service.ops.qos_gate): Slurm
        # shows them Priority until its scheduler judges the limit
        qos_waits, qos_unmodelled = self._qos_verdicts(snapshot, observed, leaving, now)
        if qos_waits:
            held_back = [job for job in snapshot.jobs if job.spec.job_id in qos_waits]
            snapshot.jobs[:] = [job for job in snapshot.jobs if job.spec.job_id not in qos_waits]
            waiting = sorted(waiting + held_back, key=lambda job: job.index)
            reasons.update((job_id, "") for job_id in qos_waits)
        # pending jobs asking for what the plan's model cannot express (GPUs of several
        # types, an OR constraint, --exclusive=user, a count the release or the nodes do
        # not report): they wait, banded; the plan never guesses where Slurm would start
        # them. Counted per reason (metrics, the census log line, explain).
        self.unmodelled = _inexpressible(snapshot, observed, qos_unmodelled)
        unmodelled = set(self.unmodelled.jobs)
        # jobs whose own nodes (partitions, GPU type, reservation, features) no preemption can free wait
        # too: the core's selection, the one every replay loop makes (controller.core.placement.set_aside)
        aside, unreachable = set_aside(snapshot, unmodelled)
        if aside:
            waiting += aside
            reasons.update((job.job_id, "") for job in aside)
        plan = self.engine.step(snapshot)
        if waiting:
            ctx = PolicyContext(now_s=now, thresholds_gpu_s=self.engine.config.thresholds_gpu_s, service=self.service)
            add_waiting(plan, waiting, reasons, self.engine.policy, ctx)
            for job_id, limit in qos_waits.items():
                plan.wait_reasons[job_id] = qos_wait_text(limit)
            for job_id in unreachable:
                plan.wait_reasons[job_id] = ("its nodes (partitions, GPU type, reservation, features) have too few"
                                             " GPUs free or held by preemptable jobs: no job is preempted for it")
            for job_id, (codes, what) in self.unmodelled.jobs.items():
                if codes == ("mixed_gpu_types",):
                    job = observed[job_id]
                    plan.wait_reasons[job_id] = (
                        f"asks for GPUs of several types ({', '.join(job.gpu_types)}; {job.gpus} in all), which the"
                        " plan cannot place (one GPU type a job): Slurm may start it, no job is preempted for it")
                else:
                    plan.wait_reasons[job_id] = (f"asks for what the plan cannot express: {what}; Slurm may start"
                                                 " it, no job is preempted for it")
        return plan

    def _note_updates(self, levers, observed: dict[str, ObservedJob]) -> None:
        """Remember the pending jobs this round's bands and comments updated in Slurm (enforce only:
        elsewhere nothing reached Slurm); forget the jobs no longer pending."""
        # a band or a comment: neither changes whether Slurm may start it
        self.executor.when_acting(lambda: self._updated.update(
            action.job_id for action in levers if isinstance(action, (SetBand, SetAdminComment))
            and getattr(observed.get(action.job_id), "state", "") == "PENDING"))
        pending = {job_id for job_id, job in observed.items() if job.state == "PENDING"}
        self._updated &= pending
        self._startable_seen &= pending

    def _qos_verdicts(self, snapshot: Snapshot, observed: dict[str, ObservedJob], leaving: set[str],
                      now: float) -> tuple[dict[str, str], dict[str, ObservedJob]]:
        """The QOS gate's verdicts on the plan's pending jobs: job id -> the limit it waits
        on, and job id -> the job with the ``qos_limits`` reason added (a QOS the gate
        cannot judge). Running jobs being preempted are not counted (their GPUs leave the
        QOS's totals); those the plan may preempt are counted as freeable."""
        gate = self.qos_gate
        if not gate.on:
            return {}, {}
        gate.refresh(now)
        pending = [observed[job.spec.job_id] for job in snapshot.jobs if not job.running]
        if not pending:
            return {}, {}
        preemptable = {job.spec.job_id for job in snapshot.jobs if job.running and job.spec.preemptable}
        running = [job for job in observed.values() if job.state == "RUNNING" and job.job_id not in leaving]
        waits: dict[str, str] = {}
        unmodelled: dict[str, ObservedJob] = {}
        for job_id, verdict in gate.judge(pending, running, preemptable.__contains__).items():
            if verdict.wait:
                waits[job_id] = verdict.wait
            else:
                job = observed[job_id]
                codes = job.unmodelled_reasons or (("other",) if job.unmodelled else ())
                unmodelled[job_id] = replace(job, unmodelled="; ".join(filter(None, (job.unmodelled,
                                                                                     verdict.unmodelled))),
                                             unmodelled_reasons=tuple(dict.fromkeys(codes + ("qos_limits",))))
        return waits, unmodelled

    def _spec_of(self, job_id: str) -> Optional[JobSpec]:
        """The JobSpec this round's plan used for ``job_id`` (None: not planned)."""
        kept = self._specs.get(job_id)
        return None if kept is None else kept[2]

    def _job_spec(self, job: ObservedJob, record, key: tuple, specs: dict[str, tuple]) -> JobSpec:
        """The engine's JobSpec of ``job``, kept in ``specs`` with ``key`` (submit time,
        skew, preemptable, pinned): _snapshot takes the one of the last round while the
        same ObservedJob (the backend keeps it while Slurm's record is unchanged) has
        the same key (building 12,000 specs was a third of a round).

        A pending job carries its own --nodelist / --exclude / -N, which the plan's
        placement honours. A node list this controller wrote (a pin, kept in
        Starts.pins) is not the job's own. Constraints Slurm would not hold together
        are left out (logged once): the job is then planned as any other, never the
        round lost."""
        preemptable, pinned = key[2], key[3]
        spec = None
        # where Slurm may run it: its partitions (a pending job may list several), its
        # GPU type, its reservation (controller.core.placement.Eligibility)
        kind = dict(partitions=tuple(p for p in job.partition.split(",") if p), gpu_type=job.gpu_type,
                    reservation=job.reservation, cpus_per_node=job.cpus_per_node,
                    mem_per_node_mb=job.mem_per_node_mb, features=job.features, exclusive=job.exclusive,
                    held_by_node=job.held_by_node)
        if job.state == "PENDING" and (job.required_nodes or job.excluded_nodes or job.min_nodes > 1
                                       or job.max_nodes > 0):
            try:
                spec = JobSpec(job.job_id, job.gpus, record.submit_time_s, None, skew=record.skew,
                               partition=job.partition, user=job.user, preemptable=preemptable,
                               account=job.account, job_name=job.name, time_limit_s=job.time_limit_s, **kind,
                               required_nodes=() if pinned else job.required_nodes,
                               excluded_nodes=job.excluded_nodes,
                               min_nodes=job.min_nodes if job.min_nodes > 1 else None,
                               max_nodes=job.max_nodes or None)
            except InputError as err:
                self._log_once(f"job {job.job_id}: its node constraints are left out of the plan: {err}")
        if spec is None:
            spec = JobSpec(job.job_id, job.gpus, record.submit_time_s, None, skew=record.skew,
                           partition=job.partition, user=job.user, preemptable=preemptable,
                           account=job.account, job_name=job.name, time_limit_s=job.time_limit_s, **kind)
        specs[job.job_id] = (job, key, spec)
        return spec

    def _refresh_service(self, now: float) -> None:
        if not self.engine.policy.uses_service_distribution:
            return
        if now - self.service_loaded_at < self.config.service_refresh_s:
            return
        if self.engine.policy.conditions_service and self.config.service_conditioned:
            self.service = learn_conditioned(self.store.service_samples_featured(self.config.cluster),
                                             self.config.service_window or None).current
        else:
            samples, censored = self.store.service_samples_censored(self.config.cluster)
            self.service = ServiceDistribution(samples, censored=censored, learned=True) if samples else None
        self.service_loaded_at = now

    def _snapshot(self, observed: dict[str, ObservedJob], observation: Observation, now: float, round_id: int,
                  leaving: set[str], explain: bool = False) -> tuple[Snapshot, list[JobState], dict[str, str]]:
        """The engine's input: active GPU jobs in submit order with their accounts, and
        the capacity (available nodes' GPUs); and, apart, the pending jobs that wait on
        Slurm (held, dependent, limited, ...: controller.service.round.startable) with
        their Slurm reasons: they are not the engine's to start or preempt for.

        A job being preempted (signalled, in its grace period) is left out and its GPUs
        count as free: they are already promised to the job its preemption made room
        for, which the plan then places there (a start Slurm makes once they are free).
        Counting them as busy instead made the next round preempt a second victim for
        the same waiting job. The simulator plans the same way.

        Running jobs on unavailable (drained, down) nodes are left out: their GPUs are
        busy capacity that no plan can hand out, not demand that could push another
        running job out. Running jobs outside the preemption contract keep their GPUs
        (JobSpec.preemptable=False)."""
        jobs: list[JobState] = []
        waiting: list[JobState] = []
        reasons: dict[str, str] = {}
        held_gpus = 0
        released: list[tuple[tuple[str, int, int], ...]] = []  # the CPUs, memory of jobs being preempted
        unavailable = {n.name for n in observation.nodes if not n.available}
        free_by_node = {n.name: n.gpus_free for n in observation.nodes if n.available}
        specs: dict[str, tuple] = {}  # this round's JobSpecs (see _job_spec)
        # (the loop runs once per active job: its lookups are bound to locals)
        records, why_not, pins, last_specs = self.records, self.contract.why_not, self.starts.pins, self._specs
        startable_seen, updated = self._startable_seen, self._updated
        unjudged = self.first_seen_unjudged
        unjudged.clear()
        # preemption: slurm: slurmctld's requeues count against preempt_max_per_job too
        # (Slurm's restart count; Preemptions.protected)
        counted = self.preemptions.strategy.counted_preemptions
        arrival = self.submit_order.ids(observed, lambda job_id: records[job_id].submit_time_s,
                                        lambda job_id: observed[job_id].state in ACTIVE_STATES)
        index = -1
        for job_id in arrival:
            job = observed.get(job_id)
            if job is None:
                continue
            state = job.state
            running = state == "RUNNING"
            if not running and state != "PENDING":
                continue
            index += 1
            if running:
                if job_id in leaving:
                    for node, gpus in job.gpus_by_node:  # being preempted: its GPUs are the beneficiary's
                        if node in free_by_node:
                            free_by_node[node] += gpus
                    if job.held_by_node:  # and so are its CPUs and memory
                        released.append(job.held_by_node)
                    continue
                if unavailable and any(node in unavailable for node, _ in job.gpus_by_node):
                    # Its GPUs on available nodes (if it spans some) are busy too.
                    held_gpus += sum(gpus for node, gpus in job.gpus_by_node if node not in unavailable)
                    continue
                reason, preemptable = "", not why_not(job)
            else:
                reason, preemptable = slurm_wait(job), True
                if reason == UNJUDGED and job_id in updated and job_id in startable_seen:
                    reason = ""  # our own update's None: Slurm judged it startable before it
                elif reason == UNJUDGED and job_id not in last_specs:
                    unjudged.add(job_id)
                elif reason:
                    startable_seen.discard(job_id)
                else:
                    startable_seen.add(job_id)
            record = records[job_id]
            # the JobSpec of the last round while the same ObservedJob has the same account
            # fields and pin (see _job_spec, which builds it otherwise)
            key = (record.submit_time_s, record.skew, preemptable, job_id in pins)
            kept = last_specs.get(job_id)
            if kept is not None and kept[0] is job and kept[1] == key:
                specs[job_id] = kept
                spec = kept[2]
            else:
                spec = self._job_spec(job, record, key, specs)
            if reason:
                reasons[job_id] = reason
            # by position, in _JOB_STATE_FIELDS order (a keyword call cost twice as much)
            (waiting if reason else jobs).append(JobState(
                spec, index, record.attained_gpu_s, record.queue_service_gpu_s, record.executed_s,
                record.executed_since_promotion_s, record.waited_since_promotion_s, 0.0, record.first_start_s,
                (job.start_time_s if job.start_time_s is not None else now) if running else None, running,
                job.gpus_by_node if running else (),
                counted(record.preemptions, job.restart_count), 0, None,
                record.queue_level,
                record.queue_entry))
        self._specs = specs
        nodes = _with_released(observation.nodes, released) if released else observation.nodes
        capacity = sum(n.gpus_total for n in nodes if n.available) - held_gpus
        return Snapshot(now_s=now, jobs=jobs, nodes=nodes, service=self.service, round_id=round_id,
                        capacity_gpus=max(capacity, 0), explain=explain, free_by_node=free_by_node), waiting, reasons

    # -- usage records --------------------------------------------------------------------------
    def _collect_usage(self, now: float) -> None:
        """Collect the epilog usage spool every usage_collect_s, when the directory exists.
        A failure is logged once (until collection works again) and never ends the round."""
        cfg = self.config
        if now - self.usage_collected_at < cfg.usage_collect_s or not os.path.isdir(cfg.usage_spool_dir):
            return
        self.usage_collected_at = now
        try:
            added, duplicates, bad = collect_spool(cfg.usage_spool_dir, self.store)
        except Exception as err:  # store down, permissions: collection only waits
            if not self._usage_failing:
                log.warning("usage spool %s not collected (retrying every %gs): %s: %s", cfg.usage_spool_dir,
                            cfg.usage_collect_s, type(err).__name__, err)
            self._usage_failing = True
            return
        if self._usage_failing:
            log.warning("usage spool %s collected again", cfg.usage_spool_dir)
            self._usage_failing = False
        if added or bad:
            log.info("usage spool: %d records stored, %d already stored, %d unreadable lines", added, duplicates,
                     bad)
        self._prune_usage()

    def _prune_usage(self) -> None:
        """Usage-record retention (usage_max_age_s), hourly; on the store's clock
        (``added_s`` is the wall time the record was stored)."""
        wall = time.time()
        if not self.config.usage_max_age_s or wall - self._usage_pruned_at < PRUNE_EVERY_S:
            return
        self._usage_pruned_at = wall
        try:
            deleted = self.store.prune_usage_records(self.config.cluster, before_s=wall - self.config.usage_max_age_s)
        except StoreError as err:  # retried in an hour
            log.warning("usage records not pruned: %s", err)
            return
        if deleted:
            log.info("usage records: %d older than %gs deleted", deleted, self.config.usage_max_age_s)


# JobState's leading fields as _snapshot passes them, by position: checked here, so a
# model that reorders them fails at import, not in a plan.
_JOB_STATE_FIELDS = ("spec", "index", "attained_gpu_s", "queue_service_gpu_s", "executed_s",
                     "executed_since_promotion_s", "waited_since_promotion_s", "progress_s", "first_start_s",
                     "run_start_s", "running", "placement", "preemptions", "promotions", "finish_time_s",
                     "queue_level", "queue_entry")
if tuple(f.name for f in fields(JobState))[:len(_JOB_STATE_FIELDS)] != _JOB_STATE_FIELDS:
    raise ImportError(f"controller.core.model.JobState's fields are no longer {_JOB_STATE_FIELDS}: "
                      "update _snapshot's positional JobState call")


def _inexpressible(snapshot: Snapshot, observed: dict[str, ObservedJob],
                   amended: Optional[Mapping[str, ObservedJob]] = None) -> Census:
    """The pending jobs of the plan whose request its model cannot express, with their
    reason codes and texts (controller.service.ops.unmodelled.census); ``pending``: the
    pending jobs the plan weighs (not those waiting on Slurm). ``amended``: jobs with
    reasons the round added (a QOS it cannot judge)."""
    amended = amended or {}
    return census(((amended.get(job.job_id) or observed[job.job_id]) for job in snapshot.jobs if not job.running),
                  snapshot.nodes)


def _with_released(nodes, released) -> list:
    """``nodes`` with the CPUs and memory of the jobs being preempted counted free: they
    are promised to the job each preemption made room for, as their GPUs are."""
    cpus: dict[str, int] = {}
    mem: dict[str, int] = {}
    for held in released:
        for node, held_cpus, held_mb in held:
            cpus[node] = cpus.get(node, 0) + held_cpus
            mem[node] = mem.get(node, 0) + held_mb
    return [replace(n, cpus_free=None if n.cpus_free is None else n.cpus_free + cpus.get(n.name, 0),
                    mem_free_mb=None if n.mem_free_mb is None else n.mem_free_mb + mem.get(n.name, 0))
            if n.name in cpus else n for n in nodes]


def _one_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return shorten(text[0] if text else type(err).__name__, 200)

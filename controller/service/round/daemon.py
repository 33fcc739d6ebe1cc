"""The controller loop: observe -> account -> plan -> apply, every interval and on change.

One round, in run_round: read the cluster (backend.observe), advance the accounts
(controller.service.round.accounting), let the engine plan (controller.core.engine), then
apply every lever in one call (controller.service.round.levers.Levers.run: the lever
planner's step and phases, carried out through the executor in the round's order: bands,
starts' pins and releases, the plan's victims and their requeues, partition moves, GPU
sharing, AdminComment lines). Every decision goes to the store's log.

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
import threading
import time
from typing import Callable, Mapping, Optional

from controller.core.actions import SetBand
from controller.core.engine import Engine
from controller.core.conditioned import learn_conditioned
from controller.core.gittins import ServiceDistribution
from controller.core.levers.preemption import strategy_for
from controller.core.inputs import shorten
from controller.core.plan import Plan
from controller.service.round.accounting import Accounts
from controller.service.acting.backend import Backend, BackendUnavailable, Observation
from controller.service.ops.config import Config
from controller.service.round.contract import Contract
from controller.service.state.decision_log import PRUNE_EVERY_S
from controller.service.acting.executor import LeverExecutor
from controller.service.round.handoff import Handoffs
from controller.service.ops.heap import Heap
from controller.service.acting.lease import Lease
from controller.service.round.partition_moves import PartitionMover
from controller.service.round.preemption import Preemptions
from controller.service.ops.preflight import Pending
from controller.service.ops.qos_gate import QosGate
from controller.service.ops.report import LogOnce, RoundReport, entry
from controller.service.acting.restore import RecordingBackend, log_report, on_start, restore
from controller.service.round.sharing import GpuSharing
from controller.service.round.slurm_clock import SlurmClock
from controller.service.state.usage import UsageCollector
from controller.service.ops import logs
from controller.service.round.levers import Levers
from controller.service.round.snapshot import RoundInput
from controller.service.state.store import Store, StoreError
from controller.service.round.submit_order import SubmitOrder
from controller.service.ops.unmodelled import CensusLog



log = logging.getLogger("tiresias.controller")


class PreflightRefused(RuntimeError):
    """Enforce mode's preflight, run late (slurmctld answered after the start), found
    a wrong slurm.conf setting: the controller acts on nothing and stops."""



def digest(signature: Optional[frozenset]) -> Optional[tuple[int, int]]:
    """What is kept of a light poll's answer to compare the next one with: its size and
    hash, not its lines (a line per job: 0.1 KB a job held for nothing but this test).
    Two different answers with the same 64-bit hash and size would cost a round missed
    until the next full observation (full_observe_s), no more."""
    return None if signature is None else (len(signature), hash(signature))

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
        self._stale = True
        self.inputs = RoundInput(config, self.engine, self._log_once)  # observation -> Snapshot (round/snapshot)
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
        self.usage = UsageCollector(config, store)  # the epilog spool (state/usage)
        self._calls_mark: dict[str, int] = {}  # backend.commands_run when the current round began
        self.heap = Heap()  # one full garbage collection an hour (controller.service.ops.heap)
        # The light poll's answer taken just before the last full observation, and when
        # that observation was made (controller clock): see observe().
        self._full_signature: Optional[tuple[int, int]] = None  # digest() of that poll's answer
        self._full_nodes: Optional[frozenset] = None  # backend.poll_nodes() taken just before it
        self._full_at = -math.inf
        # The last full round (full_round_every_s): the backend read every record anew and
        # the round's reused inputs were checked against the ones built again (None: no
        # observation yet; the first is full anyway, nothing being kept before it).
        self._full_round_at: Optional[float] = None
        # Quiet rounds (see _quiet_round): the observation observe() last repeated, and
        # until when the last planned round stands (-inf: plan the next round).
        self._repeated: Optional[Observation] = None
        self._stands_until = -math.inf
        # the last plan's pending jobs whose request it cannot express, said in the log at
        # most every LOG_EVERY_S
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
        self.levers = Levers(config, self.executor, self.accounts, by_level=self.engine.policy.discretized,
                             by_index=self.engine.policy.bands_by_index)
        book = self.levers.book  # every family's book (controller.core.levers.book)
        self.handoffs = Handoffs(config, store, book.handoffs)
        self.contract = Contract(config, self.backend, self._log_once)
        # the GPU limits of pending jobs' QOS; a backend that does not offer both reads: none checked
        backend = self.backend
        self.qos_gate = QosGate(backend.qos_limit_table if backend.offers("qos_limit_table") else None,
                                backend.partition_config if backend.offers("partition_config") else None,
                                self._log_once)
        self.preemptions = Preemptions(config, store, self.executor, self.accounts, self.contract, clock=self.clock)
        self.mover = PartitionMover(config, self.backend, store, self.executor, self.accounts, self._log_once,
                                    book=book.moves)
        self.sharing = GpuSharing(config, self.executor, self._log_once, book=book.holds)
        self.admin_comments = book.comments  # the lines' book (core.levers.comments)
        # the jobs first seen unjudged (RoundInput.first_seen_unjudged): one set, refilled each round
        self.inputs.first_seen_unjudged = set()
        self.levers.hold = self.inputs.first_seen_unjudged
        self.levers.bind(self.handoffs, self.preemptions, self.mover, self.sharing, self.contract)
        self.inputs.bind(self.records, self.submit_order, self.contract, self.qos_gate, self.levers.pins)
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
            return digest(signature) != last_signature or started >= next_full or self._stale

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
                    last_signature = digest(signature)
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
        if not self._stale and (self.lease is None or self.lease.hold()):  # (a standby's are the holder's rows)
            self.accounts.save_all()  # the clock rows that lag
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
        if (reusing and digest(signature) == self._full_signature and nodes == self._full_nodes and not self._stale
                and now - self._full_at < self.config.full_observe_s):
            observation = repeat()
            if observation is not None:
                self._mark_polls()
                observation = self.slurm_clock.localize(observation, fresh=False)
                self._repeated = observation
                return observation
        with self.heap.paused():  # (what it parses lives into the round: a collection would find nothing)
            observation = self._observe()
        self._full_signature, self._full_nodes, self._full_at = digest(signature), nodes, now
        return observation

    def _mark_polls(self) -> None:
        calls = self._slurm_calls_since_mark()  # polls that found nothing to do: not a round's cost
        if calls and self.metrics is not None:
            self.metrics.observe_slurm_calls(calls, in_round=False)

    def _observe(self) -> Observation:
        self._mark_polls()
        self._begin_full_round()
        observation = self._from_backend(self.backend.observe)
        for line in observation.skipped:
            self._log_once(f"skipped record: {line}")
        return self.slurm_clock.localize(observation)  # Slurm's times on this controller's clock, from here on

    def _begin_full_round(self) -> None:
        """Every full_round_every_s, a full round: the backend forgets what it reuses (each
        record parsed and each job built anew), and so every later cache keyed on those
        objects misses (accounts, plan inputs, AdminComment checks); the plan inputs that
        the last round reused are compared with the ones built again (_check_reuse)."""
        every_s, now = self.config.full_round_every_s, self.clock()
        if self._full_round_at is None or every_s <= 0:
            self._full_round_at = now
            return
        if now - self._full_round_at < every_s or not self.backend.offers("forget_reuse"):
            return
        self._full_round_at = now
        self.backend.forget_reuse()
        self.accounts.forget_reuse()
        self.inputs.verify_reuse = True

    def _check_reuse(self) -> None:
        """A full round's finding: plan inputs the incremental rounds reused that differ
        from the ones built again from the same Slurm record (a cache keyed on too
        little): logged and counted; this round planned with the ones built again."""
        inputs = self.inputs
        mismatches, inputs.verify_reuse, inputs.reuse_mismatches = inputs.reuse_mismatches, False, []
        if not mismatches:
            return
        log.error("full round: %d job(s) planned from reused inputs that differ from the ones built again "
                  "(first: %s); planned from the new ones this round", len(mismatches), ", ".join(mismatches[:5]))
        if self.metrics is not None:
            self.metrics.observe_incremental_mismatches(len(mismatches))

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
        jobs = self.inputs.split(observation)  # GPU, pending CPU-only, MPS-only, running CPU-only jobs
        observed = jobs.observed
        accounted = jobs.accounted
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
        plan = self.inputs.plan(observed, observation, now, round_id, leaving, self.service)
        if self.inputs.verify_reuse:
            self._check_reuse()
        self.unmodelled_log.note(self.unmodelled, now)
        self.accounts.place(plan.levels, plan.positions)
        # apply: every lever through the executor, which alone knows the mode
        self.executor.begin_round()
        report = RoundReport(round_id, now, plan)
        for action in plan.of_kind("promote"):  # the store's, in every mode: the accounts are kept even in observe
            self.accounts.promote(action.job_id)
            kept = self.executor.in_store()
            report.applied.append(entry(action, applied=kept.applied, detail=kept.detail))
        self.levers.run(plan, observation, jobs, now, report, requeueing, leaving, self.inputs.spec_of)
        # record: the accounts (promotions, preemption counts) and the decisions together
        with self.store.transaction():
            self.accounts.save_touched()
            self.store.log_decisions(self.config.cluster, round_id, now, self.executor.mode,
                                     self.executor.decisions_to_log(report.applied))
        report.levers = self.executor.end_round(round_id)
        self.inputs.note_updates(report.levers, observed, self.executor.sends(SetBand))
        logs.log_decisions(log, report.applied, round_id)
        self._prune_decisions(now)
        forgotten = self.accounts.forget_finished()
        self.submit_order.forget(forgotten)
        for job_id in forgotten:
            self.levers.forget(job_id)  # every family's book (LeverBook.forget)
            self.contract.forget(job_id)
        self.usage.collect(now)
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
        AdminComment lines are written in quiet rounds too, when due.

        A running job no victim rule may preempt changes only its own queue when it
        crosses a threshold (Plan.acts_until_s): that queue, shown in its line, the store
        and explain, may lag the crossing by up to admin_comment_refresh_s, as the rest of
        its line does, so that a site with thousands of such runs still has quiet rounds
        (at 55,000 jobs one of them crossed every few seconds). Not under ``preemption:
        slurm``, where a running job's band is its queue's (running_site_factors)."""
        cfg = self.config
        if (report.applied or leaving or self.handoffs.watching or self.levers.bands_waiting
                or self.contract.reads_left <= 0 or cfg.partition_moves or cfg.gpu_sharing):
            return -math.inf
        until = plan.stands_until_s
        if not strategy_for(cfg.preemption).running_banded:
            until = max(until, min(plan.acts_until_s, until + cfg.admin_comment_refresh_s))
        pins = self.levers.pins
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
            self.levers.comment(self.last_plan, observed, now)
            report.levers = self.executor.end_round(round_id)
            self.inputs.note_updates(report.levers, observed, self.executor.sends(SetBand))
        self._prune_decisions(now)
        self.usage.collect(now)
        self.last_observation = observation
        if self.metrics is not None:
            self.metrics.observe_round(self, self.last_plan, report, time.perf_counter() - started,
                                       slurm_calls=self._slurm_calls_since_mark())
        return report

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
        return self.inputs.plan(observed, observation, observation.observed_at_s, 0, self.preemptions.leaving(),
                                self.service, explain=True), observation

    @property
    def unmodelled(self):
        """The last plan's pending jobs whose request it cannot express (RoundInput.unmodelled)."""
        return self.inputs.unmodelled

    @property
    def _specs(self) -> dict[str, tuple]:
        return self.inputs.specs

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


def _one_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return shorten(text[0] if text else type(err).__name__, 200)

"""The controller loop: observe -> account -> plan -> apply, every interval and on change.

Attained service is kept per job in the store and advanced from what Slurm
reports, so it survives requeues and controller restarts: a job seen running at
two observations with the same restart count ran all the time in between.
Preemption is a small persisted state machine (signal, grace, requeue), so a
killed and restarted controller never requeues a job twice.
"""
from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from controller.service.backend import Backend, BackendUnavailable, Observation, ObservedJob
from controller.service.colocation import ShareRequest, SharedGpu, Tenant, choose_tier, job_class, plan_colocation, quota_change
from controller.service.config import Config
from controller.core.engine import Engine
from controller.service.executor import LeverExecutor
from controller.core.gittins import ServiceDistribution
from controller.core.model import JobSpec, JobState, Snapshot
from controller.partitions.moves import (MoveSettings, PendingGpuJob, RunningGpuJob, allowed_after_observation,
                                   is_candidate, plan_moves, split_partitions)
from controller.core.placement import COUNT_NODE
from controller.core.plan import Plan
from controller.service.spool import collect_spool
from controller.service.store import JobRecord, Store, StoreError

log = logging.getLogger("tiresias.controller")

ACTIVE_STATES = {"PENDING", "RUNNING"}
# Still holding resources or about to: neither schedulable nor finished.
TRANSIENT_STATES = {"COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"}
# Pending jobs the plan cannot start: leave them out of the snapshot.
UNSTARTABLE_REASONS = {"JobHeldUser", "JobHeldAdmin", "Dependency", "DependencyNeverSatisfied",
                       "PartitionDown", "PartitionInactive", "ReqNodeNotAvail"}
SKEW_HINT = re.compile(r"(?:^|[\s;,])tiresias:skew=([^\s;,]*)")


def parse_skew_hint(comment: str) -> tuple[Optional[float], Optional[str]]:
    """``tiresias:skew=0.73`` in a job comment -> (0.73, None); garbage -> (None, why)."""
    match = SKEW_HINT.search(comment or "")
    if match is None:
        return None, None
    text = match.group(1)
    try:
        value = float(text)
    except ValueError:
        return None, f"skew hint {text!r} is not a number"
    if not (0.0 <= value <= 1.0):
        return None, f"skew hint {text!r} is outside 0..1"
    return value, None


@dataclass
class RoundReport:
    round_id: int
    observed_at_s: float
    plan: Optional[Plan]
    applied: list[dict] = field(default_factory=list)
    skipped_reason: str = ""


class Controller:
    def __init__(self, config: Config, backend: Backend, store: Store, clock: Callable[[], float] = time.time,
                 metrics=None):
        self.config = config
        self.backend = backend
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.engine = Engine(config.engine_config())
        self.executor = LeverExecutor(backend, config.mode)
        self.records: dict[str, JobRecord] = store.load_jobs(config.cluster, include_finished=False)
        self.pins: dict[str, float] = {}  # job id -> expiry (epoch s)
        self.site_factors_set: dict[str, int] = {}
        self.stopped_at: dict[str, float] = {}  # job id -> when its last run was seen to stop
        self.service: Optional[ServiceDistribution] = None
        self.service_loaded_at = -math.inf
        self.last_plan: Optional[Plan] = None
        self.last_observation: Optional[Observation] = None
        self._outage_since: Optional[float] = None
        self._logged_once: set[str] = set()
        # job id -> epoch s of its last move (or would-move in shadow), for the cooldown;
        # -inf: the decision log was read and holds none.
        self.last_move_s: dict[str, float] = {}
        self.usage_collected_at = -math.inf
        self._usage_failing = False
        # job id -> signature of its last logged share decision (GPU sharing): logged once.
        self.share_logged: dict[str, tuple] = {}

    # -- the loop -----------------------------------------------------------------------
    def run_forever(self, stop: Optional[threading.Event] = None) -> None:
        """Observe every poll_s; plan when something changed or interval_s passed."""
        stop = stop or threading.Event()
        last_signature = None
        next_full = 0.0
        while not stop.is_set():
            started = self.clock()
            try:
                observation = self._observe()
            except BackendUnavailable:
                stop.wait(self.config.poll_s)
                continue
            signature = frozenset((j.job_id, j.state, j.restart_count) for j in observation.jobs)
            if signature != last_signature or started >= next_full:
                try:
                    self.run_round(observation)
                    last_signature = signature
                    next_full = started + self.config.interval_s
                except BackendUnavailable as err:
                    self._note_outage(err)
                except StoreError as err:
                    # Nothing of the round was written; the next round redoes it.
                    log.error("round skipped: %s", err)
            stop.wait(max(0.0, self.config.poll_s - (self.clock() - started)))

    def _observe(self) -> Observation:
        try:
            observation = self.backend.observe()
        except BackendUnavailable as err:
            self._note_outage(err)
            raise
        if self._outage_since is not None:
            log.warning("cluster manager answers again after %.0f s", self.clock() - self._outage_since)
            self._outage_since = None
        for line in observation.skipped:
            self._log_once(f"skipped record: {line}")
        return observation

    def _note_outage(self, err: Exception) -> None:
        if self._outage_since is None:
            self._outage_since = self.clock()
            log.warning("cluster manager unavailable, acting on nothing until it answers: %s", err)
        if self.metrics is not None:
            self.metrics.observe_outage()

    def _log_once(self, message: str) -> None:
        if message not in self._logged_once:
            self._logged_once.add(message)
            log.warning(message)

    # -- one round ------------------------------------------------------------------------
    def run_round(self, observation: Optional[Observation] = None) -> RoundReport:
        started = time.perf_counter()
        observation = observation or self._observe()
        now = observation.observed_at_s
        observed = {job.job_id: job for job in observation.jobs if job.gpus > 0}
        self._account(observed, now)
        self._finish_gone(observed, observation, now)
        self._refresh_service(now)
        round_id = self.store.next_round_id(self.config.cluster)
        leaving = {p.job_id for p in self.store.pending_preemptions(self.config.cluster)}
        snapshot = self._snapshot(observed, observation, now, round_id, leaving)
        plan = self.engine.step(snapshot)
        for job_id, level in plan.levels.items():
            self.records[job_id].level = level
        report = RoundReport(round_id, now, plan)
        self._apply(plan, observed, now, report)
        self._advance_preemptions(observed, now, report)
        self._move_partitions(plan, observed, observation.nodes, now, report)
        self._share_gpus(observation, report)
        self.store.save_jobs(self.config.cluster, self.records.values())
        if self.config.mode != "observe":
            self.store.log_decisions(self.config.cluster, round_id, now, self.config.mode, report.applied)
        self._forget_finished()
        self._collect_usage(now)
        self.last_plan = plan
        self.last_observation = observation
        if self.metrics is not None:
            self.metrics.observe_round(self, plan, report, time.perf_counter() - started)
        return report

    def preview(self) -> tuple[Plan, Observation]:
        """A read-only round for ``queue`` and ``explain``: the plan the controller
        would make now, from Slurm's state and the stored accounts; writes nothing."""
        observation = self._observe()
        observed = {job.job_id: job for job in observation.jobs if job.gpus > 0}
        self._account(observed, observation.observed_at_s)
        self._refresh_service(observation.observed_at_s)
        leaving = {p.job_id for p in self.store.pending_preemptions(self.config.cluster)}
        snapshot = self._snapshot(observed, observation, observation.observed_at_s, 0, leaving, explain=True)
        return self.engine.step(snapshot), observation

    def _account(self, observed: dict[str, ObservedJob], now: float) -> None:
        """Advance attained service and the starvation clocks from the observation."""
        for job in observed.values():
            if job.state not in ACTIVE_STATES:
                continue
            record = self.records.get(job.job_id)
            if record is None:
                skew, problem = parse_skew_hint(job.comment)
                if problem:
                    self._log_once(f"job {job.job_id}: {problem}; using skew 0")
                record = JobRecord(job_id=job.job_id, num_gpus=job.gpus,
                                   submit_time_s=job.submit_time_s or now, user=job.user,
                                   partition=job.partition, skew=skew or 0.0)
                self.records[job.job_id] = record
            last = record.last_observed_s
            if job.state == "RUNNING":
                run_start = job.start_time_s if job.start_time_s is not None else now
                same_run = record.last_running and record.restart_count == job.restart_count and last is not None
                since = max(last, run_start) if same_run else run_start
                ran = max(0.0, now - since)
                record.attained_gpu_s += job.gpus * ran
                record.queue_service_gpu_s += job.gpus * ran
                record.executed_s += ran
                record.executed_since_promotion_s += ran
                if record.first_start_s is None:
                    record.first_start_s = run_start
            else:
                since = last if last is not None else record.submit_time_s
                record.waited_since_promotion_s += max(0.0, now - since)
            if record.last_running and job.state != "RUNNING":
                self.stopped_at.setdefault(job.job_id, now)
            elif job.state == "RUNNING":
                self.stopped_at.pop(job.job_id, None)
            record.last_running = job.state == "RUNNING"
            record.restart_count = job.restart_count
            record.last_observed_s = now
            record.state = job.state
            # record.partition is the allowed set, kept from first sight: a move narrows
            # the job's partition field and must never widen what the user allowed.
            reset = allowed_after_observation(record.partition, job.partition)
            if reset is not None:
                if record.partition:
                    log.info("job %s: partition changed to %s outside its allowed set %s: allowing %s",
                             job.job_id, job.partition, record.partition, reset)
                record.partition = reset

    def _finish_gone(self, observed: dict[str, ObservedJob], observation: Observation, now: float) -> None:
        """Jobs that ended (or left Slurm's memory) become service samples."""
        trust_missing = not observation.skipped  # a job whose record failed to parse is not gone
        for job_id, record in list(self.records.items()):
            job = observed.get(job_id)
            if job is not None and (job.state in ACTIVE_STATES or job.state in TRANSIENT_STATES):
                continue
            if job is None and not trust_missing:
                continue
            end_state = job.state if job is not None else "GONE"
            end = job.end_time_s if job is not None and job.end_time_s else now
            if record.last_running and record.last_observed_s is not None and end > record.last_observed_s:
                ran = end - record.last_observed_s
                record.attained_gpu_s += record.num_gpus * ran
                record.executed_s += ran
            record.state, record.finished_s, record.end_state = "DONE", end, end_state
            if self.metrics is not None and end_state == "COMPLETED":
                self.metrics.observe_finished(record.submit_time_s, end)
            self.store.mark_finished(self.config.cluster, job_id, end, end_state, record.attained_gpu_s)
            if end_state == "COMPLETED" and record.attained_gpu_s > 0:
                self.store.add_service_sample(self.config.cluster, job_id, record.attained_gpu_s, finished_s=end)

    def _forget_finished(self) -> None:
        for job_id in [j for j, r in self.records.items() if r.state == "DONE"]:
            del self.records[job_id]
            self.pins.pop(job_id, None)
            self.site_factors_set.pop(job_id, None)
            self.stopped_at.pop(job_id, None)
            self.last_move_s.pop(job_id, None)

    def _refresh_service(self, now: float) -> None:
        if not self.engine.policy.uses_service_distribution:
            return
        if now - self.service_loaded_at < self.config.service_refresh_s:
            return
        samples = self.store.service_samples(self.config.cluster)
        self.service = ServiceDistribution(samples) if samples else None
        self.service_loaded_at = now

    def _snapshot(self, observed, observation, now, round_id, leaving, explain=False) -> Snapshot:
        jobs: list[JobState] = []
        held_gpus = 0
        candidates = [j for j in observed.values() if j.state in ACTIVE_STATES]
        candidates.sort(key=lambda j: (j.submit_time_s or 0.0, _numeric_id(j.job_id)))
        for index, job in enumerate(candidates):
            if job.state == "RUNNING" and job.job_id in leaving:
                held_gpus += job.gpus  # being preempted: its GPUs are not free yet, nor plannable
                continue
            if job.state == "PENDING" and job.reason in UNSTARTABLE_REASONS:
                continue
            record = self.records[job.job_id]
            spec = JobSpec(job.job_id, job.gpus, record.submit_time_s, None, skew=record.skew,
                           partition=job.partition, user=job.user)
            jobs.append(JobState(
                spec=spec, index=index, attained_gpu_s=record.attained_gpu_s,
                queue_service_gpu_s=record.queue_service_gpu_s, executed_s=record.executed_s,
                executed_since_promotion_s=record.executed_since_promotion_s,
                waited_since_promotion_s=record.waited_since_promotion_s,
                first_start_s=record.first_start_s, running=job.state == "RUNNING",
                placement=job.gpus_by_node if job.state == "RUNNING" else (), preemptions=record.preemptions))
        nodes = observation.nodes
        capacity = sum(n.gpus_total for n in nodes if n.available) - held_gpus
        return Snapshot(now_s=now, jobs=jobs, nodes=nodes, service=self.service, round_id=round_id,
                        capacity_gpus=max(capacity, 0), explain=explain)

    # -- applying the plan -------------------------------------------------------------------
    def _apply(self, plan: Plan, observed: dict[str, ObservedJob], now: float, report: RoundReport) -> None:
        cfg = self.config
        for action in plan.of_kind("promote"):
            record = self.records[action.job_id]
            record.queue_service_gpu_s = record.executed_since_promotion_s = record.waited_since_promotion_s = 0.0
            record.promotions += 1
            report.applied.append(_entry(action, applied=cfg.mode != "observe", detail="store"))
        # 1. SiteFactor bands: queue level -> band, plan order within the band.
        factors = self._site_factors(plan, observed)
        changed = {j: v for j, v in factors.items() if self.site_factors_set.get(j) != v
                   and observed[j].site_factor != v}
        result = self.executor.set_site_factors(changed)
        if result.applied:
            self.site_factors_set.update(changed)
        # 2. starts: pins for consolidation, release a requeued job's BeginTime
        for action in plan.of_kind("start"):
            job = observed[action.job_id]
            details = []
            nodes = sorted(node for node, _ in action.placement if node != COUNT_NODE)
            sensitive = cfg.placement == "consolidate" and self.records[job.job_id].skew > cfg.pack_limit
            if sensitive and nodes and sorted(job.required_nodes) != nodes:
                outcome = self.executor.call("pin_nodes", job.job_id, nodes)
                details.append(outcome.detail)
                if outcome.applied:
                    self.pins[job.job_id] = now + cfg.pin_expiry_s
            if job.reason == "BeginTime" and job.restart_count > 0:
                # Not at once: slurmd refuses to relaunch a job whose previous run it is
                # still tearing down (epilog) and the job then FAILS ("already killed").
                stopped = self.stopped_at.get(job.job_id)
                if stopped is None or now - stopped >= cfg.requeue_settle_s:
                    details.append(self.executor.call("release_begin_time", job.job_id).detail)
                else:
                    details.append(f"BeginTime kept {cfg.requeue_settle_s - (now - stopped):.0f}s more: "
                                   "the previous run is still being torn down")
            report.applied.append(_entry(action, applied=cfg.mode == "enforce", detail="; ".join(details)))
        # 3. expired pins
        for job_id, expiry in list(self.pins.items()):
            job = observed.get(job_id)
            if job is None or job.state != "PENDING":
                self.pins.pop(job_id)
            elif now >= expiry:
                self.executor.call("pin_nodes", job_id, [])
                self.pins.pop(job_id)
        # 4. preemptions: signal now, requeue after the grace period (see _advance_preemptions)
        for action in plan.of_kind("preempt"):
            job = observed[action.job_id]
            why_not = self._protected(job, now)
            if why_not:
                report.applied.append(_entry(action, applied=False, detail=f"kept running: {why_not}"))
                continue
            if cfg.mode != "enforce":
                self.executor.call("signal", job.job_id, cfg.preempt_signal)
                self.executor.call("requeue", job.job_id)
                report.applied.append(_entry(action, applied=False,
                                             detail=f"{cfg.mode}: would signal {cfg.preempt_signal}, "
                                                    f"requeue after {cfg.preempt_grace_s:g}s"))
                continue
            if not self.store.begin_preemption(cfg.cluster, job.job_id, now, job.restart_count):
                continue  # already in progress (e.g. before a controller restart)
            if not job.requeueable:
                self.executor.call("make_requeueable", job.job_id)
            outcome = self.executor.call("signal", job.job_id, cfg.preempt_signal)
            report.applied.append(_entry(action, applied=outcome.applied,
                                         detail=f"signal {cfg.preempt_signal}; requeue after "
                                                f"{cfg.preempt_grace_s:g}s" if outcome.applied else outcome.detail))

    # -- partition moves --------------------------------------------------------------------
    def partition_nodes(self) -> Optional[dict[str, list[str]]]:
        """Partition name -> node names from the backend (``sinfo``), limited to the
        configured partitions; None when the backend offers no such map."""
        reader = getattr(self.backend, "partition_nodes", None)
        members = reader() if callable(reader) else None
        if not isinstance(members, dict):
            self._log_once("the backend offers no partition map (partition_nodes): no partition moves")
            return None
        wanted = set(self.config.partitions)
        return {name: list(nodes) for name, nodes in members.items() if not wanted or name in wanted}

    def _move_partitions(self, plan: Plan, observed: dict[str, ObservedJob], nodes: list, now: float,
                         report: RoundReport) -> None:
        """Move pending jobs among the partitions their users allowed (controller.partitions.moves)."""
        cfg = self.config
        if not cfg.partition_moves:
            return
        pending, running = [], []
        for job_id in plan.order:
            job = observed.get(job_id)
            if job is None or job.state != "PENDING" or job_id not in self.records:
                continue
            frozen = "pinned to nodes" if job_id in self.pins or job.required_nodes else ""
            pending.append(PendingGpuJob(
                job_id, job.gpus, split_partitions(self.records[job_id].partition), split_partitions(job.partition),
                rank=len(pending), queued_s=now - (job.submit_time_s or now), frozen=frozen))
        candidates = [p.job_id for p in pending if is_candidate(p)]
        if not candidates:
            return
        members = self.partition_nodes()
        if members is None:
            return
        for job in observed.values():
            if job.state == "RUNNING" and job.gpus_by_node:
                ran = now - job.start_time_s if job.start_time_s is not None else 0.0
                running.append(RunningGpuJob(job.job_id, job.gpus_by_node, ran))
        for job_id in candidates:
            self._load_last_move(job_id)
        settings = MoveSettings(cfg.partition_allocator, cfg.partition_move_min_gain_s, cfg.partition_move_cooldown_s,
                                cfg.partition_duration_estimate_s)
        try:
            moves = plan_moves(now, members, nodes, pending, running, settings,
                               {j: t for j, t in self.last_move_s.items() if t > -math.inf})
        except Exception as err:  # an optional layer: never lose the round over it
            self._log_once(f"partition moves skipped: {type(err).__name__}: {err}")
            return
        for number, move in enumerate(moves.moves, 1):
            outcome = self.executor.call("move_partition", move.job_id, move.to_partition)
            self.last_move_s[move.job_id] = now
            if outcome.applied:
                self.records[move.job_id].moves += 1
            report.applied.append({"decision_id": f"r{report.round_id}.m{number}", "job_id": move.job_id,
                                   "kind": "move", "reason": f"{move.from_partition} -> {move.to_partition}: "
                                   f"{move.reason}", "applied": outcome.applied, "detail": outcome.detail})

    def _load_last_move(self, job_id: str) -> None:
        """The cooldown survives a restart: read the job's last move from the decision log once."""
        if job_id in self.last_move_s:
            return
        last = -math.inf
        for entry in self.store.decisions(self.config.cluster, job_id=job_id, limit=200):
            if entry["kind"] == "move" and entry["mode"] == self.config.mode:
                last = float(entry["now_s"])
                break
        self.last_move_s[job_id] = last

    # -- GPU sharing (MPS co-location) -----------------------------------------------------------
    def _share_gpus(self, observation: Observation, report: RoundReport) -> None:
        """Apply controller.service.colocation to MPS jobs (``--gres=mps:N``, 100 shares per GPU).

        Pending MPS jobs whose planned tier differs from their request get it through
        ``set_mps_share`` (pending only: an MPS quota is fixed for a client's life). A
        job no GPU admits now waits: logged once, no lever. Running jobs are never
        changed: a different wanted tier is logged as quota_change's advice, never
        requeued for. Each decision is logged once per (job, outcome), so shadow mode
        does not repeat a would-share every round.

        Approximation: the observation has no GPU index for MPS jobs, so each node's
        GPUs not held by whole-GPU jobs (``Node.gpus_free``) are a pool and the running
        MPS jobs on the node are packed into them first fit (one user per GPU unless
        mps_allow_multi_user). Slurm still chooses the GPU; the pool only decides
        which jobs wait. ``ObservedJob.mps`` is a job's total over its nodes: a pending
        job asking for more than one GPU's worth is left alone.
        """
        if not self.config.gpu_sharing:
            return
        try:
            decisions = self._plan_shares(observation)
        except Exception as err:  # an optional layer: never lose the round over it
            self._log_once(f"GPU sharing skipped: {type(err).__name__}: {err}")
            return
        for number, (job_id, signature, reason, tier) in enumerate(decisions, 1):
            if tier is not None:
                outcome = self.executor.call("set_mps_share", job_id, tier)
                applied, detail = outcome.applied, outcome.detail
            else:
                applied, detail = False, signature[0]
            self.share_logged[job_id] = signature
            report.applied.append({"decision_id": f"r{report.round_id}.s{number}", "job_id": job_id,
                                   "kind": "share", "reason": reason, "applied": applied, "detail": detail})

    def _plan_shares(self, observation: Observation) -> list[tuple[str, tuple, str, Optional[int]]]:
        """(job id, signature, reason, tier to set or None) per decision to log now."""
        policy = self.config.colocation_policy()
        pending: list[ObservedJob] = []
        running: list[tuple[ObservedJob, int]] = []  # (job, share per node)
        for job in observation.jobs:
            if job.mps <= 0 or job.gpus > 0:
                continue
            if job.state == "PENDING":
                if job.mps > 100:
                    self._log_once(f"job {job.job_id}: asks for {job.mps} MPS shares, more than one GPU's "
                                   "worth (several nodes?): its share is left alone")
                    continue
                pending.append(job)
            elif job.state in ("RUNNING", "CONFIGURING", "COMPLETING") and job.nodes:
                running.append((job, job.mps // len(job.nodes)))
        # Startable jobs first: a held job must not take the room of one that can start.
        pending.sort(key=lambda j: (j.reason in UNSTARTABLE_REASONS, j.submit_time_s or 0.0, _numeric_id(j.job_id)))
        for job in pending:
            problem = job_class(job.comment)[1]
            if problem:
                self._log_once(f"job {job.job_id}: {problem}")
        requests = [ShareRequest(j.job_id, j.user, j.comment or "", j.mps) for j in pending]
        gpus = _shared_gpus(observation.nodes, running, policy)
        decisions = []
        for job, action in zip(pending, plan_colocation(requests, gpus, policy)):
            if action.kind == "place" and action.tier != job.mps:
                signature = ("set", action.tier, job.mps)
                if self.share_logged.get(job.job_id) != signature:
                    decisions.append((job.job_id, signature, f"MPS share {job.mps}% -> {action.tier}%: "
                                      f"{action.reason}", action.tier))
            elif action.kind == "wait":
                signature = ("waits: no GPU admits it now; share left unchanged", action.tier, job.mps)
                if self.share_logged.get(job.job_id, ("",))[0] != signature[0]:
                    decisions.append((job.job_id, signature, action.reason, None))
            else:
                self.share_logged.pop(job.job_id, None)  # placed at the tier it asked for
        for job, share in running:
            wanted, _, tier_reason = choose_tier(ShareRequest(job.job_id, job.user, job.comment or "", share), policy)
            if wanted == share:
                continue
            advice = quota_change(job.job_id, share, wanted, job.requeueable, policy)
            signature = (f"advice only ({advice.kind}): running jobs are not requeued for a quota change",
                         job.restart_count, share, wanted)
            if self.share_logged.get(job.job_id) != signature:
                decisions.append((job.job_id, signature, f"{tier_reason}; {advice.reason}", None))
        current = {j.job_id for j in pending} | {j.job_id for j, _ in running}
        for job_id in [j for j in self.share_logged if j not in current]:
            del self.share_logged[job_id]
        return decisions

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

    def _site_factors(self, plan: Plan, observed: dict[str, ObservedJob]) -> dict[str, int]:
        """Pending jobs only: band (K - level) x width, minus the rank inside the level."""
        band = self.config.site_factor_band
        levels = len(self.config.queues_gpu_s) + 1
        rank_in_level: dict[int, int] = {}
        factors: dict[str, int] = {}
        for job_id in plan.order:
            job = observed.get(job_id)
            if job is None or job.state != "PENDING":
                continue
            level = plan.levels.get(job_id, 0)
            rank = rank_in_level.get(level, 0)
            rank_in_level[level] = rank + 1
            factors[job_id] = (levels - level) * band + max(band - 1 - rank, 0)
        return factors

    def _protected(self, job: ObservedJob, now: float) -> str:
        """Why a running job must not be preempted, or ''."""
        cfg = self.config
        if not job.batch:
            return "not a batch job"
        if not job.requeueable and not cfg.make_requeueable:
            return "not requeueable (Requeue=0)"
        ran = now - job.start_time_s if job.start_time_s is not None else 0.0
        if ran < cfg.preempt_min_runtime_s:
            return f"ran {ran:.0f}s < preempt_min_runtime_s {cfg.preempt_min_runtime_s:g}"
        record = self.records[job.job_id]
        if record.preemptions >= cfg.preempt_max_per_job:
            return f"already preempted {record.preemptions} times (preempt_max_per_job)"
        return ""

    def _advance_preemptions(self, observed: dict[str, ObservedJob], now: float, report: RoundReport) -> None:
        """Requeue signalled jobs whose grace period is over; close what resolved itself."""
        if self.config.mode != "enforce":
            return
        cluster = self.config.cluster
        for pending in self.store.pending_preemptions(cluster):
            job = observed.get(pending.job_id)
            if job is None or job.state not in ACTIVE_STATES | TRANSIENT_STATES:
                self.store.finish_preemption(cluster, pending.job_id, "finished", now)
                continue
            if job.restart_count > pending.restart_count or job.state == "PENDING":
                # Requeued, but the process that did it died before recording it:
                # count the preemption now, so preempt_max_per_job still holds.
                if self.store.finish_preemption(cluster, pending.job_id, "requeued", now):
                    record = self.records.get(job.job_id)
                    if record is not None:
                        record.preemptions += 1
                continue
            if job.state == "RUNNING" and now >= pending.signalled_at_s + self.config.preempt_grace_s:
                outcome = self.executor.call("requeue", job.job_id)
                if outcome.applied:
                    self.stopped_at[job.job_id] = now
                    self.store.finish_preemption(cluster, job.job_id, "requeued", now)
                    record = self.records.get(job.job_id)
                    if record is not None:
                        record.preemptions += 1
                report.applied.append({"decision_id": f"r{report.round_id}.requeue", "job_id": job.job_id,
                                       "kind": "requeue", "applied": outcome.applied,
                                       "reason": f"grace period of {self.config.preempt_grace_s:g}s over",
                                       "detail": outcome.detail})


def _shared_gpus(nodes, running: list[tuple[ObservedJob, int]], policy) -> list[SharedGpu]:
    """Each available node's GPUs not held by whole-GPU jobs, with the running MPS jobs
    packed into them first fit (the observation has no GPU index for MPS jobs)."""
    tenants: dict[str, list[Tenant]] = {}
    for job, share in sorted(running, key=lambda item: (item[0].user, _numeric_id(item[0].job_id))):
        klass = job_class(job.comment)[0]
        for node in job.nodes:
            tenants.setdefault(node, []).append(Tenant(job.job_id, job.user, share, klass))
    gpus = []
    for node in sorted(nodes, key=lambda n: n.name):
        if not node.available or node.gpus_free <= 0:
            continue
        slots: list[list[Tenant]] = [[] for _ in range(node.gpus_free)]
        for tenant in tenants.get(node.name, []):
            fits = [slot for slot in slots if sum(t.tier for t in slot) + tenant.tier <= 100
                    and len(slot) < policy.max_tenants
                    and (policy.allow_multi_user or all(t.user == tenant.user for t in slot))]
            target = fits[0] if fits else min(slots, key=lambda slot: sum(t.tier for t in slot))
            target.append(tenant)
        gpus.extend(SharedGpu(node.name, index, tuple(slot)) for index, slot in enumerate(slots))
    return gpus


def _entry(action, *, applied: bool, detail: str = "") -> dict:
    return {"decision_id": action.decision_id, "job_id": action.job_id, "kind": action.kind,
            "reason": action.reason, "applied": applied, "detail": detail}


def _numeric_id(job_id: str) -> tuple:
    head, _, tail = job_id.partition("_")
    return (int(head) if head.isdigit() else 0, tail, job_id)

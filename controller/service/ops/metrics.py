"""Prometheus metrics of the controller (names carry their units).

A private registry, so tests and several controllers in one process never clash.
"""
from __future__ import annotations

from collections import Counter as _Tally

from typing import Mapping, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from controller.service.ops.unmodelled import REASONS

# Job completion and queueing times: a minute to two weeks.
DURATION_BUCKETS_S = (60, 300, 600, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 12 * 3600, 86400, 2 * 86400,
                      4 * 86400, 7 * 86400, 14 * 86400)
# A quiet round is 2-3 reads (squeue, sinfo, maybe sprio); busy rounds add batched levers.
SLURM_CALL_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)


class Metrics:
    def __init__(self, mode: str):
        self.mode = mode
        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("tiresias_jobs", "GPU jobs by MLFQ level (1-based) and state",
                          ["mode", "level", "state"], registry=r)
        self.preemptions = Counter("tiresias_preemptions_total", "preemptions signalled (checkpoint + requeue)",
                                   ["mode"], registry=r)
        self.partition_moves = Counter("tiresias_partition_moves_total", "pending jobs moved between partitions",
                                       ["mode"], registry=r)
        self.decisions = Counter("tiresias_decisions_total", "planned actions by type and whether applied",
                                 ["mode", "kind", "applied"], registry=r)
        self.round_seconds = Histogram("tiresias_round_duration_seconds", "wall time of one round",
                                       ["mode"], registry=r,
                                       buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.outages = Counter("tiresias_backend_unavailable_total",
                               "outages: times the cluster manager stopped answering (not the polls that failed)",
                               ["mode"], registry=r)
        self.incremental_mismatches = Counter(
            "tiresias_incremental_mismatches_total",
            "jobs whose reused plan input differed from the one a full round built again (full_round_every_s): "
            "a defect to report; that round planned from the new one", ["mode"], registry=r)
        self.failed_rounds = Counter("tiresias_failed_rounds_total",
                                     "rounds begun and not completed, whatever the cause: the store (locked, "
                                     "unreachable, lease lost), Slurm stopping mid-round, odd data, a bug "
                                     "(logged; state reloaded from the store)",
                                     ["mode"], registry=r)
        # Histograms (not Summaries): the dashboard's JCT percentiles come from the buckets
        # (histogram_quantile), across controllers and time windows; a Summary has no quantiles here.
        self.jct = Histogram("tiresias_job_completion_time_seconds", "JCT of jobs finished while observed",
                             ["mode"], registry=r, buckets=DURATION_BUCKETS_S)
        self.queue_wait = Histogram("tiresias_queue_wait_seconds", "time a job waited before its first start",
                                    ["mode"], registry=r, buckets=DURATION_BUCKETS_S)
        self.requeues = Counter("tiresias_requeues_total", "preempted jobs requeued (after their grace period)",
                                ["mode"], registry=r)
        self.failed_handoffs = Counter("tiresias_handoffs_failed_total",
                                       "jobs a preemption made room for that Slurm did not start within "
                                       "handoff_timeout_s (each then braked)", ["mode"], registry=r)
        self.braked_jobs = Gauge("tiresias_handoff_braked_jobs",
                                 "pending jobs no preemption is made for: their last handoff failed and nothing "
                                 "they depend on changed since", ["mode"], registry=r)
        self.slurm_calls = Counter("tiresias_slurm_calls_total",
                                   "Slurm commands run (squeue, sinfo, sprio, scontrol, scancel), rounds and polls",
                                   ["mode", "command"], registry=r)
        self.slurm_calls_per_round = Histogram("tiresias_slurm_calls_per_round",
                                               "Slurm commands run by one round (its observation included)",
                                               ["mode"], registry=r, buckets=SLURM_CALL_BUCKETS)
        self.attained = Gauge("tiresias_attained_gpu_seconds", "total attained service of active jobs",
                              ["mode"], registry=r)
        # The heartbeat: an alert on time() - this (packaging/prometheus/tiresias-alerts.yml)
        # tells an admin the controller stopped while its SiteFactor bands stay frozen.
        self.last_round = Gauge("tiresias_last_round_timestamp_seconds",
                                "epoch time at which the controller's last round ended", ["mode"], registry=r)
        # Requests the plan does not model (controller.service.ops.unmodelled): every reason
        # exported each round, 0 when none, so a reason that had jobs drops to 0.
        self.unmodelled = Gauge("tiresias_unmodelled_jobs",
                                "pending GPU jobs whose request the plan cannot express, by reason (a job with "
                                "two reasons counts under each): none of them causes a preemption",
                                ["mode", "reason"], registry=r)
        self.unmodelled_share = Gauge("tiresias_unmodelled_pending_ratio",
                                      "share of the pending GPU jobs the plan weighs that cannot cause a preemption "
                                      "(unmodelled); above 0.2 the controller is not reordering this site",
                                      ["mode"], registry=r)
        self.updates_waiting = Gauge("tiresias_slurm_updates_waiting",
                                     "updates held back by the RPC budget (slurm_rpc_per_s, slurm_rpc_burst) at "
                                     "the end of the round, by lever (band, admin_comment): sent in later rounds",
                                     ["mode", "lever"], registry=r)
        self._seen_levels: set[tuple[str, str]] = set()
        self._started: set[str] = set()

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def observe_outage(self) -> None:
        """The cluster manager stopped answering (once per outage, however many polls fail)."""
        self.outages.labels(self.mode).inc()

    def observe_incremental_mismatches(self, count: int) -> None:
        self.incremental_mismatches.labels(self.mode).inc(count)

    def observe_failed_round(self) -> None:
        self.failed_rounds.labels(self.mode).inc()

    def observe_slurm_calls(self, calls: Mapping[str, int], in_round: bool) -> None:
        """Slurm commands by name (``calls``: command -> count) since the last call;
        ``in_round``: they belong to one round (else to polls that found no change)."""
        for command, count in calls.items():
            if count:
                self.slurm_calls.labels(self.mode, command).inc(count)
        if in_round:
            self.slurm_calls_per_round.labels(self.mode).observe(sum(calls.values()))

    def observe_round(self, controller, plan, report, seconds: float,
                      slurm_calls: Optional[Mapping[str, int]] = None) -> None:
        """One round: its wall time (s), levels, decisions; ``slurm_calls`` (command ->
        count) when the backend counts its commands."""
        self.round_seconds.labels(self.mode).observe(seconds)
        if slurm_calls is not None:
            self.observe_slurm_calls(slurm_calls, in_round=True)
        tally = _Tally()
        total_attained = 0.0
        for job_id, record in controller.records.items():
            level = str(plan.levels.get(job_id, record.level) + 1)
            tally[(level, record.state)] += 1
            total_attained += record.attained_gpu_s
            if record.first_start_s is not None and job_id not in self._started:
                self._started.add(job_id)
                self.queue_wait.labels(self.mode).observe(max(0.0, record.first_start_s - record.submit_time_s))
        for key in self._seen_levels - set(tally):
            self.jobs.labels(self.mode, *key).set(0)
        for (level, state), count in tally.items():
            self.jobs.labels(self.mode, level, state).set(count)
        self._seen_levels |= set(tally)
        self._started.intersection_update(controller.records)  # forget jobs the controller forgot: bounded
        self.attained.labels(self.mode).set(total_attained)
        self.last_round.labels(self.mode).set(controller.clock())
        for entry in report.applied:
            applied = "true" if entry.get("applied") else "false"
            self.decisions.labels(self.mode, entry["kind"], applied).inc()
            if entry["kind"] == "preempt" and entry.get("applied"):
                self.preemptions.labels(self.mode).inc()
            if entry["kind"] == "move" and entry.get("applied"):
                self.partition_moves.labels(self.mode).inc()
            if entry["kind"] == "requeue" and entry.get("applied"):
                self.requeues.labels(self.mode).inc()
            if entry["kind"] == "handoff" and not entry.get("applied"):
                self.failed_handoffs.labels(self.mode).inc()
        self.braked_jobs.labels(self.mode).set(len(controller.handoffs.braked))
        self.updates_waiting.labels(self.mode, "band").set(controller.levers.bands_waiting)
        self.updates_waiting.labels(self.mode, "admin_comment").set(controller.admin_comments.waiting)
        census = getattr(controller, "unmodelled", None)
        if census is not None:
            self.observe_unmodelled(census)

    def observe_unmodelled(self, census) -> None:
        """The round's census (controller.service.ops.unmodelled.Census): jobs per reason, and the share."""
        by_reason = census.by_reason()
        for code in REASONS:
            self.unmodelled.labels(self.mode, code).set(len(by_reason.get(code, ())))
        self.unmodelled_share.labels(self.mode).set(census.share)

    def observe_finished(self, submit_s: float, end_s: float) -> None:
        self.jct.labels(self.mode).observe(max(0.0, end_s - submit_s))

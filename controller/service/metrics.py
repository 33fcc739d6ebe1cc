"""Prometheus metrics of the controller (names carry their units).

A private registry, so tests and several controllers in one process never clash.
"""
from __future__ import annotations

from collections import Counter as _Tally

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, start_http_server


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
        self.outages = Counter("tiresias_backend_unavailable_total", "rounds skipped: cluster manager unavailable",
                               ["mode"], registry=r)
        self.jct = Summary("tiresias_job_completion_time_seconds", "JCT of jobs finished while observed",
                           ["mode"], registry=r)
        self.queue_wait = Summary("tiresias_queue_wait_seconds", "time a job waited before its first start",
                                  ["mode"], registry=r)
        self.attained = Gauge("tiresias_attained_gpu_seconds", "total attained service of active jobs",
                              ["mode"], registry=r)
        self._seen_levels: set[tuple[str, str]] = set()
        self._started: set[str] = set()

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def observe_outage(self) -> None:
        self.outages.labels(self.mode).inc()

    def observe_round(self, controller, plan, report, seconds: float) -> None:
        self.round_seconds.labels(self.mode).observe(seconds)
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
        self.attained.labels(self.mode).set(total_attained)
        for entry in report.applied:
            applied = "true" if entry.get("applied") else "false"
            self.decisions.labels(self.mode, entry["kind"], applied).inc()
            if entry["kind"] == "preempt" and entry.get("applied"):
                self.preemptions.labels(self.mode).inc()
            if entry["kind"] == "move" and entry.get("applied"):
                self.partition_moves.labels(self.mode).inc()

    def observe_finished(self, submit_s: float, end_s: float) -> None:
        self.jct.labels(self.mode).observe(max(0.0, end_s - submit_s))

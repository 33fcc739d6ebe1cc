"""Attained service per job, advanced from what the cluster manager reports.

The accounts live in the store (one JobRecord per job), so they survive requeues and
controller restarts: a job seen running at two observations with the same restart
count ran all the time in between. Ended jobs become service samples (GPU-seconds)
for the Gittins policies.
"""
from __future__ import annotations

import logging
import operator
from itertools import compress
from typing import Callable, Optional

from controller.core.hints import parse_skew_hint  # the one hint grammar (controller.core.hints)
from controller.partitions.moves import allowed_after_observation
from controller.service.acting.backend import ACTIVE_STATES, TRANSIENT_STATES, Observation, ObservedJob, numeric_id
from controller.service.state.store import JobRecord, Store

log = logging.getLogger("tiresias.controller")

# How an ended job's attained service counts as a sample of the service distribution:
# it ran to its own end (complete), or it was cut short (censored: it needed more).
# GONE is a job that left Slurm's memory while unseen: its end is unknown.
COMPLETE_SAMPLE_STATES = {"COMPLETED", "FAILED"}
CENSORED_SAMPLE_STATES = {"CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "DEADLINE", "OUT_OF_MEMORY",
                          "BOOT_FAIL", "GONE"}
# A pending job whose record only moved its clocks (its wait since the last promotion,
# last_observed_s: Accounts._advance_clocks) is written every
# PENDING_CLOCKS_EVERY_ROUNDS rounds, a share of the pending jobs each round: writing
# every pending row every round was a third of a round, and an eighth of them still
# 6,000 rows of the 55,000-job round (its store 120 ms; 85 ms with a 32nd,
# bench/bench_round.py). The row then lags at most that many rounds, which a reload
# catches up (advance counts a job still pending as waiting since its stored
# last_observed_s); only a job that started while the controller was down loses the
# lag, from its starvation wait clock (read only by a finite promote_knob). A clean
# stop writes every row (Accounts.save_all). Running jobs are written every round:
# their attained service is what the policy ranks by, and one that ends while the
# controller is down is credited from its stored time (at most gone_credit_s more
# when Slurm forgot it).
PENDING_CLOCKS_EVERY_ROUNDS = 32
_NOT_ENDED = frozenset(ACTIVE_STATES | TRANSIENT_STATES)
# Which pending jobs Slurm would start (the rest wait in the plan): controller.service.round.startable.


class Accounts:
    """The active jobs' records (job id -> JobRecord) and when each last stopped running.

    ``stopped_at`` (job id -> epoch s) is when a job's last run was seen to stop: the
    requeue settle time counts from it.
    """

    def __init__(self, store: Store, cluster: str, metrics=None, log_once: Callable[[str], None] = log.warning,
                 gone_credit_s: float = 2.0):
        self.store = store
        self.cluster = cluster
        self.gone_credit_s = gone_credit_s
        self.metrics = metrics
        self.log_once = log_once
        self.records: dict[str, JobRecord] = store.load_jobs(cluster, include_finished=False)
        self.closed: set[str] = set()  # ended jobs Slurm still lists that the store already holds
        self.stopped_at: dict[str, float] = {}
        self.rounds = 0  # advance() calls: which share of the clocks is written (PENDING_CLOCKS_EVERY_ROUNDS)
        # Records changed through the methods below since the last save(): what
        # save_touched() writes (the next save() compares every record anyway).
        self.touched: set[str] = set()
        self.done: list[str] = []  # closed by finish_gone, not yet forgotten (forget_finished)
        # the records of the jobs the last full advance() found running (with their
        # GPUs and run start), and pending: what a quiet advance moves the clocks of
        self._running: list[tuple[JobRecord, int, float]] = []
        self._running_ids: dict[str, None] = {}  # (the running jobs' ids, kept across advances)
        self._pending: dict[str, JobRecord] = {}  # job id -> its record (kept across advances)
        self._seen: dict[str, ObservedJob] = {}  # job id -> the ObservedJob the last advance() read
        self._changed: list[JobRecord] = []  # read whole by advance() since the last save()
        self._placed_levels: dict[str, int] = {}  # the levels the last place() was given
        # job id -> the start its current run is charged from, and its MLFQ place then,
        # while it runs: a later observation that moves that start (slurm_clock measured
        # the clocks' offset only then, as on 22.05) takes back what was charged before
        # the true start, and the demotion that charge made
        self._charged_from: dict[str, tuple[float, tuple[Optional[int], Optional[float]]]] = {}
        # the jobs that ever ran (first_start_s set): a pending one is a requeued one,
        # which the SiteFactor bands put first in its level (controller.core.levers.bands)
        self.started_once: set[str] = {job_id for job_id, r in self.records.items() if r.first_start_s is not None}

    def advance(self, observed: dict[str, ObservedJob], now: float, quiet: bool = False) -> None:
        """Advance attained service and the starvation clocks to ``now`` (epoch s).
        ``quiet``: ``observed`` shows the jobs in the states of the last call (a repeated
        observation: controller.service.round.daemon's quiet round), so only the clocks move,
        for the jobs that call found running or pending (a loop over 12,000 jobs less).
        Otherwise a job whose ObservedJob is the very object of the last call (the
        backend keeps it while Slurm's record is unchanged: most jobs) moves its clocks
        only; the others are read whole and remembered as changed (save writes them).
        The jobs read whole are found by identity tests in C, and the pending ones kept
        across calls: a loop over every job was a tenth of a round at 110,000 jobs."""
        self.rounds += 1
        if quiet:
            self._advance_clocks(now)
            return
        last_seen, pending, running_ids = self._seen, self._pending, self._running_ids
        changed, records, full = self._changed, self.records, self._advance_job
        if last_seen:
            fresh = list(compress(observed, map(operator.is_not, observed.values(), map(last_seen.get, observed))))
            for job_id in last_seen.keys() - observed.keys():
                pending.pop(job_id, None)
                running_ids.pop(job_id, None)
        else:
            fresh = list(observed)
            pending.clear()
            running_ids.clear()
        for job_id in fresh:  # new, or its record changed: read whole
            job = observed[job_id]
            pending.pop(job_id, None)
            running_ids.pop(job_id, None)
            state = job.state
            if state == "RUNNING":
                changed.append(full(job, now))
                running_ids[job_id] = None
            elif state == "PENDING":
                pending[job_id] = full(job, now)
                changed.append(pending[job_id])
        running = []
        for job_id in running_ids:  # an MPS job's service in GPU-equivalents (mps:50: half a GPU)
            job, record = observed[job_id], records.get(job_id)
            if record is None:  # (forgotten since it was read: read whole again, as when new)
                record = full(job, now)
                changed.append(record)
            running.append((record, job.gpus or job.gpu_equivalents,
                            # (a start after now, from a clock ahead of ours: from the last observation)
                            job.start_time_s if job.start_time_s is not None and job.start_time_s <= now
                            else record.last_observed_s))
        self._seen, self._running = dict(observed), running
        self._advance_clocks(now)

    def forget_reuse(self) -> None:
        """The next advance() reads every job whole (a full round)."""
        self._seen = {}

    def _advance_clocks(self, now: float) -> None:
        """The clocks of the jobs the last advance found running (service: GPUs x the
        time since the last observation or the run's start, the later) and pending
        (the wait since the last observation). A job read whole this round has its
        last observation at ``now`` already: nothing added twice."""
        for record, gpus, run_start in self._running:
            last = record.last_observed_s
            ran = max(0.0, now - (last if last >= run_start else run_start))
            gpu_s = gpus * ran
            record.attained_gpu_s += gpu_s
            record.queue_service_gpu_s += gpu_s
            record.executed_s += ran
            record.executed_since_promotion_s += ran
            record.last_observed_s = now
        for record in self._pending.values():
            record.waited_since_promotion_s += max(0.0, now - record.last_observed_s)
            record.last_observed_s = now

    def _advance_job(self, job: ObservedJob, now: float) -> JobRecord:
        """One job read whole: its state, restart count, partition and first start as
        observed now; its clocks up to the last observation (or its run's start, when
        this is another run), from where _advance_clocks moves them to ``now``."""
        record = self.records.get(job.job_id)
        if record is None:
            record = self._first_sight(job, now)
        last = record.last_observed_s
        if job.state == "RUNNING":
            run_start = job.start_time_s if job.start_time_s is not None else now
            same_run = record.last_running and record.restart_count == job.restart_count and last is not None
            if not same_run:
                # Another run: it began after the last observation of the job (pending, or
                # in its last run) and not after now, whatever a start time from another
                # clock says (controller.service.round.slurm_clock moves Slurm's onto ours; this
                # bounds what a clock it could not measure yet would charge).
                run_start = min(run_start if last is None else max(run_start, last), now)
            if same_run:
                self._take_back(record, job, run_start)
            else:
                self._charged_from[job.job_id] = (run_start, (record.queue_level, record.queue_entry))
            record.last_observed_s = max(record.last_observed_s, run_start) if same_run else run_start
            if record.first_start_s is None:
                record.first_start_s = run_start
                self.started_once.add(job.job_id)
        else:
            self._charged_from.pop(job.job_id, None)
            record.last_observed_s = last if last is not None else record.submit_time_s
        if record.last_running and job.state != "RUNNING":
            self.stopped_at.setdefault(job.job_id, now)
        elif job.state == "PENDING" and job.restart_count > 0 and job.waits_for in (
                "begin_time_after_requeue", "begin_time"):
            # Requeued before this process saw it stop (e.g. across a restart): the
            # settle time counts from now, never from an unknown past.
            self.stopped_at.setdefault(job.job_id, now)
        elif job.state == "RUNNING":
            self.stopped_at.pop(job.job_id, None)
        record.last_running = job.state == "RUNNING"
        record.restart_count = job.restart_count
        record.state = job.state
        # record.partition is the allowed set, kept from first sight: a move narrows
        # the job's partition field and must never widen what the user allowed.
        reset = None if job.partition == record.partition else allowed_after_observation(
            record.partition, job.partition)  # the same field: nothing to reset (the usual round)
        if reset is not None:
            if record.partition:
                log.info("job %s: partition changed to %s outside its allowed set %s: allowing %s",
                         job.job_id, job.partition, record.partition, reset)
            record.partition = reset
        return record

    def _take_back(self, record: JobRecord, job: ObservedJob, run_start: float) -> None:
        """The run's start moved later than the one it was charged from (its first
        sight ran on a clock the controller had not measured yet: 22.05 says slurmctld's
        time only through jobs seen starting): the seconds charged before the true start,
        up to the last observation, are taken back from every clock they went into, and
        its MLFQ place is the one it had when the run was first charged (a demotion by
        the over-charge undone; the next round places it by its corrected service)."""
        charged = self._charged_from.get(job.job_id)
        if charged is None or run_start <= charged[0] or record.last_observed_s is None:
            return
        charged_from, place = charged
        self._charged_from[job.job_id] = (run_start, place)
        over_s = min(run_start, record.last_observed_s) - charged_from
        if over_s <= 0:
            return
        gpu_s = (job.gpus or job.gpu_equivalents) * over_s
        record.attained_gpu_s = max(0.0, record.attained_gpu_s - gpu_s)
        record.queue_service_gpu_s = max(0.0, record.queue_service_gpu_s - gpu_s)
        record.executed_s = max(0.0, record.executed_s - over_s)
        record.executed_since_promotion_s = max(0.0, record.executed_since_promotion_s - over_s)
        if record.first_start_s == charged_from:  # this is its first run: it began then too
            record.first_start_s = run_start
        record.queue_level, record.queue_entry = place
        log.info("job %s: its run started %.0f s later than charged (the clocks' offset measured since): "
                 "%.0f GPU-s taken back", job.job_id, over_s, gpu_s)

    def _first_sight(self, job: ObservedJob, now: float) -> JobRecord:
        skew, problem = parse_skew_hint(job.comment)
        if problem:
            self.log_once(f"job {job.job_id}: {problem}; using skew 0")
        record = JobRecord(job_id=job.job_id, num_gpus=job.gpus, submit_time_s=job.submit_time_s or now,
                           user=job.user, partition=job.partition, skew=skew or 0.0)
        self.records[job.job_id] = record
        return record

    def finish_gone(self, observed: dict[str, ObservedJob], observation: Observation, now: float,
                    requeueing: frozenset[str] | set[str] = frozenset()) -> None:
        """Jobs that ended (or left Slurm's memory) are closed in the store; completed
        jobs become service samples (censored when cut short). A job seen running last is credited up to its end
        as Slurm reports it; one that left Slurm's memory (its end unknown, e.g. it ended
        while the controller was down) at most ``gone_credit_s``, never the whole gap.
        Call it inside the round's transaction: closing a job and adding its sample
        commit together. ``requeueing``: ended jobs the preemption machine requeues this
        round (they ended inside a grace period): their run is credited, the record stays
        open."""
        ended = {job_id for job_id, job in observed.items() if job.state not in _NOT_ENDED}
        self._first_sight_of_ended(observed, ended, now)
        # Set operations find the few jobs to look at; they are closed in the records' order.
        candidates = (self.records.keys() - observed.keys()) | (ended & self.records.keys())
        for job_id in [j for j in self.records if j in candidates] if candidates else ():
            record = self.records[job_id]
            if record.state == "DONE":
                continue  # closed by an earlier round that did not get to forget it
            job = observed.get(job_id)
            if job is None and observation.withholds(job_id):
                continue  # its record failed to parse, or an array task not listed: not gone
            end_state = job.state if job is not None else "GONE"
            if job is not None and job.end_time_s:
                end, ran = job.end_time_s, self._unseen_run(record, job)
            else:
                last = record.last_observed_s
                end = now
                ran = min(now - last, self.gone_credit_s) if record.last_running and last is not None else 0.0
            if ran > 0:
                record.attained_gpu_s += record.num_gpus * ran
                record.executed_s += ran
            if job_id in requeueing:
                record.queue_service_gpu_s += record.num_gpus * max(ran, 0.0)
                record.executed_since_promotion_s += max(ran, 0.0)
                record.last_running = False
                record.last_observed_s = max(record.last_observed_s or end, end)  # credited up to its end
                self.touched.add(job_id)
                continue
            record.state, record.finished_s, record.end_state = "DONE", end, end_state
            self.done.append(job_id)
            if self.metrics is not None and end_state == "COMPLETED":
                self.metrics.observe_finished(record.submit_time_s, end)
            self.store.mark_finished(self.cluster, job_id, end, end_state, record.attained_gpu_s)
            sampled = end_state in COMPLETE_SAMPLE_STATES or end_state in CENSORED_SAMPLE_STATES
            if sampled and record.attained_gpu_s > 0 and record.num_gpus > 0:  # not an MPS job: never planned
                features = ((job.user, job.account or job.partition, job.name, record.num_gpus) if job is not None
                            else ("", "", "", record.num_gpus))
                self.store.add_service_sample(self.cluster, job_id, record.attained_gpu_s, finished_s=end,
                                              censored=end_state in CENSORED_SAMPLE_STATES, features=features)

    def _first_sight_of_ended(self, observed: dict[str, ObservedJob], ended: set[str], now: float) -> None:
        """A job that ran and ended entirely while the store could not be written (or
        the controller was down) is first seen ended: give it a record, so that it is
        closed with the run Slurm reports, like any other. ``ended``: the observed jobs
        in an ended state."""
        ended = {j for j in ended if observed[j].end_time_s and j not in self.records}
        self.closed &= ended  # forget jobs Slurm no longer lists
        unknown = ended - self.closed
        if not unknown:
            return
        known = self.store.known_job_ids(self.cluster, unknown)
        self.closed |= known
        for job_id in sorted(unknown - known):
            self._first_sight(observed[job_id], now)
            self.closed.add(job_id)

    @staticmethod
    def _unseen_run(record: JobRecord, job: ObservedJob) -> float:
        """Seconds of an ended job's last run (Slurm's times) the accounts have not
        credited: all of it when it started after the last saved observation (e.g.
        while the store could not be written)."""
        last, end = record.last_observed_s, job.end_time_s
        if job.start_time_s is not None:
            since = job.start_time_s if last is None else max(job.start_time_s, last)
        elif record.last_running and last is not None:
            since = last
        else:
            since = end
        return max(0.0, end - since)

    def credit_until(self, job: ObservedJob, until: float) -> None:
        """A running job this controller just stopped (requeue): its run's service up
        to ``until`` (epoch s), which the next observation can no longer see."""
        record = self.records.get(job.job_id)
        if record is None or not record.last_running or record.last_observed_s is None:
            return
        ran = max(0.0, until - record.last_observed_s)
        record.attained_gpu_s += job.gpus * ran
        record.queue_service_gpu_s += job.gpus * ran
        record.executed_s += ran
        record.executed_since_promotion_s += ran
        record.last_observed_s = max(record.last_observed_s, until)
        self.touched.add(job.job_id)

    def place(self, levels: dict[str, int], positions: dict[str, tuple[int, Optional[float]]]) -> None:
        """The plan's level and MLFQ place (queue, entry) of each job. Only the levels
        that differ from the last plan's are compared with the records (a set
        difference in C: comparing 55,000 records was a twentieth of a round)."""
        records, touched = self.records, self.touched
        last = self._placed_levels
        for job_id, level in levels.items() - last.items() if last else levels.items():
            record = records[job_id]
            if record.level != level:
                record.level = level
                touched.add(job_id)
        self._placed_levels = dict(levels)
        for job_id, place in positions.items():
            record = records[job_id]
            if (record.queue_level, record.queue_entry) != place:
                record.queue_level, record.queue_entry = place
                touched.add(job_id)

    def promote(self, job_id: str) -> None:
        """A starvation promotion: the job's queue clocks start again from zero."""
        record = self.records[job_id]
        record.queue_service_gpu_s = record.executed_since_promotion_s = record.waited_since_promotion_s = 0.0
        record.promotions += 1
        self.touched.add(job_id)

    def count_preemption(self, job_id: str) -> None:
        record = self.records.get(job_id)
        if record is not None:
            record.preemptions += 1
            self.touched.add(job_id)

    def count_move(self, job_id: str) -> None:
        """A partition move this controller made."""
        self.records[job_id].moves += 1
        self.touched.add(job_id)

    def save(self, quiet: bool = False) -> None:
        """Write the records that changed since the last save: the running jobs' (their
        service moved), this round's share of the pending ones (see
        PENDING_CLOCKS_EVERY_ROUNDS), and those advance() read whole, finish_gone()
        closed or the methods below touched; the other records are not even compared.
        ``quiet``: after a quiet advance, which reads none whole."""
        phase = self.rounds % PENDING_CLOCKS_EVERY_ROUNDS
        records = self.records
        rows = [record for record, _, _ in self._running]
        rows += [record for record in self._pending.values()
                 if hash(record.job_id) % PENDING_CLOCKS_EVERY_ROUNDS == phase]
        rows += self._changed
        rows += [records[job_id] for job_id in self.done if job_id in records]
        rows += [records[job_id] for job_id in self.touched if job_id in records]
        self.store.save_jobs(self.cluster, rows)
        self._changed, self.touched = [], set()

    def save_all(self) -> None:
        """At a clean stop: write every active record whose row differs (no pending
        job's clock row lags behind, PENDING_CLOCKS_EVERY_ROUNDS). Nothing before the
        first advance (the records are the store's own)."""
        if self.rounds == 0:
            return
        try:
            with self.store.transaction():
                self.store.save_jobs(self.cluster, list(self.records.values()))
        except Exception as err:  # noqa: BLE001 - store down, lease lost, a bug: the stop (restore, release) goes on
            log.error("clock rows not written at stop (a restart counts from their last write): %s", err)
            return
        self._changed, self.touched = [], set()

    def save_touched(self) -> None:
        """Write the records changed through this class's methods since save(): after
        the plan, comparing all 12,000 records again found a few hundred changed."""
        records = self.records
        self.store.save_jobs(self.cluster, [records[j] for j in self.touched if j in records])
        self.touched = set()

    def forget_finished(self) -> list[str]:
        """Drop finished jobs from memory (the store keeps them); their ids."""
        done, self.done = self.done, []
        for job_id in done:
            self.records.pop(job_id, None)
            self._seen.pop(job_id, None)  # (seen again, it is read whole)
            self.stopped_at.pop(job_id, None)
            self.started_once.discard(job_id)
            self._placed_levels.pop(job_id, None)  # a record made again for it is compared again
        return done


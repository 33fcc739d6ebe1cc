"""The way back: undo every lever the controller set on Slurm jobs.

Three levers persist on a job after the controller stops acting: its SiteFactor band,
a ReqNodeList pin and our bracketed AdminComment line. ``RecordingBackend`` (the
backend the executor acts through) writes each one to the store before it goes out;
``restore()`` reads those rows and resets each lever straight through the backend
(an explicit admin action: whatever the configured mode): SiteFactor to 0, the pin
cleared, our AdminComment part removed with the site's text kept. A job's own
``--nodelist`` is never touched: only node lists the controller wrote are recorded.

What restore acts on is the store's rows, whatever partitions the controller is
configured to observe now: a job moved out of them since, or left out by a config
whose ``partitions`` changed, keeps the band the controller gave it otherwise. The
jobs the observation does not list are looked up whatever their partition
(``observe_jobs``, when the backend has it) before they are taken as gone. Only the
levers the store names are touched.

While slurmctld preempts by priority (``PreemptType=preempt/qos`` with a PreemptMode
other than OFF: ``preemption: slurm``), a running job's band is kept: at 0 it would fall
below the pending jobs, whose age and fair-share alone would then give them the
strictly higher priority WITHIN/PRIORITY needs, a burst of preemptions. Its row stays;
restore resets it once the job waits, or once the admin has turned that off.

Idempotent: a row goes once its lever is reset (or its job is gone), so a second run
finds nothing to do. A pin on a job that runs now is kept and reported: changing a
running job's ReqNodeList resizes it. Partition moves, MPS shares, signals and
requeues are one-off choices and are not undone.

``on_start()`` runs restore when a controller starts in shadow/observe after having
run in enforce (the store keeps each cluster's last mode).
"""
from __future__ import annotations

import logging
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional

from controller.core.levers.table import (
    ADMIN_COMMENT, BY_NAME, HOLD, LABELS, PIN, RECORDED, SITE_FACTOR, UNDO,
)
from controller.service.acting.backend import ACTIVE_STATES, TRANSIENT_STATES, numeric_id
from controller.core.levers.comments import ours_in, site_part
from controller.service.acting.executor import acts
from controller.service.acting.backend import (
    Backend, BackendUnavailable, LeverRelay, LeverTarget, ObservedJob,
)
from controller.service.acting.backend import parse_show_config
from controller.service.state.store import Store

log = logging.getLogger("tiresias.restore")

LEVER_NAMES = LABELS  # the store's lever rows, by their names in the report
PRUNE_EVERY_S = 3600.0  # rows of ended jobs are dropped at most this often


# What the store keeps of each lever restore undoes: the table rows' ``record``
# (controller.core.levers.table.RECORDED). A lever not named records nothing.


class RecordingBackend(LeverRelay):
    """A lever target that records in the store the levers restore undoes (RECORDED),
    before carrying them out on ``backend`` (a crash in between leaves a row for a lever
    that may be set: restore then resets it anyway), and carries every other lever out
    unchanged. The store writes are as many as the lever calls, which the executor
    already sends only on change. Its lever methods are generated (LeverRelay)."""

    def __init__(self, backend: LeverTarget, store: Store, cluster: str, clock: Callable[[], float] = time.time):
        self.backend = backend
        self.store = store
        self.cluster = cluster
        self.clock = clock
        self._pruned_at = -math.inf

    def lever(self, name: str, *args) -> None:
        write, forget = RECORDED[name](*args) if name in RECORDED else (None, None)
        if write is not None:
            self._record(*write)
        BY_NAME[name].method(self.backend)(*args)
        if forget is not None:
            self.store.forget_levers(self.cluster, *forget)

    def _record(self, lever: str, values: dict[str, str]) -> None:
        now = self.clock()
        self.store.record_levers(self.cluster, lever, values, now)
        if now - self._pruned_at >= PRUNE_EVERY_S:
            self._pruned_at = now
            self.store.prune_levers_of_finished(self.cluster)


@dataclass(frozen=True)
class Change:
    """One job and lever: ``outcome`` reset, already (nothing set any more), gone (the
    job ended or left Slurm), kept (left as it is, ``detail`` says why) or failed."""

    job_id: str
    lever: str
    outcome: str
    detail: str

    def line(self) -> str:
        return f"job {self.job_id}: {LEVER_NAMES.get(self.lever, self.lever)} {self.outcome}: {self.detail}"


@dataclass
class RestoreReport:
    changes: list[Change] = field(default_factory=list)

    def add(self, job_id: str, lever: str, outcome: str, detail: str) -> None:
        self.changes.append(Change(job_id, lever, outcome, detail))

    def count(self, outcome: str, lever: Optional[str] = None) -> int:
        return sum(1 for c in self.changes if c.outcome == outcome and lever in (None, c.lever))

    def lines(self) -> list[str]:
        """One line per job and lever (job id order), then the totals."""
        order = sorted(self.changes, key=lambda c: (numeric_id(c.job_id), list(LEVER_NAMES).index(c.lever)))
        return [c.line() for c in order] + [self.totals()]

    def totals(self) -> str:
        reset = Counter(c.lever for c in self.changes if c.outcome == "reset")
        # holds are a GPU-sharing lever only: named when there were some
        parts = ", ".join(f"{reset[lever]} {name}" for lever, name in LEVER_NAMES.items()
                          if lever in (SITE_FACTOR, PIN, ADMIN_COMMENT) or any(c.lever == lever for c in self.changes))
        return (f"restored: {parts}; {self.count('already')} already clear, {self.count('gone')} of jobs gone, "
                f"{self.count('kept')} kept, {self.count('failed')} failed")


def _alive(job: Optional[ObservedJob]) -> bool:
    return job is not None and (job.state in ACTIVE_STATES or job.state in TRANSIENT_STATES)


def restore(backend: Backend, store: Store, cluster: str) -> RestoreReport:
    """Reset every lever the store says this cluster's controller set; see the module
    docstring. Raises BackendUnavailable when Slurm does not answer (nothing done
    then, or only part: the rest stays recorded for the next run)."""
    jobs = {job.job_id: job for job in backend.observe().jobs}
    recorded = store.levers(cluster)
    # Pins recorded by Levers before the nodes were recorded here count as well.
    pins = {job_id: "" for job_id in store.load_pins(cluster)}
    pins.update(recorded.get(PIN, {}))
    unlisted = set(pins).union(*recorded.values()) - jobs.keys()
    if unlisted:
        jobs.update(_outside_scope(backend, unlisted))
    report = RestoreReport()
    _restore_site_factors(backend, store, cluster, jobs, recorded.get(SITE_FACTOR, {}), report)
    _restore_pins(backend, store, cluster, jobs, pins, report)
    comments = set(recorded.get(ADMIN_COMMENT, {}))
    comments |= {job.job_id for job in jobs.values() if ours_in(job.admin_comment)}
    _restore_admin_comments(backend, store, cluster, jobs, comments, report)
    _restore_holds(backend, store, cluster, jobs, set(recorded.get(HOLD, {})), report)
    for name, lever in UNDO.items():  # the table's other recorded levers, each by its row's undo
        _restore_generic(backend, store, cluster, jobs, name, lever.undo, set(recorded.get(name, {})), report)
    return report


def _restore_generic(backend, store, cluster, jobs, name: str, undo, job_ids: set[str], report) -> None:
    """Undo a recorded lever by its table row's ``undo`` (controller.core.levers.table)
    on each job still alive; a job gone just loses its row."""
    done = []
    for job_id in sorted(job_ids, key=numeric_id):
        job = jobs.get(job_id)
        if not _alive(job):
            report.add(job_id, name, "gone", f"job {job.state if job else 'no longer listed'}")
        elif not _undone(report, job_id, name, lambda: undo(backend, job_id), "undone"):
            continue
        done.append(job_id)
    store.forget_levers(cluster, name, done)


def _undone(report, job_id: str, name: str, call, detail: str) -> bool:
    """Carry out one undo; a job the cluster manager refuses keeps its row (False) for the
    next restore, a manager that does not answer stops the restore."""
    try:
        call()
    except BackendUnavailable:
        raise
    except (RuntimeError, ValueError) as err:
        report.add(job_id, name, "failed", str(err))
        return False
    report.add(job_id, name, "reset", detail)
    return True


def _outside_scope(backend: Backend, job_ids: set[str]) -> dict[str, ObservedJob]:
    """The recorded jobs ``job_ids`` that observe() did not list, as the backend finds
    them whatever its partitions (``observe_jobs``): moved out of the configured
    partitions, or the partitions changed since. Those it does not find (or a backend
    without the look-up) are gone."""
    found = backend.observe_jobs(sorted(job_ids, key=numeric_id)) if backend.offers("observe_jobs") else None
    return {job.job_id: job for job in found or () if job.job_id in job_ids}


def _restore_holds(backend, store, cluster, jobs, job_ids: set[str], report) -> None:
    """Release the holds the GPU-sharing policy set (recorded by RecordingBackend). Its
    hold is an operator's (JobHeldAdmin); a job its user holds now (JobHeldUser:
    someone released the controller's hold, the user held the job since) keeps the
    user's hold: `scontrol release` would drop it."""
    done = []
    for job_id in sorted(job_ids):
        job = jobs.get(job_id)
        if not _alive(job):
            report.add(job_id, HOLD, "gone", f"job {job.state if job else 'no longer listed'}")
        elif job.state == "PENDING" and job.waits_for == "user_hold":
            report.add(job_id, HOLD, "kept", "held by its user (JobHeldUser), not by the controller")
        elif job.state != "PENDING" or job.waits_for != "admin_hold":
            report.add(job_id, HOLD, "already", f"job is {job.state} ({job.reason or 'no reason'}), not held")
        elif not _undone(report, job_id, HOLD, lambda: backend.release_hold(job_id), "released"):
            continue
        done.append(job_id)
    store.forget_levers(cluster, HOLD, done)


def _running_bands_kept(backend) -> str:
    """Why running jobs keep their band (slurmctld preempts by priority; see the
    module docstring), or '' (also when this backend cannot read slurm.conf)."""
    text = backend.slurm_config() if backend.offers("slurm_config") else None
    if not isinstance(text, str):
        return ""
    settings = parse_show_config(text)
    preempt_type, preempt_mode = settings.get("PreemptType", ""), settings.get("PreemptMode", "")
    if preempt_type != "preempt/qos" or preempt_mode.upper() == "OFF":
        return ""
    return (f"running while PreemptType=preempt/qos (PreemptMode={preempt_mode}) preempts by priority: at 0 it "
            "would fall below pending jobs, whose age and fair-share would then preempt it; reset once it "
            "waits, or set PreemptType=preempt/none (or PreemptMode=OFF) and run restore again")


def _restore_site_factors(backend, store, cluster, jobs, recorded: dict[str, str], report) -> None:
    done, to_zero = [], {}
    running_kept = None  # read from slurm.conf once, when a running job has a band
    for job_id, value in recorded.items():
        job = jobs.get(job_id)
        if not _alive(job):
            report.add(job_id, SITE_FACTOR, "gone", f"job {job.state if job else 'no longer listed'}")
            done.append(job_id)
        elif job.site_factor == 0:
            report.add(job_id, SITE_FACTOR, "already", "0")
            done.append(job_id)
        elif job.state != "PENDING" and (running_kept := running_kept if running_kept is not None
                                         else _running_bands_kept(backend)):
            report.add(job_id, SITE_FACTOR, "kept", running_kept)  # its row stays: reset by a later run
        else:
            to_zero[job_id] = value
    try:
        backend.set_site_factors({job_id: 0 for job_id in to_zero})
        failed: dict[str, str] = {}
    except BackendUnavailable:
        raise
    except (RuntimeError, ValueError):  # one batch: find out which jobs Slurm refused
        failed = {}
        for job_id in to_zero:
            try:
                backend.set_site_factors({job_id: 0})
            except (RuntimeError, ValueError) as err:
                failed[job_id] = str(err)
    for job_id, value in to_zero.items():
        if job_id in failed:
            report.add(job_id, SITE_FACTOR, "failed", failed[job_id])
            continue
        was = jobs[job_id].site_factor
        report.add(job_id, SITE_FACTOR, "reset", f"{was if was is not None else value} -> 0")
        done.append(job_id)
    store.forget_levers(cluster, SITE_FACTOR, done)


def _restore_pins(backend, store, cluster, jobs, pins: dict[str, str], report) -> None:
    for job_id, written in pins.items():
        job = jobs.get(job_id)
        ours = sorted(filter(None, written.split(",")))
        if not _alive(job):
            report.add(job_id, PIN, "gone", f"job {job.state if job else 'no longer listed'}")
        elif job.state != "PENDING":
            # Kept recorded: a later restore clears it once the job waits again.
            report.add(job_id, PIN, "kept", f"job is {job.state}: changing its ReqNodeList would resize it")
            continue
        elif not job.required_nodes:
            report.add(job_id, PIN, "already", "no ReqNodeList")
        elif ours and sorted(job.required_nodes) != ours:
            report.add(job_id, PIN, "kept", f"ReqNodeList is {','.join(job.required_nodes)}, not the pin the "
                                            f"controller wrote ({','.join(ours)}): someone changed it since")
        else:
            try:
                backend.pin_nodes(job_id, [])
            except BackendUnavailable:
                raise
            except (RuntimeError, ValueError) as err:
                report.add(job_id, PIN, "failed", str(err))
                continue
            report.add(job_id, PIN, "reset", f"{','.join(job.required_nodes)} cleared")
        with store.transaction():
            store.forget_levers(cluster, PIN, [job_id])
            store.clear_pin(cluster, job_id)


def _restore_admin_comments(backend, store, cluster, jobs, job_ids: set[str], report) -> None:
    done = []
    for job_id in job_ids:
        job = jobs.get(job_id)
        if not _alive(job):
            report.add(job_id, ADMIN_COMMENT, "gone", f"job {job.state if job else 'no longer listed'}")
        elif not ours_in(job.admin_comment):
            report.add(job_id, ADMIN_COMMENT, "already", "no line of the controller")
        else:
            site = site_part(job.admin_comment)
            try:
                backend.set_admin_comment(job_id, site)
            except BackendUnavailable:
                raise
            except (RuntimeError, ValueError) as err:
                report.add(job_id, ADMIN_COMMENT, "failed", str(err))
                continue
            report.add(job_id, ADMIN_COMMENT, "reset",
                       "the controller's line removed" + (f", the site's text kept: {site}" if site else ""))
        done.append(job_id)
    store.forget_levers(cluster, ADMIN_COMMENT, done)


def on_start(backend: Backend, store: Store, cluster: str, mode: str, now_s: float) -> Optional[RestoreReport]:
    """At a controller's start: restore when the last recorded mode was enforce and
    this one is not, then record this mode. Returns the report (None: no restore).
    BackendUnavailable propagates with the mode left unrecorded, so the next try
    restores again."""
    last = store.last_mode(cluster)
    report = None
    if acts(last) and not acts(mode):
        log.warning("cluster %s ran in enforce last and now runs in %s: restoring the levers it set", cluster, mode)
        report = restore(backend, store, cluster)
        log_report(report)
    if last != mode:
        store.record_mode(cluster, mode, now_s)
    return report


def log_report(report: RestoreReport) -> None:
    for line in report.lines()[:-1]:
        log.info("restore: %s", line)
    log.warning("restore: %s", report.totals())

"""The one simulated slurmctld: Slurm's start rule, backfill, and preempt/qos on the
bands it was sent. Every replay that lets Slurm start the jobs calls it: ``SimSlurm``
(the lever replay's target, controller.replay.lever_replay), ``SlurmOrder``
(controller.replay.slurm_order: ``SimConfig.slurm_starts``), ``SlurmPreempts``
(controller.replay.slurm_preemption: ``preemption: slurm``) and bench/scripted_slurm.py
(the scripted slurmctld the real backend reads).

The start rule (``start_walk``): slurmctld's main scheduler takes the pending jobs in
priority order (``by_site_factor``: multifactor priority with only the SiteFactor set,
then the older job; ``by_band``: the band a replayed plan gave the job), each where it
fits (``pick_nodes``: the nodes with the fewest free GPUs it fits on, among those it may
use: its partitions, GPU type, its pin (ReqNodeList); a gang of N nodes, ``--gres=gpu:G
-N N``, N whole such nodes, listed by name); a job that fits nowhere waits, and with
backfill keeps the jobs after it off the nodes it reserves (``reservation``: where it
could start soonest, ``available_at`` by the running jobs' time limits).

``SimSlurm`` (``qos`` set: ``preemption: slurm``) and bench/scripted_slurm.py
(``preempts``) run preempt/qos after each scheduling pass through
``slurm_preemptions``: each victim gets its signal at once, runs on through its
GraceTime and is requeued, held by a BeginTime, at the first pass after it.

Under ``preemption: slurm`` the controller signals and requeues nobody: it only sets
SiteFactor bands, on running jobs too (the top of their queue's band: only a pending job
of a strictly higher queue, a lower level number, outranks a running one). slurmctld's
preempt/qos plugin then picks the victims, by rules unlike the engine's victim rule.
The rules modelled here, read in Slurm's source at slurm-22-05-8-1, slurm-24-11-5-1 and
slurm-26-05-3-1 (the functions named are the same in all three; preempt.c moved from
src/slurmctld/ to src/interfaces/ after 22.05, cons_common/job_test.c into
cons_tres/job_test.c):

1. Who is a candidate (``may_preempt``, ``candidates``). preempt_qos.c
   ``preempt_p_preemptable``: a pending job may preempt a running one of its own QOS
   only when that QOS (or slurm.conf) has WITHIN, and then only with a strictly higher
   priority; a running job of another QOS only when the preemptor's QOS lists it in its
   Preempt list, and from 25.05 only with a strictly higher priority when the
   preemptor's QOS (or slurm.conf) has PRIORITY. Here: the declared jobs
   (``spec.preemptable``: declared and requeue-able) share the preemptable QOS with
   requeue,within; the undeclared jobs' QOS lists it with PRIORITY
   (``undeclared="priority"``, 25.05+ ``tcrossprio``), lists it without
   (``"any"``, what a site gets before 25.05 by naming it), or lists nothing
   (``"none"``: they preempt nobody). Nobody's Preempt list names the undeclared jobs'
   QOS, and it has no WITHIN, so they are never victims. preempt.c
   ``_is_job_preempt_exempt_internal``: a victim still within its PreemptExemptTime
   (acct_policy.c ``acct_policy_is_job_preempt_exempt``) is no candidate;
   ``_add_preemptable_job``: only a job running on a node of the preemptor's partition
   is one.
2. The order candidates are tried (``candidates``). preempt.c
   ``slurm_find_preemptable_jobs`` sorts them with ``_sort_by_prio`` on preempt_qos.c
   ``preempt_p_get_prio``: the QOS's priority in the high bits, the job's node count in
   the low ones, smallest first. One QOS here, so the fewest nodes first; the jobs'
   own priorities play no part. Ties keep the job list's order (jobs are appended as
   submitted; list_sort is a qsort, so that is not guaranteed): the older job first.
3. How many are taken (``choose_victims``). job_test.c ``_run_now``: if the job does
   not fit as things are, the candidates are taken away one at a time in that order,
   testing after each whether the job would then fit; the victims are the candidates up
   to the one that made it fit, less those with no GPU on the nodes the job would get.
   Then (SchedulerParameters ``preempt_reorder_count``, default 1) the list is
   reordered, the candidate that made it fit first, then the earlier ones by how many
   of the chosen nodes they hold, and the search runs again, at most reorder_count + 1
   times more: this drops victims a smaller set can do without.
4. The preemptor must then fit exactly (``slurm_fit``): on nodes of its partitions and
   GPU type, its gang on whole nodes of equal share, as controller.replay.slurm_order
   starts jobs.
5. Which pending jobs try (``SlurmPreempts.step``). The main scheduler
   (job_scheduler.c ``_schedule``) and backfill (backfill.c ``_try_sched``, with
   ``slurm_find_preemptable_jobs``) both test each pending job in priority order with
   its candidates. A job that cannot start, by preempting or not, keeps the jobs after
   it off nodes it will need (the main scheduler's ``fail_by_part``, backfill's
   reservations): here, the nodes the job preempts on, or, with time limits, those
   slurm_order reserves for it. A job whose victims are still in their grace counts
   their GPUs as its own (they stay in the candidate list, and preempting them again
   does nothing: preempt.c ``_job_check_grace_internal``), so it preempts nobody more.
6. What a victim gets: its QOS's GraceTime (preempt_qos.c ``preempt_p_get_grace_time``),
   then the requeue at slurmctld's next pass (docs/slurm-preemption.md, fact 3); the
   replay charges both as SimConfig.preempt_grace_s (controller.cli.simulate
   controller_costs), then the requeue delay. A victim whose work ends within that time
   completes (real Slurm records it TIMEOUT, exit 0: its work is done): the cluster's
   ``grace_work_kept`` path.

Not modelled: suspend and cancel modes, partition-priority preemption,
``preempt_youngest_first``, ``preempt_strict_order``, ``min_exempt_priority``, backfill's
whole-node reservations and its time window, het jobs and arrays, where cons_tres's own
node choice differs from the fewest-free-GPUs rule, and that a preemptor retried while
its victims leave may pick more victims after kill_wait + msg_timeout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Container, Hashable, Iterable, Mapping, Optional, TypeVar

from controller.core.levers.target import LeverTarget
from controller.core.model import InputError, JobState, Node
from controller.core.placement import hand_over, node_fits
from controller.replay.cluster import SimCluster
from controller.replay.run_config import EPS

Job = TypeVar("Job")


# -- the start rule ----------------------------------------------------------------------
def by_site_factor(site_factor: Callable[[Job], int], age: Callable[[Job], float],
                   tiebreak: Callable[[Job], Hashable] = lambda job: job) -> Callable[[Job], tuple]:
    """Slurm's priority order as a sort key, with only the SiteFactor set: the higher
    SiteFactor first, then the older job (``age``: its submit time), then ``tiebreak``."""
    return lambda job: (-site_factor(job), age(job), tiebreak(job))


def by_band(level: Callable[[JobState], int]) -> Callable[[JobState], tuple]:
    """Slurm's priority order as a sort key for a replayed plan's bands: the lower level
    (the higher band) first, inside it a job that ran before (half a band more), then the
    older job."""
    return lambda job: (level(job), job.first_start_s is None, job.spec.submit_time_s, job.index)


def gang(num_gpus: int, per_node: int) -> tuple[int, int]:
    """``--gres=gpu:G -N N``: a job's GPUs on each node and its node count (whole nodes
    for a job larger than a node)."""
    gpus = min(num_gpus, per_node)
    return gpus, -(-num_gpus // gpus)


def pick_nodes(free: Mapping[str, int], allowed: Iterable[str], gpus: int, count: int) -> Optional[tuple[str, ...]]:
    """Where a job of ``count`` x ``gpus`` GPUs starts among the ``allowed`` nodes: the
    ``count`` nodes with the fewest free GPUs it fits on, listed by name; None when
    fewer fit."""
    fits = sorted([(have, node) for node in allowed if (have := free.get(node, 0)) >= gpus])
    if len(fits) < count:
        return None
    return tuple(sorted(node for _, node in fits[:count]))


def available_at(free: int, ends: Iterable[tuple[float, int]], now: float, gpus: int) -> float:
    """Backfill's "when is a node free": when ``gpus`` GPUs of a node with ``free`` free
    now are free, by the (end by time limit, GPUs held) of the jobs on it; inf: never."""
    have, at = free, now
    for end, held in sorted(ends):
        if have >= gpus:
            break
        have, at = have + held, end
    return at if have >= gpus else math.inf


def reservation(usable: Iterable[str], free: Mapping[str, int], ends: Mapping[str, list[tuple[float, int]]],
                now: float, gpus: int, count: int) -> list[str]:
    """Backfill's reservation for a job that cannot start: the ``count`` nodes it may use
    where it could start soonest (``available_at``)."""
    return [node for _, node in sorted((available_at(free.get(node, 0), ends[node], now, gpus), node)
                                       for node in usable)[:count]]


def start_walk(pending: Iterable[Job], priority: Callable[[Job], tuple],
               place: Callable[[Job, set[str]], object], start: Callable[[Job, object], Optional[Iterable[str]]],
               reserve: Optional[Callable[[Job, set[str]], Iterable[str]]] = None,
               again: Optional[Callable[[Job], bool]] = None, full: Optional[Callable[[], bool]] = None) -> None:
    """slurmctld's scheduling pass: the pending jobs in ``priority`` order; each is
    placed (``place(job, reserved)``: where it starts, None: nowhere, the nodes others
    reserved left out) and started (``start(job, where)``, which returns the nodes it
    keeps from the jobs after it, if any); one that cannot start keeps the jobs after it
    off the nodes ``reserve`` gives (backfill; None: no backfill). ``again(job)``: try
    the same job once more after a start (an array's pending record, task by task).
    ``full()``: True when no node left out of the reservations has a free GPU, so no
    later job can start (the walk stops: its reservations would change nothing)."""
    reserved: set[str] = set()
    for job in sorted(pending, key=priority):
        if full is not None and full():
            break
        while True:
            where = place(job, reserved)
            if where is None:
                if reserve is not None:
                    reserved.update(reserve(job, reserved))
                break
            reserved.update(start(job, where) or ())
            if again is None or not again(job):
                break


# -- the lever target: SimSlurm ----------------------------------------------------------
class SimSlurm(LeverTarget):
    """The simulated slurmctld an executor acts on: the lever methods of the service's
    backend port (controller.service.acting.backend), carried out on a SimCluster.

    ``site_factor``, ``pins`` (ReqNodeList), ``held`` (requeued, BeginTime not yet
    released), ``partition``, ``mps_share``, ``admin_comment``, ``nice``: what the levers set;
    ``leaving``: signalled jobs (signalled at, when their work ends if not requeued first)."""

    def __init__(self, cluster: SimCluster, jobs: Iterable[JobState]):
        self.cluster = cluster
        self.by_id = {job.job_id: job for job in jobs}
        self.now = 0.0
        self.pending: dict[str, JobState] = {}  # submitted, not running, not leaving
        self.site_factor: dict[str, int] = {}
        self.pins: dict[str, tuple[str, ...]] = {}
        self.held: set[str] = set()
        self.admin_held: set[str] = set()  # hold(): kept pending until release_hold()
        self.partition: dict[str, str] = {}
        self.mps_share: dict[str, int] = {}
        # MPS-only jobs (job id -> shares asked): listed pending, never started (the
        # cluster counts whole GPUs); their share set, held and released by the levers
        self.mps_pending: dict[str, int] = {}
        self.admin_comment: dict[str, str] = {}
        self.nice: dict[str, int] = {}  # set_nice(): taken off the job's start priority
        self.leaving: dict[str, tuple[float, float]] = {}
        self.ended: list[JobState] = []  # ended at a requeue, not yet told to the loop
        # preempt/qos (``preemption: slurm``; None: slurmctld preempts nobody) and its QOS's
        # GraceTime; its own victims: job id -> (signalled at, its progress then)
        self.qos: Optional[SlurmQos] = None
        self.grace_s = 0.0
        self.preempted: dict[str, tuple[float, float]] = {}

    def _pending_job(self, job_id: str) -> JobState:
        if job_id not in self.pending:
            raise RuntimeError(f"job {job_id} is not PENDING")
        return self.pending[job_id]

    # -- the levers (the backend port's names and arguments) ------------------------
    def set_site_factors(self, factors: dict[str, int]) -> None:
        self.site_factor.update(factors)

    def pin_nodes(self, job_id: str, nodes: list[str]) -> None:
        self._pending_job(job_id)
        if nodes:
            self.pins[job_id] = tuple(nodes)
        else:
            self.pins.pop(job_id, None)

    def release_begin_time(self, job_id: str) -> None:
        self._pending_job(job_id)
        self.held.discard(job_id)

    def move_partition(self, job_id: str, partition: str) -> None:
        """The job's partition field: where the scheduler (and the plan) place it from now on."""
        job = self._pending_job(job_id)
        self.partition[job_id] = partition
        job.spec = replace(job.spec, partitions=tuple(p for p in partition.split(",") if p))
        self.cluster.allowed_again(job)

    def set_nice(self, job_id: str, nice: int) -> None:
        """Nice: slurmctld takes it off the job's priority (its start order below)."""
        if job_id not in self.by_id:
            raise RuntimeError(f"job {job_id} is not known")
        self.nice[job_id] = nice

    def set_mps_share(self, job_id: str, shares: int) -> None:
        if job_id not in self.mps_pending:
            self._pending_job(job_id)
        self.mps_share[job_id] = shares

    def set_admin_comment(self, job_id: str, text: str) -> None:
        self.admin_comment[job_id] = text

    def hold(self, job_id: str) -> None:
        if job_id not in self.mps_pending:
            self._pending_job(job_id)
        self.admin_held.add(job_id)

    def release_hold(self, job_id: str) -> None:
        self.admin_held.discard(job_id)

    def signal(self, job_id: str, signal_name: str, batch_only: bool) -> None:
        job = self.by_id[job_id]
        if not job.running:
            raise RuntimeError(f"job {job_id} is not RUNNING; nothing sent")
        # It runs on through the grace period: work that ends before the requeue ends
        # the job (finish_leaving), whether or not it keeps the work done after the
        # signal for a restart (SimConfig.grace_work_kept: not here).
        self.cluster.sync(job, self.now)
        done_s = self.cluster.completion_time(job)
        self.cluster.signal_now(job, self.now)
        self.leaving[job_id] = (self.now, done_s)

    def finish_leaving(self) -> list[JobState]:
        """Signalled jobs whose work ended by now, before their requeue: they end (and
        any a requeue found ended)."""
        ended, self.ended = self.ended, []
        for job_id, (signalled_s, done_s) in list(self.leaving.items()):
            if done_s <= self.now + EPS:
                del self.leaving[job_id]
                self.cluster.release(self.by_id[job_id], signalled_s, done_s, self.now)
                ended.append(self.by_id[job_id])
        return ended

    def requeue(self, job_id: str) -> None:
        """Back to PENDING, held (BeginTime) until released; its GPUs are free now and
        its work since the signal's checkpoint is lost (SimCluster.release)."""
        if job_id not in self.leaving:
            raise RuntimeError(f"job {job_id} is not RUNNING")
        signalled_s, done_s = self.leaving.pop(job_id)
        job = self.by_id[job_id]
        self.cluster.release(job, signalled_s, done_s, self.now)
        self.cluster.settling.clear()  # slurmctld's requeue delay is the BeginTime hold below
        if job.finish_time_s is None:
            self.pending[job_id] = job
            self.held.add(job_id)
        else:
            self.ended.append(job)

    # -- slurmctld's scheduler --------------------------------------------------------
    def schedule(self) -> list[tuple[str, tuple[str, ...]]]:
        """slurmctld's scheduling pass (``start_walk``): the pending jobs not held by
        SiteFactor, then the older job, each on the nodes ``pick_nodes`` gives among those
        it may use (its pin's nodes, if pinned; else those of its partitions, GPU type,
        reservation); a job that fits nowhere waits and the next one is tried (no backfill
        reservation: no time limits here). Returns (job id, nodes) per start."""
        self.requeue_preempted()
        free = self.cluster.free_by_node  # the cluster's own: each start takes its GPUs
        eligible = self.cluster.eligible
        per_node = self.cluster.cfg.gpus_per_node
        started = []

        def place(job: JobState, reserved: set[str]) -> Optional[tuple[str, ...]]:
            allowed = self.pins.get(job.job_id) or (eligible is not None and eligible.allowed(job.spec)) or free
            return pick_nodes(free, allowed, *gang(job.num_gpus, per_node))

        def start(job: JobState, nodes: tuple[str, ...]) -> None:
            gpus, _ = gang(job.num_gpus, per_node)
            self.cluster.start(job, tuple((node, gpus) for node in nodes), self.now)
            del self.pending[job.job_id]
            started.append((job.job_id, nodes))

        start_walk([job for job_id, job in self.pending.items()
                    if job_id not in self.held and job_id not in self.admin_held],
                   by_site_factor(lambda job: self.site_factor.get(job.job_id, 0) - self.nice.get(job.job_id, 0),
                                  lambda job: job.spec.submit_time_s,
                                  lambda job: job.index), place, start)
        if self.qos is not None:
            self.preempt()
        return started

    def level(self, job: JobState) -> int:
        """A job's priority as preempt/qos compares it: the band it was sent (less its
        Nice), the lower level the higher priority."""
        return self.nice.get(job.job_id, 0) - self.site_factor.get(job.job_id, 0)

    def preempt(self) -> None:
        """preempt/qos after the starts (``slurm_preemptions``): each victim gets its
        signal now and is requeued one GraceTime later (``requeue_preempted``), running
        on meanwhile, as slurmctld's victims do."""
        running = [job for job in self.by_id.values() if job.running and job.job_id not in self.leaving]
        pending = [job for job_id, job in self.pending.items()
                   if job_id not in self.held and job_id not in self.admin_held]
        for victim in slurm_preemptions(pending, running, self.level, self.cluster.free_by_node,
                                        {node.name: node for node in self.cluster.nodes}, self.qos, self.now,
                                        self.cluster.cfg.gpus_per_node, set(self.preempted),
                                        lambda job: self.pins.get(job.job_id)):
            self.cluster.sync(victim, self.now)
            self.preempted[victim.job_id] = (self.now, victim.progress_s)

    def requeue_preempted(self) -> None:
        """slurmctld's next pass after a victim's GraceTime: requeued, held (BeginTime),
        its work since the signal lost; one that ended meanwhile is forgotten."""
        for job_id, (signalled_s, progress_s) in list(self.preempted.items()):
            job = self.by_id[job_id]
            if not job.running:
                del self.preempted[job_id]
            elif signalled_s + self.grace_s <= self.now + EPS:
                del self.preempted[job_id]
                self.cluster.sync(job, self.now)
                done_s = self.cluster.signal_now(job, self.now)
                self.cluster.release(job, self.now, done_s, self.now)
                self.cluster.settling.clear()  # the requeue delay is the BeginTime hold
                job.progress_s = progress_s
                self.pending[job_id] = job
                self.held.add(job_id)


# -- preempt/qos ---------------------------------------------------------------------------
UNDECLARED = ("none", "priority", "any")


@dataclass(frozen=True)
class SlurmQos:
    """The QOS setup under ``preemption: slurm``: ``undeclared`` says what the
    undeclared jobs' QOS may preempt (module docstring, rule 1); ``reorder_count``:
    SchedulerParameters preempt_reorder_count (rule 3)."""

    undeclared: str = "none"
    reorder_count: int = 1

    def __post_init__(self):
        if self.undeclared not in UNDECLARED:
            raise InputError(f"undeclared value {self.undeclared!r} must be one of {', '.join(UNDECLARED)}")
        if self.reorder_count < 0:
            raise InputError(f"reorder_count value {self.reorder_count!r} must be >= 0")


def may_preempt(preemptor: JobState, victim: JobState, level: Callable[[JobState], int], qos: SlurmQos) -> bool:
    """preempt_qos.c preempt_p_preemptable with this site's QOS (rule 1). Priority is the
    band: a pending job outranks a running one only from a strictly lower level."""
    if not victim.spec.preemptable:  # the undeclared jobs' QOS: no Preempt list names it, no WITHIN
        return False
    higher = level(preemptor) < level(victim)
    if preemptor.spec.preemptable:  # the same QOS, requeue,within
        return higher
    return qos.undeclared == "any" or (qos.undeclared == "priority" and higher)


def candidates(preemptor: JobState, running: Iterable[JobState], level: Callable[[JobState], int], qos: SlurmQos,
               now: float, exempt_s: float, usable: set[str]) -> list[JobState]:
    """The running jobs ``preemptor`` may preempt, in the order Slurm tries them (rules
    1 and 2): not within PreemptExemptTime, with GPUs on a node it may use, fewest nodes
    first, then the older job."""
    found = [job for job in running
             if job.running and may_preempt(preemptor, job, level, qos)
             and not (job.run_start_s is not None and now - job.run_start_s < exempt_s)
             and any(node in usable for node, _ in job.placement)]
    return sorted(found, key=lambda job: (len(job.placement), job.spec.submit_time_s, job.index))


def slurm_fit(job: JobState, free: dict[str, int], usable: Iterable[str],
              per_node: int) -> Optional[tuple[tuple[str, int], ...]]:
    """Where Slurm would start ``job`` on these free GPUs (rule 4), or None: the start
    rule's ``pick_nodes`` on the nodes it may use, as (node, GPUs) slots."""
    gpus, count = gang(job.num_gpus, per_node)
    nodes = pick_nodes(free, usable, gpus, count)
    return None if nodes is None else tuple((node, gpus) for node in nodes)


def choose_victims(fit: Callable[[dict[str, int]], Optional[tuple]], ordered: list[JobState],
                   free: dict[str, int], reorder_count: int = 1):
    """job_test.c _run_now's search (rule 3): ``fit(free)`` places the preemptor or
    says None; ``ordered``: its candidates in Slurm's order. Returns (victims, slots),
    or None when taking every candidate still leaves it out."""
    order = list(ordered)
    passes = 0
    while True:
        trial = dict(free)
        made_it = slots = None
        for k, job in enumerate(order):
            for node, gpus in job.placement:
                if node in trial:
                    trial[node] += gpus
            slots = fit(trial)
            if slots is not None:
                made_it = k
                break
        if made_it is None:
            return None
        chosen = {node for node, _ in slots}
        taken = order[:made_it + 1]
        passes += 1
        # the pass counting of _run_now: stop after reorder_count + 2 passes, or when the
        # passes reach the number of candidates
        if passes > reorder_count + 1 or len(order) <= passes:
            return [job for job in taken if any(node in chosen for node, _ in job.placement)], slots

        def held(job: JobState) -> int:
            return sum(1 for node, _ in job.placement if node in chosen)

        # the one that made it fit first, then the earlier ones by their nodes among the
        # chosen, then the rest (a stable sort, as _sort_usable_nodes_dec on a list)
        rank = {id(job): held(job) for job in order[:made_it]}
        rank[id(order[made_it])] = math.inf
        order.sort(key=lambda job: -rank.get(id(job), 0))


def preempt_walk(pending: Iterable[JobState], level: Callable[[JobState], int], running: list[JobState],
                 free: dict[str, int], nodes: Mapping[str, Node], qos: SlurmQos, now: float, exempt_s: float,
                 per_node: int, limit_s: Optional[float],
                 allowed: Optional[Callable[[JobState], Optional[Iterable[str]]]] = None
                 ) -> list[tuple[JobState, list[JobState], tuple]]:
    """Which pending jobs preempt whom (rule 5): the start rule's walk over the pending
    jobs Slurm did not start (``free``: what is free after its starts; taken down by each
    preemptor's slots and up by its victims' GPUs), each that cannot start as things are
    and can by preempting gets preempt/qos's victims; one that can neither keeps the
    jobs after it off the nodes backfill reserves for it (with time limits ``limit_s``;
    none without); ``allowed(job)``: the only nodes it may use (its pin, ReqNodeList), None:
    any. Returns (preemptor, victims, slots) in the walk's order."""
    taken: set[int] = set()
    found: list[tuple[JobState, list[JobState], tuple]] = []
    usable_now: list[set[str]] = [set()]  # the nodes the job being placed may use

    def place(job: JobState, reserved: set[str]):
        only = allowed(job) if allowed is not None else None
        usable = {name for name, node in nodes.items() if name not in reserved and node_fits(node, job.spec)
                  and (only is None or name in only)}
        usable_now[0] = usable
        fit = partial(slurm_fit, job, usable=usable, per_node=per_node)
        if fit(free) is not None:
            return ()  # Slurm left it for a job above it (slurm_order's reservation): no preemption needed
        ordered = [c for c in candidates(job, running, level, qos, now, exempt_s, usable) if c.index not in taken]
        return choose_victims(fit, ordered, free, qos.reorder_count) if ordered else None

    def start(job: JobState, where) -> list[str]:
        if not where:
            return []
        victims, slots = where
        hand_over(free, victims, slots, taken)
        found.append((job, victims, slots))
        return [node for node, _ in slots]

    def blocked(job: JobState, reserved: set[str]) -> list[str]:
        """The nodes a job that can neither start nor preempt keeps from the jobs after
        it: with time limits, backfill's reservation for it; with none, none."""
        if limit_s is None:
            return []
        usable = usable_now[0]
        ends: dict[str, list[tuple[float, int]]] = {node: [] for node in usable}
        for other in running:
            for node, held in other.placement:
                if node in ends:
                    ends[node].append((other.run_start_s + limit_s, held))
        return reservation(usable, free, ends, now, *gang(job.num_gpus, per_node))

    start_walk(pending, by_band(level), place, start, blocked)
    return found


def slurm_preemptions(pending: Iterable[JobState], running: list[JobState], level: Callable[[JobState], int],
                      free: Mapping[str, int], nodes: Mapping[str, Node], qos: SlurmQos, now: float,
                      per_node: int, in_grace: Container[str] = (),
                      allowed: Optional[Callable[[JobState], Optional[Iterable[str]]]] = None) -> list[JobState]:
    """The victims preempt/qos picks in one pass of a target that keeps its own jobs
    (SimSlurm, bench/scripted_slurm.py) after its starts (``free``: what is free
    then): ``preempt_walk`` with no PreemptExemptTime and no time limits, the jobs
    still in their GraceTime (``in_grace``) counted as free GPUs of their preemptors
    (rule 5). Returns the new victims."""
    free = dict(free)
    for job in running:
        if job.job_id in in_grace:
            for node, gpus in job.placement:
                free[node] += gpus
    left = [job for job in running if job.job_id not in in_grace]
    return [victim for _, victims, _ in preempt_walk(pending, level, left, free, nodes, qos, now, 0.0, per_node,
                                                     None, allowed)
            for victim in victims]

"""slurmctld choosing its own preemption victims, for a replayed controller with
``preemption: slurm`` and Slurm starting the jobs (``SimConfig.slurm_starts``;
``Simulation(..., slurm_preemption=SlurmQos(...))``).

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
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterable, Optional

from controller.core.model import InputError, JobState, Node
from controller.core.placement import node_fits
from controller.core.plan import Preempt, Start
from controller.core.ids import caused_id, decision_id

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
    """Where Slurm would start ``job`` on these free GPUs (rule 4), or None: its GPUs
    split evenly over whole nodes it may use, the nodes with the fewest free GPUs
    first, as controller.replay.slurm_order does."""
    gpus = min(job.num_gpus, per_node)
    count = -(-job.num_gpus // gpus)
    fits = sorted((free.get(node, 0), node) for node in usable if free.get(node, 0) >= gpus)
    if len(fits) < count:
        return None
    return tuple((node, gpus) for node in sorted(node for _, node in fits[:count]))


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


class SlurmPreempts:
    """The replayed controller's round with slurmctld choosing the victims: wraps the
    controller.replay.slurm_order.SlurmOrder engine. The plan's own victims are dropped
    (the controller signals nobody under ``preemption: slurm``); walking the pending
    jobs in Slurm's order, each that Slurm did not start and can start by preempting
    gets preempt/qos's victims (module docstring), and a start on them that the replay
    loop makes once their GPUs are free (at once without a grace period)."""

    def __init__(self, order, qos: SlurmQos):
        self.inner = order
        self.policy = order.policy
        self.qos = qos

    def step(self, snapshot):
        plan = self.inner.step(snapshot)
        order, engine = self.inner, self.inner.inner
        thresholds = engine.config.thresholds_gpu_s
        exempt_s = engine.config.preempt_min_runtime_s  # PreemptExemptTime (controller_costs)
        now = snapshot.now_s

        def level(job: JobState) -> int:
            return plan.levels.get(job.job_id, sum(1 for t in thresholds if job.queue_service_gpu_s >= t))

        starts = [a for a in plan.actions if a.kind == "start"]
        started = {a.job_id for a in starts}
        free = snapshot.free_gpus_by_node()  # a victim's GPUs in its grace count: they are on their way
        for action in starts:
            for node, gpus in action.placement:
                free[node] -= gpus
        # slurm_order's pending jobs and order: a requeued job waits for its BeginTime release
        pending = [j for j in snapshot.jobs if not j.running and j.job_id not in started
                   and (j.preemptions == 0 or order.released.get(j.job_id) == j.preemptions)]
        pending.sort(key=lambda j: (level(j), j.first_start_s is None, j.spec.submit_time_s, j.index))
        running = [j for j in snapshot.jobs if j.running]
        nodes: dict[str, Node] = {node.name: node for node in snapshot.nodes}
        per_node = max(node.gpus_total for node in snapshot.nodes)
        reserved: set[str] = set()
        taken: set[int] = set()
        preempts, gains = [], []
        for job in pending:
            usable = {name for name, node in nodes.items() if name not in reserved and node_fits(node, job.spec)}
            fit = partial(slurm_fit, job, usable=usable, per_node=per_node)
            if fit(free) is not None:
                continue  # Slurm left it for a job above it (slurm_order's reservation): no preemption needed
            ordered = [c for c in candidates(job, running, level, self.qos, now, exempt_s, usable)
                       if c.index not in taken]
            found = choose_victims(fit, ordered, free, self.qos.reorder_count) if ordered else None
            if found is None:
                reserved.update(self._blocked_nodes(job, usable, free, running, now, per_node))
                continue
            victims, slots = found
            for victim in victims:
                taken.add(victim.index)
                for node, gpus in victim.placement:
                    free[node] += gpus
                preempts.append(Preempt(decision_id(snapshot.round_id, "slurm_preempt", len(preempts)), victim.job_id,
                                        f"Slurm preempt/qos: for {job.job_id}"))
            for node, gpus in slots:
                free[node] -= gpus
                reserved.add(node)
            gains.append(Start(caused_id(decision_id(snapshot.round_id, "slurm_preempt", len(preempts)), "slurm_gain"), job.job_id, slots,
                               "Slurm: on its preemption's GPUs"))
        kept = [a for a in plan.actions if a.kind not in ("start", "preempt")]
        plan.actions = kept + preempts + starts + gains
        return plan

    def _blocked_nodes(self, job: JobState, usable: set[str], free: dict[str, int], running: list[JobState],
                       now: float, per_node: int) -> set[str]:
        """The nodes a job that can neither start nor preempt keeps from the jobs after
        it: with time limits, those where it could start soonest (slurm_order's backfill
        reservation); with none, none."""
        limit_s = self.inner.limit_s
        if limit_s is None:
            return set()
        gpus = min(job.num_gpus, per_node)
        count = -(-job.num_gpus // gpus)
        ends: dict[str, list[tuple[float, int]]] = {node: [] for node in usable}
        for other in running:
            for node, held in other.placement:
                if node in ends:
                    ends[node].append((other.run_start_s + limit_s, held))

        def available_at(node: str) -> float:
            have, at = free.get(node, 0), now
            for end, held in sorted(ends[node]):
                if have >= gpus:
                    break
                have, at = have + held, end
            return at if have >= gpus else math.inf

        return {node for _, node in sorted((available_at(node), node) for node in usable)[:count]}

"""The round's input: the observation turned into the engine's Snapshot (and, for the
lever planner, its view of the jobs), with the caches that make it cheap.

Moved out of controller.service.round.daemon: the Controller calls ``RoundInput.split``
(the GPU, CPU-only and MPS-only jobs), ``RoundInput.plan`` (the engine's plan of the
jobs Slurm could start, with the jobs that wait on Slurm after them) and
``RoundInput.note_updates`` (the pending jobs this round's levers updated).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, fields, replace
from typing import Callable, Container, Mapping, Optional

from controller.core.actions import SetAdminComment, SetBand
from controller.core.levers.preemption import strategy_for
from controller.core.levers.view import LeverView
from controller.core.model import InputError, JobSpec, JobState, Snapshot
from controller.core.placement import set_aside
from controller.core.plan import Plan
from controller.core.policies import PolicyContext
from controller.service.acting.backend import Observation, ObservedJob
from controller.service.ops.qos_gate import wait_text as qos_wait_text
from controller.service.ops.unmodelled import Census, census
from controller.service.acting.backend import ACTIVE_STATES
from controller.service.round.startable import add_waiting
from controller.service.acting.backend import UNJUDGED, slurm_wait


@dataclass
class JobSplit:
    """The observation's jobs by what the round does with them: ``observed`` the GPU
    jobs (planned), ``cpu_pending`` the pending CPU-only jobs (their SiteFactor band),
    ``shared`` the MPS-only jobs (accounted in GPU-equivalents, banded; never planned),
    ``cpu_running`` (``preemption: slurm`` only) the running CPU-only jobs."""

    observed: dict[str, ObservedJob]
    cpu_pending: dict[str, ObservedJob]
    shared: dict[str, ObservedJob]
    cpu_running: dict[str, ObservedJob]

    @property
    def accounted(self) -> dict[str, ObservedJob]:
        return {**self.observed, **self.shared} if self.shared else self.observed


class RoundInput:
    """The engine's input built from an observation, and what it keeps between rounds:
    the last round's JobSpecs (``specs``), the pending jobs last seen startable and those
    this controller updated since (Slurm's reason None after our own update), the jobs
    first seen unjudged this round, and the last plan's unmodelled census."""

    def __init__(self, config, engine, log_once: Callable[[str], None]):
        self.config = config
        self.strategy = strategy_for(config.preemption)  # who carries out the plan's victims
        self.engine = engine
        self._log_once = log_once
        self.specs: dict[str, tuple] = {}  # job id -> (ObservedJob, pinned, JobSpec) of the last snapshot
        # A full round (Controller._begin_full_round): every JobSpec is built again, and
        # the ids of those that differ from the one the last round reused for an equal
        # ObservedJob and key are listed (a key missing a field the spec reads)
        self.verify_reuse = False
        self.reuse_mismatches: list[str] = []
        # Slurm shows reason None after any `scontrol update` of a pending job until its
        # next scheduling pass (controller.service.round.startable): a job this controller
        # updated (band, AdminComment, pin) while Slurm said it waited only for GPUs still
        # does, so its own update does not cost it a round (seen: the preemption came a
        # round later, sometimes two, than the round that first saw the job).
        self.startable_seen: set[str] = set()  # pending jobs last seen with a startable reason
        self.updated: set[str] = set()  # pending jobs this controller updated since
        # Pending jobs first seen this round at reason None (Slurm has not judged them yet):
        # no band or comment is written to them this round, so that Slurm's first
        # judgement, not the None our update would cause, is what the next round reads
        # (26.05 judges a job a pass after its submission: with the update at first sight
        # its preemption came two rounds after it, not one). The levers read it.
        self.first_seen_unjudged: set[str] = set()
        # the last plan's pending jobs whose request it cannot express (metrics, explain)
        self.unmodelled = Census()
        self.records: dict = {}
        self.submit_order = None
        self.contract = None
        self.qos_gate = None
        self.pins: Mapping[str, float] = {}

    def bind(self, records, submit_order, contract, qos_gate, pins: Mapping[str, float]) -> None:
        """The state (re)loaded from the store (Controller._load_state)."""
        self.records, self.submit_order, self.contract, self.qos_gate, self.pins = (
            records, submit_order, contract, qos_gate, pins)

    def split(self, observation: Observation) -> JobSplit:
        """The GPU jobs, the pending CPU-only jobs (their SiteFactor band: the planner's
        bands) and the MPS-only jobs (accounted in GPU-equivalents, banded; never
        planned), in one pass."""
        observed: dict[str, ObservedJob] = {}
        cpu_pending: dict[str, ObservedJob] = {}
        shared: dict[str, ObservedJob] = {}
        cpu_running: dict[str, ObservedJob] = {}  # preemption: slurm: banded when in preempt_qos
        running_banded = self.strategy.running_banded
        for job in observation.jobs:
            if job.gpus > 0:
                observed[job.job_id] = job
            elif job.mps > 0:
                shared[job.job_id] = job
            elif job.state == "PENDING":
                cpu_pending[job.job_id] = job
            elif running_banded and job.state == "RUNNING":
                cpu_running[job.job_id] = job
        return JobSplit(observed, cpu_pending, shared, cpu_running)

    def plan(self, observed: dict[str, ObservedJob], observation: Observation, now: float, round_id: int,
             leaving: set[str], service=None, explain: bool = False) -> Plan:
        """The engine's plan of the jobs Slurm could start, with the jobs that wait on
        Slurm (controller.service.round.startable) added after them: ordered and banded,
        never a reason to preempt."""
        snapshot, waiting, reasons, pending = self.snapshot(observed, observation, now, round_id, leaving, service,
                                                            explain=explain)
        # pending jobs a QOS GPU limit keeps from starting even after every preemption the
        # plan could make under that QOS wait on Slurm (controller.service.ops.qos_gate): Slurm
        # shows them Priority until its scheduler judges the limit
        qos_waits, qos_unmodelled = self._qos_verdicts(snapshot, pending, observed, leaving, now)
        if qos_waits:
            pending = [job for job in pending if job.job_id not in qos_waits]
            kept, held_back = [], []
            for job in snapshot.jobs:  # (one pass: the plan's jobs are most of the round's)
                (held_back if job.job_id in qos_waits else kept).append(job)
            snapshot.jobs[:] = kept
            waiting = sorted(waiting + held_back, key=lambda job: job.index)
            reasons.update((job_id, "") for job_id in qos_waits)
        # pending jobs asking for what the plan's model cannot express (GPUs of several
        # types, an OR constraint, --exclusive=user, a count the release or the nodes do
        # not report): they wait, banded; the plan never guesses where Slurm would start
        # them. Counted per reason (metrics, the census log line, explain).
        self.unmodelled = _inexpressible(pending, snapshot.nodes, qos_unmodelled)
        unmodelled = set(self.unmodelled.jobs)
        # jobs whose own nodes (partitions, GPU type, reservation, features) no preemption can free wait
        # too: the core's selection, the one every replay loop makes (controller.core.placement.set_aside)
        aside, unreachable = set_aside(snapshot, unmodelled)
        if aside:
            waiting += aside
            reasons.update((job.job_id, "") for job in aside)
        plan = self.engine.step(snapshot)
        if waiting:
            ctx = PolicyContext(now_s=now, thresholds_gpu_s=self.engine.config.thresholds_gpu_s, service=service)
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

    def _qos_verdicts(self, snapshot: Snapshot, pending: list[ObservedJob], observed: dict[str, ObservedJob],
                      leaving: set[str], now: float) -> tuple[dict[str, str], dict[str, ObservedJob]]:
        """The QOS gate's verdicts on the plan's pending jobs (``pending``, as observed):
        job id -> the limit it waits on, and job id -> the job with the ``qos_limits``
        reason added (a QOS the gate cannot judge). Running jobs being preempted are not
        counted (their GPUs leave the QOS's totals); those the plan may preempt are
        counted as freeable."""
        gate = self.qos_gate
        if not gate.on:
            return {}, {}
        gate.refresh(now)
        # the distinct (partition, QOS) pairs of every GPU job, running ones too (a superset
        # of the pending ones'), made in C: where none has a GPU limit, no verdict is possible
        # (the passes below were 40 ms of a round at 55,000 jobs, 250 ms at 220,000)
        if gate.silent_for(set(map(_PARTITION_AND_QOS, observed.values()))):
            return {}, {}
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

    def snapshot(self, observed: dict[str, ObservedJob], observation: Observation, now: float, round_id: int,
                 leaving: set[str], service=None, explain: bool = False
                 ) -> tuple[Snapshot, list[JobState], dict[str, str], list[ObservedJob]]:
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
        (JobSpec.preemptable=False).

        Returned last: the ObservedJobs of the snapshot's pending jobs, in its order (the
        QOS gate and the census read them: looked up again by id, they were a pass of
        dict lookups of their own, longer than the census)."""
        jobs: list[JobState] = []
        waiting: list[JobState] = []
        reasons: dict[str, str] = {}
        held_gpus = 0
        released: list[tuple[tuple[str, int, int], ...]] = []  # the CPUs, memory of jobs being preempted
        unavailable = {n.name for n in observation.nodes if not n.available}
        free_by_node = {n.name: n.gpus_free for n in observation.nodes if n.available}
        specs: dict[str, tuple] = {}  # this round's JobSpecs (see _job_spec)
        # (the loop runs once per active job: its lookups are bound to locals)
        records, why_not, pins, last_specs = self.records, self.contract.why_not, self.pins, self.specs
        startable_seen, updated = self.startable_seen, self.updated
        verify = self.verify_reuse
        unjudged = self.first_seen_unjudged
        unjudged.clear()
        arrived: list[str] = []  # pending jobs first seen this round
        pending: list[ObservedJob] = []  # the ObservedJobs of ``jobs``' pending ones
        # preemption: slurm: slurmctld's requeues count against preempt_max_per_job too
        # (Slurm's restart count; Preemptions.protected)
        counted = self.strategy.counted_preemptions
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
                if job_id not in last_specs:
                    arrived.append(job_id)
            record = records[job_id]
            # the JobSpec of the last round while the same ObservedJob has the same pin and
            # the spec the same account fields (see _job_spec, which builds it otherwise)
            pinned = job_id in pins
            kept = last_specs.get(job_id)
            if (kept is not None and kept[0] is job and kept[1] == pinned and not verify
                    and _same_account_fields(kept[2], record, preemptable)):
                specs[job_id] = kept
                spec = kept[2]
            else:
                spec = self._job_spec(job, record, preemptable, pinned, specs)
                # (a full round: the spec the last round would have reused, for an equal job)
                if (verify and kept is not None and kept[1] == pinned and kept[2] != spec and kept[0] == job
                        and _same_account_fields(kept[2], record, preemptable)):
                    self.reuse_mismatches.append(job_id)
            if reason:
                reasons[job_id] = reason
            elif not running:
                pending.append(job)
            # by position, in _JOB_STATE_FIELDS order (a keyword call cost twice as much)
            (waiting if reason else jobs).append(JobState(
                spec, index, record.attained_gpu_s, record.queue_service_gpu_s, record.executed_s,
                record.executed_since_promotion_s, record.waited_since_promotion_s, 0.0, record.first_start_s,
                (job.start_time_s if job.start_time_s is not None else now) if running else None, running,
                job.gpus_by_node if running else (),
                counted(record.preemptions, job.restart_count), 0, None,
                record.queue_level,
                record.queue_entry))
        if unjudged:
            # The jobs that arrived with a job first seen unjudged get no band this round
            # either: none of them jumps ahead of it in Slurm's order (seen on 26.05: the job
            # submitted first, held back alone, lost its node to the later ones, and a
            # preemption then took the node back). The next round bands them all.
            unjudged.update(arrived)
        self.specs = specs
        nodes = _with_released(observation.nodes, released) if released else observation.nodes
        capacity = sum(n.gpus_total for n in nodes if n.available) - held_gpus
        return Snapshot(now_s=now, jobs=jobs, nodes=nodes, service=service, round_id=round_id,
                        capacity_gpus=max(capacity, 0), explain=explain, free_by_node=free_by_node), waiting, reasons, \
            pending

    def _job_spec(self, job: ObservedJob, record, preemptable: bool, pinned: bool,
                  specs: dict[str, tuple]) -> JobSpec:
        """The engine's JobSpec of ``job``, kept in ``specs`` with ``pinned``: snapshot()
        takes the one of the last round while the same ObservedJob (the backend keeps it
        while Slurm's record is unchanged) has the same pin, and the spec the record's
        submit time and skew and the job's preemptability (building 12,000 specs was a
        third of a round; a key tuple kept beside each was 0.07 KB a job).

        A pending job carries its own --nodelist / --exclude / -N, which the plan's
        placement honours. A node list this controller wrote (a pin, kept in
        Levers.pins) is not the job's own. Constraints Slurm would not hold together
        are left out (logged once): the job is then planned as any other, never the
        round lost."""
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
        specs[job.job_id] = (job, pinned, spec)
        return spec

    def spec_of(self, job_id: str) -> Optional[JobSpec]:
        """The JobSpec this round's plan used for ``job_id`` (None: not planned)."""
        kept = self.specs.get(job_id)
        return None if kept is None else kept[2]

    def note_updates(self, levers, observed: dict[str, ObservedJob], acting: bool) -> None:
        """Remember the pending jobs this round's bands and comments updated in Slurm (enforce only:
        elsewhere nothing reached Slurm); forget the jobs no longer pending."""
        if acting:  # a band or a comment: neither changes whether Slurm may start it
            self.updated.update(action.job_id for action in levers if isinstance(action, (SetBand, SetAdminComment))
                                 and getattr(observed.get(action.job_id), "state", "") == "PENDING")
        pending = {job_id for job_id, job in observed.items() if job.state == "PENDING"}
        self.updated &= pending
        self.startable_seen &= pending



def lever_view(now: float, observed: Mapping[str, ObservedJob], accounts, *,
               cpu_pending: Optional[Mapping[str, ObservedJob]] = None,
               shared: Optional[Mapping[str, ObservedJob]] = None,
               cpu_running: Optional[Mapping[str, ObservedJob]] = None, requeueing: Container[str] = (),
               kept_from_slurm: Container[str] = (), may_preempt: Optional[Callable[[ObservedJob], bool]] = None,
               unjudged: Container[str] = (), acting: bool = True,
               preemptable: Optional[Callable[[ObservedJob], bool]] = None) -> LeverView:
    """What the lever planner may know this round (controller.core.levers.view), from the
    observation and the accounts: the ObservedJobs as they are (they carry the view's
    neutral flags), the accounts' skew, service and stop times. ``acting``: the levers
    reach Slurm (the executor's word), so they are held to its RPC budget."""
    records = accounts.records

    def shared_service(job_id: str) -> Optional[float]:
        record = records.get(job_id)
        return record.queue_service_gpu_s if record is not None else None

    return LeverView(now=now, gpu=observed, cpu_pending=cpu_pending or {}, shared=shared or {},
                     cpu_running=cpu_running or {}, skew=lambda job_id: records[job_id].skew,
                     started_once=accounts.started_once, shared_service=shared_service, requeueing=requeueing,
                     kept_from_slurm=kept_from_slurm, may_preempt=may_preempt, unjudged=unjudged,
                     begin_time_ours=lambda job: job.waits_for == "begin_time_after_requeue", stopped_at=accounts.stopped_at, rpc_budgeted=acting,
                     attained_gpu_s=lambda job_id: records[job_id].attained_gpu_s,
                     preemptable=preemptable or (lambda job: False))


_PARTITION_AND_QOS = operator.attrgetter("partition", "qos")


def _same_account_fields(spec: JobSpec, record, preemptable: bool) -> bool:
    """The kept ``spec`` has the account fields it would be built with now (_job_spec)."""
    return (spec.submit_time_s == record.submit_time_s and spec.skew == record.skew
            and spec.preemptable == preemptable)


# JobState's leading fields as RoundInput.snapshot passes them, by position: checked here, so a
# model that reorders them fails at import, not in a plan.
_JOB_STATE_FIELDS = ("spec", "index", "attained_gpu_s", "queue_service_gpu_s", "executed_s",
                     "executed_since_promotion_s", "waited_since_promotion_s", "progress_s", "first_start_s",
                     "run_start_s", "running", "placement", "preemptions", "promotions", "finish_time_s",
                     "queue_level", "queue_entry")
if tuple(f.name for f in fields(JobState))[:len(_JOB_STATE_FIELDS)] != _JOB_STATE_FIELDS:
    raise ImportError(f"controller.core.model.JobState's fields are no longer {_JOB_STATE_FIELDS}: "
                      "update RoundInput.snapshot's positional JobState call")


def _inexpressible(pending: list[ObservedJob], nodes, amended: Optional[Mapping[str, ObservedJob]] = None) -> Census:
    """The pending jobs of the plan whose request its model cannot express, with their
    reason codes and texts (controller.service.ops.unmodelled.census); ``pending``: the
    pending jobs the plan weighs (not those waiting on Slurm), as observed. ``amended``:
    jobs with reasons the round added (a QOS it cannot judge)."""
    if amended:
        pending = [amended.get(job.job_id) or job for job in pending]
    return census(pending, nodes)


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

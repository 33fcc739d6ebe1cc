"""Arrays and het jobs as the plan sees them: tasks and gangs, never a bare ArrayJobId.

Slurm lists a pending job array as one record (``array_task_string`` "5-50%4": tasks
5..50, at most 4 running at once) and each started task as its own. Planned as one
job, the record would be one task's GPUs. So a pending record is planned as its
tasks, each under "ARRAYID_TASKID", and only as many as the throttle lets start: %N
minus the tasks already running and the pending tasks that have records of their own
(a requeued task), so the plan never starts more tasks of an array than %N allows.
At most MAX_LISTED_TASKS are listed per record (a 9,588-task array is not 9,588 plan
entries); the rest are withheld, never taken as gone.

A task listed from inside the pending record carries ``shared_band_id`` (its
ArrayJobId; the port's ObservedJob.lever_id is then ''): any ``scontrol update``,
hold or release naming "ARRAYID_TASKID" makes Slurm split that task off into a
record of its own (slurmctld's update_job_str -> job_array_split), and split tasks
multiply slurmctld's records (MaxJobCount) and were seen to run past the array's
throttle. So no lever names such a task: the array's
tasks share one SiteFactor, set on the ArrayJobId (controller.core.levers.bands.array_bands),
which Slurm applies to the pending record whole. Running and split-off tasks have
records of their own and keep their own levers.

A het job's components (``het_job_id``, ``het_job_offset``) start together and are
one gang: planned under the leader's id (a lever on it acts on every component),
with their GPUs and nodes summed, so it is preempted whole or not at all. It is marked
``gang`` so that nothing pins it (ObservedJob.pinnable: a pin names one node list; each
component has its own). The gang is placed by one request: a pending het job whose
components differ in the nodes they may use or in what they ask per node (a
component's --constraint, partition, GPU type, GPUs per node) is unmodelled (code
``het``), never a reason to preempt.

The array and het fields of a Slurm record are slurm_plugin's own: the observation's
jobs are SlurmObservedJobs (the port's ObservedJob and these fields), which plan_view
reads; the controller reads only the port's neutral ``shared_band_id`` and ``gang``.
"""
from __future__ import annotations

import dataclasses
import operator
import re
from dataclasses import dataclass, field
from typing import Iterable

from controller.core.model import MIXED_TYPES
from controller.service.acting.backend import ObservedJob, unmodelled_fields

__all__ = ["MAX_LISTED_TASKS", "PlanView", "SlurmObservedJob", "Withheld", "plan_view", "task_ranges"]

MAX_LISTED_TASKS = 1000
MAX_TASK_ID = 4_000_000  # Slurm's MaxArraySize is at most 4,000,001
_ITEM_RE = re.compile(r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?", re.ASCII)
_HET_JOB_ID = operator.attrgetter("het_job_id")
_ARRAY_TASKS = operator.attrgetter("array_tasks")
_HOLDS_GPUS = {"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "SIGNALING", "RESIZING", "STAGE_OUT"}


@dataclass(frozen=True, slots=True)
class SlurmObservedJob(ObservedJob):
    """An ObservedJob with the array and het fields of its Slurm record (as
    slurm_plugin.records.SlurmJob reads them), which plan_view turns into the port's
    neutral facts. A pending array record (job_id the ArrayJobId): its pending tasks
    ("5-50%4") and throttle; an array task: the throttle; a het job component: its
    leader's id and offset. plan_view clears the array fields of the tasks it lists,
    and the gang of a het job keeps its leader's."""

    array_tasks: str = ""
    array_max_tasks: int = 0
    het_job_id: str = ""
    het_offset: int = 0


@dataclass
class Withheld:
    """Job ids whose absence from an observation is not "gone": ``ids`` exactly (and
    every task of an ArrayJobId among them), the tasks of ``tasks`` (ArrayJobId ->
    ranges of task ids), every task of ``arrays``, or everything (a bad record whose id
    could not be read)."""

    ids: set[str] = field(default_factory=set)
    tasks: dict[str, list[range]] = field(default_factory=dict)
    arrays: set[str] = field(default_factory=set)
    everything: bool = False

    def __contains__(self, job_id: object) -> bool:
        if self.everything or job_id in self.ids:
            return True
        head, _, task = str(job_id).partition("_")
        if not task:
            return False
        # an ArrayJobId among ``ids``: its pending record did not parse (a task record's
        # own id is "ARRAYID_TASKID"), and which tasks it held is unknown: all are withheld
        if head in self.arrays or head in self.ids:
            return True
        return task.isdigit() and any(int(task) in r for r in self.tasks.get(head, ()))


@dataclass
class PlanView:
    jobs: list[ObservedJob]
    withheld: Withheld
    problems: list[str]  # one line per record left out of the plan


def task_ranges(text: str) -> tuple[list[range], int]:
    """("5-50:5,7%4" ->) the task ranges and the %N throttle (0: none) of an
    ``array_task_string``. ValueError naming the value when it is not one."""
    body, percent, limit = text.strip().partition("%")
    if percent and not (limit.isascii() and limit.isdigit() and len(limit) <= 7):
        raise ValueError(f"array_task_string: {text!r} has no task limit after %")
    ranges = []
    for item in body.split(","):
        match = _ITEM_RE.fullmatch(item.strip())
        if match is None:
            raise ValueError(f"array_task_string: {text!r} is not a task list (item {item!r})")
        lo = int(match.group(1))
        hi = int(match.group(2)) if match.group(2) else lo
        step = int(match.group(3)) if match.group(3) else 1
        if hi < lo or step < 1 or hi > MAX_TASK_ID:
            raise ValueError(f"array_task_string: {text!r} has an empty or too large range {item!r}")
        ranges.append(range(lo, hi + 1, step))
    return ranges, int(limit) if percent else 0


def _listed(ranges: list[range], count: int) -> tuple[list[int], list[range]]:
    """The first ``count`` task ids of the ranges, and the ranges of the rest."""
    listed: list[int] = []
    rest: list[range] = []
    for r in ranges:
        take = r[:max(0, count - len(listed))]
        listed.extend(take)
        if len(take) < len(r):
            rest.append(r[len(take):])
    return listed, rest


def _tasks(record: SlurmObservedJob, taken: int, withheld: Withheld) -> list[ObservedJob]:
    """The tasks of a pending array record to plan: as many as its throttle leaves room
    for next to ``taken`` (its tasks running, and pending in records of their own)."""
    ranges, throttle = task_ranges(record.array_tasks)
    throttle = throttle or record.array_max_tasks
    room = MAX_LISTED_TASKS if not throttle else min(MAX_LISTED_TASKS, max(0, throttle - taken))
    listed, rest = _listed(ranges, room)
    if rest:
        withheld.tasks.setdefault(record.job_id, []).extend(rest)
    return [dataclasses.replace(record, job_id=f"{record.job_id}_{task}", array_tasks="", array_max_tasks=0,
                                shared_band_id=record.job_id)
            for task in listed]


# What a component says of the nodes it may use, and what it asks of each: the gang is
# placed under the leader's, so where the components differ in any of these the plan
# would put some component's GPUs where Slurm will not (a --constraint, a partition, a
# GPU type, GPUs or CPUs or memory per node of its own): such a het job is unmodelled.
_NODE_RULES = (("partition", "partition"), ("required_nodes", "--nodelist"), ("excluded_nodes", "--exclude"),
               ("features", "--constraint"), ("gpu_types", "GPU type"), ("reservation", "--reservation"),
               ("exclusive", "--exclusive"), ("cpus_per_node", "CPUs per node"),
               ("mem_per_node_mb", "memory per node"))


def _gpus_per_node(job: SlurmObservedJob) -> float:
    return job.gpus / max(job.min_nodes, 1)


def _het_unmodelled(parts: list[SlurmObservedJob]) -> dict:
    """The unmodelled fields of a pending het job's gang ({} none): ``het`` where its
    components differ in their node rules or per-node request, and every component's own
    reasons (the gang is planned under the leader's fields, which would drop them)."""
    differ = [what for name, what in _NODE_RULES if len({getattr(p, name) for p in parts}) > 1]
    if len({_gpus_per_node(p) for p in parts}) > 1:
        differ.append("GPUs per node")
    texts, codes = [], []
    if differ:
        het = unmodelled_fields([("het", f"het job components differ in {', '.join(differ)} "
                                         "(each would need nodes of its own)")])
        texts.append(het["unmodelled"])
        codes.extend(het["unmodelled_reasons"])
    for part in parts:
        if part.unmodelled:
            texts.append(f"het component {part.het_offset}: {part.unmodelled}")
            codes.extend(part.unmodelled_reasons)
    return dict(unmodelled="; ".join(texts), unmodelled_reasons=tuple(dict.fromkeys(codes))) if texts else {}


def _gang(leader_id: str, parts: list[SlurmObservedJob]) -> ObservedJob:
    """One job of a het job's components (the leader first): their sums, the leader's
    rest; a pending one whose components differ in the nodes they may use is unmodelled
    (code ``het``: never a reason to preempt), as is one with an unmodelled component."""
    parts = sorted(parts, key=lambda j: j.het_offset)
    leader = parts[0]
    unmodelled = _het_unmodelled(parts) if leader.state == "PENDING" and len(parts) > 1 else {}
    by_node: dict[str, int] = {}
    for part in parts:
        for node, gpus in part.gpus_by_node:
            by_node[node] = by_node.get(node, 0) + gpus
    nodes = tuple(dict.fromkeys(n for part in parts for n in part.nodes))
    # components of different GPU types make a gang of several types, which the plan cannot place
    types = tuple(sorted({t for part in parts for t in part.gpu_types}))
    return dataclasses.replace(
        leader, job_id=leader_id, het_offset=0, gang=True, gpus=sum(p.gpus for p in parts),
        mps=sum(p.mps for p in parts), gpu_types=types,
        gpu_type=MIXED_TYPES if len(types) > 1 else leader.gpu_type, nodes=nodes,
        gpus_by_node=tuple(by_node.items()), min_nodes=sum(p.min_nodes for p in parts),
        max_nodes=0 if any(p.max_nodes == 0 for p in parts) else sum(p.max_nodes for p in parts), **unmodelled)


def plan_view(records: Iterable[SlurmObservedJob], withheld: Withheld | None = None) -> PlanView:
    """The jobs the plan sees for the records of one observation: pending array
    records as their listed tasks, het components as one gang, the rest as they are.
    An array's pending tasks with records of their own (requeued, split off) count
    against its throttle too: beyond it they are withheld, not planned. ``withheld``
    (the ids of records that failed to parse) is extended with the tasks not listed
    and the het jobs left out. Pure: the same records give the same view."""
    withheld = withheld if withheld is not None else Withheld()
    records = list(records)
    running: dict[str, int] = {}
    own_pending: dict[str, list[tuple[int, SlurmObservedJob]]] = {}  # ArrayJobId -> its pending task records
    # (only the records that can be array tasks are split and tested, and only a view
    # with arrays, het jobs or throttled tasks is walked: most records are none of these)
    for job in [job for job in records if "_" in job.job_id]:  # the array tasks' own records
        head, _, task = job.job_id.partition("_")
        if task and job.state in _HOLDS_GPUS:
            running[head] = running.get(head, 0) + 1
        elif task and job.state == "PENDING" and not job.het_job_id and task.isdigit():
            own_pending.setdefault(head, []).append((int(task), job))
    taken = dict(running)
    left_out: set[str] = set()  # pending task records past their array's throttle
    for head, tasks in own_pending.items():
        throttle = max(job.array_max_tasks for _, job in tasks)
        room = max(0, throttle - running.get(head, 0)) if throttle else len(tasks)
        tasks.sort(key=lambda item: item[0])
        left_out.update(job.job_id for _, job in tasks[room:])
        taken[head] = taken.get(head, 0) + min(room, len(tasks))
    withheld.ids |= left_out
    problems: list[str] = []
    if not left_out and not any(map(_HET_JOB_ID, records)) and not any(map(_ARRAY_TASKS, records)):
        return PlanView(records, withheld, problems)  # every record is planned as it is
    jobs: list[ObservedJob] = []
    hets: dict[str, list[SlurmObservedJob]] = {}
    for job in records:
        if job.het_job_id:
            hets.setdefault(job.het_job_id, []).append(job)
        elif job.array_tasks and job.state == "PENDING":
            try:
                jobs.extend(_tasks(job, taken.get(job.job_id, 0), withheld))
            except ValueError as exc:
                problems.append(f"squeue job {job.job_id}: {exc}")
                withheld.arrays.add(job.job_id)
        elif job.job_id not in left_out:
            jobs.append(job)
    for leader_id, parts in hets.items():
        if not any(p.het_offset == 0 for p in parts) or (withheld is not None and leader_id in withheld.ids):
            # a component without its leader (its record did not parse): not planned in part
            problems.append(f"squeue het job {leader_id}: leader record missing; not planned")
            withheld.ids.add(leader_id)
            continue
        jobs.append(_gang(leader_id, parts))
    return PlanView(jobs, withheld, problems)

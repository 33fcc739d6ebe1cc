"""The queue's jobs: ``squeue --json`` and ``scontrol show job -o`` into SlurmJob records
(slurm_plugin.records), each job's GPU, CPU and memory request read the same way from both.
"""
from __future__ import annotations

import math
import re
from sys import intern  # the few values thousands of records repeat (user, partition, state, ...) held once
from typing import Any

from controller.core.model import MIXED_TYPES
from slurm_plugin.grammar import (Constraint, SlurmParseError, expand_hostlist, gres_counts, gres_items,
    parse_constraint, parse_duration_s, quoted, scontrol_int, scontrol_time, split_scontrol_line)
from slurm_plugin.records import (SlurmJob, collect_records, count_value, epoch_value, finish_times, int_value,
    load_document, nullish_to_empty, reported_count, slurm_number, split_state, squeue_planned_id, str_value,
    time_limit_of)


REQUEST_FIELDS = ("tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket")
# the fields Slurm writes a per-GPU request in: a job whose only mention of a GPU is
# here (22.05's squeue for --ntasks-per-gpu without --gpus) still asks for GPUs
PER_GPU_FIELDS = ("cpus_per_tres", "memory_per_tres")


def _gpus_and_mps_from_request(record: dict, node_count: int, task_count: int,
                               state: str = "PENDING") -> tuple[int, int, tuple[tuple[str, str], ...]]:
    """(GPUs, MPS shares, the request's unmodelled reasons) of a squeue record, from the
    most specific field present: --gpus (per job), --gres / --gpus-per-node,
    --gpus-per-task (times the tasks). Every field in every spelling of the GRES
    grammar (``gres/gpu:2``, 22.05 ``gres:gpu:2``, ``gpu:a100:2``, several items).

    Two forms leave the count to Slurm's choice, and a job that holds its GPUs is
    counted by what Slurm allocated (``gres_detail``, else ``tres_alloc_str``):

    * --gpus-per-socket (``tres_per_socket``): Slurm picks the sockets, so a pending
      job is read as one socket's GPUs on each node, never more than Slurm gives it
      (records of 23.11-25.11 show ``gres/gpu:2`` per socket with two sockets per node
      and 2 GPUs allocated), and is unmodelled (``per_socket``).
    * --ntasks-per-gpu without a GPU count (``tasks_per_tres``, 24.11+; 22.05 writes no
      field of it but ``cpus_per_tres``/``memory_per_tres`` name the GPU it asks for):
      unmodelled (``per_task``) while pending; with --gpus beside it the count is
      --gpus and the job is modelled."""
    per = {name: gres_counts(str_value(record.get(name), name), field_name=name) for name in REQUEST_FIELDS}
    req = gres_counts(str_value(record.get("tres_req_str"), "tres_req_str"), field_name="tres_req_str")
    times = {"tres_per_job": 1, "tres_per_node": max(1, node_count), "tres_per_task": max(1, task_count),
             "tres_per_socket": max(1, node_count)}
    reasons: list[tuple[str, str]] = []
    holds = state not in ("PENDING", "")
    result = []
    for name in ("gpu", "mps"):
        for source in REQUEST_FIELDS:
            if name in per[source]:
                count = per[source][name] * times[source]
                if source == "tres_per_socket" and name == "gpu":
                    allocated = _allocated_gpus(record) if holds else None
                    if allocated is not None:
                        count = allocated
                    elif not holds:
                        reasons.append(("per_socket", f"--gpus-per-socket={per[source][name]} (which sockets, so "
                                                      "how many GPUs, is Slurm's choice)"))
                result.append(count)
                break
        else:
            result.append(req.get(name, 0))
    if not result[0] and _asks_gpus_per_task(record):
        allocated = _allocated_gpus(record) if holds else None
        if allocated is not None:
            result[0] = allocated
        elif not holds:
            reasons.append(("per_task", "--ntasks-per-gpu without a GPU count (how many GPUs is Slurm's choice)"))
    elif result[0] and not holds and count_value(record.get("tasks_per_tres"), "tasks_per_tres"):
        # --ntasks-per-gpu beside --gpus (24.11+ say so): how Slurm lays the tasks out over
        # nodes is its choice, and on 24.11 the conformance suite saw the plan preempt for
        # such a job (-w g2 --gpus=2 --ntasks-per-gpu=3) that one victim could not fit, in
        # 2 of 3 runs, not yet explained: not modelled until it is
        reasons.append(("per_task", f"--ntasks-per-gpu={count_value(record['tasks_per_tres'], 'tasks_per_tres')} beside"
                                    " a GPU count (the tasks' layout over nodes is Slurm's choice)"))
    return result[0], result[1], tuple(reasons)


def _gpus_per_node(record: dict) -> bool:
    """Whether the job asks its GPUs per node (--gres=gpu:K, --gpus-per-node:
    ``tres_per_node`` with no ``tres_per_job``): Slurm then needs K GPUs on every node
    it gives the job and counts its GPUs at its node count."""
    per = {name: gres_counts(str_value(record.get(name), name), field_name=name) for name in ("tres_per_job",
                                                                                        "tres_per_node")}
    return "gpu" in per["tres_per_node"] and "gpu" not in per["tres_per_job"]


def _asks_gpus_per_task(record: dict) -> bool:
    """Whether a record without a GPU count still asks for GPUs by its tasks:
    --ntasks-per-gpu (``tasks_per_tres``), or a per-GPU field naming a GPU."""
    if record.get("tasks_per_tres") is not None and count_value(record["tasks_per_tres"], "tasks_per_tres"):
        return True
    return any(gres == "gpu" for key in PER_GPU_FIELDS
               for gres, _, _, _ in _gres_items_or_none(str_value(record.get(key), key), key) or ())


def _allocated_gpus(record: dict) -> int | None:
    """The GPUs a job holds as Slurm allocated them: summed over ``gres_detail`` (one
    string per node), else the ``gres/gpu`` of ``tres_alloc_str``; None when neither says."""
    detail = _gres_detail(record.get("gres_detail"))
    if detail:
        return sum(gres_counts(item, field_name="gres_detail").get("gpu", 0) for item in detail)
    alloc = gres_counts(str_value(record.get("tres_alloc_str"), "tres_alloc_str"), field_name="tres_alloc_str")
    return alloc["gpu"] if "gpu" in alloc else None


def _gres_items_or_none(text: str, field_name: str) -> list | None:
    """gres_items, or None when the value is not the GRES grammar."""
    try:
        return gres_items(text, field_name)
    except SlurmParseError:
        return None


def _gpu_types_requested(record: dict) -> tuple[str, ...]:
    """The GPU types a job names in its request fields (else in ``tres_req_str``),
    sorted; () = any type. ``--gres=gpu:a100:4,gpu:v100:4`` names two
    (``tres_per_node`` ``gres/gpu:a100:4,gres/gpu:v100:4``): its count is their sum."""
    for names in (REQUEST_FIELDS, ("tres_req_str",)):
        types = {gtype for name in names for gres, gtype, _, _ in gres_items(str_value(record.get(name), name), name)
                 if gres == "gpu" and gtype}
        if types:
            return tuple(sorted(types))
    return ()


def _gpu_type_of(types: tuple[str, ...]) -> str:
    """A request's one GPU type ('' any; MIXED_TYPES when it names several, which the
    plan cannot place: controller.service.round.daemon keeps such a job out of preemption)."""
    return types[0] if len(types) == 1 else MIXED_TYPES if types else ""


# --------------------------------------------------------------------------
# squeue --json

def parse_squeue_json(text: str | bytes | dict, errors: list | None = None) -> list[SlurmJob]:
    """Jobs from ``squeue --json`` (22.05 and 23.02+ shapes; also slurmrestd /jobs)."""
    _, records = load_document(text, ("jobs",), "squeue --json")
    return collect_records(records, _squeue_job, errors, "job_id", "jobs")


def squeue_clock(doc: dict) -> float | None:
    """slurmctld's clock when it answered: the document's top-level ``last_update``
    (the 24.11 and 26.05 recordings; slurmctld stamps the job list it packs with its
    current time: the newest record time of tests/fixtures/slurm/*/squeue_array.json
    is a second older); None on 22.05, which has none, or when it is unreadable (the
    clock is then not measured from it)."""
    try:
        return epoch_value(doc.get("last_update"), "last_update")
    except SlurmParseError:
        return None


def json_says_sharing(doc: dict) -> bool:
    """Whether the document's jobs say --exclusive/--oversubscribe: data_parser v0.0.45
    (26.05) dropped ``shared`` ("replaced by 'oversubscribe' and 'exclusive'", which
    squeue's job records do not carry: an --exclusive job reads ``shared: []`` like any
    other); older parsers (22.05's has no meta field) say it."""
    plugin = (doc.get("meta") or {}).get("plugin") or {}
    found = re.fullmatch(r"data_parser/v(\d+)\.(\d+)\.(\d+)", str(plugin.get("data_parser") or ""))
    return found is None or tuple(int(n) for n in found.groups()) < (0, 0, 45)


def parse_show_job_sharing(text: str) -> dict[str, str]:
    """Job id -> its sharing mode as ``SlurmJob.shared`` names it, from `scontrol show job
    -o` (26.05: ``OverSubscribe=NO Exclusive=NODE``; Exclusive NODE is 'exclusive', USER,
    MCS, TOPO their lower-case names, NO with OverSubscribe=YES 'oversubscribe', else '').
    Keyed as squeue's records are planned: an array task's line (``ArrayTaskId=3``) under
    "ARRAYJOBID_3", a pending array record's (``ArrayTaskId=5-50%4``) under its ArrayJobId,
    any other under its JobId. Lines without both keys are left out."""
    out = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(?:^|\s)(JobId|ArrayJobId|ArrayTaskId|OverSubscribe|Exclusive)=(\S*)", line))
        if {"JobId", "OverSubscribe", "Exclusive"} <= fields.keys():
            exclusive = fields["Exclusive"].upper()
            key = fields["JobId"]
            if fields.get("ArrayJobId"):
                task = fields.get("ArrayTaskId", "")
                key = f"{fields['ArrayJobId']}_{task}" if task.isdigit() else fields["ArrayJobId"]
            out[key] = ("exclusive" if exclusive == "NODE" else exclusive.lower() if exclusive != "NO"
                        else "oversubscribe" if fields["OverSubscribe"].upper() == "YES" else "")
    return out


def parse_squeue_record(record: dict) -> SlurmJob:
    """One record of ``squeue --json``'s ``jobs`` list, as parse_squeue_json reads each
    (slurm_plugin.record_cache parses only the records that changed with it)."""
    return _squeue_job(record)


def _squeue_job(r: dict) -> SlurmJob:
    job_id = squeue_planned_id(r)
    array_id = int_value(r.get("array_job_id"), "array_job_id")
    het_id = int_value(r.get("het_job_id"), "het_job_id")
    if het_id:
        job_id = str(int_value(r["job_id"], "job_id"))  # a component keeps its own id; arrays.py gangs them
    state, flags = split_state(r.get("job_state"), "job_state")
    node_count = count_value(r.get("node_count"), "node_count")
    task_count = count_value(r.get("tasks"), "tasks")
    gpus, mps, request_unmodelled = _gpus_and_mps_from_request(r, node_count, task_count, state)
    gpu_types = _gpu_types_requested(r)
    start, end = finish_times(state, epoch_value(r.get("start_time"), "start_time"),
                               epoch_value(r.get("end_time"), "end_time"))
    limit_min = slurm_number(r.get("time_limit"), "time_limit")
    site = r.get("site_factor")
    return SlurmJob(
        job_id=job_id,
        name=intern(str_value(r.get("name"), "name")),  # (many jobs share a name: train, bash, an array's)
        user=intern(str_value(r.get("user_name"), "user_name")),
        account=intern(str_value(r.get("account"), "account")),
        partition=intern(str_value(r.get("partition"), "partition")),
        state=intern(state),
        state_flags=flags,
        reason=intern(str_value(r.get("state_reason"), "state_reason")),
        gpus=gpus,
        mps=mps,
        nodes=_names(expand_hostlist(str_value(r.get("nodes"), "nodes"))),
        node_count=node_count,
        max_nodes=count_value(r.get("max_nodes"), "max_nodes"),
        gpus_per_node=_gpus_per_node(r),
        submit_time=epoch_value(r.get("submit_time"), "submit_time"),
        start_time=start,
        end_time=end,
        eligible_time=epoch_value(r.get("eligible_time"), "eligible_time"),
        restart_count=count_value(r.get("restart_cnt"), "restart_cnt"),
        requeue=bool(r["requeue"]) if r.get("requeue") is not None else None,
        batch=bool(r.get("batch_flag")),
        comment=intern(str_value(r.get("comment"), "comment")),
        admin_comment=str_value(r.get("admin_comment"), "admin_comment"),
        priority=int_value(r.get("priority"), "priority") if r.get("priority") is not None else None,
        site_factor=int_value(site, "site_factor") if site is not None else None,
        nice=int_value(r.get("nice"), "nice"),  # 22.05 writes null for 0
        required_nodes=expand_hostlist(str_value(r.get("required_nodes"), "required_nodes")) or NO_NAMES,
        excluded_nodes=expand_hostlist(str_value(r.get("excluded_nodes"), "excluded_nodes")) or NO_NAMES,
        time_limit_s=time_limit_of(limit_min),
        allocated_nodes=_names(_allocated_nodes(r.get("job_resources"))),
        gres_detail=_gres_detail(r.get("gres_detail")),
        array_job_id=str(array_id) if array_id else "",
        array_tasks=str_value(r.get("array_task_string"), "array_task_string") if "_" not in job_id else "",
        array_max_tasks=count_value(r.get("array_max_tasks"), "array_max_tasks"),
        het_job_id=str(het_id) if het_id else "",
        het_offset=count_value(r.get("het_job_offset"), "het_job_offset"),
        gpu_type=_gpu_type_of(gpu_types),
        gpu_types=gpu_types,
        reservation=str_value(r.get("resv_name"), "resv_name"),
        qos=intern(str_value(r.get("qos"), "qos")),
        request_unmodelled=request_unmodelled,
        **_job_resources_asked(r, job_id),
    )


class _SharedEmpty(list):
    """An empty list that refuses to change: it stands in every record's empty lists."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("NO_NAMES is every record's empty list: copy it before changing it")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse


# One empty list for every record's empty node and GRES lists: most records have four
# or five (56 bytes each, about 0.24 KB a job held in the record cache).
NO_NAMES: list = _SharedEmpty()


def _names(nodes: list[str]) -> list[str]:
    """Node names as one object each, however many jobs name a node (an empty list: NO_NAMES)."""
    return [intern(name) for name in nodes] if nodes else NO_NAMES


def _per_gpu(r: dict, key: str) -> int | None:
    """--mem-per-gpu / --cpus-per-gpu from ``memory_per_tres`` / ``cpus_per_tres`` in any
    form Slurm writes (slurm_plugin.grammar.gres_items): ``gres/gpu:4096`` (23.02+),
    ``gres:gpu:4096`` (22.05), ``gpu:2`` (the DefCpuPerGPU / DefMemPerGPU that Slurm
    fills into every GPU job it tests against a partition, on 22.05, 24.11 and 26.05),
    typed (``gpu:a100:2``), several items. 0 when empty; None when the key is absent,
    the value is not the grammar, names another GRES, or gives GPU types different
    values: not read as 0 (the job is then unmodelled)."""
    if key not in r:
        return None
    text = str_value(r.get(key), key).strip()
    if not text:
        return 0
    items = _gres_items_or_none(text, key)
    if not items or any(name != "gpu" for name, _, _, _ in items):
        return None
    if not all(re.search(r"[:=][0-9]+$", item) for item in text.split(",")):
        return None  # a per-GPU value always has its number: 'gpu:x' would read as one of type x
    values = {count for _, _, count, _ in items}
    return values.pop() if len(values) == 1 else None


def _mem_per_node(r: dict) -> int | None:
    """--mem in MB (0 not asked, None not said). 24.11 and 26.05 write a job's memory per
    GPU (``MinMemoryTRES``: --mem-per-gpu or the DefMemPerGPU Slurm filled in) as its
    ``memory_per_node``, even beside --mem (recorded: --mem=3000 with DefMemPerGPU=1000
    reads 1000): there --mem is the ``mem=`` of ``tres_req_str`` over its nodes when the
    flags say EXACT_MEMORY_REQUESTED (the user set it), else none. 22.05 writes --mem."""
    per_node = reported_count(r, "memory_per_node")
    if not (isinstance(r.get("memory_per_node"), dict) and _per_gpu(r, "memory_per_tres")):
        return per_node
    flags = r.get("flags")
    if not isinstance(flags, list):
        return None
    if "EXACT_MEMORY_REQUESTED" not in flags or reported_count(r, "memory_per_cpu"):
        return 0
    total = _tres_mem_mb(str_value(r.get("tres_req_str"), "tres_req_str"))
    return None if total is None else -(-total // max(1, count_value(r.get("node_count"), "node_count")))


def _tres_mem_mb(tres: str) -> int | None:
    """The ``mem=`` of a TRES string in MB (``mem=3000M``, ``mem=62.50G``); None when absent."""
    found = re.search(r"(?:^|,)mem=([0-9]{1,15}(?:\.[0-9]{1,6})?)([KMGT]?)(?:,|$)", tres)
    if not found:
        return None
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 ** 2}[found.group(2)]
    return math.ceil(float(found.group(1)) * scale)


# the ``shared`` modes a job may carry (22.05 one string; 23.02+ a list of flags)
_SHARED_EXCLUSIVE = {"none", "no", "exclusive"}


def _shared(value: Any) -> str:
    """'' (the default), 'exclusive' (--exclusive), or Slurm's name of another mode."""
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    if value is not None and not isinstance(value, (str, list)):
        raise SlurmParseError(f"shared: expected a string or a list, got {quoted(value)}")
    names = sorted({str(item).strip().lower() for item in items if str(item).strip()})
    if any(name in _SHARED_EXCLUSIVE for name in names):
        return "exclusive"
    # 22.05 names --oversubscribe (and a partition's OverSubscribe=FORCE: the backend tells
    # them apart by the partition) 'shared'
    if names and all(name in ("oversubscribe", "yes", "ok", "shared") for name in names):
        return "oversubscribe"  # CPUs may be shared: the plan's whole-CPU count is the stricter one
    return ",".join(names)


def _job_resources_asked(r: dict, job_id: str) -> dict:
    """The SlurmJob fields of what the job asks of each node beyond GPUs, and what a
    running one holds there (see SlurmJob)."""
    constraint = None
    if "features" in r:
        try:
            constraint = parse_constraint(str_value(r.get("features"), "features"))
        except SlurmParseError as err:  # left to Slurm, with why (never the record lost)
            constraint = Constraint(str_value(r.get("features"), "features"), form=f"unreadable ({err})")
    cpus_by_node, mem_by_node = _held_by_node(r.get("job_resources"), count_value(r.get("cpus"), "cpus"))
    cpus = reported_count(r, "cpus")
    return dict(
        cpus=cpus or None,  # every job has a CPU: 0 is "not said"
        min_cpus_per_node=reported_count(r, "minimum_cpus_per_node") or None,
        cpus_per_gpu=_per_gpu(r, "cpus_per_tres"),
        mem_per_node_mb=_mem_per_node(r),
        mem_per_cpu_mb=reported_count(r, "memory_per_cpu"),
        mem_per_gpu_mb=_per_gpu(r, "memory_per_tres"),
        constraint=constraint,
        shared=_shared(r.get("shared")) if "shared" in r else None,
        cpus_by_node=cpus_by_node,
        mem_by_node_mb=mem_by_node,
    )


def _held_by_node(resources: Any, cpus: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A running job's CPUs and memory (MB) per allocated node, in allocation order:
    24.05+ ``nodes.allocation[].cpus.count`` / ``.memory.allocated``; 22.05/23.02
    ``allocated_nodes[].memory_allocated``, whose CPUs per node are not said (its
    ``cpus_used`` is what steps use): then the job's CPUs when it holds one node,
    else unknown (())."""
    if not isinstance(resources, dict):
        return (), ()
    items = resources.get("allocated_nodes")
    if isinstance(items, list) and all(isinstance(item, dict) for item in items) and items:
        mem = (tuple(count_value(item["memory_allocated"], "memory_allocated", hi=2**62) for item in items)
               if all("memory_allocated" in item for item in items) else ())
        return ((cpus,) if len(items) == 1 and cpus else ()), mem
    nodes = resources.get("nodes")
    items = nodes.get("allocation") if isinstance(nodes, dict) else None
    if not (isinstance(items, list) and items and all(isinstance(item, dict) for item in items)):
        return (), ()
    cpus_held = [(item.get("cpus") or {}).get("count") if isinstance(item.get("cpus"), dict) else None
                 for item in items]
    mem_held = [(item.get("memory") or {}).get("allocated") if isinstance(item.get("memory"), dict) else None
                for item in items]
    return (tuple(count_value(n, "cpus.count") for n in cpus_held) if None not in cpus_held else (),
            tuple(count_value(n, "memory.allocated", hi=2**62) for n in mem_held) if None not in mem_held else ())


def _allocated_nodes(resources: Any) -> list[str]:
    """The nodes a job holds, in allocation order (the order of ``gres_detail``):
    22.05/23.02 ``job_resources.allocated_nodes[].nodename``, 24.05+
    ``job_resources.nodes.allocation[].name``. [] when absent or not every one named."""
    if not isinstance(resources, dict):
        return []
    items, key = resources.get("allocated_nodes"), "nodename"
    if not isinstance(items, list):
        nodes = resources.get("nodes")
        items, key = (nodes.get("allocation"), "name") if isinstance(nodes, dict) else (None, key)
        if not isinstance(items, list):
            return []
    names = [item.get(key) for item in items if isinstance(item, dict)]
    return names if names and all(isinstance(name, str) and name for name in names) else []


def _gres_detail(detail: Any) -> list[str]:
    """The per-node GRES strings (``gpu:2(IDX:0-1)``), or [] when not a list of strings."""
    if isinstance(detail, list) and detail and all(isinstance(item, str) for item in detail):
        return list(detail)
    return NO_NAMES


# --------------------------------------------------------------------------
# scontrol show job -o

def parse_scontrol_show_job(text: str, errors: list | None = None) -> list[SlurmJob]:
    """Jobs from ``scontrol show job -o`` (one ``Key=Value ...`` line per job).

    Timestamps are local time of this process (as scontrol prints them).
    ``Reason`` keeps scontrol's underscores. ``No jobs in the system`` gives [].
    """
    if not isinstance(text, str):
        raise SlurmParseError(f"scontrol show job: expected text, got {type(text).__name__}")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) == 1 and lines[0].strip().lower().startswith("no jobs"):
        return []
    records = []
    for line in lines:
        if not line.lstrip().startswith("JobId="):
            raise SlurmParseError(f"scontrol show job: line does not start with JobId=: {quoted(line[:60])}")
        records.append(split_scontrol_line(line.strip()))
    return collect_records(records, _scontrol_job, errors, "JobId", "scontrol")


def _scontrol_job(r: dict) -> SlurmJob:
    job_id = r.get("JobId", "")
    if not re.fullmatch(r"[0-9]{1,19}", job_id):
        raise SlurmParseError(f"JobId: expected an integer, got {quoted(job_id)}")
    state, flags = split_state(r.get("JobState", ""), "JobState")
    num_nodes = r.get("NumNodes", "0")
    m = re.match(r"([0-9]{1,9})(?:-([0-9]{1,9}))?", num_nodes)  # "1", or "4-4" (min-max) pending
    if not m:
        raise SlurmParseError(f"NumNodes: expected a count, got {quoted(num_nodes)}")
    node_count = int(m.group(1))
    max_nodes = int(m.group(2)) if m.group(2) else 0
    # the squeue record's request fields, from their scontrol keys (NtasksPerTRES: 22.05
    # prints it where its JSON has no field; AllocTRES: 24.11+, the TRES of a running job)
    fake = {
        "tres_per_job": nullish_to_empty(r.get("TresPerJob")),
        "tres_per_node": nullish_to_empty(r.get("TresPerNode")),
        "tres_per_task": nullish_to_empty(r.get("TresPerTask")),
        "tres_per_socket": nullish_to_empty(r.get("TresPerSocket")),
        "cpus_per_tres": nullish_to_empty(r.get("CpusPerTres")),
        "memory_per_tres": nullish_to_empty(r.get("MemPerTres")),
        "tasks_per_tres": scontrol_int(r.get("NtasksPerTRES"), "NtasksPerTRES"),
        "tres_req_str": nullish_to_empty(r.get("ReqTRES") or r.get("TRES")),
        "tres_alloc_str": nullish_to_empty(r.get("AllocTRES") or r.get("TRES")) if state != "PENDING" else "",
    }
    gpus, mps, request_unmodelled = _gpus_and_mps_from_request(
        fake, node_count, scontrol_int(r.get("NumTasks"), "NumTasks"), state)
    start, end = finish_times(state, scontrol_time(r.get("StartTime"), "StartTime"),
                               scontrol_time(r.get("EndTime"), "EndTime"))
    user = r.get("UserId", "")
    site = r.get("SiteFactor")
    return SlurmJob(
        job_id=job_id,
        name=r.get("JobName", ""),
        user=user.split("(", 1)[0],
        account=nullish_to_empty(r.get("Account")),
        partition=nullish_to_empty(r.get("Partition")),
        state=state,
        state_flags=flags,
        reason=nullish_to_empty(r.get("Reason")),
        gpus=gpus,
        mps=mps,
        nodes=expand_hostlist(r.get("NodeList")),
        node_count=node_count,
        max_nodes=max_nodes,
        gpus_per_node=_gpus_per_node(fake),
        submit_time=scontrol_time(r.get("SubmitTime"), "SubmitTime"),
        start_time=start,
        end_time=end,
        eligible_time=scontrol_time(r.get("EligibleTime"), "EligibleTime"),
        restart_count=count_value(scontrol_int(r.get("Restarts"), "Restarts"), "Restarts"),
        requeue=(r["Requeue"] == "1") if "Requeue" in r else None,
        batch=r.get("BatchFlag") == "1",
        comment=nullish_to_empty(r.get("Comment")),
        admin_comment=nullish_to_empty(r.get("AdminComment")),
        priority=scontrol_int(r.get("Priority"), "Priority") if "Priority" in r else None,
        site_factor=scontrol_int(site, "SiteFactor") if site not in (None, "") else None,
        nice=scontrol_int(r.get("Nice"), "Nice") if r.get("Nice") not in (None, "") else 0,
        required_nodes=expand_hostlist(r.get("ReqNodeList")),
        excluded_nodes=expand_hostlist(r.get("ExcNodeList")),
        time_limit_s=parse_duration_s(r.get("TimeLimit"), "TimeLimit"),
        qos=nullish_to_empty(r.get("QOS")),
        request_unmodelled=request_unmodelled,
    )

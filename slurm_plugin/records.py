"""SlurmJob and SlurmNode, the one model every Slurm record is normalized into, and the
field readers the parsers share (parse_jobs, parse_nodes, parse_history).

Every record shape Slurm prints (two JSON generations, scontrol text) is read here
(parse_jobs: squeue and scontrol show job; parse_nodes: sinfo, reservations,
partitions; parse_history: sacct) and nowhere else, so a version drift is fixed in one file and the rest of the code
never sees it (slurm_plugin/observe.py reads only these dataclasses). The string
grammars inside the records (hostlists, GRES, durations, timestamps, scontrol's
``Key=Value`` line) are in slurm_plugin.grammar.

Two JSON generations are accepted and turned into the same dataclasses:

* Slurm 22.05 (openapi/v0.0.38 plugin): plain numbers, ``null`` for unset,
  ``job_state`` a string, node ``state`` a lower-case string plus ``state_flags``.
* Slurm 23.02+ / 24.11 (data_parser v0.0.39..v0.0.42): numbers wrapped as
  ``{"set": bool, "infinite": bool, "number": N}``, ``job_state`` and node
  ``state`` as lists of upper-case flags, ``--gres`` stored as ``gres/gpu:2``.
  26.05 (data_parser v0.0.45) writes the same documents; the fields read here keep
  their names and places. What changed in them is noted where it is read (sinfo's
  ``gres.used``, sacct's ``association``).

Plus the text form ``scontrol show job -o`` (one job per line).

Error handling: input that is not the expected document at all (not JSON, no
``jobs``/``nodes`` list) raises :class:`SlurmParseError`. A single malformed
record does not fail the whole parse: every ``parse_*`` function takes an
optional ``errors`` list; the record is skipped and its
:class:`SlurmParseError` (with ``record_index`` and ``job_id``/``node`` set where
known) is appended there. Without an ``errors`` list the skipped records are
dropped silently, so callers that care should pass one.

Times are epoch seconds (float); durations carry ``_s``. Slurm's "unset"
values (0, ``Unknown``, ``set: false``) become ``None``.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from controller.core.inputs import MAX_EPOCH_S, MAX_SECONDS, shorten
from slurm_plugin.grammar import Constraint, SlurmParseError, quoted



# Base job states; anything else in a 23.02+ job_state list is a flag.
JOB_BASE_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
    "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REQUEUED",
    "RESIZING", "REVOKED",
})
TERMINAL_JOB_STATES = frozenset({
    "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REQUEUED", "REVOKED",
})
NODE_BASE_STATES = frozenset({
    "idle", "mixed", "allocated", "down", "error", "future", "unknown",
})
# Base states and flags that mean "do not plan work onto this node".
NODE_UNAVAILABLE_STATES = frozenset({"down", "error", "future", "unknown"})
NODE_UNAVAILABLE_FLAGS = frozenset({
    "DRAIN", "DRAINED", "DRAINING", "NOT_RESPONDING", "FAIL", "FAILING",
    "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "MAINTENANCE", "REBOOT_ISSUED",
    "INVALID_REG",
})


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as Slurm reports it, in one shape for every Slurm version.

    ``gpus`` is the total number of whole GPUs the job asks for (all nodes);
    ``mps`` the total MPS shares (an MPS-only job has ``gpus == 0``).
    ``start_time`` of a pending job and ``end_time`` of an unfinished job are
    Slurm's estimates and are reported as ``None``. ``time_limit_s`` is ``None``
    for UNLIMITED. ``requeue`` is ``None`` where the source does not say (sacct).
    ``node_count`` of a pending job is the fewest nodes it accepts (1 unless -N or
    --nodelist asks for more; of a running job, the nodes it holds); ``max_nodes``
    the most (0: no maximum; -N N gives both N).
    """

    job_id: str
    name: str = ""
    user: str = ""
    account: str = ""
    partition: str = ""
    state: str = ""
    state_flags: frozenset[str] = frozenset()
    reason: str = ""
    gpus: int = 0
    mps: int = 0
    nodes: list[str] = field(default_factory=list)
    node_count: int = 0
    max_nodes: int = 0
    # GPUs asked per node (--gres=gpu:K, --gpus-per-node): K on every node it gets, so the
    # gang never spreads over more nodes than its count (the backend bounds it there)
    gpus_per_node: bool = False
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    # when Slurm lets the job start (BeginTime: --begin, StartTime=, or the delay a
    # requeue adds; a requeue also sets submit_time to the requeue's time)
    eligible_time: float | None = None
    restart_count: int = 0
    requeue: bool | None = None
    batch: bool = False
    comment: str = ""
    admin_comment: str = ""
    priority: int | None = None
    site_factor: int | None = None
    nice: int = 0  # Nice (--nice, or an operator's scontrol update): lowers its priority
    required_nodes: list[str] = field(default_factory=list)
    excluded_nodes: list[str] = field(default_factory=list)
    time_limit_s: float | None = None
    # squeue only: the nodes a running job holds in allocation order, and the GRES it
    # holds on each, aligned with them when Slurm says (else [])
    allocated_nodes: list[str] = field(default_factory=list)
    gres_detail: list[str] = field(default_factory=list)
    # squeue only: an array task's job_id is "ARRAYID_TASKID" (Slurm's own levers match a
    # bare ArrayJobId to every task); a pending array record keeps the ArrayJobId and
    # carries its pending tasks (``array_tasks``, e.g. "5-50%4") and throttle. A het
    # job component carries its leader's id and its offset (slurm_plugin.arrays).
    array_job_id: str = ""
    array_tasks: str = ""
    array_max_tasks: int = 0
    het_job_id: str = ""
    het_offset: int = 0
    gpu_type: str = ""  # the GPU type asked for (--gres=gpu:a100:2, --gpus=a100:2); '' any; MIXED_TYPES several
    # every GPU type the request names, sorted (() any): two or more for
    # --gres=gpu:a100:4,gpu:v100:4, whose ``gpus`` is then their sum
    gpu_types: tuple[str, ...] = ()
    reservation: str = ""  # --reservation ('' none)
    qos: str = ""  # its QOS ('' not reported)
    # What it asks of each node beyond GPUs, as Slurm checks before it starts it (squeue
    # only; None: the record does not say, which is never read as 0). ``cpus``: all its
    # CPUs; ``min_cpus_per_node``: its per-node minimum; ``cpus_per_gpu``: --cpus-per-gpu
    # (0 none). Memory in MB: --mem (per node), --mem-per-cpu, --mem-per-gpu; 0: not
    # asked. ``constraint``: --constraint parsed (slurm_plugin.grammar; a value that is
    # not the grammar is kept with its error as ``form``). ``shared``: '' (the
    # partition's default), 'exclusive' (--exclusive), else the mode Slurm names
    # ('oversubscribe', 'user', 'mcs', 'topo', ...).
    cpus: int | None = None
    min_cpus_per_node: int | None = None
    cpus_per_gpu: int | None = None
    mem_per_node_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    constraint: Constraint | None = None
    shared: str | None = None
    # a running job's CPUs and MB of memory on each of ``allocated_nodes`` (() when not said)
    cpus_by_node: tuple[int, ...] = ()
    mem_by_node_mb: tuple[int, ...] = ()
    # what in its GPU request is Slurm's choice (controller.service.ops.unmodelled codes
    # per_socket, per_task, with the option): a pending job's only
    request_unmodelled: tuple[tuple[str, str], ...] = ()

    @property
    def partitions(self) -> list[str]:
        """The partition field split on commas (a pending job may list several)."""
        return [p for p in self.partition.split(",") if p]


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One node: base ``state`` lower-case (idle/mixed/allocated/down/...),
    ``flags`` upper-case (DRAIN, NOT_RESPONDING, ...), GPU counts in whole GPUs.
    ``gpus_used``: GPUs held whole or with shards or MPS shares in use (_gpus_held);
    ``gpus_mps``: those of them in use only through MPS shares."""

    name: str
    state: str
    flags: frozenset[str] = frozenset()
    gpus_total: int = 0
    gpus_used: int = 0
    gpus_mps: int = 0
    partitions: list[str] = field(default_factory=list)
    reason: str = ""
    available: bool = True
    gpu_type: str = ""  # its GPUs' type ('' untyped, MIXED_TYPES several; a MIG profile is a type)
    # What Slurm counts beyond GPUs before it starts a job here (None: not reported):
    # CPUs, and those allocated; real memory and allocated memory, MB; active features.
    cpus_total: int | None = None
    cpus_alloc: int | None = None
    mem_total_mb: int | None = None
    mem_alloc_mb: int | None = None
    features: tuple[str, ...] | None = None

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus_total - self.gpus_used)


# --------------------------------------------------------------------------
# value helpers shared by the JSON parsers

def slurm_number(value: Any, field_name: str) -> float | None:
    """A Slurm number in either generation; None for unset or infinite."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SlurmParseError(f"{field_name}: expected a number, got {quoted(value)}")
    if isinstance(value, (int, float)):
        return _bounded(value, field_name)
    if isinstance(value, dict) and "number" in value:
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return slurm_number(value["number"], field_name)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,19}", value.strip()):
        return _bounded(int(value), field_name)
    raise SlurmParseError(f"{field_name}: expected a number, got {quoted(value)}")


def int_value(value: Any, field_name: str, default: int = 0) -> int:
    n = slurm_number(value, field_name)
    return default if n is None else int(n)


def epoch_value(value: Any, field_name: str) -> float | None:
    """Unix time; 0/unset is None; negative is an error. (Estimates of pending jobs
    may lie centuries ahead; finish_times drops those and bounds what it keeps.)"""
    n = slurm_number(value, field_name)
    if not n:
        return None
    if n < 0:
        raise SlurmParseError(f"{field_name}: {quoted(n)} is not a Unix time")
    return float(n)


def _bounded(value: int | float, field_name: str) -> int | float:
    """Slurm's numbers are 64-bit; anything larger (or nan/inf) is not from Slurm."""
    if isinstance(value, float) and not math.isfinite(value) or not -2**63 <= value < 2**64:
        raise SlurmParseError(f"{field_name}: {quoted(value)} is not a 64-bit number")
    return value


def count_value(value: Any, field_name: str, hi: int = 10**7) -> int:
    """A count (nodes, tasks, restarts): an integer in 0..hi; unset is 0."""
    n = int_value(value, field_name)
    if not 0 <= n <= hi:
        raise SlurmParseError(f"{field_name}: {quoted(n)} is not a count in 0..{hi}")
    return n


def time_limit_of(limit_min: float | None) -> float | None:
    """A time limit in minutes as seconds; negative or absurd limits are errors."""
    if limit_min is None:
        return None
    if not 0 <= limit_min <= MAX_SECONDS / 60:
        raise SlurmParseError(f"time_limit: {quoted(limit_min)} minutes is not a time limit")
    return float(limit_min) * 60.0


def str_value(value: Any, field_name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise SlurmParseError(f"{field_name}: expected a string, got {quoted(value)}")


_BASE_STATES_BUT_REQUEUED = JOB_BASE_STATES - {"REQUEUED"}  # REQUEUED is a flag beside a base state


def split_state(value: Any, field_name: str) -> tuple[str, frozenset[str]]:
    """22.05 'RUNNING' or 23.02+ ['PENDING', 'REQUEUED'] -> ('PENDING', {'REQUEUED'})."""
    if isinstance(value, str):
        items = [value]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        raise SlurmParseError(f"{field_name}: expected a state string or list, got {quoted(value)}")
    items = [v.strip().upper() for v in items if v.strip()]
    if not items:
        raise SlurmParseError(f"{field_name}: empty state {quoted(value)}")
    base = next((v for v in items if v in _BASE_STATES_BUT_REQUEUED), None)
    if base is None:
        base = next((v for v in items if v in JOB_BASE_STATES), items[0])
    if "COMPLETING" in items:
        # 22.05 names a job that is being torn down COMPLETING whatever its base (a
        # requeued one too, until its nodes are clean); 24.11 writes ["PENDING",
        # "COMPLETING"]: the same state, so that neither release shows a requeued job
        # PENDING (reason None) before it really waits.
        base = "COMPLETING"
    flags = frozenset(v for v in items if v != base)
    if len(_FLAG_SETS) < 256 or flags in _FLAG_SETS:  # one object per distinct set (most jobs: the empty one)
        flags = _FLAG_SETS.setdefault(flags, flags)
    return base, flags


_FLAG_SETS: dict[frozenset, frozenset] = {}


def load_document(text: str | bytes | dict, list_keys: Iterable[str], what: str) -> tuple[str, list]:
    """The record list of a document: JSON text, or the dict a caller already decoded."""
    try:
        doc = text if isinstance(text, dict) else json.loads(text)
    except (TypeError, ValueError) as exc:
        raise SlurmParseError(f"{what}: not JSON ({exc})") from None
    except RecursionError:
        # json's decoder recurses once per level: a hostile file nested 100,000 deep
        # would otherwise end the command with a traceback.
        raise SlurmParseError(f"{what}: JSON nested too deeply to read (1000 levels or more)") from None
    if not isinstance(doc, dict):
        raise SlurmParseError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    for key in list_keys:
        if key in doc:
            records = doc[key]
            if not isinstance(records, list):
                raise SlurmParseError(f"{what}: {quoted(key)} is {type(records).__name__}, not a list")
            return key, records
    raise SlurmParseError(f"{what}: no {' or '.join(repr(k) for k in list_keys)} list in the document")


def collect_records(records: list, parse_one: Callable[[dict], Any], errors: list | None,
             id_key: str, what: str) -> list:
    out = []
    for index, record in enumerate(records):
        try:
            if not isinstance(record, dict):
                raise SlurmParseError(f"{what}[{index}]: expected an object, got {type(record).__name__}")
            out.append(parse_one(record))
        except SlurmParseError as exc:
            if errors is not None:
                exc.record_index = index
                if isinstance(record, dict) and record.get(id_key) is not None:
                    if id_key == "name":
                        exc.node = shorten(str(record[id_key]), 40)
                    else:
                        exc.job_id = error_job_id(record)
                errors.append(exc)
    return out


def finish_times(state: str, start: float | None, end: float | None) -> tuple[float | None, float | None]:
    # Pending start and unfinished end are estimates (often far future): drop them.
    if state == "PENDING":
        start = None
    if state not in TERMINAL_JOB_STATES:
        end = None
    for name, value in (("start_time", start), ("end_time", end)):
        if value is not None and value > MAX_EPOCH_S:
            raise SlurmParseError(f"{name}: {quoted(value)} is not a Unix time (after the year 2096)")
    return start, end


def squeue_planned_id(r: dict) -> str:
    """The id a squeue record is planned under: "ARRAYID_TASKID" for an array task,
    the ArrayJobId for a pending array record (all its tasks), the leader's id for a
    het job component, else the job id. SlurmParseError when the fields do not say."""
    if r.get("job_id") is None:
        raise SlurmParseError("job_id: missing")
    job_id = str(int_value(r["job_id"], "job_id"))
    array_id = int_value(r.get("array_job_id"), "array_job_id")
    task = r.get("array_task_id")
    task = None if task is None else slurm_number(task, "array_task_id")  # 23.02+: {"set": false}
    if array_id and task is not None:
        return f"{array_id}_{int(task)}"
    het_id = int_value(r.get("het_job_id"), "het_job_id")
    return str(array_id or het_id or job_id)


def error_job_id(record: dict) -> str | None:
    """The planned id of a record that failed to parse, as far as its id fields say
    (its job alone is then withheld from "gone"); None when they do not (every job
    is then withheld: which one it was is unknown)."""
    try:
        return squeue_planned_id(record)
    except SlurmParseError:
        return None


def reported_count(r: dict, key: str, absent: int | None = None) -> int | None:
    """A count the record may lack: ``absent`` (None: unknown) when the key is not
    there; 0 when Slurm says it is not set (22.05 ``null``, 23.02+ ``set: false``)."""
    if key not in r:
        return absent
    return count_value(r.get(key), key, hi=2**62)


def nullish_to_empty(value: str | None) -> str:
    return "" if value is None or value == "(null)" else value

"""Normalize Slurm command output into one model, at the edge.

Every record shape Slurm prints (two JSON generations, scontrol text) is read here
and nowhere else, so a version drift is fixed in one file and the rest of the code
never sees it (slurm_plugin/backend.py reads only these dataclasses). The string
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
# the grammars' names callers have always imported from here stay importable here
from controller.core.model import MIXED_TYPES
from slurm_plugin.grammar import (MAX_HOSTS, Constraint, SlurmParseError, expand_hostlist,  # noqa: F401
                                  gres_counts, gres_items, parse_constraint, parse_duration_s, quoted, scontrol_int,
                                  scontrol_time, split_scontrol_line, untyped_first)

__all__ = [
    "SlurmParseError",
    "SlurmJob",
    "SlurmNode",
    "parse_squeue_json",
    "parse_squeue_record",
    "parse_sinfo_json",
    "parse_sinfo_record",
    "parse_scontrol_show_job",
    "parse_sacct_json",
    "expand_hostlist",
    "gres_counts",
]


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
    # job component carries its leader's id and its offset (controller.service.round.arrays).
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


def _int(value: Any, field_name: str, default: int = 0) -> int:
    n = slurm_number(value, field_name)
    return default if n is None else int(n)


def _epoch(value: Any, field_name: str) -> float | None:
    """Unix time; 0/unset is None; negative is an error. (Estimates of pending jobs
    may lie centuries ahead; _finish_times drops those and bounds what it keeps.)"""
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


def _count(value: Any, field_name: str, hi: int = 10**7) -> int:
    """A count (nodes, tasks, restarts): an integer in 0..hi; unset is 0."""
    n = _int(value, field_name)
    if not 0 <= n <= hi:
        raise SlurmParseError(f"{field_name}: {quoted(n)} is not a count in 0..{hi}")
    return n


def _limit_s(limit_min: float | None) -> float | None:
    """A time limit in minutes as seconds; negative or absurd limits are errors."""
    if limit_min is None:
        return None
    if not 0 <= limit_min <= MAX_SECONDS / 60:
        raise SlurmParseError(f"time_limit: {quoted(limit_min)} minutes is not a time limit")
    return float(limit_min) * 60.0


def _str(value: Any, field_name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise SlurmParseError(f"{field_name}: expected a string, got {quoted(value)}")


_BASE_STATES_BUT_REQUEUED = JOB_BASE_STATES - {"REQUEUED"}  # REQUEUED is a flag beside a base state


def _split_state(value: Any, field_name: str) -> tuple[str, frozenset[str]]:
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
    return base, frozenset(v for v in items if v != base)


def _load_document(text: str | bytes | dict, list_keys: Iterable[str], what: str) -> tuple[str, list]:
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


def _collect(records: list, parse_one: Callable[[dict], Any], errors: list | None,
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
    per = {name: gres_counts(_str(record.get(name), name), field_name=name) for name in REQUEST_FIELDS}
    req = gres_counts(_str(record.get("tres_req_str"), "tres_req_str"), field_name="tres_req_str")
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
    elif result[0] and not holds and _count(record.get("tasks_per_tres"), "tasks_per_tres"):
        # --ntasks-per-gpu beside --gpus (24.11+ say so): how Slurm lays the tasks out over
        # nodes is its choice, and on 24.11 the conformance suite saw the plan preempt for
        # such a job (-w g2 --gpus=2 --ntasks-per-gpu=3) that one victim could not fit, in
        # 2 of 3 runs, not yet explained: not modelled until it is
        reasons.append(("per_task", f"--ntasks-per-gpu={_count(record['tasks_per_tres'], 'tasks_per_tres')} beside"
                                    " a GPU count (the tasks' layout over nodes is Slurm's choice)"))
    return result[0], result[1], tuple(reasons)


def _gpus_per_node(record: dict) -> bool:
    """Whether the job asks its GPUs per node (--gres=gpu:K, --gpus-per-node:
    ``tres_per_node`` with no ``tres_per_job``): Slurm then needs K GPUs on every node
    it gives the job and counts its GPUs at its node count."""
    per = {name: gres_counts(_str(record.get(name), name), field_name=name) for name in ("tres_per_job",
                                                                                        "tres_per_node")}
    return "gpu" in per["tres_per_node"] and "gpu" not in per["tres_per_job"]


def _asks_gpus_per_task(record: dict) -> bool:
    """Whether a record without a GPU count still asks for GPUs by its tasks:
    --ntasks-per-gpu (``tasks_per_tres``), or a per-GPU field naming a GPU."""
    if record.get("tasks_per_tres") is not None and _count(record["tasks_per_tres"], "tasks_per_tres"):
        return True
    return any(gres == "gpu" for key in PER_GPU_FIELDS
               for gres, _, _, _ in _gres_items_or_none(_str(record.get(key), key), key) or ())


def _allocated_gpus(record: dict) -> int | None:
    """The GPUs a job holds as Slurm allocated them: summed over ``gres_detail`` (one
    string per node), else the ``gres/gpu`` of ``tres_alloc_str``; None when neither says."""
    detail = _gres_detail(record.get("gres_detail"))
    if detail:
        return sum(gres_counts(item, field_name="gres_detail").get("gpu", 0) for item in detail)
    alloc = gres_counts(_str(record.get("tres_alloc_str"), "tres_alloc_str"), field_name="tres_alloc_str")
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
        types = {gtype for name in names for gres, gtype, _, _ in gres_items(_str(record.get(name), name), name)
                 if gres == "gpu" and gtype}
        if types:
            return tuple(sorted(types))
    return ()


def _gpu_type_of(types: tuple[str, ...]) -> str:
    """A request's one GPU type ('' any; MIXED_TYPES when it names several, which the
    plan cannot place: controller.service.round.daemon keeps such a job out of preemption)."""
    return types[0] if len(types) == 1 else MIXED_TYPES if types else ""


def _gpu_type_of_node(gres: Any) -> str:
    """A node's GPU type from its ``gres`` ('gpu:a100:4(S:0)'): one type, '' untyped,
    MIXED_TYPES when it lists several."""
    types = {gtype for name, gtype, count, _ in gres_items(_str(gres, "gres"), "gres") if name == "gpu" and count}
    return MIXED_TYPES if len(types) > 1 else next(iter(types), "")


SHARED_GPU_GRES = ("shard", "mps")  # GRES that share a GPU: a GPU with any in use is not free for a whole-GPU job
MAX_GPU_INDEX = 1024  # Slurm's own bound on a node's GRES bitmap (MAX_GRES_BITMAP)


def _gpu_indices(inside: str) -> frozenset[int] | None:
    """The GPU indices of ``IDX:0-1,3`` (empty for ``IDX:N/A``), None when the
    parentheses give none or cannot be read (the caller then counts instead)."""
    if not inside.startswith("IDX:"):
        return None
    text = inside[len("IDX:"):].strip()
    if text == "N/A":
        return frozenset()
    out: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*([0-9]{1,4})(?:-([0-9]{1,4}))?\s*", part)
        if not m:
            return None
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if high < low or high >= MAX_GPU_INDEX:
            return None
        out.update(range(low, high + 1))
    return frozenset(out)


def _per_gpu_in_use(inside: str) -> list[bool] | None:
    """Per-GPU shared use (``50/100,0/100,-/100``): whether each GPU in the list has
    some in use (``-``: held whole, no shared use). None when not that form."""
    if "/" not in inside:
        return None
    out = []
    for part in inside.split(","):
        in_use, slash, _ = part.strip().partition("/")
        if not slash or not (in_use.isdigit() or in_use == "-"):
            return None
        out.append(in_use.isdigit() and int(in_use) > 0)
    return out


def _gpus_held(gres: Any, gres_used: Any, total: int, used: int) -> tuple[int, int]:
    """(GPUs in use, those of them in use only through MPS) on a node of ``total``
    GPUs, ``used`` of them allocated whole. A GPU is in use when a job holds it whole,
    or some of its shards (gres/shard) or MPS shares (gres/mps) are in use: no
    whole-GPU job is planned onto it, nor any job preempted to make room there.
    Counted by GPU index where the string gives indices (a GPU is never counted
    twice), else summed (24.11 and 26.05 never give one GPU both whole and shared). A
    GPU counted busy that is not costs a delayed start; one counted free that is not
    costs a preemption for nothing. The GPUs in use only through MPS are the pool MPS
    jobs share (controller.service.round.sharing).

    ``gres_used`` per release, as recorded (tests/fixtures/slurm) and as Slurm's
    gres.c prints it:

    * 22.05: whole GPUs as a count, ``gpu:3`` (no indices when untyped), a shared GRES
      as the GPUs it touches with their indices, ``mps:(null):1(IDX:0)`` (1 is a GPU
      count, not shares), ``shard:a100:1(IDX:0)``. The whole GPUs' indices are not
      given, so they and the shared GPUs are summed. The recording shows 22.05 giving
      one GPU both ways (squeue: job 7 ``gpu:3(IDX:0-2)``, MPS job 6 ``mps:50(IDX:0)``;
      so GPU 3 was free), which gpu2's ``gpu:3,mps:(null):1(IDX:0)`` cannot tell from
      MPS on a fourth GPU: counted 4 busy, one too many there.
    * 24.11: ``gpu:(null):3(IDX:1-3),mps:(null):50(50/100,0/100,0/100,0/100)``: whole
      GPUs by index; a shared GRES's count is shares, then shares in use/available per
      GPU, listed per GPU type in topology order (a GPU held whole reads ``0/100``).
    * 26.05: as 24.11 without the ``(null)`` type (``gpu:3(IDX:1-3)``), and ``-``
      for a GPU held whole (``mps:50(50/100,-/100,-/100,-/100)``): no shared use.

    The per-GPU list's positions are GPU indices on a node of one GPU type (the
    recordings line 26.05's ``-`` up with the whole GPUs' IDX); on a node of several
    types they count per type, so its GPUs are summed. A shared count without per-GPU
    detail or indices (a node whose GRES has no File=): shards as one GPU each (an
    upper bound, never more than the node has); MPS shares as
    ceil(shares / shares per GPU), the fewest GPUs they fit on (an MPS job's shares on
    a node sit on one GPU; counting each share as a GPU would take every GPU of a node
    with one mps:50 job)."""
    one_type = _gpu_type_of_node(gres) != MIXED_TYPES
    whole: set[int] = set()
    whole_indexed = True
    shared: dict[str, set[int]] = {name: set() for name in SHARED_GPU_GRES}
    counted: dict[str, int] = dict.fromkeys(SHARED_GPU_GRES, 0)  # GPUs in use without indices
    for name, _, count, inside in gres_items(_str(gres_used, "gres_used"), "gres_used"):
        if name == "gpu":
            indices = _gpu_indices(inside)
            if indices is None:
                whole_indexed = whole_indexed and not count
            else:
                whole |= indices
            continue
        if name not in SHARED_GPU_GRES or not count:
            continue
        per_gpu = _per_gpu_in_use(inside)
        indices = _gpu_indices(inside) if per_gpu is None else None
        if per_gpu is not None and one_type:
            shared[name].update(i for i, in_use in enumerate(per_gpu) if in_use)
        elif per_gpu is not None:
            counted[name] += sum(per_gpu)
        elif indices is not None:
            shared[name] |= indices
        elif name == "mps":
            per_gpu_shares = gres_counts(_str(gres, "gres"), field_name="gres").get("mps", 0) // max(total, 1)
            counted[name] += math.ceil(count / per_gpu_shares) if per_gpu_shares else 1
        else:
            counted[name] += count
    if not whole_indexed or len(whole) < used:
        whole_count = used + len(shared["shard"] | shared["mps"])
        without_mps = used + len(shared["shard"])
    else:
        whole_count = len(whole | shared["shard"] | shared["mps"])
        without_mps = len(whole | shared["shard"])
    busy = min(total, whole_count + counted["shard"] + counted["mps"])
    return busy, busy - min(total, without_mps + counted["shard"])


def _finish_times(state: str, start: float | None, end: float | None) -> tuple[float | None, float | None]:
    # Pending start and unfinished end are estimates (often far future): drop them.
    if state == "PENDING":
        start = None
    if state not in TERMINAL_JOB_STATES:
        end = None
    for name, value in (("start_time", start), ("end_time", end)):
        if value is not None and value > MAX_EPOCH_S:
            raise SlurmParseError(f"{name}: {quoted(value)} is not a Unix time (after the year 2096)")
    return start, end


# --------------------------------------------------------------------------
# squeue --json

def parse_squeue_json(text: str | bytes | dict, errors: list | None = None) -> list[SlurmJob]:
    """Jobs from ``squeue --json`` (22.05 and 23.02+ shapes; also slurmrestd /jobs)."""
    _, records = _load_document(text, ("jobs",), "squeue --json")
    return _collect(records, _squeue_job, errors, "job_id", "jobs")


def squeue_clock(doc: dict) -> float | None:
    """slurmctld's clock when it answered: the document's top-level ``last_update``
    (the 24.11 and 26.05 recordings; slurmctld stamps the job list it packs with its
    current time: the newest record time of tests/fixtures/slurm/*/squeue_array.json
    is a second older); None on 22.05, which has none, or when it is unreadable (the
    clock is then not measured from it)."""
    try:
        return _epoch(doc.get("last_update"), "last_update")
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


def squeue_planned_id(r: dict) -> str:
    """The id a squeue record is planned under: "ARRAYID_TASKID" for an array task,
    the ArrayJobId for a pending array record (all its tasks), the leader's id for a
    het job component, else the job id. SlurmParseError when the fields do not say."""
    if r.get("job_id") is None:
        raise SlurmParseError("job_id: missing")
    job_id = str(_int(r["job_id"], "job_id"))
    array_id = _int(r.get("array_job_id"), "array_job_id")
    task = r.get("array_task_id")
    task = None if task is None else slurm_number(task, "array_task_id")  # 23.02+: {"set": false}
    if array_id and task is not None:
        return f"{array_id}_{int(task)}"
    het_id = _int(r.get("het_job_id"), "het_job_id")
    return str(array_id or het_id or job_id)


def error_job_id(record: dict) -> str | None:
    """The planned id of a record that failed to parse, as far as its id fields say
    (its job alone is then withheld from "gone"); None when they do not (every job
    is then withheld: which one it was is unknown)."""
    try:
        return squeue_planned_id(record)
    except SlurmParseError:
        return None


def _squeue_job(r: dict) -> SlurmJob:
    job_id = squeue_planned_id(r)
    array_id = _int(r.get("array_job_id"), "array_job_id")
    het_id = _int(r.get("het_job_id"), "het_job_id")
    if het_id:
        job_id = str(_int(r["job_id"], "job_id"))  # a component keeps its own id; arrays.py gangs them
    state, flags = _split_state(r.get("job_state"), "job_state")
    node_count = _count(r.get("node_count"), "node_count")
    task_count = _count(r.get("tasks"), "tasks")
    gpus, mps, request_unmodelled = _gpus_and_mps_from_request(r, node_count, task_count, state)
    gpu_types = _gpu_types_requested(r)
    start, end = _finish_times(state, _epoch(r.get("start_time"), "start_time"),
                               _epoch(r.get("end_time"), "end_time"))
    limit_min = slurm_number(r.get("time_limit"), "time_limit")
    site = r.get("site_factor")
    return SlurmJob(
        job_id=job_id,
        name=_str(r.get("name"), "name"),
        user=_str(r.get("user_name"), "user_name"),
        account=_str(r.get("account"), "account"),
        partition=_str(r.get("partition"), "partition"),
        state=state,
        state_flags=flags,
        reason=_str(r.get("state_reason"), "state_reason"),
        gpus=gpus,
        mps=mps,
        nodes=expand_hostlist(_str(r.get("nodes"), "nodes")),
        node_count=node_count,
        max_nodes=_count(r.get("max_nodes"), "max_nodes"),
        gpus_per_node=_gpus_per_node(r),
        submit_time=_epoch(r.get("submit_time"), "submit_time"),
        start_time=start,
        end_time=end,
        eligible_time=_epoch(r.get("eligible_time"), "eligible_time"),
        restart_count=_count(r.get("restart_cnt"), "restart_cnt"),
        requeue=bool(r["requeue"]) if r.get("requeue") is not None else None,
        batch=bool(r.get("batch_flag")),
        comment=_str(r.get("comment"), "comment"),
        admin_comment=_str(r.get("admin_comment"), "admin_comment"),
        priority=_int(r.get("priority"), "priority") if r.get("priority") is not None else None,
        site_factor=_int(site, "site_factor") if site is not None else None,
        required_nodes=expand_hostlist(_str(r.get("required_nodes"), "required_nodes")),
        excluded_nodes=expand_hostlist(_str(r.get("excluded_nodes"), "excluded_nodes")),
        time_limit_s=_limit_s(limit_min),
        allocated_nodes=_allocated_nodes(r.get("job_resources")),
        gres_detail=_gres_detail(r.get("gres_detail")),
        array_job_id=str(array_id) if array_id else "",
        array_tasks=_str(r.get("array_task_string"), "array_task_string") if "_" not in job_id else "",
        array_max_tasks=_count(r.get("array_max_tasks"), "array_max_tasks"),
        het_job_id=str(het_id) if het_id else "",
        het_offset=_count(r.get("het_job_offset"), "het_job_offset"),
        gpu_type=_gpu_type_of(gpu_types),
        gpu_types=gpu_types,
        reservation=_str(r.get("resv_name"), "resv_name"),
        qos=_str(r.get("qos"), "qos"),
        request_unmodelled=request_unmodelled,
        **_job_resources_asked(r, job_id),
    )


def _reported(r: dict, key: str, absent: int | None = None) -> int | None:
    """A count the record may lack: ``absent`` (None: unknown) when the key is not
    there; 0 when Slurm says it is not set (22.05 ``null``, 23.02+ ``set: false``)."""
    if key not in r:
        return absent
    return _count(r.get(key), key, hi=2**62)


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
    text = _str(r.get(key), key).strip()
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
    per_node = _reported(r, "memory_per_node")
    if not (isinstance(r.get("memory_per_node"), dict) and _per_gpu(r, "memory_per_tres")):
        return per_node
    flags = r.get("flags")
    if not isinstance(flags, list):
        return None
    if "EXACT_MEMORY_REQUESTED" not in flags or _reported(r, "memory_per_cpu"):
        return 0
    total = _tres_mem_mb(_str(r.get("tres_req_str"), "tres_req_str"))
    return None if total is None else -(-total // max(1, _count(r.get("node_count"), "node_count")))


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
            constraint = parse_constraint(_str(r.get("features"), "features"))
        except SlurmParseError as err:  # left to Slurm, with why (never the record lost)
            constraint = Constraint(_str(r.get("features"), "features"), form=f"unreadable ({err})")
    cpus_by_node, mem_by_node = _held_by_node(r.get("job_resources"), _count(r.get("cpus"), "cpus"))
    cpus = _reported(r, "cpus")
    return dict(
        cpus=cpus or None,  # every job has a CPU: 0 is "not said"
        min_cpus_per_node=_reported(r, "minimum_cpus_per_node") or None,
        cpus_per_gpu=_per_gpu(r, "cpus_per_tres"),
        mem_per_node_mb=_mem_per_node(r),
        mem_per_cpu_mb=_reported(r, "memory_per_cpu"),
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
        mem = (tuple(_count(item["memory_allocated"], "memory_allocated", hi=2**62) for item in items)
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
    return (tuple(_count(n, "cpus.count") for n in cpus_held) if None not in cpus_held else (),
            tuple(_count(n, "memory.allocated", hi=2**62) for n in mem_held) if None not in mem_held else ())


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
    if isinstance(detail, list) and all(isinstance(item, str) for item in detail):
        return list(detail)
    return []


# --------------------------------------------------------------------------
# sinfo --json / scontrol show nodes --json

def parse_sinfo_json(text: str | bytes | dict, errors: list | None = None) -> list[SlurmNode]:
    """Nodes from ``sinfo --json`` (22.05: ``nodes``), ``scontrol show nodes --json``
    or slurmrestd ``/nodes`` (23.02+: ``nodes`` with list states), or the 23.11+
    ``sinfo --json`` grouping (``sinfo`` entries; merged per node)."""
    key, records = _load_document(text, ("nodes", "sinfo"), "sinfo --json")
    if key == "nodes":
        return _collect(records, _node, errors, "name", "nodes")
    return _sinfo_groups(records, errors)


def _node_state(r: dict) -> tuple[str, frozenset[str]]:
    raw = r.get("state")
    extra = r.get("state_flags") or []
    if isinstance(raw, str):
        items = [raw] + list(extra)
    elif isinstance(raw, list) and all(isinstance(v, str) for v in raw):
        items = list(raw) + list(extra)
    else:
        raise SlurmParseError(f"state: expected a node state string or list, got {quoted(raw)}")
    # 22.05 text states may carry a suffix: 'idle*' (not responding), 'idle~' (powered down).
    suffix_flags = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP",
                    "%": "POWERING_DOWN", "!": "POWER_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED"}
    base, flags = None, set()
    for item in items:
        item = item.strip()
        while item and item[-1] in suffix_flags:
            flags.add(suffix_flags[item[-1]])
            item = item[:-1]
        low = item.lower()
        if low in NODE_BASE_STATES and base is None:
            base = low
        elif low in ("drained", "draining", "drain"):
            flags.add("DRAIN")
        elif item:
            flags.add(item.upper())
    if base is None:
        raise SlurmParseError(f"state: no base node state in {quoted(raw)}")
    return base, frozenset(flags)


def _gpu_count(gres: Any, tres: Any, field_name: str) -> int:
    counts = gres_counts(_str(gres, field_name), field_name=field_name)
    if "gpu" in counts:
        return counts["gpu"]
    return gres_counts(_str(tres, "tres"), field_name="tres").get("gpu", 0)


def parse_sinfo_record(record: dict) -> SlurmNode:
    """One record of a ``nodes`` list (22.05 ``sinfo --json``, ``scontrol show nodes
    --json``), as parse_sinfo_json reads each (for slurm_plugin.record_cache)."""
    return _node(record)


def _node(r: dict) -> SlurmNode:
    name = _str(r.get("name"), "name")
    if not name:
        raise SlurmParseError("name: missing node name")
    state, flags = _node_state(r)
    partitions = r.get("partitions") or []
    if not isinstance(partitions, list):
        raise SlurmParseError(f"partitions: expected a list, got {quoted(partitions)}")
    total = _gpu_count(r.get("gres"), r.get("tres"), "gres")
    used, mps_only = _gpus_held(r.get("gres"), r.get("gres_used"), total,
                                _gpu_count(r.get("gres_used"), r.get("tres_used"), "gres_used"))
    return SlurmNode(
        name=name,
        state=state,
        flags=flags,
        gpus_total=total,
        gpus_used=used,
        gpus_mps=mps_only,
        partitions=[str(p) for p in partitions],
        reason=_str(r.get("reason"), "reason"),
        available=state not in NODE_UNAVAILABLE_STATES and not (flags & NODE_UNAVAILABLE_FLAGS),
        gpu_type=_gpu_type_of_node(r.get("gres")),
        cpus_total=_reported(r, "cpus"),
        cpus_alloc=_reported(r, "alloc_cpus"),
        mem_total_mb=_reported(r, "real_memory"),
        mem_alloc_mb=_reported(r, "alloc_memory"),
        features=_feature_list(r["active_features"], "active_features") if "active_features" in r else None,
    )


def _feature_list(value: Any, field_name: str) -> tuple[str, ...]:
    """A node's features: comma-separated ('' none; 22.05 and sinfo), or a list of
    them (``scontrol show nodes --json`` and slurmrestd /nodes of 23.11+)."""
    if isinstance(value, list):
        if not all(isinstance(item, str) for item in value):
            raise SlurmParseError(f"{field_name}: expected a list of feature names, got {quoted(value)}")
        items = [part for item in value for part in item.split(",")]
    else:
        items = _str(value, field_name).split(",")
    return tuple(sorted({item.strip() for item in items if item.strip()}))


def _group_per_node(group: dict, key: str, count: int) -> tuple[int | None, int | None]:
    """(each node's total, each node's allocated) of a 23.11+ sinfo group's ``cpus`` or
    ``memory``: the total when its minimum and maximum agree; the allocated count (a
    sum over the group) when the group is one node or nothing is allocated. None:
    the group does not say (never split by guess)."""
    item = group.get(key)
    if not isinstance(item, dict):
        return None, None
    low, high = slurm_number(item.get("minimum"), f"{key}.minimum"), slurm_number(item.get("maximum"),
                                                                                    f"{key}.maximum")
    total = int(low) if low is not None and low == high else None
    allocated = slurm_number(item.get("allocated"), f"{key}.allocated") if "allocated" in item else None
    if allocated is not None and (count == 1 or allocated == 0):
        return total, int(allocated)
    return total, None


def _sinfo_groups(records: list, errors: list | None) -> list[SlurmNode]:
    # 23.11+ `sinfo --json`: one entry per (partition, state, ...) group with
    # node names under nodes.nodes. GPU counts are per node in gres.total/used.
    by_name: dict[str, SlurmNode] = {}
    order: list[str] = []
    for index, g in enumerate(records):
        try:
            if not isinstance(g, dict):
                raise SlurmParseError(f"sinfo[{index}]: expected an object")
            names = (g.get("nodes") or {}).get("nodes") or []
            if isinstance(names, str):
                names = expand_hostlist(names)
            state, flags = _node_state(g.get("node") or {})
            gres = g.get("gres") or {}
            part = ((g.get("partition") or {}).get("name")) or ""
            # a group's CPU and memory counts are its nodes' sums: per node only where they say
            count = sum(len(expand_hostlist(name)) for name in names)
            cpus_total, cpus_alloc = _group_per_node(g, "cpus", count)
            mem_total, mem_alloc = _group_per_node(g, "memory", count)
            features = g.get("features")
            for name in names:
                for n in expand_hostlist(name):
                    prev = by_name.get(n)
                    parts = (prev.partitions if prev else []) + ([part] if part and (not prev or part not in prev.partitions) else [])
                    total = _gpu_count(gres.get("total"), None, "gres.total")
                    used, mps_only = _gpus_held(gres.get("total"), gres.get("used"), total,
                                                _gpu_count(gres.get("used"), None, "gres.used"))
                    by_name[n] = SlurmNode(
                        cpus_total=cpus_total, cpus_alloc=cpus_alloc, mem_total_mb=mem_total, mem_alloc_mb=mem_alloc,
                        features=(_feature_list(features.get("active"), "features.active")
                                  if isinstance(features, dict) and "active" in features else None),
                        name=n, state=state, flags=flags, gpu_type=_gpu_type_of_node(gres.get("total")),
                        gpus_total=total, gpus_used=used, gpus_mps=mps_only,
                        partitions=parts,
                        # 26.05 moved reason.user to reason_set_by_user; the description stays
                        reason=_str((g.get("reason") or {}).get("description")
                                    if isinstance(g.get("reason"), dict) else g.get("reason"), "reason"),
                        available=state not in NODE_UNAVAILABLE_STATES and not (flags & NODE_UNAVAILABLE_FLAGS),
                    )
                    if prev is None:
                        order.append(n)
        except SlurmParseError as exc:
            exc.record_index = index
            if errors is not None:
                errors.append(exc)
    return [by_name[n] for n in order]


# --------------------------------------------------------------------------
# sacct --json

def parse_sacct_json(text: str | bytes, errors: list | None = None) -> list[SlurmJob]:
    """Job records from ``sacct --json`` (22.05 and 23.02+ shapes).

    With ``sacct -D`` a requeued job appears once per run: earlier runs have
    state REQUEUED. GPUs come from ``tres.allocated`` when the job ran, else
    ``tres.requested``.
    """
    _, records = _load_document(text, ("jobs",), "sacct --json")
    return _collect(records, _sacct_job, errors, "job_id", "jobs")


def _tres_list_counts(items: Any, field_name: str) -> dict[str, int]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise SlurmParseError(f"{field_name}: expected a list, got {quoted(items)}")
    untyped: dict[str, int] = {}
    typed: dict[str, int] = {}
    for item in items:
        if not isinstance(item, dict):
            raise SlurmParseError(f"{field_name}: expected TRES objects, got {quoted(item)}")
        if item.get("type") != "gres" or not item.get("name"):
            continue
        name, _, gtype = str(item["name"]).partition(":")
        count = _int(item.get("count"), f"{field_name}.count")
        target = typed if gtype else untyped
        target[name] = target.get(name, 0) + count
    return untyped_first(untyped, typed)


def _sacct_job(r: dict) -> SlurmJob:
    if r.get("job_id") is None:
        raise SlurmParseError("job_id: missing")
    job_id = str(_int(r["job_id"], "job_id"))
    st = r.get("state")
    if not isinstance(st, dict):
        raise SlurmParseError(f"state: expected an object, got {quoted(st)}")
    state, flags = _split_state(st.get("current"), "state.current")
    if "REQUEUED" in flags:
        # 24.11 writes a run that a requeue ended as ["PENDING", "REQUEUED"] (the job's
        # state after it); 22.05 and `sacct -P` say REQUEUED: the run is over either way.
        state, flags = "REQUEUED", flags - {"REQUEUED"}
    t = r.get("time") or {}
    if not isinstance(t, dict):
        raise SlurmParseError(f"time: expected an object, got {quoted(t)}")
    tres = r.get("tres") or {}
    allocated = _tres_list_counts(tres.get("allocated"), "tres.allocated")
    requested = _tres_list_counts(tres.get("requested"), "tres.requested")
    counts = allocated if allocated else requested
    start, end = _finish_times(state, _epoch(t.get("start"), "time.start"), _epoch(t.get("end"), "time.end"))
    limit_min = slurm_number(t.get("limit"), "time.limit")
    comment = r.get("comment")
    if isinstance(comment, dict):  # {administrator, job, system}
        comment = comment.get("job")
    steps = r.get("steps") or []
    batch = any(isinstance(s, dict) and (s.get("step") or {}).get("name") == "batch" for s in steps)
    names = expand_hostlist(_str(r.get("nodes"), "nodes"))
    # user and account are the record's own (association.user only when user is
    # missing): 26.05 leaves association.user and .account "", 24.11 repeated them there.
    return SlurmJob(
        job_id=job_id,
        name=_str(r.get("name"), "name"),
        user=_str(r.get("user"), "user") or _str((r.get("association") or {}).get("user"), "association.user"),
        account=_str(r.get("account"), "account"),
        partition=_str(r.get("partition"), "partition"),
        state=state,
        state_flags=flags,
        reason=_str(st.get("reason"), "state.reason"),
        gpus=counts.get("gpu", 0),
        mps=counts.get("mps", 0),
        nodes=names,
        node_count=_count(r.get("allocation_nodes"), "allocation_nodes") or len(names),
        submit_time=_epoch(t.get("submission"), "time.submission"),
        start_time=start,
        end_time=end,
        restart_count=_count(r.get("restart_cnt"), "restart_cnt"),
        requeue=None,
        batch=batch,
        comment=_str(comment, "comment.job"),
        priority=_int(r.get("priority"), "priority") if r.get("priority") is not None else None,
        required_nodes=[],
        excluded_nodes=[],
        time_limit_s=_limit_s(limit_min),
    )


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
    return _collect(records, _scontrol_job, errors, "JobId", "scontrol")


def _scontrol_job(r: dict) -> SlurmJob:
    job_id = r.get("JobId", "")
    if not re.fullmatch(r"[0-9]{1,19}", job_id):
        raise SlurmParseError(f"JobId: expected an integer, got {quoted(job_id)}")
    state, flags = _split_state(r.get("JobState", ""), "JobState")
    num_nodes = r.get("NumNodes", "0")
    m = re.match(r"([0-9]{1,9})(?:-([0-9]{1,9}))?", num_nodes)  # "1", or "4-4" (min-max) pending
    if not m:
        raise SlurmParseError(f"NumNodes: expected a count, got {quoted(num_nodes)}")
    node_count = int(m.group(1))
    max_nodes = int(m.group(2)) if m.group(2) else 0
    # the squeue record's request fields, from their scontrol keys (NtasksPerTRES: 22.05
    # prints it where its JSON has no field; AllocTRES: 24.11+, the TRES of a running job)
    fake = {
        "tres_per_job": _nullish_to_empty(r.get("TresPerJob")),
        "tres_per_node": _nullish_to_empty(r.get("TresPerNode")),
        "tres_per_task": _nullish_to_empty(r.get("TresPerTask")),
        "tres_per_socket": _nullish_to_empty(r.get("TresPerSocket")),
        "cpus_per_tres": _nullish_to_empty(r.get("CpusPerTres")),
        "memory_per_tres": _nullish_to_empty(r.get("MemPerTres")),
        "tasks_per_tres": scontrol_int(r.get("NtasksPerTRES"), "NtasksPerTRES"),
        "tres_req_str": _nullish_to_empty(r.get("ReqTRES") or r.get("TRES")),
        "tres_alloc_str": _nullish_to_empty(r.get("AllocTRES") or r.get("TRES")) if state != "PENDING" else "",
    }
    gpus, mps, request_unmodelled = _gpus_and_mps_from_request(
        fake, node_count, scontrol_int(r.get("NumTasks"), "NumTasks"), state)
    start, end = _finish_times(state, scontrol_time(r.get("StartTime"), "StartTime"),
                               scontrol_time(r.get("EndTime"), "EndTime"))
    user = r.get("UserId", "")
    site = r.get("SiteFactor")
    return SlurmJob(
        job_id=job_id,
        name=r.get("JobName", ""),
        user=user.split("(", 1)[0],
        account=_nullish_to_empty(r.get("Account")),
        partition=_nullish_to_empty(r.get("Partition")),
        state=state,
        state_flags=flags,
        reason=_nullish_to_empty(r.get("Reason")),
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
        restart_count=_count(scontrol_int(r.get("Restarts"), "Restarts"), "Restarts"),
        requeue=(r["Requeue"] == "1") if "Requeue" in r else None,
        batch=r.get("BatchFlag") == "1",
        comment=_nullish_to_empty(r.get("Comment")),
        admin_comment=_nullish_to_empty(r.get("AdminComment")),
        priority=scontrol_int(r.get("Priority"), "Priority") if "Priority" in r else None,
        site_factor=scontrol_int(site, "SiteFactor") if site not in (None, "") else None,
        required_nodes=expand_hostlist(r.get("ReqNodeList")),
        excluded_nodes=expand_hostlist(r.get("ExcNodeList")),
        time_limit_s=parse_duration_s(r.get("TimeLimit"), "TimeLimit"),
        qos=_nullish_to_empty(r.get("QOS")),
        request_unmodelled=request_unmodelled,
    )


def _nullish_to_empty(value: str | None) -> str:
    return "" if value is None or value == "(null)" else value


# --------------------------------------------------------------------------
# scontrol show reservation -o

def parse_reservations(text: str) -> dict[str, str]:
    """Node name -> the name of the ACTIVE reservation holding it, from ``scontrol show
    reservation -o`` (one ``ReservationName=... Nodes=gpu[1-2] ... State=ACTIVE`` line
    each; "No reservations in the system" when none). A future (INACTIVE)
    reservation holds nothing yet. A node in several (OVERLAP) keeps the first."""
    held: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("ReservationName="):
            continue
        # Key=Value words (split_scontrol_line's free-text rules are the job line's:
        # a reservation's Features/Licenses would swallow the keys after them)
        fields = dict(re.findall(r"(?:^|\s)([A-Za-z]+)=(\S*)", line))
        if fields.get("State", "").upper() != "ACTIVE":
            continue
        name = fields.get("ReservationName", "")
        if not name:
            raise SlurmParseError(f"ReservationName: missing in {quoted(line[:80])}")
        for node in expand_hostlist(_nullish_to_empty(fields.get("Nodes"))):
            held.setdefault(node, name)
    return held


def parse_partition_sharing(text: str) -> dict[str, str]:
    """Partition name -> how it shares nodes, from ``scontrol show partition -o`` (one
    ``PartitionName=...`` line each): its OverSubscribe upper case without the count
    ('NO', 'YES', 'EXCLUSIVE', 'FORCE'). 26.05 prints a whole-node partition as
    ``OverSubscribe=NO Exclusive=NODE`` (22.05 and 24.11: ``OverSubscribe=EXCLUSIVE``):
    'EXCLUSIVE' too; its other Exclusive modes by their names ('USER', 'TOPO', ...). A
    line without OverSubscribe says nothing of its partition."""
    modes: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("PartitionName="):
            continue
        fields = dict(re.findall(r"(?:^|\s)([A-Za-z]+)=(\S*)", line))
        name, mode = fields.get("PartitionName", ""), fields.get("OverSubscribe", "")
        if not name:
            raise SlurmParseError(f"PartitionName: missing in {quoted(line[:80])}")
        exclusive = fields.get("Exclusive", "NO").upper()
        if exclusive not in ("", "NO"):
            modes[name] = "EXCLUSIVE" if exclusive == "NODE" else exclusive
        elif mode:
            modes[name] = mode.split(":", 1)[0].upper()
    return modes

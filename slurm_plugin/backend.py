"""A controller Backend that drives Slurm through its command-line tools.

(Just over 500 lines in one module: every Slurm command the controller runs, its
time-out and its failure reading are here, so the rest never builds an argv.)

On Slurm 22.05 the CLI is the only complete interface (slurmrestd has no
SiteFactor, ReqNodeList or requeue; pyslurm does not build against 22.05), so
every read and every lever is one ``squeue``/``sinfo``/``sprio``/``scontrol``/
``scancel`` call with an argument list (never a shell string) and a time-out.

Reading: ``squeue --json --states=all`` and ``sinfo --json`` return every job/node
(22.05 ignores their filters; 24.11 honours them and without ``--states=all`` leaves
out the jobs that ended within MinJobAge), so partitions are filtered here. 22.05's squeue
JSON has no ``site_factor`` and ``scontrol show job`` does not print
``SiteFactor=`` either; ``sprio -h -o "%i %S"`` does (pending, unheld jobs
only), so it is read when some pending job lacks a site factor.

Failure policy: a command that times out or cannot reach slurmctld raises
:class:`controller.service.acting.backend.BackendUnavailable`; the observation is then
discarded whole, never returned partially. 22.05's ``squeue --json`` exits 0
with an empty job list and a non-empty ``errors`` list when slurmctld is down,
so that list is checked too. A lever that Slurm refuses (job gone, no longer
pending, ...) raises :class:`LeverFailed`.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Optional, Sequence

from controller.service.round.arrays import Withheld, plan_view
from controller.service.acting.backend import Backend, BackendUnavailable, Observation, ObservedJob
from controller.service.ops.qos_limits import DEFAULT_QOS_COMMAND, QOS_LIMITS_COMMAND
from controller.service.ops.unmodelled import unmodelled_fields
from controller.core.model import ALL_MEMORY, Node
from slurm_plugin.parse import (
    SlurmJob,
    SlurmNode,
    SlurmParseError,
    gres_counts,
    parse_partition_sharing,
    parse_reservations,
    parse_sinfo_json,
    parse_squeue_json,
    parse_sinfo_record,
    json_says_sharing,
    parse_show_job_sharing,
    parse_squeue_record,
    squeue_clock,
)
from slurm_plugin.record_cache import RecordCache

log = logging.getLogger(__name__)
RESERVATIONS_EVERY_S = 60.0  # how stale the reservations may be when no job names a new one
PARTITIONS_EVERY_S = 60.0  # how stale the partitions' OverSubscribe may be when no job names a new partition

__all__ = ["SlurmBackend", "LeverFailed", "CommandResult", "subprocess_runner"]

_JOB_ID_RE = re.compile(r"[0-9]{1,19}(?:_[0-9]{1,9})?", re.ASCII)
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-\[\],]+")
_SIGNAL_RE = re.compile(r"(?:SIG)?[A-Z][A-Z0-9+\-]*|[0-9]{1,3}", re.ASCII)
SITE_FACTOR_LIMIT = 2147483645  # Slurm's documented +- range for SiteFactor
ADMIN_COMMENT_MAX_CHARS = 1024  # ours is ~80; the rest is what the site keeps there
MPS_SHARES_PER_GPU = 100  # Gres=gpu:N,mps:100*N: one MPS share = 1% of one GPU's SMs
# Stderr fragments that mean "slurmctld did not answer", not "Slurm said no".
# 22.05 prints "Unexpected message received for job N" for `scontrol requeue`
# and SiteFactor updates when it cannot connect at all.
_UNREACHABLE_MARKERS = (
    "unable to contact slurm controller",
    "connect failure",
    "socket timed out",
    "connection refused",
    "unexpected message received",
    "zero bytes were transmitted or received",
    "slurm_persist_conn",
)
# Stop one comma list from growing without bound (argv and RPC size); far above
# any realistic number of jobs that share one SiteFactor value in a round.
MAX_IDS_PER_UPDATE = 1000
# ...and from outliving command_timeout_s: scontrol sends one RPC per id, and under
# rl_enable (a bucket of 30 refilled 2 a second per user by default; the controller's
# Operator user is not exempt) a command that finds the bucket empty waits for each id's
# token. At most this many ids a second of command_timeout_s (half the default refill:
# the polls take the rest), so such a command still ends in time: 15 ids at 15 s.
RL_IDS_PER_S = 1.0
# 26.05+: `scontrol show job -o ID` (one id a call: 22.05 prints nothing for "1,2") for at
# most this many pending jobs of unknown --exclusive mode per observation, the rest at the
# next; each call waits at most SHOW_JOB_TIMEOUT_S (capped by command_timeout_s), and the
# first that fails to answer ends this observation's reads: a slow slurmctld costs one wait.
MAX_SHOW_JOB_IDS = 20
SHOW_JOB_TIMEOUT_S = 5.0
# The fields an ObservedJob takes from the SlurmJob as they are (same name, same
# value); _observed_job names the ones it renames or converts.
_AS_REPORTED = ("job_id", "user", "partition", "state", "reason", "gpus", "time_limit_s", "restart_count", "batch",
                "comment", "admin_comment", "max_nodes", "mps", "array_tasks", "array_max_tasks", "het_job_id",
                "het_offset", "gpu_type", "gpu_types", "reservation", "account", "name", "qos")


def _free(total: int | None, allocated: int | None) -> int | None:
    """What a node has free of a count Slurm reports in all and allocated (None: not both)."""
    return None if total is None or allocated is None else max(total - allocated, 0)


# One record per node (and partition): 23.11+ `sinfo --json` without -N groups nodes by
# partition and state and reports the group's first node's features for all of them
# (seen on 24.11: g1 with Features=ib grouped with g2-g4 without, all shown "ib") and its
# CPUs summed; -N makes every count and feature a node's own. 22.05 lists nodes anyway.
SINFO_ARGV = ["sinfo", "--json", "-N"]


def _held_on_nodes(jobs: list[SlurmJob]) -> dict[str, tuple[int | None, int | None]]:
    """Each node's CPUs and MB of memory held by the jobs on it (every partition's),
    summed from the jobs' own allocations: what a node reports for itself is missing
    where 23.11+ sinfo groups several nodes into one record (their allocated counts
    are summed over the group). None: some job on the node does not say its share."""
    held: dict[str, tuple[int | None, int | None]] = {}
    for job in jobs:
        names = job.allocated_nodes
        if not names or job.state == "PENDING":
            continue
        cpus = job.cpus_by_node if len(job.cpus_by_node) == len(names) else (None,) * len(names)
        mem = job.mem_by_node_mb if len(job.mem_by_node_mb) == len(names) else (None,) * len(names)
        for name, c, m in zip(names, cpus, mem):
            had_c, had_m = held.get(name, (0, 0))
            held[name] = (None if had_c is None or c is None else had_c + c,
                          None if had_m is None or m is None else had_m + m)
    return held


def _allocated(reported: int | None, held: int | None) -> int | None:
    """A node's allocated count: as it reports it, else the sum its jobs hold."""
    return reported if reported is not None else held


# Pending reasons Slurm gives a job once it has tried to place it on nodes.
TESTED_REASONS = frozenset({"Resources"})


def job_defaults(text: str) -> tuple[int, int]:
    """(DefCpuPerGPU, DefMemPerGPU) of a JobDefaults value (``DefCpuPerGPU=2,DefMemPerGPU=1000``,
    ``(null)``); 0 for each it does not set or sets to something other than a count."""
    found = dict(re.findall(r"(DefCpuPerGPU|DefMemPerGPU)=([0-9]{1,12})\b", text or ""))
    return int(found.get("DefCpuPerGPU", 0)), int(found.get("DefMemPerGPU", 0))


def _partition_sharing(job: SlurmJob, modes: Mapping[str, str]) -> tuple[str | None, list[tuple[str, str]]]:
    """The pending job's sharing mode once its partitions' OverSubscribe is applied
    (``modes``: partition -> parse_partition_sharing's mode), and why it is beyond the
    plan (code, text) if it is.

    A job of an OverSubscribe=EXCLUSIVE partition gets whole nodes as --exclusive does
    (the plan models that); every release says so in its own record only for the job's
    first partition (24.11 not for a job of several), so the partition decides. FORCE:
    Slurm shares the cores it gives with other jobs, which the plan's CPU count does not
    express. YES: as NO unless the job asks --oversubscribe (its own ``shared``). A job
    of several partitions of which some give whole nodes and some do not gets whole
    nodes or not by where Slurm starts it: not modelled. A partition not in ``modes``
    (not read): the job's record stands."""
    parts = [p for p in job.partitions if p]
    known = {p: modes[p] for p in parts if p in modes}
    if not known:
        return job.shared, []
    forced = sorted(p for p, mode in known.items() if mode == "FORCE")
    if forced:
        return job.shared, [("oversubscribe", f"partition {forced[0]}'s OverSubscribe=FORCE (Slurm shares the"
                                               " cores it gives)")]
    other = sorted(p for p, mode in known.items() if mode not in ("NO", "YES", "EXCLUSIVE"))
    if other:
        return job.shared, [("exclusive", f"partition {other[0]}'s Exclusive={known[other[0]]}")]
    whole = sorted(p for p, mode in known.items() if mode == "EXCLUSIVE")
    if not whole:
        return job.shared, []
    if len(whole) == len(parts):
        return "exclusive", []
    shared = sorted(set(parts) - set(whole))
    return job.shared, [("exclusive", f"partitions {','.join(whole)} (OverSubscribe=EXCLUSIVE) and"
                                      f" {','.join(shared)} (not): whole nodes or not by where Slurm starts it")]


def _asked_per_node(job: SlurmJob, memory_allocated: Callable[[], bool] = lambda: False,
                    gpu_defaults: Callable[[str], tuple[int, int]] = lambda partition: (0, 0),
                    partition_modes: Mapping[str, str] = {}) -> dict:
    """The ObservedJob fields of what a pending job asks of each node beyond GPUs.

    CPUs per node: the most of its per-node minimum, its CPUs over its nodes (rounded
    up: Slurm may spread them unevenly, so an even share is the least a node must
    hold, and asking it of every node is on the side of preempting less) and
    --cpus-per-gpu times its GPUs per node. Memory per node: the more of --mem (else
    --mem-per-cpu times those CPUs) and --mem-per-gpu times its GPUs per node: Slurm
    starts a job only where both fit (recorded on 22.05, 24.11 and 26.05:
    tests/fixtures/slurm/*/request_forms_memory.txt, a job with --mem=1000 and 3 GPUs
    under DefMemPerGPU=1000 waits on a node with 2000 MB free, though it is given
    1000); none of them set (--mem=0, or no default on the cluster) is all of the
    node's memory (``ALL_MEMORY``) where Slurm allocates memory (``memory_allocated()``:
    a SelectTypeParameters of *_Memory), nothing where it does not.

    Slurm fills DefCpuPerGPU / DefMemPerGPU into a GPU job's record only when it first
    tests the job against a partition (a job held since its submission has neither);
    a record without them takes ``gpu_defaults(partition)`` (the most over the
    partitions it lists), as Slurm will. A field the record lacks (None), a request
    whose GPU count is Slurm's choice (per socket, per task), an OR/bracket/count
    --constraint and an --exclusive mode other than the whole node are ``unmodelled``:
    the job is never a reason to preempt."""
    unmodelled = list(job.request_unmodelled)
    nodes = max(job.node_count, 1)
    gpus_per_node = -(-job.gpus // nodes)
    cpus_per_gpu, mem_per_gpu = job.cpus_per_gpu, job.mem_per_gpu_mb
    # A record Slurm has tested against its nodes (reason Resources: select_nodes ran,
    # gres_select_util_job_set_defs with it) holds the defaults Slurm applies, and none
    # where it applies none (a job that gave --cpus-per-task, even -c 1, keeps an empty
    # cpus_per_tres): it is Slurm's answer. Another record (just submitted, held,
    # dependent, or passed over for priority) may not have been tested yet: it takes
    # the partitions' defaults, more CPUs than it may get (on the side of preempting less).
    if job.gpus and job.reason not in TESTED_REASONS:
        defaults = [gpu_defaults(partition) for partition in job.partitions or [""]]
        if cpus_per_gpu == 0:
            cpus_per_gpu = max(cpu for cpu, _ in defaults)
        if mem_per_gpu == 0 and not job.mem_per_cpu_mb:
            mem_per_gpu = max(mem for _, mem in defaults)
    cpus = mem = 0
    if job.cpus is None or job.min_cpus_per_node is None or cpus_per_gpu is None:
        unmodelled.append(("cpus", "its CPUs (not reported, or --cpus-per-gpu of another kind)"))
    else:
        cpus = max(job.min_cpus_per_node, -(-job.cpus // nodes), cpus_per_gpu * gpus_per_node)
    if None in (job.mem_per_node_mb, job.mem_per_cpu_mb, mem_per_gpu):
        unmodelled.append(("memory", "its memory (not reported, or --mem-per-gpu of another kind)"))
    else:
        mem = max(job.mem_per_node_mb or job.mem_per_cpu_mb * cpus, mem_per_gpu * gpus_per_node)
        if not mem and memory_allocated():
            mem = ALL_MEMORY
    constraint = job.constraint
    if constraint is None:
        unmodelled.append(("unreported_request", "its --constraint (not reported)"))
    elif constraint.form.startswith("unreadable"):
        log.warning("job %s: --constraint %s is not Slurm's grammar: %s", job.job_id,
                    json.dumps(constraint.text), constraint.form)
        unmodelled.append(("constraint", f"--constraint={constraint.text}, {constraint.form}"))
    elif constraint.form:
        unmodelled.append(("constraint", f"--constraint={constraint.text} ({constraint.form}: which nodes"
                                          " satisfy it is Slurm's choice)"))
    shared, by_partition = _partition_sharing(job, partition_modes)
    if by_partition:
        unmodelled.extend(by_partition)
    elif shared is None:
        unmodelled.append(("unreported_request", "its --exclusive (not reported)"))
    elif shared not in ("", "exclusive", "oversubscribe"):
        unmodelled.append(("exclusive", f"--exclusive={shared}"))
    return dict(cpus_per_node=cpus, mem_per_node_mb=mem,
                features=constraint.features if constraint is not None and not constraint.form else (),
                exclusive=shared == "exclusive", **unmodelled_fields(unmodelled))


def _held_by_node(job: SlurmJob) -> tuple[tuple[str, int, int], ...]:
    """A running job's (node, CPUs, MB) per allocated node; 0 where Slurm does not say."""
    names = job.allocated_nodes
    if not names:
        return ()
    cpus = job.cpus_by_node if len(job.cpus_by_node) == len(names) else (0,) * len(names)
    mem = job.mem_by_node_mb if len(job.mem_by_node_mb) == len(names) else (0,) * len(names)
    return tuple(zip(names, cpus, mem))


class LeverFailed(RuntimeError):
    """Slurm refused a lever (job vanished, no longer pending, ...): one line with
    the job id(s) and Slurm's stderr."""


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


# runner(argv, timeout_s, env) -> CommandResult-like (returncode/stdout/stderr);
# raises subprocess.TimeoutExpired on a time-out, OSError when the tool is missing.
Runner = Callable[[Sequence[str], float, Optional[Mapping[str, str]]], object]


def subprocess_runner(argv: Sequence[str], timeout_s: float,
                      env: Optional[Mapping[str, str]] = None) -> CommandResult:
    """Run one command (argument list, no shell) and capture its text output."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                          env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL)
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def _one_line(text: str, limit: int = 300) -> str:
    line = " | ".join(part.strip() for part in (text or "").strip().splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# scontrol's line per outcome of an update of a whole array (stderr): 22.05 prints
# every outcome ("12_4-50: No error" too), 23.02+ only the failed ones, each maybe with
# slurmctld's message in parentheses
_ARRAY_OUTCOME_RE = re.compile(r"([0-9]{1,19})_[0-9,\-]+(?:\.\.\.)?: (No error|Job has already finished)"
                               r"(?: \(.*\))?", re.ASCII)


def _only_ended_tasks(result: CommandResult, job_ids: Iterable[str]) -> bool:
    """Whether a failed answer to an update naming ``job_ids`` says only that tasks of
    arrays among them had ended (they keep no SiteFactor worth setting; slurmctld set it
    on the rest): every line scontrol wrote to stderr "ARRAYID_TASKS: Job has already
    finished" (or "...: No error") for an ArrayJobId of ``job_ids``."""
    ids = set(job_ids)
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    for line in lines:
        match = _ARRAY_OUTCOME_RE.fullmatch(line)
        if match is None or match.group(1) not in ids:
            return False
    return bool(lines)


def _check_job_id(job_id: object) -> str:
    text = str(job_id) if isinstance(job_id, int) and not isinstance(job_id, bool) else job_id
    if not isinstance(text, str) or not _JOB_ID_RE.fullmatch(text):
        raise ValueError(f"invalid Slurm job id {job_id!r}: expected digits, optionally _digits")
    return text


def _check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise ValueError(f"invalid {what} {value!r}: allowed characters are A-Z a-z 0-9 _ . - [ ] ,")
    return value


class SlurmBackend(Backend):
    """controller.service.acting.backend.Backend over Slurm's CLI.

    ``partitions``: only jobs (and nodes) in these partitions are observed; None
    means all. ``command_timeout_s``: per command, in seconds. ``runner``: how a
    command is run (tests wrap :func:`subprocess_runner` to record calls).
    ``env``: variables laid over this process's environment for every command
    (e.g. ``SLURM_CONF``).
    """

    def __init__(self, partitions: list[str] | None = None, command_timeout_s: float = 15,
                 runner: Runner | None = None, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time):
        if partitions is not None:
            partitions = [_check_name(p, "partition name") for p in partitions]
        if command_timeout_s <= 0:
            raise ValueError(f"command_timeout_s must be > 0, got {command_timeout_s!r}")
        self.partitions = None if partitions is None else set(partitions)
        self.command_timeout_s = float(command_timeout_s)
        self.runner: Runner = runner or subprocess_runner
        # The controller's clock (epoch s): when an observation was taken and answered
        # (a scripted slurmctld on a virtual clock passes that clock).
        self.clock = clock
        # The controller's lease check (controller.service.acting.lease.Lease.guard), run just
        # before every lever command: a lease lost between two scontrol chunks of one
        # call stops the next chunk.
        self.fence: Optional[Callable[[], None]] = None
        self.env = None if env is None else {**os.environ, **dict(env)}
        # Commands run, by name (squeue, sinfo, sprio, scontrol, scancel): the controller
        # reports the cost of each round from it (tiresias_slurm_calls_per_round).
        self.commands_run: Counter[str] = Counter()
        # SiteFactor per job id as last observed (or last set successfully):
        # lets set_site_factors send only what differs.
        self._site_factors: dict[str, int] = {}
        # Pending job ids whose SiteFactor was read from sprio once (or set here): sprio
        # runs again only when a pending job appears that is not among them.
        self._site_factor_known: set[str] = set()
        self._memory_allocated: Optional[bool] = None  # memory_allocated(), once read
        # JobDefaults (DefCpuPerGPU, DefMemPerGPU) by partition, '' the cluster's: gpu_defaults()
        self._gpu_defaults: dict[str, tuple[int, int]] = {}
        # 26.05+: the squeue JSON says no job's --exclusive; pending job id (planned:
        # "ARRAYID_TASKID" for a task) -> (its submit time, its mode), from `scontrol show
        # job -o ID` (json_says_sharing, _read_sharing). An entry stands while the job stays
        # pending under that submit time: the fields of its record that move every round
        # (priority, last evaluation) say nothing of the mode, and the JSON that would is gone.
        self._sharing_in_json = True
        self._sharing: dict[str, tuple[Optional[float], str]] = {}
        self._sharing_tried: set[str] = set()  # asked and not answered: after the others next time
        # Partition -> node names from the last ``sinfo --json`` read by observe().
        self._partition_nodes: Optional[dict[str, list[str]]] = None
        # squeue --json records parsed at the last observe(), by their text: only new or
        # changed records are parsed again (slurm_plugin.record_cache).
        self._squeue_records: RecordCache[SlurmJob] = RecordCache("jobs", parse_squeue_record, "job_id")
        self._sinfo_records: RecordCache[SlurmNode] = RecordCache("nodes", parse_sinfo_record, "name")
        # id(SlurmJob) -> (that job, its site factor, its ObservedJob), of the last observe()
        self._observed: dict[int, tuple[SlurmJob, Optional[int], ObservedJob]] = {}
        # ArrayJobIds of the pending array records last observed: only a SiteFactor goes
        # to one (the tasks in the record share it: controller.service.round.arrays); any other
        # lever would act on every task of the array. And per ArrayJobId, the ids of its
        # tasks that have records of their own ("ARRAYID_TASKID"): a lever may name
        # those, never a task still inside the pending record (Slurm would split it off).
        self._arrays: set[str] = set()
        self._task_records: dict[str, set[str]] = {}
        # node -> its active reservation, from `scontrol show reservation -o`, read when
        # the reservations jobs name change, else once every RESERVATIONS_EVERY_S
        self._reserved: dict[str, str] = {}
        self._reservations_read: Optional[tuple[float, frozenset]] = None
        # partition -> how it shares nodes (parse_partition_sharing), from `scontrol show
        # partition -o`, read when pending jobs name a partition not asked about at the
        # last read, else once every PARTITIONS_EVERY_S while jobs are pending
        self._partition_modes: dict[str, str] = {}
        self._partitions_read: Optional[tuple[float, frozenset]] = None
        # For repeat_observation(): the last observe()'s answer, the ids of its plain
        # records (no array, no het job: planned as they are), what the levers since
        # then set that squeue --json would show (job id -> field -> value), and
        # whether some other lever (or a failed one) changed a record in an unknown way.
        self._last_observation: Optional[Observation] = None
        self._plain_ids: set[str] = set()
        self._set_since: dict[str, dict[str, object]] = {}
        self._records_changed = False
        self._slurm_now: Optional[float] = None  # slurmctld's clock in the last squeue --json read (24.11+)

    # ------------------------------------------------------------------ commands

    def _run(self, argv: list[str], timeout_s: Optional[float] = None) -> CommandResult:
        """Run one command (within ``timeout_s``, default command_timeout_s); time-outs and
        a missing tool raise BackendUnavailable."""
        self.commands_run[os.path.basename(argv[0])] += 1
        timeout_s = self.command_timeout_s if timeout_s is None else timeout_s
        try:
            result = self.runner(argv, timeout_s, self.env)
        except subprocess.TimeoutExpired:
            raise BackendUnavailable(
                f"{argv[0]} did not answer within {timeout_s:g} s: {' '.join(argv)}") from None
        except OSError as exc:
            raise BackendUnavailable(f"cannot run {argv[0]}: {exc}") from None
        return CommandResult(int(result.returncode), result.stdout or "", result.stderr or "")

    @staticmethod
    def _unreachable(result: CommandResult) -> bool:
        text = (result.stderr + "\n" + result.stdout).lower()
        return any(marker in text for marker in _UNREACHABLE_MARKERS)

    def _read(self, argv: list[str]) -> str:
        result = self._run(argv)
        if result.returncode != 0:
            raise BackendUnavailable(
                f"{' '.join(argv)} exited {result.returncode}: {_one_line(result.stderr) or 'no message'}")
        return result.stdout

    def _query(self, argv: list[str], what: str,
               accept: Optional[Callable[[CommandResult], bool]] = None) -> str:
        """Run a command that must succeed and return its stdout: a slurmctld that does
        not answer is BackendUnavailable (act on nothing), any other failure LeverFailed
        (``accept``: a failed answer that says what was wanted was done all the same)."""
        result = self._run(argv)
        if result.returncode == 0 or (accept is not None and accept(result)):
            return result.stdout
        message = _one_line(result.stderr) or _one_line(result.stdout) or f"exit status {result.returncode}"
        if self._unreachable(result):
            raise BackendUnavailable(f"{what}: slurmctld unreachable: {message}")
        raise LeverFailed(f"{what}: {' '.join(argv)} failed ({result.returncode}): {message}")

    def _lever(self, argv: list[str], what: str, shows: Optional[Mapping[str, Mapping[str, object]]] = None,
               accept: Optional[Callable[[CommandResult], bool]] = None) -> None:
        """Run a lever. ``shows``: job id -> the fields of its squeue --json record the
        lever sets, as observe() would read them (repeat_observation lays them over the
        last observation); None, or a lever that failed: records changed unknowably.
        ``accept``: as for _query."""
        if self.fence is not None:
            self.fence()
        if shows is None or not self._plain_ids.issuperset(shows):
            self._records_changed = True
        try:
            self._query(argv, what, accept)
        except Exception:
            self._records_changed = True  # Slurm may have applied part of it
            raise
        for job_id, values in (shows or {}).items():
            self._set_since.setdefault(job_id, {}).update(values)

    # ------------------------------------------------------------------ observe

    def observe(self) -> Observation:
        """Every job in the configured partitions and their nodes, read now.

        Raises BackendUnavailable when any read fails; records that do not parse
        are listed in ``Observation.skipped`` (one line each).
        """
        observed_at_s = self.clock()
        squeue_text = self._read(["squeue", "--json", "--states=all"])
        answered_at_s = self.clock()
        sinfo_text = self._read(SINFO_ARGV)
        skipped: list[str] = []
        job_errors: list[SlurmParseError] = []
        node_errors: list[SlurmParseError] = []

        def load_squeue(text: str) -> dict:  # (the document a text identical to the last one's is not loaded again)
            doc = self._load(text, "squeue --json")
            self._slurm_now = squeue_clock(doc)
            self._sharing_in_json = json_says_sharing(doc)
            return doc
        try:
            jobs = self._squeue_records.read(squeue_text, load_squeue, job_errors)
            fresh = self._squeue_records.fresh
            if jobs is None:  # not cut into records: read whole
                job_errors.clear()
                jobs = fresh = parse_squeue_json(load_squeue(squeue_text), errors=job_errors)
            nodes = self._sinfo_records.read(sinfo_text, lambda rest: self._load(rest, "sinfo --json"), node_errors)
            if nodes is None:  # e.g. 23.11+'s grouped sinfo entries
                node_errors.clear()
                nodes = parse_sinfo_json(self._load(sinfo_text, "sinfo --json"), errors=node_errors)
        except SlurmParseError as exc:  # not a document at all: act on nothing
            raise BackendUnavailable(f"unreadable Slurm output: {exc}") from None
        try:
            observation = self._observation(jobs, fresh, nodes, job_errors, node_errors, skipped, observed_at_s)
        except BaseException:
            self._squeue_records.forget()  # its records were not all taken in: read them all again next time
            raise
        # the clock evidence (controller.service.round.slurm_clock): slurmctld's time inside the answer
        observation.answered_at_s, observation.slurm_now_s = answered_at_s, self._slurm_now
        return observation

    def _observation(self, jobs: list[SlurmJob], fresh: list[SlurmJob], nodes: list[SlurmNode],
                     job_errors: list[SlurmParseError], node_errors: list[SlurmParseError], skipped: list[str],
                     observed_at_s: float) -> Observation:
        """observe()'s records as an Observation; ``fresh``: those of ``jobs`` parsed by
        this read (the others are the very records of the last observe())."""
        withheld = Withheld()  # a bad job record withholds "gone" from its own job only
        for exc in job_errors:
            skipped.append(f"squeue job {exc.job_id or '?'} (record {exc.record_index}): {exc}")
            if exc.job_id:
                withheld.ids.add(exc.job_id)
            else:
                withheld.everything = True  # which job it was is unknown
        for exc in node_errors:
            skipped.append(f"sinfo node {exc.node or '?'} (record {exc.record_index}): {exc}")

        # a bad record may hold CPUs on any node: then no node's share is summed from jobs
        held = _held_on_nodes(jobs) if not job_errors else None
        if self.partitions is not None:
            jobs = [j for j in jobs if self._in_scope(j.partitions)]

        # A pending job's SiteFactor: its record's (24.11 JSON), else sprio's, else as
        # last observed or set here (22.05 JSON has none). sprio is read when a pending
        # job shows up whose factor is none of these: only a record parsed by this read
        # can be one (a record the last observe() saw pending was asked then), so the
        # others are not even looked at for it.
        known, known_ids = self._site_factors, self._site_factor_known
        asked = any(j.state == "PENDING" and j.site_factor is None and j.job_id not in known_ids
                    and self._in_scope(j.partitions) for j in fresh)
        sprio = self._read_sprio_site_factors(skipped) if asked else {}
        # 26.05's JSON does not say --exclusive: `scontrol show job -o` does, read when a
        # pending job shows up whose mode is not known yet (as sprio above)
        if not self._sharing_in_json:
            self._learn_sharing({j.job_id: j.submit_time for j in jobs
                                 if j.state == "PENDING" and self._in_scope(j.partitions)}, skipped)

        # the partitions' OverSubscribe (EXCLUSIVE: whole nodes, FORCE: shared cores), for the
        # pending jobs whose own record leaves it open; a change re-reads every record
        named_partitions = frozenset(p for j in fresh if j.state == "PENDING" and self._in_scope(j.partitions)
                                     and self._sharing_open(j) for p in j.partitions if p)
        if self._read_partition_modes(named_partitions, any(
                j.state == "PENDING" and self._sharing_open(j) for j in jobs), observed_at_s):
            self._observed = {}

        # One pass over the records for all they say (each pass over 55,000 records costs
        # its cache misses: one pass each was a third of observe()). A record that is the
        # same object as at the last observe() with the same SiteFactor keeps its ObservedJob.
        pending: set[str] = set()
        arrays: set[str] = set()
        task_records: dict[str, set[str]] = {}
        named: set[str] = set()  # the reservations jobs name
        plain: set[str] = set()  # records planned as they are (no array, no het job)
        observed_jobs: list[ObservedJob] = []
        last, self._observed = self._observed, {}
        kept_now = self._observed
        self._site_factors = observed_factors = {}
        for job in jobs:
            job_id = job.job_id
            site_factor = job.site_factor
            if job.state == "PENDING":
                pending.add(job_id)
                if sprio:
                    site_factor = sprio.get(job_id, site_factor)
                if site_factor is None:
                    site_factor = known.get(job_id)
            if job.array_tasks:
                arrays.add(job_id)
            elif not job.het_job_id:
                plain.add(job_id)
                if job.array_job_id and "_" in job_id:
                    task_records.setdefault(job.array_job_id, set()).add(job_id)
            if job.reservation:
                named.add(job.reservation)
            kept = last.get(id(job))
            if kept is not None and kept[0] is job and kept[1] == site_factor and (
                    self._sharing_in_json or job.state != "PENDING"):  # 26.05: its mode may be learned later
                observed = kept[2]  # the same record as last time: the same ObservedJob
            else:
                try:
                    observed = self._observed_job(job, site_factor)
                except (SlurmParseError, TypeError, ValueError) as exc:
                    skipped.append(f"squeue job {job_id}: {_one_line(str(exc))}")
                    withheld.ids.add(job.het_job_id or job_id)
                    continue
            kept_now[id(job)] = (job, site_factor, observed)
            observed_jobs.append(observed)
            if site_factor is not None:
                observed_factors[job_id] = site_factor
        self._site_factor_known = pending if asked else known_ids & pending

        reserved = self._reservations(named, nodes, observed_at_s)

        def held_on(name: str) -> tuple[int | None, int | None]:
            return (None, None) if held is None else held.get(name, (0, 0))
        observed_nodes = [
            Node(name=n.name, gpus_total=n.gpus_total, gpus_free=n.gpus_free, available=n.available,
                 partitions=tuple(n.partitions), gpu_type=n.gpu_type, reservation=reserved.get(n.name, ""),
                 gpus_mps=n.gpus_mps, cpus_total=n.cpus_total,
                 cpus_free=_free(n.cpus_total, _allocated(n.cpus_alloc, held_on(n.name)[0])),
                 mem_total_mb=n.mem_total_mb, mem_free_mb=_free(n.mem_total_mb, _allocated(n.mem_alloc_mb, held_on(n.name)[1])),
                 features=n.features)
            for n in nodes if self._node_in_scope(n)
        ]
        self._arrays, self._task_records = arrays, task_records
        self._partition_nodes = self._partition_map(nodes)
        view = plan_view(observed_jobs, withheld)
        observation = Observation(observed_at_s=observed_at_s, jobs=view.jobs, nodes=observed_nodes,
                                  skipped=skipped + view.problems, withheld=view.withheld)
        self._last_observation, self._set_since, self._records_changed = observation, {}, False
        self._plain_ids = plain
        return observation

    def observe_jobs(self, job_ids: Iterable[str]) -> list[ObservedJob]:
        """The jobs ``job_ids`` (planned ids: "ARRAYID_TASKID" for an array task) as
        observe() lists them, whatever partition they are in now: `tiresias restore`
        undoes the levers it set on jobs that left the configured partitions (moved, or
        the partitions changed). One ``squeue --json --states=all`` of its own: what
        observe() keeps between rounds is left as it is. A job Slurm no longer lists,
        or whose record does not parse, is absent. An ArrayJobId is the array's pending
        record while there is one, else one of its tasks, under the array's id (restore
        resets the array's SiteFactor there). 22.05's JSON has no SiteFactor: a job's is
        None there (unknown)."""
        wanted = {str(job_id) for job_id in job_ids}
        if not wanted:
            return []
        text = self._read(["squeue", "--json", "--states=all"])
        try:
            records = parse_squeue_json(self._load(text, "squeue --json"), errors=[])
        except SlurmParseError as exc:  # not a document at all
            raise BackendUnavailable(f"unreadable Slurm output: {exc}") from None
        jobs = []
        for job in records:
            try:
                jobs.append(self._observed_job(job, job.site_factor))
            except (SlurmParseError, TypeError, ValueError):
                continue
        found = [job for job in plan_view(jobs, Withheld()).jobs if job.job_id in wanted]
        # An ArrayJobId (the SiteFactor of the tasks in its pending record went to it):
        # that record while it is there, else one of the array's tasks, under its id.
        arrays = wanted - {job.job_id for job in found}
        of_array: dict[str, ObservedJob] = {}
        for job in jobs:
            head, _, task = job.job_id.partition("_")
            if head not in arrays or not (task or job.array_tasks):
                continue
            kept = of_array.get(head)
            if kept is None or job.job_id == head or (kept.job_id != head and job.state in ("PENDING", "RUNNING")):
                of_array[head] = job  # the pending record first, else a task still there
        return found + [replace(job, job_id=head, array_tasks="", array_max_tasks=0)
                        for head, job in of_array.items()]

    def repeat_observation(self) -> Optional[Observation]:
        """The last observe()'s records again, read at the current time, with what the
        levers since then set (SiteFactor, AdminComment) laid over them: what observe()
        would return now were nothing else changed in Slurm, without reading squeue
        --json or sinfo --json. Its caller knows that nothing else changed (the light
        poll's answer is the one of before that observe(), controller.service.round.daemon).
        None: no observe() yet, or a lever since then changed a record in a way not
        known here (a pin, a move, a requeue, a hold, a failed lever)."""
        last = self._last_observation
        if last is None or self._records_changed:
            return None
        if self._set_since:  # folded in once: a job unchanged since stays the same object
            changes = self._set_since
            last.jobs = [replace(job, **changes[job.job_id]) if job.job_id in changes and any(
                getattr(job, name) != value for name, value in changes[job.job_id].items()) else job
                for job in last.jobs]
            self._set_since = {}
        return replace(last, observed_at_s=self.clock(), jobs=list(last.jobs), answered_at_s=None, slurm_now_s=None)

    def _sharing_open(self, job: SlurmJob) -> bool:
        """The pending job's record does not settle how its partitions share nodes. Each
        release writes the first partition's EXCLUSIVE into the job's own mode (22.05
        'none', 24.11 ['none'], 26.05's `scontrol show job` Exclusive=NODE), but FORCE
        only as --oversubscribe would read (26.05: not at all), and a job of several
        partitions by the first one (24.11: by none). Only such jobs need the partitions
        read: a cluster whose jobs ask one partition each and no --oversubscribe never
        runs the command (22.05, 24.11)."""
        return (not self._sharing_in_json or job.shared == "oversubscribe"
                or sum(1 for p in job.partitions if p) > 1)

    def _read_partition_modes(self, named: frozenset, pending: bool, now: float) -> bool:
        """Read the partitions' OverSubscribe (``scontrol show partition -o``) when the
        pending jobs parsed by this read (``named``: their partitions) name one not
        asked about at the last read, or PARTITIONS_EVERY_S passed while some job is
        pending (``pending``): one command a minute at most while nothing new comes.
        Unreadable: the last answer stays (logged). Returns whether the answer changed."""
        last = self._partitions_read
        asked = frozenset() if last is None else last[1]
        if not (named - asked) and not (pending and last is not None and now - last[0] >= PARTITIONS_EVERY_S):
            return False
        self._partitions_read = (now, asked | named)
        try:
            modes = parse_partition_sharing(self._read(["scontrol", "show", "partition", "-o"]))
        except (BackendUnavailable, SlurmParseError) as exc:
            log.warning("scontrol show partition unreadable, the last answer kept: %s", _one_line(str(exc)))
            return False
        changed, self._partition_modes = modes != self._partition_modes, modes
        return changed

    def _reservations(self, by_jobs: set[str], nodes: list[SlurmNode], now: float) -> dict[str, str]:
        """Node -> active reservation. Slurm flags a node in an active reservation
        RESERVED; with no such node and no job naming one there is nothing to read.
        Else read again only when the reserved nodes or the reservations jobs name
        change, or RESERVATIONS_EVERY_S passed: one command a minute at most while
        nothing changes. Unreadable: the last answer stays (logged, not a
        skipped record: no job's record is in doubt)."""
        named = frozenset(by_jobs) | frozenset(
            "node " + n.name for n in nodes if "RESERVED" in n.flags)
        if not named:
            self._reserved, self._reservations_read = {}, None
            return self._reserved
        last = self._reservations_read
        if last is not None and last[1] == named and now - last[0] < RESERVATIONS_EVERY_S:
            return self._reserved
        self._reservations_read = (now, named)
        try:
            self._reserved = parse_reservations(self._read(["scontrol", "show", "reservation", "-o"]))
        except (BackendUnavailable, SlurmParseError) as exc:
            log.warning("scontrol show reservation unreadable, the last answer kept: %s", _one_line(str(exc)))
        return self._reserved

    def poll(self) -> frozenset:
        """The cheap change check between rounds: the lines ``JOBID STATE REASON``
        (compact state, pending reason) of every job, from one ``squeue -h -o "%i %t
        %r"`` (no JSON, no nodes, no sprio), as a set (split in C: a tuple per line was
        80% of it at 55,000 jobs). The reason is in it because it decides whether a
        pending job may cause a preemption (controller.service.round.startable): a fresh
        job's ``None`` turns into ``Resources`` with no change of state."""
        argv = ["squeue", "-h", "-o", "%i %t %r"]
        if self.partitions is not None:
            argv += ["-p", ",".join(sorted(self.partitions))]
        out = self._read(argv)
        return frozenset(map(str.strip, out.splitlines())) - {""}

    def poll_nodes(self) -> frozenset:
        """The nodes' half of the change check, taken only when a round would reuse the
        last observation (controller.service.round.daemon.Controller.observe): the lines
        ``STATE NODES`` of one ``sinfo -h -o "%T %N"`` (nodes grouped by state: a few
        lines, however many nodes), so a drained or downed node is never planned on
        from a reused observation."""
        argv = ["sinfo", "-h", "-o", "%T %N"]
        if self.partitions is not None:
            argv += ["-p", ",".join(sorted(self.partitions))]
        return frozenset(map(str.strip, self._read(argv).splitlines())) - {""}

    def partition_nodes(self) -> dict[str, list[str]]:
        """Partition name -> its node names (in ``sinfo`` order), for the partitions in
        scope. From the ``sinfo --json`` of the last observe(); read now if none yet."""
        if self._partition_nodes is None:
            doc = self._load(self._read(SINFO_ARGV), "sinfo --json")
            try:
                nodes = parse_sinfo_json(doc, errors=[])
            except SlurmParseError as exc:
                raise BackendUnavailable(f"unreadable Slurm output: {exc}") from None
            self._partition_nodes = self._partition_map(nodes)
        return {name: list(members) for name, members in self._partition_nodes.items()}

    def _partition_map(self, nodes: Iterable[SlurmNode]) -> dict[str, list[str]]:
        members: dict[str, dict[str, None]] = {}  # an ordered set per partition: linear, not quadratic
        for node in nodes:
            for name in node.partitions:
                if self.partitions is None or name in self.partitions:
                    members.setdefault(name, {})[node.name] = None
        return {name: list(names) for name, names in members.items()}

    @staticmethod
    def _load(text: str, what: str) -> dict:
        """The decoded document; an ``errors`` entry (slurmctld down) is an outage.
        Its shape is checked by the parser, whose errors also end as BackendUnavailable."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise BackendUnavailable(f"{what}: not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise BackendUnavailable(f"{what}: expected a JSON object")
        errors = doc.get("errors") or []
        if errors:
            # 22.05 exits 0 with an empty list and an error entry when slurmctld is down.
            first = errors[0] if isinstance(errors[0], dict) else {"error": errors[0]}
            detail = first.get("description") or first.get("error") or first
            source = first.get("source", "")
            raise BackendUnavailable(f"{what} reported an error: {detail}{f' ({source})' if source else ''}")
        return doc

    def _in_scope(self, partitions: list[str]) -> bool:
        return self.partitions is None or any(p in self.partitions for p in partitions)

    def _node_in_scope(self, node: SlurmNode) -> bool:
        # A node without a partition list (older/other shapes) is kept.
        return self.partitions is None or not node.partitions or self._in_scope(node.partitions)

    def _read_sprio_site_factors(self, skipped: list[str]) -> dict[str, int]:
        """SiteFactor of pending, unheld jobs (``sprio`` lists no others)."""
        argv = ["sprio", "-h", "-o", "%.30i %.30S"]
        result = self._run(argv)
        if result.returncode != 0:
            if self._unreachable(result):
                raise BackendUnavailable(f"sprio: slurmctld unreachable: {_one_line(result.stderr)}")
            # e.g. priority/basic: no factors to read; levers then send every value.
            skipped.append(f"sprio exited {result.returncode}: {_one_line(result.stderr)}; site factors unknown")
            return {}
        factors: dict[str, int] = {}
        for line in result.stdout.splitlines():
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or not re.fullmatch(r"-?[0-9]{1,19}", parts[1]):
                skipped.append(f"sprio line {line.strip()[:80]!r}: expected 'JOBID SITE'")
                continue
            factors[parts[0]] = int(parts[1])
        return factors

    def priorities(self) -> dict[str, int]:
        """Slurm's own priority of each pending, unheld job (``sprio``'s PRIORITY, the
        highest when the job waits in several partitions), for ``tiresias shadow-diff``.
        LeverFailed when sprio cannot say (e.g. priority/basic)."""
        argv = ["sprio", "-h", "-o", "%.30i %.30Y"]
        out = self._query(argv, "Slurm's job priorities")
        found: dict[str, int] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and _JOB_ID_RE.fullmatch(parts[0]) and re.fullmatch(r"-?[0-9]{1,19}", parts[1]):
                found[parts[0]] = max(int(parts[1]), found.get(parts[0], int(parts[1])))
        return found

    @staticmethod
    def _gpus_by_node(job: SlurmJob) -> tuple[tuple[str, int], ...]:
        """Per-node GPU counts of a job holding nodes: from gres_detail (aligned with
        the allocated node list) when present, else the total split evenly."""
        if not job.nodes or job.state == "PENDING":
            return ()
        names = job.allocated_nodes or list(job.nodes)
        detail = job.gres_detail
        if len(detail) == len(names):
            counts = [gres_counts(d, field_name="gres_detail").get("gpu", 0) for d in detail]
            if sum(counts) > 0 or job.gpus == 0:
                return tuple(zip(names, counts))
        if job.gpus <= 0:
            return tuple((n, 0) for n in names)
        share, extra = divmod(job.gpus, len(names))
        return tuple((n, share + (1 if i < extra else 0)) for i, n in enumerate(names))

    def _learn_sharing(self, pending: dict[str, Optional[float]], skipped: list[str]) -> None:
        """Read the --exclusive mode of the pending jobs (id -> submit time) not known yet,
        at most MAX_SHOW_JOB_IDS of them (never asked first), and forget the jobs that left
        the queue or came back under a new submit time. Modes not read stay unknown: such a
        job is never a reason to preempt (its request unreported) until a later read."""
        sharing, tried = self._sharing, self._sharing_tried
        for job_id in [k for k, (submitted, _) in sharing.items() if pending.get(k, -1.0) != submitted]:
            del sharing[job_id]
        tried.intersection_update(pending)
        unknown = [job_id for job_id in pending if job_id not in sharing]
        if not unknown:
            return
        unknown.sort(key=lambda job_id: job_id in tried)  # stable: squeue's order within each
        asked = unknown[:MAX_SHOW_JOB_IDS]
        modes, reached = self._read_sharing(asked, skipped)
        for job_id in asked[:reached]:
            if job_id in modes:
                sharing[job_id] = (pending[job_id], modes[job_id])
                tried.discard(job_id)
            else:
                tried.add(job_id)
        if len(unknown) > len(asked):
            skipped.append(f"scontrol show job: {len(unknown) - len(asked)} pending jobs' --exclusive "
                           f"left for the next observations (at most {MAX_SHOW_JOB_IDS} read each)")

    def _read_sharing(self, job_ids: list[str], skipped: list[str]) -> tuple[dict[str, str], int]:
        """The --exclusive/--oversubscribe mode of each of ``job_ids`` (planned ids) that
        `scontrol show job -o ID` answers (parse_show_job_sharing keys a task's line
        "ARRAYID_TASKID" as it was asked), and how many of them were asked. A job that has
        ended answers nothing; a call that times out or cannot reach slurmctld ends the
        reads (the rest stay unknown, not asked), never the observation."""
        modes: dict[str, str] = {}
        timeout_s = min(self.command_timeout_s, SHOW_JOB_TIMEOUT_S)
        reached = 0
        for job_id in job_ids:
            reached += 1
            try:
                result = self._run(["scontrol", "show", "job", "-o", job_id], timeout_s)
            except BackendUnavailable as exc:
                skipped.append(f"scontrol show job {job_id}: {_one_line(str(exc))}; --exclusive of "
                               f"{len(job_ids) - len(modes)} pending jobs unknown this round")
                break
            if result.returncode != 0:
                if self._unreachable(result):
                    skipped.append(f"scontrol show job {job_id}: slurmctld unreachable: "
                                   f"{_one_line(result.stderr)}; --exclusive unknown this round")
                    break
                continue  # ended since squeue read it ("Invalid job id specified")
            answer = parse_show_job_sharing(result.stdout)
            if job_id in answer:
                modes[job_id] = answer[job_id]
        return modes, reached

    def _observed_job(self, job: SlurmJob, site_factor: int | None) -> ObservedJob:
        if job.state == "PENDING" and not self._sharing_in_json:
            known = self._sharing.get(job.job_id)
            job = replace(job, shared=None if known is None else known[1])  # None: unknown, never preempted for
        if job.state == "PENDING" and job.gpus_per_node and not job.max_nodes:
            # --gres=gpu:K: Slurm needs K GPUs on each node and counts them at its node
            # count; a gang spread over more nodes (3 GPUs here, 1 there) is one Slurm never
            # starts, so no victim is chosen for such a layout
            job = replace(job, max_nodes=max(job.node_count, 1))
        return ObservedJob(
            **{name: getattr(job, name) for name in _AS_REPORTED},
            nodes=tuple(job.nodes),
            gpus_by_node=self._gpus_by_node(job),
            submit_time_s=job.submit_time,
            start_time_s=job.start_time,
            end_time_s=job.end_time,
            eligible_time_s=job.eligible_time,
            requeueable=bool(job.requeue),
            site_factor=site_factor,
            required_nodes=tuple(job.required_nodes),
            excluded_nodes=tuple(job.excluded_nodes),
            min_nodes=job.node_count,
            **(_asked_per_node(job, self.memory_allocated, self.gpu_defaults, self._partition_modes)
               if job.state == "PENDING" else {}),
            held_by_node=_held_by_node(job) if job.state == "RUNNING" else (),
        )

    # ------------------------------------------------------------------ levers

    def _task_id(self, job_id: object, array_ok: bool = False) -> str:
        """A checked id to send a lever to. Never a pending task still inside its array's
        record ("ARRAYID_TASKID" without a record of its own): Slurm would split it off
        into a record of its own (controller.service.round.arrays). A pending array's bare
        ArrayJobId only with ``array_ok`` (its SiteFactor): Slurm applies any other lever
        on it to every task of the array."""
        text = _check_job_id(job_id)
        head, _, task = text.partition("_")
        if task and head in self._arrays and text not in self._task_records.get(head, ()):
            raise ValueError(f"job {text} is a pending task still in job array {head}'s record: a lever naming it "
                             f"would split it off (the array's SiteFactor goes to {head})")
        if not task and text in self._arrays and not array_ok:
            raise ValueError(f"job id {text} is a job array: a lever names one task (ARRAYID_TASKID)")
        return text

    def set_site_factors(self, factors: dict[str, int]) -> None:
        """Set SiteFactor (added unweighted to the multifactor priority) per job id.

        One ``scontrol update JobId=a,b,c SiteFactor=N`` per distinct value; jobs
        whose last observed SiteFactor already equals the value are left out.
        All ids and values are validated before anything runs. When some calls
        fail the others still run; LeverFailed then names every failed group
        (Slurm still updates the valid ids of a list that names a vanished job).

        An ArrayJobId takes the value for the tasks inside its pending record: Slurm
        updates that record whole (no task is split off) and every other record of the
        array as well, its running tasks and its pending tasks with records of their own.
        So the arrays go first, what they set on those task records is taken as theirs,
        and the other ids then (the caller's own values for those tasks included) are
        compared with that. scontrol answers such an update with one line per outcome and
        exit status 1 when some task of the array had ended ("12_1-3: Job has already
        finished", "12_4-50: No error"): that is success for the tasks that are left.
        """
        first: dict[int, list[str]] = {}  # the arrays' values
        checked: dict[str, int] = {}
        for raw_id, value in factors.items():
            job_id = self._task_id(raw_id, array_ok=True)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"job {job_id}: SiteFactor must be an integer, got {value!r}")
            if not -SITE_FACTOR_LIMIT <= value <= SITE_FACTOR_LIMIT:
                raise ValueError(f"job {job_id}: SiteFactor {value} outside +-{SITE_FACTOR_LIMIT}")
            checked[job_id] = value
        failures: list[str] = []
        for job_id, value in checked.items():
            if "_" not in job_id and (job_id in self._arrays or job_id in self._task_records) \
                    and self._site_factors.get(job_id) != value:
                first.setdefault(value, []).append(job_id)
        self._send_site_factors(first, failures)
        for value, array_ids in first.items():
            for array_id in array_ids:
                for task_id in self._task_records.get(array_id, ()):  # what Slurm holds for them now
                    if self._site_factors.get(array_id) == value:
                        self._site_factors[task_id] = value
                    else:  # the update failed: it may have reached some
                        self._site_factors.pop(task_id, None)
        groups: dict[int, list[str]] = {}
        for job_id, value in checked.items():
            if any(job_id in ids for ids in first.values()) or self._site_factors.get(job_id) == value:
                continue
            groups.setdefault(value, []).append(job_id)
        self._send_site_factors(groups, failures)
        if failures:
            raise LeverFailed("; ".join(failures))

    def ids_per_update(self) -> int:
        """Most job ids one ``scontrol update`` names: MAX_IDS_PER_UPDATE, and no more
        than RL_IDS_PER_S x command_timeout_s (one RPC per id, rl_enable's refill)."""
        return max(1, min(MAX_IDS_PER_UPDATE, int(self.command_timeout_s * RL_IDS_PER_S)))

    def _send_site_factors(self, groups: dict[int, list[str]], failures: list[str]) -> None:
        """One ``scontrol update`` per value and per ids_per_update() ids; the values
        sent are known after, those of a failed call forgotten."""
        per_command = self.ids_per_update()
        for value in sorted(groups):
            ids = sorted(groups[value], key=lambda j: [int(p) for p in j.split("_")])
            for start in range(0, len(ids), per_command):
                chunk = ids[start:start + per_command]
                try:
                    self._lever(["scontrol", "update", f"JobId={','.join(chunk)}", f"SiteFactor={value}"],
                                f"SiteFactor={value} for job(s) {','.join(chunk)}",
                                shows={job_id: {"site_factor": value} for job_id in chunk},
                                accept=lambda result, chunk=chunk: _only_ended_tasks(result, chunk))
                except LeverFailed as exc:
                    failures.append(str(exc))
                    for job_id in chunk:  # some may have changed: forget what we knew
                        self._site_factors.pop(job_id, None)
                else:
                    for job_id in chunk:
                        self._site_factors[job_id] = value

    def pin_nodes(self, job_id: str, nodes: list[str]) -> None:
        """ReqNodeList= for a pending job; an empty list clears it."""
        job_id = self._task_id(job_id)
        names = [_check_name(n, "node name") for n in nodes]
        what = f"pin job {job_id} to [{','.join(names)}]"
        # On a job that started since the observation, the same update is a resize of
        # the running job (Slurm marks it RESIZING and keeps that start time for its
        # later runs): ask first, as signal() does. A window of one squeue remains.
        states = self._states(job_id, what)
        if states != {"PENDING"}:
            raise LeverFailed(f"{what}: job is {','.join(sorted(states)) or 'not listed'}, not PENDING; nothing set")
        self._lever(["scontrol", "update", f"JobId={job_id}", f"ReqNodeList={','.join(names)}"], what)

    def _states(self, job_id: str, what: str) -> set[str]:
        """The job's state(s) from ``squeue -j`` (one per array task; ``-t all``: 24.11
        lists an ended job under -j only so)."""
        states = self._query(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], what)
        return {s.strip().upper() for s in states.split()}

    def signal(self, job_id: str, signal_name: str, batch_only: bool = True) -> None:
        """Deliver the checkpoint signal the way Slurm delivers a job's ``--signal``:
        ``batch_only`` (``B:``) to the batch shell (``scancel --batch``), otherwise to
        every step but not the batch shell (plain ``scancel --signal``), so a batch
        script that traps nothing is not killed by a signal meant for its ``srun``
        tasks."""
        job_id = self._task_id(job_id)
        if not isinstance(signal_name, str) or not _SIGNAL_RE.fullmatch(signal_name):
            raise ValueError(f"invalid signal name {signal_name!r}: expected e.g. USR1, SIGTERM or 10")
        # 22.05 `scancel --signal` on a job that is not running does not fail: it
        # retries for over a minute, which would look like slurmctld being down.
        # Ask for the state first (squeue honours -j outside --json).
        states = self._states(job_id, f"signal {signal_name} to job {job_id}")
        if "RUNNING" not in states:
            raise LeverFailed(f"signal {signal_name} to job {job_id}: job is "
                              f"{','.join(sorted(states)) or 'not listed'}, not RUNNING; nothing sent")
        argv = ["scancel", f"--signal={signal_name}", *(["--batch"] if batch_only else []), job_id]
        self._lever(argv, f"signal {signal_name} to job {job_id}")

    def batch_script(self, job_id: str) -> str:
        """The job's batch script (``scontrol write batch_script JOB -``): its #SBATCH
        lines are where Slurm 22.05 keeps a job's ``--signal`` visible."""
        job_id = _check_job_id(job_id)  # a read, not a lever
        return self._query(["scontrol", "write", "batch_script", job_id, "-"], f"batch script of job {job_id}")

    def requeue(self, job_id: str) -> None:
        """Requeue a running batch job (needs Requeue=1); it comes back PENDING."""
        job_id = self._task_id(job_id)
        self._lever(["scontrol", "requeue", job_id], f"requeue job {job_id}")

    def make_requeueable(self, job_id: str) -> None:
        job_id = self._task_id(job_id)
        self._lever(["scontrol", "update", f"JobId={job_id}", "Requeue=1"], f"make job {job_id} requeueable")

    def hold(self, job_id: str) -> None:
        """``scontrol hold N``: an admin hold (Priority=0, Reason=JobHeldAdmin) on a
        pending job, which a user cannot release; a job that started since the
        observation is left alone (a hold on a running job changes nothing now)."""
        job_id = self._task_id(job_id)
        what = f"hold job {job_id}"
        states = self._states(job_id, what)
        if states != {"PENDING"}:
            raise LeverFailed(f"{what}: job is {','.join(sorted(states)) or 'not listed'}, not PENDING; nothing set")
        self._lever(["scontrol", "hold", job_id], what)

    def release_hold(self, job_id: str) -> None:
        """``scontrol release N``: undo ``hold``."""
        job_id = self._task_id(job_id)
        self._lever(["scontrol", "release", job_id], f"release job {job_id}")

    def release_begin_time(self, job_id: str) -> None:
        """StartTime=now: clears the cred_expire+1 s BeginTime hold after a requeue."""
        job_id = self._task_id(job_id)
        self._lever(["scontrol", "update", f"JobId={job_id}", "StartTime=now"],
                    f"release begin time of job {job_id}")

    def move_partition(self, job_id: str, partition: str) -> None:
        """Move a pending job (``a,b`` lets Slurm pick the earliest start)."""
        job_id = self._task_id(job_id)
        partition = _check_name(partition, "partition name")
        self._lever(["scontrol", "update", f"JobId={job_id}", f"Partition={partition}"],
                    f"move job {job_id} to partition {partition}")

    def set_admin_comment(self, job_id: str, text: str) -> None:
        """``scontrol update JobId=N AdminComment=TEXT`` (one argument, no shell: spaces
        and '=' inside TEXT are kept). One line, printable, at most
        ADMIN_COMMENT_MAX_CHARS; the job's owner reads it with ``scontrol show job``."""
        job_id = self._task_id(job_id)
        if not isinstance(text, str) or len(text) > ADMIN_COMMENT_MAX_CHARS or not text.isprintable():
            raise ValueError(f"job {job_id}: AdminComment must be one printable line of at most "
                             f"{ADMIN_COMMENT_MAX_CHARS} characters, got {text[:80]!r}")
        self._lever(["scontrol", "update", f"JobId={job_id}", f"AdminComment={text}"],
                    f"AdminComment of job {job_id}", shows={job_id: {"admin_comment": text}})

    def memory_allocated(self) -> bool:
        """Slurm allocates memory to jobs (SelectTypeParameters CR_*_Memory), as the
        last slurm_config() read said (the preflight reads it at start and until
        slurmctld answers); False before any read."""
        return bool(self._memory_allocated)

    def slurm_config(self) -> str:
        """`scontrol show config` as printed (the preflight's input); any failure is
        BackendUnavailable (the settings cannot be read). Remembers whether Slurm
        allocates memory (memory_allocated)."""
        text = self._read(["scontrol", "show", "config"])
        found = re.search(r"^SelectTypeParameters\s*=\s*(\S*)", text, re.M)
        self._memory_allocated = bool(found) and "MEMORY" in found.group(1).upper()
        found = re.search(r"^JobDefaults\s*=\s*(\S*)", text, re.M)
        self._gpu_defaults[""] = job_defaults(found.group(1) if found else "")
        return text

    def gpu_defaults(self, partition: str) -> tuple[int, int]:
        """(DefCpuPerGPU, DefMemPerGPU MB) a job of ``partition`` gets from Slurm: the
        partition's JobDefaults when partition_config() read them, else the cluster's as
        the last slurm_config() read said; (0, 0) none known."""
        return self._gpu_defaults.get(partition) or self._gpu_defaults.get("", (0, 0))

    def qos_config(self) -> str:
        """Every QOS's preemption settings from slurmdbd, one ``name|preemptmode|gracetime|
        preemptexempttime|preempt`` line each (the preflight of ``preemption: slurm``);
        any failure is BackendUnavailable."""
        return self._read(["sacctmgr", "-n", "-P", "show", "qos",
                           "format=name,preemptmode,gracetime,preemptexempttime,preempt"])

    def qos_limits(self) -> tuple[str, str]:
        """(every QOS's limits, the associations' default QOS) from slurmdbd, as
        controller.service.ops.qos_limits reads them (the limits preemption: slurm's QOS swap
        would drop); any failure is BackendUnavailable."""
        return self._read(QOS_LIMITS_COMMAND), self._read(DEFAULT_QOS_COMMAND)

    def qos_limit_table(self) -> str:
        """Every QOS's limits from slurmdbd as QOS_LIMITS_COMMAND prints them (the GPU
        limits of a pending job's QOS: controller.service.ops.qos_gate); any failure (no
        accounting, slurmdbd down) is BackendUnavailable."""
        return self._read(QOS_LIMITS_COMMAND)

    def partition_config(self) -> str:
        """`scontrol show partition -o` as printed, one line per partition (the
        preflight reads each one's own PreemptMode); any failure is BackendUnavailable."""
        text = self._read(["scontrol", "show", "partition", "-o"])
        for name, defaults in re.findall(r"^PartitionName=(\S+).*?\sJobDefaults=(\S*)", text, re.M):
            if job_defaults(defaults) != (0, 0):
                self._gpu_defaults[name] = job_defaults(defaults)
        return text

    def set_mps_share(self, job_id: str, shares: int) -> None:
        """Set a pending job's MPS share per node (= its percent of one GPU's SMs).

        ``scontrol update JobId=X TresPerNode=gres:mps:N``. Checked on 22.05.8: this
        form rewrites both TresPerNode and the job's TRES, and the job then starts
        with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=N. ``TresPerNode=gres/mps:N`` and
        ``TresPerNode=mps:N`` also exit 0 but only rewrite the string: TRES and the
        allocation keep the old share. Slurm accepts any count (0, 101, 500) for a
        pending job, hence the 1..100 check here. A running job is refused ("Job is
        no longer pending execution") -> LeverFailed.
        """
        job_id = self._task_id(job_id)
        if isinstance(shares, bool) or not isinstance(shares, int):
            raise ValueError(f"job {job_id}: MPS share must be an integer, got {shares!r}")
        if not 1 <= shares <= MPS_SHARES_PER_GPU:
            raise ValueError(f"job {job_id}: MPS share {shares} outside 1..{MPS_SHARES_PER_GPU}")
        self._lever(["scontrol", "update", f"JobId={job_id}", f"TresPerNode=gres:mps:{shares}"],
                    f"set MPS share of job {job_id} to {shares}")

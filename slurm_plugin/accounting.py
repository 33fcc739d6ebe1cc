"""Slurm accounting (sacct) -> a replayable job trace with what really happened.

(One module: the JSON and the text form of sacct become the same runs, merged and
sorted by one set of rules; splitting them would split those rules.)

``tiresias trace export`` reads ``sacct -a -X -D`` (one row per allocation *run*:
with ``-D`` a requeued job appears once per run, earlier runs in state REQUEUED)
either as ``--json`` (needs slurmdbd; parsed by ``slurm_plugin.parse_history.parse_sacct_json``)
or as ``-P`` parsable text. Both become :class:`SacctRun` records, which are merged
per job into :class:`AccountedJob` and then sorted into the trace or one of the
excluded categories (never silently dropped):

- ``no_gpu``: no whole GPU allocated or requested (CPU-only or MPS-only jobs);
- ``cancelled_pending``: cancelled before it was ever allocated (Slurm may still
  record a start time equal to the cancel time, so "allocated" is judged by the
  node list / allocated TRES, not by the start time);
- ``never_started``: not cancelled, but never allocated (pending when exported,
  or failed before starting);
- ``unfinished``: ran but has no end yet (running, suspended, or pending again
  after a requeue): its total run time is unknown;
- ``bad_times``: times that cannot be true (an end before the start or the
  submission): written out they would be rejected by ``simulate --actual``.

Slurm 22.05 has no restart count in sacct, so ``requeues`` is the number of
earlier runs (rows) of the same job. Times are epoch seconds; the trace keeps
them absolute (``load_trace``/``load_actuals`` rebase them to the first submit).
A job's duration is the sum of its runs' End - Start, the times the replay
compares against; where sacct's Elapsed says otherwise (suspended time, clock
steps) the job is counted in ``elapsed_disagrees`` and the export warns.

What the history shows beyond the trace (the cluster it ran on, the actual JCTs) is in
slurm_plugin.history_shape.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence


from controller.core.inputs import MAX_SECONDS, shorten
from controller.core.model import InputError, JobSpec
from slurm_plugin.grammar import (SlurmParseError, expand_hostlist, gres_counts, gres_items, parse_duration_s,
                                  scontrol_time)
from slurm_plugin.parse_history import parse_sacct_json
from slurm_plugin.records import slurm_number

__all__ = [
    "SACCT_TEXT_FIELDS",
    "SacctRun",
    "AccountedJob",
    "ExportResult",
    "runs_from_sacct_json",
    "runs_from_sacct_text",
    "runs_from_output",
    "merge_runs",
    "build_export",
    "run_sacct",
    "parse_time_bound",
]

# Fields asked from `sacct -P` when --json is not available. JobName is the one free
# text among them: a '|' inside it adds fields, which are joined back into the name
# (with a second free-text column, e.g. Comment, such a row is an error instead).
SACCT_TEXT_FIELDS = ("JobIDRaw", "JobID", "JobName", "User", "Partition", "State", "Submit", "Start", "End",
                     "Elapsed", "AllocTRES", "ReqTRES", "NodeList")
_FREE_TEXT_COLUMNS = ("jobname", "comment", "admincomment", "systemcomment", "workdir", "constraints")
# Elapsed and End - Start are whole seconds each; a second apart is rounding, not a disagreement.
ELAPSED_TOLERANCE_S = 1.0
_REQUIRED_TEXT = ("State", "Submit", "Start", "End", "Elapsed")
SACCT_TIMEOUT_S = 300

# Final states of a job that will not run again (a REQUEUED run is followed by another row).
_FINISHED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                              "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"})


@dataclass(frozen=True)
class SacctRun:
    """One sacct row: one run (allocation) of a job. Times in epoch seconds."""

    job_id: str
    user: str
    partition: str
    state: str
    submit_s: Optional[float]
    start_s: Optional[float]
    end_s: Optional[float]
    elapsed_s: float
    gpus: int  # allocated when it ran, else requested
    mps: int
    allocated: bool  # nodes were assigned to this run
    gpu_type: str = ""  # gres/gpu:TYPE it asked for ('' any type, or mixed)
    job_name: str = ""
    node_list: str = ""  # Slurm hostlist as sacct prints it ('' none)


@dataclass
class AccountedJob:
    """A job after merging its runs: requeues = earlier runs, elapsed = sum of run times."""

    job_id: str
    user: str
    partition: str
    state: str  # the last run's state
    submit_s: float
    first_start_s: Optional[float]
    last_end_s: Optional[float]
    elapsed_s: float
    gpus: int
    mps: int
    requeues: int
    allocated: bool  # any run was allocated nodes
    gpu_type: str = ""
    job_name: str = ""
    node_list: str = ""  # the last allocated run's nodes
    last_start_s: Optional[float] = None  # the last allocated run's start
    run_s: Optional[float] = None  # sum of the allocated runs' End - Start (None: a run lacks one)


@dataclass
class ExportResult:
    """Trace rows (with actuals) plus every excluded job, by category."""

    jobs: list[JobSpec] = field(default_factory=list)
    actuals: dict[str, dict[str, Any]] = field(default_factory=dict)
    excluded: dict[str, list[str]] = field(default_factory=lambda: {
        "no_gpu": [], "cancelled_pending": [], "never_started": [], "unfinished": [], "bad_times": []})
    rows_read: int = 0
    jobs_seen: int = 0
    requeued_jobs: int = 0
    source: str = ""
    # jobs in the trace whose Elapsed differs from End - Start (the trace has End - Start)
    elapsed_disagrees: list[str] = field(default_factory=list)

    def warning_lines(self) -> list[str]:
        """One line per kind of inconsistency in the history, with its count (stderr)."""
        lines = []
        if self.elapsed_disagrees:
            shown = ",".join(self.elapsed_disagrees[:8]) + (",..." if len(self.elapsed_disagrees) > 8 else "")
            lines.append(f"warning: {len(self.elapsed_disagrees)} job(s) whose Elapsed disagrees with End - Start "
                         f"by more than {ELAPSED_TOLERANCE_S:g} s (suspended, or clock steps); the trace has "
                         f"End - Start: {shown}")
        no_gpu = self.excluded["no_gpu"]
        if no_gpu:
            everything = len(no_gpu) == self.jobs_seen
            lines.append(f"warning: {len(no_gpu)} jobs without whole GPUs (no gres/gpu in AllocTRES or ReqTRES)"
                         + ("; none of the jobs has one: " if everything else "; if some did use GPUs, ")
                         + "the site does not account gres/gpu (slurm.conf AccountingStorageTRES=gres/gpu)")
        return lines

    def summary_lines(self) -> list[str]:
        """Human summary (for stderr): what was read, kept and excluded, and why."""
        ex = self.excluded
        lines = [f"{self.source}: {self.rows_read} sacct row(s), {self.jobs_seen} job(s); "
                 f"{len(self.jobs)} GPU job(s) in the trace ({self.requeued_jobs} requeued, runs merged)"]
        labels = (("no_gpu", "without whole GPUs (CPU-only or MPS-only)"),
                  ("cancelled_pending", "cancelled while pending (never allocated)"),
                  ("never_started", "never started (pending or failed before start)"),
                  ("unfinished", "still running or pending again (total run time unknown)"),
                  ("bad_times", "with impossible times (end before start or submit)"))
        for key, text in labels:
            if ex[key]:
                shown = ",".join(ex[key][:8]) + (",..." if len(ex[key]) > 8 else "")
                lines.append(f"  excluded {len(ex[key])} job(s) {text}: {shown}")
        return lines


# --------------------------------------------------------------------------- reading
def _input_error(where: str, err: Exception) -> InputError:
    return InputError(f"{where}: {str(err).splitlines()[0] if str(err) else type(err).__name__}")


def runs_from_sacct_json(text: str | bytes, where: str = "sacct --json") -> list[SacctRun]:
    """Runs from ``sacct --json [-D]`` (22.05 and 23.02+/24.11 shapes).

    Strict: any malformed record is an InputError naming it (a silently skipped
    record would bias the replay)."""
    errors: list[SlurmParseError] = []
    try:
        jobs = parse_sacct_json(text, errors)
    except SlurmParseError as err:
        raise _input_error(where, err) from None
    if errors:
        first = errors[0]
        ident = f"jobs[{first.record_index}]" + (f" (job {first.job_id})" if first.job_id else "")
        more = f" (and {len(errors) - 1} more bad record(s))" if len(errors) > 1 else ""
        raise InputError(f"{where}: {ident}: {first}{more}")
    records = json.loads(text)["jobs"]  # valid: parse_sacct_json accepted it
    runs = []
    for record, job in zip(records, jobs):
        tres = record.get("tres") or {}
        gpu_type = _replayed_gpu_type(_json_gpu_type(tres.get("requested")), _json_gpu_type(tres.get("allocated")))
        t = record.get("time") or {}
        try:
            elapsed = slurm_number(t.get("elapsed"), "time.elapsed")
        except SlurmParseError as err:
            raise InputError(f"{where}: job {job.job_id}: {err}") from None
        if elapsed is None:
            elapsed = (job.end_time - job.start_time) if job.start_time and job.end_time else 0.0
        if not 0 <= elapsed <= MAX_SECONDS:  # a 14-digit elapsed is not a run time
            raise InputError(f"{where}: job {job.job_id}: time.elapsed '{shorten(elapsed)}' is not a duration "
                             f"in 0..{MAX_SECONDS:g} s")
        if job.submit_time is None:
            raise InputError(f"{where}: job {job.job_id}: time.submission is missing")
        runs.append(SacctRun(job_id=job.job_id, user=job.user, partition=job.partition, state=job.state,
                             submit_s=job.submit_time, start_s=job.start_time, end_s=job.end_time,
                             elapsed_s=float(max(elapsed, 0)), gpus=job.gpus, mps=job.mps,
                             allocated=bool(job.nodes), gpu_type=gpu_type, job_name=job.name,
                             node_list=_hostlist_text(record.get("nodes")) if job.nodes else ""))
    return runs


def _replayed_gpu_type(requested: str, allocated: str) -> str:
    """The GPU type a job is replayed on: the one it asked for, else the one Slurm gave
    it. A job that asked for any GPU ran on one type, the node kinds of its history are
    read from that, and the same history exported with or without ReqTRES (or a JSON
    without ``tres.requested``) gives the same trace. Whether another type would have
    served it the history cannot say: it is replayed where it ran."""
    return requested or allocated


def _hostlist_text(value: Any) -> str:
    return value.strip() if isinstance(value, str) and value.strip() not in ("None assigned", "(null)") else ""


def one_gpu_type(types: Iterable[str]) -> str:
    """The GPU type when the GPUs are all of one type, else '' (untyped, or mixed)."""
    found = {t for t in types if t}
    return found.pop() if len(found) == 1 else ""


def _json_gpu_type(items: Any) -> str:
    # parse_sacct_json already checked these lists; gres items are {"type": "gres", "name": "gpu:a100"}
    if not isinstance(items, list):
        return ""
    return one_gpu_type(str(item.get("name", "")).partition(":")[2] for item in items
                     if isinstance(item, dict) and item.get("type") == "gres"
                     and str(item.get("name", "")).partition(":")[0] == "gpu")


def _text_gpu_type(spec: str, field_name: str) -> str:
    return one_gpu_type(gtype for name, gtype, _, _ in gres_items(spec, field_name) if name == "gpu")


def _split_text_lines(text: str) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]


def runs_from_sacct_text(text: str, where: str = "sacct -P") -> list[SacctRun]:
    """Runs from ``sacct -P -o FIELDS`` (with its header line; '|'-separated).

    Needs JobIDRaw or JobID, State, Submit, Start, End, Elapsed and AllocTRES or
    ReqTRES; User, Partition and NodeList are used when present. Job steps
    (``123.batch``) are skipped. Timestamps are read in this process's local time
    zone, as sacct prints them."""
    lines = _split_text_lines(text)
    if not lines:
        return []
    header_no, header_line = lines[0]
    header = [h.strip() for h in header_line.split("|")]
    if header and header[-1] == "":  # `sacct -p` ends every line with '|'
        header = header[:-1]
    index = {name.lower(): i for i, name in enumerate(header)}
    id_col = index.get("jobidraw", index.get("jobid"))
    missing = [name for name in _REQUIRED_TEXT if name.lower() not in index]
    if id_col is None:
        missing.insert(0, "JobID")
    if "alloctres" not in index and "reqtres" not in index:
        missing.append("AllocTRES or ReqTRES")
    if missing:
        raise InputError(f"{where}:{header_no}: header {header_line.strip()[:80]!r} lacks column(s) "
                         f"{', '.join(missing)} (expected `sacct -P -o {','.join(SACCT_TEXT_FIELDS)}`)")
    width = len(header)
    free_text = [index[name] for name in _FREE_TEXT_COLUMNS if name in index]
    runs = []
    for line_no, line in lines[1:]:
        fields = line.split("|")
        if len(fields) == width + 1 and fields[-1] == "":
            fields = fields[:-1]
        if len(fields) > width and free_text == [index.get("jobname")]:
            # the '|' that sacct -P does not escape in a job name: its extra fields are the name's
            at, extra = free_text[0], len(fields) - width
            fields = fields[:at] + ["|".join(fields[at:at + extra + 1])] + fields[at + extra + 1:]
        if len(fields) != width:
            raise InputError(f"{where}:{line_no}: row has {len(fields)} field(s), the header has {width}")

        def get(name: str) -> str:
            i = index.get(name.lower())
            return fields[i].strip() if i is not None else ""

        job_id = fields[id_col].strip()
        if not job_id:
            raise InputError(f"{where}:{line_no}: field 'JobID' is empty")
        if "." in job_id:  # a step (123.batch, 123.0): -X was not used
            continue
        try:
            state_text = get("State")
            if not state_text:
                raise SlurmParseError("field 'State' is empty")
            state = state_text.split()[0].upper()  # "CANCELLED by 0"
            submit = scontrol_time(get("Submit"), "Submit")
            start = scontrol_time(get("Start"), "Start")
            end = scontrol_time(get("End"), "End")
            elapsed = parse_duration_s(get("Elapsed"), "Elapsed") or 0.0
            alloc = gres_counts(get("AllocTRES"), field_name="AllocTRES")
            req = gres_counts(get("ReqTRES"), field_name="ReqTRES")
            alloc_type = _text_gpu_type(get("AllocTRES"), "AllocTRES")
            req_type = _text_gpu_type(get("ReqTRES"), "ReqTRES")
            nodes = expand_hostlist(get("NodeList")) if "nodelist" in index else None
        except SlurmParseError as err:
            raise InputError(f"{where}:{line_no}: job {shorten(job_id)}: {err}") from None
        if submit is None:
            raise InputError(f"{where}:{line_no}: job {shorten(job_id)}: field 'Submit' value '{shorten(get('Submit'))}' "
                             "is not a time")
        # Allocation is judged by the node list, else by the allocated TRES, else
        # (neither column saved) by a start time.
        if nodes is not None:
            allocated = bool(nodes)
        elif "alloctres" in index:
            allocated = bool(get("AllocTRES"))
        else:
            allocated = start is not None
        counts = alloc if (allocated and alloc) else req
        if state == "PENDING":
            start = None
        if state not in _FINISHED_STATES and state != "REQUEUED":
            end = None
        gpu_type = _replayed_gpu_type(req_type, alloc_type)
        runs.append(SacctRun(job_id=job_id, user=get("User"), partition=get("Partition"), state=state,
                             submit_s=submit, start_s=start, end_s=end, elapsed_s=elapsed,
                             gpus=counts.get("gpu", 0), mps=counts.get("mps", 0), allocated=allocated,
                             gpu_type=gpu_type, job_name=get("JobName"),
                             node_list=_hostlist_text(get("NodeList")) if nodes else ""))
    return runs


def runs_from_output(text: str | bytes, where: str) -> list[SacctRun]:
    """JSON or -P text, told apart by the first non-blank character."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"{where}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    stripped = text.lstrip()
    if not stripped:
        return []
    if stripped[0] in "{[":
        return runs_from_sacct_json(text, where)
    if "|" not in stripped.splitlines()[0]:
        raise InputError(f"{where}: neither sacct JSON nor `sacct -P` text (first line "
                         f"{stripped.splitlines()[0][:60]!r} has no '|')")
    return runs_from_sacct_text(text, where)


# --------------------------------------------------------------------------- merging
def merge_runs(runs: Iterable[SacctRun]) -> list[AccountedJob]:
    """One AccountedJob per job id, in order of first submission.

    Runs are ordered by their submit time (a requeue re-submits): the first run's
    submit is the job's, the first start is the actual start, the last run's end
    and state are final, elapsed times add up, and requeues = runs - 1."""
    by_id: dict[str, list[SacctRun]] = {}
    for run in runs:
        by_id.setdefault(run.job_id, []).append(run)
    out = []
    for job_id, job_runs in by_id.items():
        job_runs.sort(key=lambda r: (r.submit_s or 0.0, r.start_s or 0.0))
        last = job_runs[-1]
        starts = [r.start_s for r in job_runs if r.start_s is not None and r.allocated]
        allocated_runs = [r for r in job_runs if r.allocated]
        sized = allocated_runs[-1] if allocated_runs else last
        timed = [r for r in allocated_runs if r.start_s is not None and r.end_s is not None]
        out.append(AccountedJob(
            job_id=job_id, user=next((r.user for r in reversed(job_runs) if r.user), ""),
            partition=(allocated_runs[-1].partition if allocated_runs else last.partition),
            state=last.state, submit_s=float(job_runs[0].submit_s),
            first_start_s=min(starts) if starts else None,
            last_end_s=last.end_s if last.state in _FINISHED_STATES else None,
            elapsed_s=float(sum(r.elapsed_s for r in job_runs)),
            gpus=max(sized.gpus, 0), mps=sized.mps, requeues=len(job_runs) - 1,
            allocated=bool(allocated_runs), gpu_type=sized.gpu_type,
            job_name=next((r.job_name for r in reversed(job_runs) if r.job_name), ""),
            node_list=allocated_runs[-1].node_list if allocated_runs else "",
            last_start_s=allocated_runs[-1].start_s if allocated_runs else None,
            run_s=(float(sum(max(r.end_s - r.start_s, 0.0) for r in timed))
                   if allocated_runs and len(timed) == len(allocated_runs) else None)))
    out.sort(key=lambda j: (j.submit_s, id_key(j.job_id)))
    return out


def id_key(job_id: str) -> tuple:
    return tuple((0, int(p), "") if p.isascii() and p.isdigit() else (1, 0, p)
                 for p in re.split(r"([0-9]{1,30})", job_id))


def build_export(runs: Sequence[SacctRun], *, source: str = "sacct",
                 users: Sequence[str] = (), partitions: Sequence[str] = (),
                 start_s: Optional[float] = None, end_s: Optional[float] = None) -> ExportResult:
    """Merge runs, apply the optional filters, and sort jobs into trace/excluded.

    ``start_s``/``end_s`` keep jobs that overlap the window (submitted before its
    end and not ended before its start), like ``sacct -S/-E``."""
    result = ExportResult(rows_read=len(runs), source=source)
    user_set, part_set = set(users), set(partitions)
    for job in merge_runs(runs):
        if user_set and job.user not in user_set:
            continue
        if part_set and not (set(job.partition.split(",")) & part_set):
            continue
        if end_s is not None and job.submit_s > end_s:
            continue
        if start_s is not None and job.last_end_s is not None and job.last_end_s < start_s:
            continue
        result.jobs_seen += 1
        if job.gpus <= 0:
            result.excluded["no_gpu"].append(job.job_id)
        elif not job.allocated and job.state == "CANCELLED":
            result.excluded["cancelled_pending"].append(job.job_id)
        elif not job.allocated or job.first_start_s is None:
            result.excluded["never_started"].append(job.job_id)
        elif job.last_end_s is None:
            result.excluded["unfinished"].append(job.job_id)
        elif not (job.first_start_s <= job.last_end_s and job.submit_s <= job.last_end_s):
            result.excluded["bad_times"].append(job.job_id)
        else:
            duration = job.elapsed_s if job.run_s is None else job.run_s
            if job.run_s is not None and abs(job.run_s - job.elapsed_s) > ELAPSED_TOLERANCE_S:
                result.elapsed_disagrees.append(job.job_id)
            result.jobs.append(JobSpec(job_id=job.job_id, num_gpus=job.gpus, submit_time_s=job.submit_s,
                                       duration_s=duration, partition=job.partition.split(",")[0] or "default",
                                       user=job.user, job_name=job.job_name, gpu_type=job.gpu_type))
            result.actuals[job.job_id] = {"actual_start_s": job.first_start_s, "actual_end_s": job.last_end_s,
                                          "requeues": job.requeues, "state": job.state,
                                          "node_list": job.node_list}
            if job.requeues:  # where its last run begins: the history's shape needs it (history_shape)
                result.actuals[job.job_id]["last_start_s"] = job.last_start_s
            if job.requeues:
                result.requeued_jobs += 1
    return result


# --------------------------------------------------------------------------- running sacct
_RELATIVE = re.compile(r"now(?:-([0-9]{1,9})(seconds?|minutes?|hours?|days?|weeks?)?)?", re.IGNORECASE | re.ASCII)
_UNIT_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


def parse_time_bound(text: str, field_name: str, now_s: Optional[float] = None) -> float:
    """A --start/--end value as epoch seconds (local time): ``YYYY-MM-DD[THH:MM[:SS]]``,
    epoch seconds, ``now`` or ``now-N[seconds|minutes|hours|days|weeks]`` (sacct's forms)."""
    value = text.strip()
    now = time.time() if now_s is None else now_s
    m = _RELATIVE.fullmatch(value)
    if m:
        if m.group(1) is None:
            return now
        unit = (m.group(2) or "seconds").lower().rstrip("s")
        return now - int(m.group(1)) * _UNIT_S[unit]
    if re.fullmatch(r"[0-9]{9,10}", value):
        return float(value)
    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        try:
            return time.mktime(time.strptime(value, fmt))
        except ValueError:
            continue
    raise InputError(f"{field_name} value '{shorten(text)}' is not a time (YYYY-MM-DD[THH:MM[:SS]], epoch seconds, "
                     f"now or now-Ndays)")


def _sacct_window_args(start: str, end: str, users: Sequence[str], partitions: Sequence[str],
                       all_users: bool = True, job_ids: Sequence[str] = ()) -> list[str]:
    if job_ids:  # these jobs whenever they were eligible: a window hides jobs never yet eligible
        return ["-X", "-D", "-j", ",".join(job_ids)]
    args = (["-a"] if all_users else []) + ["-X", "-D", "-S", start, "-E", end]
    if users:
        args += ["-u", ",".join(users)]
    if partitions:
        args += ["-r", ",".join(partitions)]
    return args


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def run_sacct(start: str, end: str, users: Sequence[str] = (), partitions: Sequence[str] = (),
              *, sacct: str = "sacct", timeout_s: float = SACCT_TIMEOUT_S,
              notes: Optional[list[str]] = None,
              progress: Optional[Callable[..., None]] = None, all_users: bool = True,
              job_ids: Sequence[str] = ()) -> tuple[list[SacctRun], str]:
    """Query sacct: ``--json`` first (needs slurmdbd), else ``-P`` text. Returns (runs, source).

    ``notes`` collects why the JSON path was not used (for the stderr summary).
    ``progress(bytes_read, None)``, when given, is called about twice a second while
    sacct runs (a month of a busy cluster is minutes and hundreds of MB). ``all_users``
    False: no ``-a`` and ``-P`` text only (22.05's ``--json`` ignores ``-u`` and answers
    with every job the caller may see): Slurm answers for this process's user.
    ``job_ids``: these jobs instead of the window (``-j``)."""
    if shutil.which(sacct) is None:
        raise InputError(f"{sacct}: command not found (use --from-file with a saved sacct output)")
    window = _sacct_window_args(start, end, users, partitions, all_users, job_ids)
    notes = notes if notes is not None else []

    def call(args: list[str]) -> subprocess.CompletedProcess:
        # Output goes to temporary files: their size is the progress, and no pipe can fill up.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen([sacct, *args], stdout=out, stderr=err)
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    proc.wait(timeout=min(0.5, max(deadline - time.monotonic(), 0.01)))
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        proc.kill()
                        proc.wait()
                        raise InputError(f"{sacct} did not answer within {timeout_s:g} s (is slurmdbd up?)") from None
                    if progress is not None:
                        progress(os.fstat(out.fileno()).st_size, None)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if progress is not None:
            progress(len(stdout), None)
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout.decode("utf-8", "replace"),
                                           stderr.decode("utf-8", "replace"))

    if all_users:
        proc = call(["--json", *window])
        if proc.returncode == 0:
            try:
                return runs_from_sacct_json(proc.stdout, "sacct --json"), "sacct --json"
            except InputError as err:
                notes.append(f"sacct --json output unusable ({err}); used `sacct -P`")
        else:
            notes.append(f"sacct --json failed ({_first_line(proc.stderr) or f'exit {proc.returncode}'}); "
                         f"used `sacct -P`")
    proc = call(["-P", "-o", ",".join(SACCT_TEXT_FIELDS), *window])
    if proc.returncode != 0:
        raise InputError(f"sacct -P failed (exit {proc.returncode}): "
                         f"{_first_line(proc.stderr) or 'no message'} (job accounting needs slurmdbd)")
    return runs_from_sacct_text(proc.stdout, "sacct -P"), "sacct -P"


def own_recent_job_ids(squeue: str = "squeue", timeout_s: float = 30.0) -> list[str]:
    """The caller's jobs slurmctld still holds (pending, running, and ended within
    MinJobAge), raw ids. sacct's answer lags: slurmdbd lists a job in a time window
    only once slurmctld has sent it its eligible time (seconds after submission,
    never for a held job), and a user asking for their jobs expects the one just
    submitted first. Empty when squeue fails (the windowed answer stands alone)."""
    try:
        proc = subprocess.run([squeue, "--me", "-h", "-t", "all", "-o", "%A"],
                              capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    return [word for word in proc.stdout.split() if word.isdigit()]

"""Job-trace readers and writer.

The formats share header detection, the number rules and the FILE:LINE error path,
which live in controller.replay.trace_rows (a trace file's rows); this module turns the
rows into JobSpecs, reads the actual runs and service samples, and writes traces.

``load_trace(path)`` reads every trace format found under ``shared/traces/``; the
format is detected from the header row (column names are matched case-insensitively,
surrounding blanks and a UTF-8 BOM are ignored, column order does not matter):

=============  =====================================================================  =========
format         columns used (others are ignored)                                      units
=============  =====================================================================  =========
project        job_id,num_gpus,submit_time_s,duration_s[,skew,user_priority,          seconds
               partition,user,model_name,gpu_type,account,job_name,time_limit_s]
               [,actual_start_s,actual_end_s,requeues,state,node_list]
muri-raw       job_id,num_gpu,submit_time,model_name,duration,priority                ms -> s
               (recognised by batch_size + iteration_time + priority)
tiresias       job_id,num_gpu,submit_time,iterations,model_name,duration,interval     seconds
itp            job_id,submission_time,duration,num_gpu (rows not sorted)              seconds
philly-pollux  timestamp,duration,num_gpus[,gpu_time],cluster                         datetime
=============  =====================================================================  =========

Conventions of the returned ``list[JobSpec]``:

- sorted by (submit time, data row order); submit times rebased so the first is 0,
  then multiplied by ``time_scale`` (durations too);
- ``job_id`` is the file's id when the format has one, else the 1-based data row
  number (as a string); a duplicate id is an error;
- ``skew`` comes from ``model_name`` (``skew_for_model``) unless the project format
  gives one; ``partition`` is Philly's virtual ``cluster``; Muri's ``priority``
  (0 or 1) becomes ``user_priority = priority + 1`` so that every weight stays
  positive (larger = more urgent, as in the model);
- a zero duration is legal; in the project format an empty ``duration_s`` means
  "unknown" (``None``).

Every error is an ``InputError`` with a one-line message ``FILE:LINE: ...`` naming the
field and the offending value.
"""
from __future__ import annotations

import csv
import dataclasses
import gc
import math
import os
from typing import Any, Iterable, Mapping, Optional

from controller.core.inputs import shorten
from controller.core.model import InputError, JobSpec, skew_for_model
from controller.replay.trace_rows import (FieldError, Table, field_failure, nonneg_float, nonneg_int, norm_header,
                                          parse_rows, text_field)

__all__ = [
    "load_trace",
    "load_actuals",
    "time_base_s",
    "load_service_samples",
    "load_service_distribution",
    "write_trace",
    "PROJECT_COLUMNS",
    "ACTUAL_COLUMNS",
]

PROJECT_COLUMNS = (
    "job_id", "num_gpus", "submit_time_s", "duration_s", "skew",
    "user_priority", "partition", "user", "model_name",
)
ACTUAL_COLUMNS = ("actual_start_s", "actual_end_s", "requeues", "state")
# the nodes a job last ran on (a Slurm hostlist) and when a requeued job's last run
# began, each written only when some job has one: what `trace export` and `simulate`
# read the history's cluster shape from
NODE_LIST_COLUMN = "node_list"
LAST_START_COLUMN = "last_start_s"
# what Slurm knows at submit besides the above (dgittins conditions on it): optional
# project columns, written only when some job has one
FEATURE_COLUMNS = ("account", "job_name", "time_limit_s")


def _check_time_scale(time_scale: float) -> float:
    try:
        ts = float(time_scale)
    except (TypeError, ValueError):
        raise InputError(f"time_scale value '{time_scale}' is not a positive number") from None
    if not (0.0 < ts < math.inf):
        raise InputError(f"time_scale value '{time_scale}' is not a positive number")
    return ts


def load_trace(path: str | os.PathLike[str], *, time_scale: float = 1.0) -> list[JobSpec]:
    """Read a job trace in any supported format (see the module docstring)."""
    ts = _check_time_scale(time_scale)
    # Hundreds of thousands of small containers are made here and none is cyclic:
    # pausing the cyclic GC roughly halves the load time of the large traces.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _load_trace(path, ts)
    finally:
        if was_enabled:
            gc.enable()


def _load_trace(path: str | os.PathLike[str], ts: float) -> list[JobSpec]:
    table = Table(path)
    parsed = parse_rows(table)
    if not parsed:
        return []
    base = min(p[0] for p in parsed)

    ids: list[str] = [p[1] for p in parsed]
    if ids and ids[0] is None:
        ids = [str(k + 1) for k in range(len(parsed))]
    if len(set(ids)) != len(ids):
        seen: dict[str, int] = {}
        for k, jid in enumerate(ids):
            first = seen.get(jid)
            if first is not None:
                raise table.fail(k, f"field 'job_id' value '{jid}' is a duplicate "
                                    f"(first on line {table.line_of(first)})")
            seen[jid] = k

    order = sorted(range(len(parsed)), key=lambda k: (parsed[k][0], k))
    features = _features(table, order, ts)
    skews = {m: skew_for_model(m) if m else 0.0 for m in {p[8] for p in parsed}}
    rows = [parsed[k] for k in order]
    ids = [ids[k] for k in order]
    if features is not None:
        # the gpu_type column applies here too: an exported trace has both
        return _with_kinds(table, [
            JobSpec(jid, g, (t - base) * ts, None if d is None else d * ts, skews[m] if sk is None else sk, pr,
                    pa, u, m, account=account, job_name=name, time_limit_s=limit)
            for jid, (t, _, g, d, sk, pr, pa, u, m), (account, name, limit) in zip(ids, rows, features)], order)
    if ts == 1.0:
        specs = [
            JobSpec(jid, g, t - base, d, skews[m] if sk is None else sk, pr, pa, u, m)
            for jid, (t, _, g, d, sk, pr, pa, u, m) in zip(ids, rows)
        ]
    else:
        specs = [
            JobSpec(jid, g, (t - base) * ts, None if d is None else d * ts,
                    skews[m] if sk is None else sk, pr, pa, u, m)
            for jid, (t, _, g, d, sk, pr, pa, u, m) in zip(ids, rows)
        ]
    return _with_kinds(table, specs, order)


def _with_kinds(table: Table, specs: list[JobSpec], order: list[int]) -> list[JobSpec]:
    """A project trace's jobs with its optional ``gpu_type`` column (empty: any type).
    The ``partition`` column (several as ``a,b``) is JobSpec.partition already; the
    simulator reads both when it has --node-kinds (else every node is every job's)."""
    i_ty = table.index.get("gpu_type")
    if table.format != "project" or i_ty is None:
        return specs
    out = []
    for k, spec in zip(order, specs):
        row = table.rows[k]
        raw = row[i_ty].strip() if i_ty < len(row) else ""
        try:
            gpu_type = text_field("gpu_type", raw) if raw else ""
        except FieldError as e:
            raise table.fail(k, f"field '{e.field}' value '{shorten(e.value)}' {e.what}") from None
        out.append(dataclasses.replace(spec, gpu_type=gpu_type) if gpu_type else spec)
    return out


def _features(table: Table, order: list[int], ts: float) -> Optional[list[tuple]]:
    """(account, job name, time limit s) per job in ``order``, from the project format's
    optional FEATURE_COLUMNS; None when the trace has none of them."""
    ix = table.index
    if table.format != "project" or not any(c in ix for c in FEATURE_COLUMNS):
        return None
    i_a, i_n, i_l = (ix.get(c) for c in FEATURE_COLUMNS)

    def field(row: list[str], i: Optional[int]) -> str:
        return row[i].strip() if i is not None and i < len(row) else ""

    def one(k: int) -> tuple:
        row = table.rows[k]
        try:
            account, name, limit = field(row, i_a), field(row, i_n), field(row, i_l)
            return (text_field("account", account) if account else "", text_field("job_name", name) if name else "",
                    nonneg_float("time_limit_s", limit) * ts if limit else None)
        except FieldError as e:
            raise field_failure(table, k, e) from None
    return [one(k) for k in order]


def load_actuals(path: str | os.PathLike[str], *, time_scale: float = 1.0) -> dict[str, dict[str, Any]]:
    """Per job id, what a Slurm-accounting export recorded about the real run.

    Only the project format carries these columns (``actual_start_s``,
    ``actual_end_s``, ``requeues``, ``state``, ``node_list``, ``last_start_s``; any subset;
    the last two are keys only when their column exists). Times are shifted and
    scaled exactly like ``load_trace`` shifts the submit times, so they compare
    directly with ``JobSpec.submit_time_s``; an empty time is ``None`` (never
    started / still running), empty ``requeues`` is 0, empty ``state`` is "".
    Returns ``{}`` for a file without any of these columns.
    """
    ts = _check_time_scale(time_scale)
    table = Table(path)
    if table.format != "project" or not any(c in table.index for c in ACTUAL_COLUMNS):
        return {}
    parsed = parse_rows(table)  # validates the whole row, finds the time base
    if not parsed:
        return {}
    base = min(p[0] for p in parsed)
    ix = table.index
    i_s, i_e, i_r, i_st = (ix.get(c) for c in ACTUAL_COLUMNS)
    i_nodes, i_last = ix.get(NODE_LIST_COLUMN), ix.get(LAST_START_COLUMN)
    out: dict[str, dict[str, Any]] = {}
    for k, row in enumerate(table.rows):
        jid = parsed[k][1]
        if jid in out:
            raise table.fail(k, f"field 'job_id' value '{jid}' is a duplicate")
        rec: dict[str, Any] = {}
        try:
            for name, i in (("actual_start_s", i_s), ("actual_end_s", i_e)):
                s = row[i].strip() if i is not None else ""
                rec[name] = (nonneg_float(name, s) - base) * ts if s else None
            s = row[i_r].strip() if i_r is not None else ""
            rec["requeues"] = nonneg_int("requeues", s) if s else 0
            rec["state"] = row[i_st].strip() if i_st is not None else ""
            if i_nodes is not None:  # no key for a trace without the column: nothing recorded
                nodes = row[i_nodes].strip() if i_nodes < len(row) else ""
                rec[NODE_LIST_COLUMN] = text_field(NODE_LIST_COLUMN, nodes) if nodes else ""
            if i_last is not None:
                s = row[i_last].strip() if i_last < len(row) else ""
                rec[LAST_START_COLUMN] = (nonneg_float(LAST_START_COLUMN, s) - base) * ts if s else None
        except FieldError as e:
            raise table.fail(k, f"field '{e.field}' value '{shorten(e.value)}' {e.what}") from None
        if rec["actual_start_s"] is not None and rec["actual_end_s"] is not None \
                and rec["actual_end_s"] < rec["actual_start_s"]:
            raise table.fail(k, f"field 'actual_end_s' value '{row[i_e].strip()}' is before actual_start_s")
        out[jid] = rec
    return out


def time_base_s(path: str | os.PathLike[str]) -> Optional[float]:
    """The first submit time as the file writes it: what ``load_trace`` and
    ``load_actuals`` subtract. For a ``trace export`` (absolute epoch seconds) it
    turns replayed times back into dates; None for an empty trace."""
    parsed = parse_rows(Table(path))
    return min(p[0] for p in parsed) if parsed else None


def load_service_samples(path: str | os.PathLike[str]) -> list[float]:
    """The one-column ``duration`` sample (GPU-seconds) such as yarn_gpu_time_1000.csv.

    It is a service-time distribution, not a job trace, so ``load_trace`` rejects it.
    """
    p = os.fspath(path)
    try:
        fh = open(p, newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise InputError(f"{p}: cannot read samples: {exc.strerror or exc}") from None
    out: list[float] = []
    with fh:
        reader = csv.reader(fh)
        header = None
        for row in reader:
            if not row or not "".join(row).strip():
                continue
            if header is None:
                header = norm_header(row)
                if "duration" not in header:
                    raise InputError(f"{p}:{reader.line_num}: header '{','.join(header)}' lacks column 'duration'")
                col = header.index("duration")
                continue
            try:
                out.append(nonneg_float("duration", row[col].strip() if col < len(row) else ""))
            except FieldError as e:
                raise InputError(f"{p}:{reader.line_num}: field '{e.field}' value '{shorten(e.value)}' {e.what}") from None
    if header is None:
        raise InputError(f"{p}:1: empty file, expected a header row")
    return out


# --------------------------------------------------------------------------- writing
def _fmt_num(v: Optional[float]) -> str:
    if v is None:
        return ""
    f = float(v)
    if not math.isfinite(f):
        raise InputError(f"value '{v}' is not a finite number")
    if f.is_integer() and abs(f) < 1e15:
        return str(int(f))
    return repr(f)


def write_trace(
    path: str | os.PathLike[str],
    jobs: Iterable[JobSpec],
    *,
    actuals: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> None:
    """Write jobs in the project format, in the given order, deterministically.

    Numbers are written in their shortest exact form (``120``, ``0.1``); ``None``
    durations as an empty field; ``\\n`` line endings. With ``actuals`` (job id ->
    ``actual_start_s``/``actual_end_s``/``requeues``/``state``) the four accounting
    columns are appended, and ``node_list``/``last_start_s`` when some job has one; ``gpu_type``
    when some job has one (the type it asked for or ran on).
    """
    jobs = list(jobs)
    featured = any(j.account or j.job_name or j.time_limit_s is not None for j in jobs)
    typed = any(j.gpu_type for j in jobs)
    with_nodes = actuals is not None and any((a or {}).get(NODE_LIST_COLUMN) for a in actuals.values())
    with_last = actuals is not None and any((a or {}).get(LAST_START_COLUMN) is not None for a in actuals.values())
    header = (list(PROJECT_COLUMNS) + (list(ACTUAL_COLUMNS) if actuals is not None else [])
              + ([NODE_LIST_COLUMN] if with_nodes else []) + ([LAST_START_COLUMN] if with_last else [])
              + (list(FEATURE_COLUMNS) if featured else []) + (["gpu_type"] if typed else []))
    p = os.fspath(path)
    with open(p, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for j in jobs:
            row = [
                j.job_id, str(int(j.num_gpus)), _fmt_num(j.submit_time_s), _fmt_num(j.duration_s),
                _fmt_num(j.skew), str(int(j.user_priority)), j.partition, j.user, j.model_name,
            ]
            if actuals is not None:
                a = actuals.get(j.job_id, {})
                req = a.get("requeues")
                row += [
                    _fmt_num(a.get("actual_start_s")), _fmt_num(a.get("actual_end_s")),
                    "" if req is None else str(int(req)), a.get("state", "") or "",
                ]
                if with_nodes:
                    row.append(a.get(NODE_LIST_COLUMN, "") or "")
                if with_last:
                    row.append(_fmt_num(a.get(LAST_START_COLUMN)))
            if featured:
                row += [j.account, j.job_name, _fmt_num(j.time_limit_s)]
            if typed:
                row.append(j.gpu_type)
            w.writerow(row)


def load_service_distribution(path: str | os.PathLike[str]):
    """A Gittins service distribution from a one-column sample file."""
    from controller.core.gittins import ServiceDistribution

    values = load_service_samples(path)
    if not values:
        raise InputError(f"{path}: no service samples")
    return ServiceDistribution(values)

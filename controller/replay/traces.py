"""Job-trace readers and writer.

One module on purpose (over 600 lines): the five formats share header detection,
the number rules and the FILE:LINE error path; split per format they would repeat them.

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
import re
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Optional

from controller.core.inputs import MAX_JOB_GPUS, MAX_SECONDS, BadValue, is_ascii_int, parse_float, parse_int, shorten
from controller.core.model import InputError, JobSpec, skew_for_model

__all__ = [
    "FORMATS",
    "detect_format",
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

# name -> (required columns, signature columns that must also be present).
# Checked in this order: the Muri raw header is a superset of the Tiresias one.
FORMATS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "project": (("job_id", "num_gpus", "submit_time_s", "duration_s"), ()),
    "muri-raw": (("job_id", "num_gpu", "submit_time", "model_name", "duration", "priority"),
                 ("batch_size", "iteration_time")),
    "tiresias": (("job_id", "num_gpu", "submit_time", "model_name", "duration"),
                 ("iterations", "interval")),
    "itp": (("job_id", "submission_time", "duration", "num_gpu"), ()),
    "philly-pollux": (("timestamp", "duration", "num_gpus", "cluster"), ()),
}

_FORMAT_HELP = (
    "project (job_id,num_gpus,submit_time_s,duration_s,...), "
    "tiresias (job_id,num_gpu,submit_time,iterations,model_name,duration,interval), "
    "itp (job_id,submission_time,duration,num_gpu), "
    "philly-pollux (timestamp,duration,num_gpus,gpu_time,cluster), "
    "muri-raw (job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,"
    "interval,iteration_time,resource_time_0..2,priority; milliseconds)"
)

_EPOCH = datetime(1970, 1, 1)


# --------------------------------------------------------------------------- fields
class _FieldError(Exception):
    def __init__(self, field: str, value: str, what: str):
        super().__init__(field, value, what)
        self.field, self.value, self.what = field, value, what


def _positive_int(field: str, s: str, hi: int = MAX_JOB_GPUS) -> int:
    """1..hi in ASCII digits; ``8.0`` is taken as 8 (some exports write integers so)."""
    if not s:
        raise _FieldError(field, s, "is empty")
    what = f"is not a positive integer (1..{hi})"
    if is_ascii_int(s):
        v = int(s)
    else:
        try:
            f = parse_float(s, 0.0, float(hi))
        except BadValue:
            raise _FieldError(field, s, what) from None
        if not f.is_integer():
            raise _FieldError(field, s, what)
        v = int(f)
    if not 1 <= v <= hi:
        raise _FieldError(field, s, what)
    return v


def _nonneg_int(field: str, s: str, hi: int = 1_000_000) -> int:
    try:
        return parse_int(s, 0, hi, what=f"is not a non-negative integer (0..{hi})")
    except BadValue as e:
        raise _FieldError(field, s, e.what) from None


def _nonneg_float(field: str, s: str, hi: float = MAX_SECONDS) -> float:
    try:
        return parse_float(s, 0.0, hi, what=f"is not a non-negative number (0..{hi:g})")
    except BadValue as e:
        raise _FieldError(field, s, e.what) from None


def _finite_float(field: str, s: str) -> float:
    try:
        return parse_float(s, -MAX_SECONDS, MAX_SECONDS, what="is not a number")
    except BadValue as e:
        raise _FieldError(field, s, e.what) from None


def _datetime_s(field: str, s: str) -> float:
    """Seconds since 1970-01-01 (naive times are taken as UTC); ASCII digits only."""
    if not s:
        raise _FieldError(field, s, "is empty")
    what = "is not a datetime (YYYY-MM-DD HH:MM:SS)"
    if not s.isascii() or len(s) > 40 or "_" in s:
        raise _FieldError(field, s, what)
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise _FieldError(field, s, what) from None
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return (dt - _EPOCH).total_seconds()


MAX_TEXT_CHARS = 256  # a job id, partition, user or model name


def _text(field: str, s: str) -> str:
    if s == "":
        raise _FieldError(field, s, "is empty")
    if len(s) > MAX_TEXT_CHARS or not s.isprintable():
        raise _FieldError(field, s, f"is not printable text of at most {MAX_TEXT_CHARS} characters")
    return s


# --------------------------------------------------------------------------- reading
def _norm_header(row: list[str]) -> list[str]:
    return [c.strip().lstrip("\ufeff").strip().lower() for c in row]


def detect_format(header: Iterable[str], *, where: str = "trace") -> str:
    """Name of the trace format whose columns the header holds (see ``FORMATS``)."""
    cols = set(header)
    for name, (required, signature) in FORMATS.items():
        if cols.issuperset(required) and cols.issuperset(signature):
            return name
    # Near miss: name the format the header resembles and the columns it lacks.
    best, best_score = None, 0.0
    for name, (required, signature) in FORMATS.items():
        need = set(required) | set(signature)
        score = len(cols & need) / len(need)
        if score > best_score:
            best, best_score = name, score
    shown = ",".join(header)
    if best is not None and best_score >= 0.5:
        required, signature = FORMATS[best]
        missing = [c for c in (*required, *signature) if c not in cols]
        raise InputError(
            f"{where}: header '{shown}' looks like the {best} format but lacks column(s) "
            f"{', '.join(repr(m) for m in missing)}"
        )
    raise InputError(f"{where}: unknown trace header '{shown}'; known formats: {_FORMAT_HELP}")


class _Table:
    """A CSV file read once: normalized header, detected format, non-blank data rows.

    Line numbers are only needed for error messages, so they are found lazily by
    reading the file a second time (``line_of``).
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        self.name = self.path
        self._lines: Optional[list[int]] = None
        try:
            fh = open(self.path, newline="", encoding="utf-8-sig")
        except OSError as exc:
            raise InputError(f"{self.name}: cannot read trace: {exc.strerror or exc}") from None
        with fh:
            reader = csv.reader(fh)
            try:
                rows = [r for r in reader if r and (len(r) > 1 or r[0].strip())]
            except csv.Error as exc:
                raise InputError(f"{self.name}:{reader.line_num}: malformed CSV: {exc}") from None
            except UnicodeDecodeError:
                raise InputError(f"{self.name}: not a UTF-8 text file") from None
        if not rows:
            raise InputError(f"{self.name}:1: empty file, expected a header row; known formats: {_FORMAT_HELP}")
        header = _norm_header(rows[0])
        self.header = header
        try:
            self.format = detect_format(header, where=f"{self.name}:1")
        except InputError:
            self.format = detect_format(header, where=f"{self.name}:{self.line_of(-1)}")
        self.index: dict[str, int] = {}
        for i, c in enumerate(header):
            self.index.setdefault(c, i)
        self.rows = rows[1:]
        self.width = len(header)

    def line_of(self, k: int) -> int:
        """Physical line number of data row ``k`` (0-based; -1 is the header)."""
        if self._lines is None:
            lines = []
            with open(self.path, newline="", encoding="utf-8-sig") as fh:
                reader = csv.reader(fh)
                for r in reader:
                    if r and (len(r) > 1 or r[0].strip()):
                        lines.append(reader.line_num)
            self._lines = lines
        return self._lines[k + 1]

    def fail(self, k: int, msg: str) -> InputError:
        return InputError(f"{self.name}:{self.line_of(k)}: {msg}")

    def check_width(self, row: list[str], k: int) -> None:
        n = len(row)
        if n == self.width:
            return
        if n > self.width and not any(c.strip() for c in row[self.width:]):
            return
        raise self.fail(k, f"row has {n} fields, the header has {self.width}")


def _convert(table: _Table, convert: Callable[[list[str]], tuple]) -> list[tuple]:
    """Row-by-row conversion: the reference path, and the one that names bad rows."""
    out = []
    width = table.width
    for k, row in enumerate(table.rows):
        if len(row) != width:
            table.check_width(row, k)  # raises unless only empty extra fields
        try:
            out.append(convert(row))
        except _FieldError as e:
            raise _field_failure(table, k, e) from None
    return out


def _field_failure(table: _Table, k: int, e: _FieldError) -> InputError:
    return table.fail(k, f"field '{e.field}' value '{shorten(e.value)}' {e.what}")


_INF = math.inf


# Whole-column spellings the fast path accepts (ASCII digits, bounded length); any
# other column goes through the row path, which accepts or names the bad value.
_INT_COLUMN = re.compile(r"(?:[0-9]{1,7}\n)*[0-9]{1,7}", re.ASCII)
_REAL = r"[0-9]{1,20}(?:\.[0-9]{0,20})?(?:[eE][+-]?[0-9]{1,3})?"
_REAL_COLUMN = re.compile(rf"(?:{_REAL}\n)*{_REAL}", re.ASCII)


def _bulk_floats(col: tuple[str, ...], scale: float = 1.0) -> Optional[list[float]]:
    if _REAL_COLUMN.fullmatch("\n".join(col)) is None:
        return None
    vals = list(map(float, col))
    if scale != 1.0:
        vals = [v * scale for v in vals]
    if vals and max(vals) > MAX_SECONDS:
        return None
    return vals


def _bulk_ints(col: tuple[str, ...], hi: int = MAX_JOB_GPUS) -> Optional[list[int]]:
    if _INT_COLUMN.fullmatch("\n".join(col)) is None:
        return None
    vals = list(map(int, col))
    if vals and (min(vals) <= 0 or max(vals) > hi):
        return None
    return vals


def _bulk_texts(col: tuple[str, ...]) -> Optional[list[str]]:
    vals = list(map(str.strip, col))
    if "" in vals or max(map(len, vals), default=0) > MAX_TEXT_CHARS or not "".join(vals).isprintable():
        return None
    return vals


def _bulk_parse(table: _Table) -> Optional[list[tuple]]:
    """Column-at-a-time conversion of the common, clean case (C-speed ``map``).

    Returns ``None`` whenever anything is unusual (a bad value, ragged rows, a
    timezone, an integer written as ``8.0``...): the caller then runs the row path,
    which accepts or names the offending row.
    """
    fmt = table.format
    if fmt == "project" or not table.rows:
        return None
    width = table.width
    rows = table.rows
    for r in rows:
        if len(r) != width:
            return None
    cols = list(zip(*rows))
    ix = table.index
    n = len(rows)
    try:
        if fmt in ("tiresias", "muri-raw"):
            scale = 1e-3 if fmt == "muri-raw" else 1.0
            t = _bulk_floats(cols[ix["submit_time"]], scale)
            ids = _bulk_texts(cols[ix["job_id"]])
            g = _bulk_ints(cols[ix["num_gpu"]])
            d = _bulk_floats(cols[ix["duration"]], scale)
            models = list(map(str.strip, cols[ix["model_name"]]))
            if fmt == "muri-raw":
                if _INT_COLUMN.fullmatch("\n".join(cols[ix["priority"]])) is None:
                    return None
                pr = list(map(int, cols[ix["priority"]]))
                if pr and max(pr) > 1_000_000:
                    return None
                prio = [p + 1 for p in pr]
            else:
                prio = [1] * n
            parts = ["default"] * n
        elif fmt == "itp":
            t = _bulk_floats(cols[ix["submission_time"]])
            ids = _bulk_texts(cols[ix["job_id"]])
            g = _bulk_ints(cols[ix["num_gpu"]])
            d = _bulk_floats(cols[ix["duration"]])
            models, prio, parts = [""] * n, [1] * n, ["default"] * n
        elif fmt == "philly-pollux":
            raw = list(map(str.strip, cols[ix["timestamp"]]))
            joined = "".join(raw)
            if not joined.isascii() or "_" in joined or max(map(len, raw)) > 40:
                return None
            stamps = list(map(datetime.fromisoformat, raw))
            for x in stamps:
                if x.tzinfo is not None:
                    return None
            epoch = _EPOCH
            t = [(x - epoch).total_seconds() for x in stamps]
            ids = [None] * n
            g = _bulk_ints(cols[ix["num_gpus"]])
            d = _bulk_floats(cols[ix["duration"]])
            parts = _bulk_texts(cols[ix["cluster"]])
            models, prio = [""] * n, [1] * n
        else:  # pragma: no cover
            return None
    except (ValueError, TypeError, OverflowError):
        return None
    if t is None or ids is None or g is None or d is None or parts is None:
        return None
    none = [None] * n
    users = [""] * n
    return list(zip(t, ids, g, d, none, prio, parts, users, models))


def _parse_rows(table: _Table) -> list[tuple]:
    """(submit_raw, job_id|None, num_gpus, duration|None, skew|None, user_priority,
    partition, user, model_name) per data row, in file order, times in seconds."""
    fmt = table.format
    ix = table.index
    strip = str.strip

    if fmt in ("tiresias", "muri-raw"):
        i_id, i_g, i_t, i_d, i_m = (ix["job_id"], ix["num_gpu"], ix["submit_time"],
                                    ix["duration"], ix["model_name"])
        i_p = ix.get("priority") if fmt == "muri-raw" else None
        scale = 1e-3 if fmt == "muri-raw" else 1.0

        def conv(r):
            model = strip(r[i_m])
            prio = 1
            if i_p is not None:
                prio = _nonneg_int("priority", strip(r[i_p])) + 1
            return (
                _nonneg_float("submit_time", strip(r[i_t]), MAX_SECONDS / scale) * scale,
                _text("job_id", strip(r[i_id])),
                _positive_int("num_gpu", strip(r[i_g])),
                _nonneg_float("duration", strip(r[i_d]), MAX_SECONDS / scale) * scale,
                None, prio, "default", "", model,
            )
    elif fmt == "itp":
        i_id, i_g, i_t, i_d = ix["job_id"], ix["num_gpu"], ix["submission_time"], ix["duration"]

        def conv(r):
            return (
                _nonneg_float("submission_time", strip(r[i_t])),
                _text("job_id", strip(r[i_id])),
                _positive_int("num_gpu", strip(r[i_g])),
                _nonneg_float("duration", strip(r[i_d])),
                None, 1, "default", "", "",
            )
    elif fmt == "philly-pollux":
        i_ts, i_g, i_d, i_c = ix["timestamp"], ix["num_gpus"], ix["duration"], ix["cluster"]

        def conv(r):
            return (
                _datetime_s("timestamp", strip(r[i_ts])),
                None,
                _positive_int("num_gpus", strip(r[i_g])),
                _nonneg_float("duration", strip(r[i_d])),
                None, 1, _text("cluster", strip(r[i_c])), "", "",
            )
    elif fmt == "project":
        i_id, i_g, i_t, i_d = ix["job_id"], ix["num_gpus"], ix["submit_time_s"], ix["duration_s"]
        i_sk, i_up, i_pa, i_us, i_m = (ix.get("skew"), ix.get("user_priority"), ix.get("partition"),
                                       ix.get("user"), ix.get("model_name"))

        def conv(r):
            d = strip(r[i_d])
            skew = None
            if i_sk is not None:
                s = strip(r[i_sk])
                if s:
                    skew = _finite_float("skew", s)
                    if not 0.0 <= skew <= 1.0:
                        raise _FieldError("skew", s, "is not a number in [0, 1]")
            prio = 1
            if i_up is not None:
                s = strip(r[i_up])
                if s:
                    prio = _nonneg_int("user_priority", s)
            part = strip(r[i_pa]) if i_pa is not None else ""
            return (
                _nonneg_float("submit_time_s", strip(r[i_t])),
                _text("job_id", strip(r[i_id])),
                _positive_int("num_gpus", strip(r[i_g])),
                _nonneg_float("duration_s", d) if d else None,
                skew, prio, part or "default",
                strip(r[i_us]) if i_us is not None else "",
                strip(r[i_m]) if i_m is not None else "",
            )
    else:  # pragma: no cover - detect_format only returns known names
        raise InputError(f"{table.name}: unsupported format {fmt}")

    fast = _bulk_parse(table)
    if fast is not None:
        return fast
    return _convert(table, conv)


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
    table = _Table(path)
    parsed = _parse_rows(table)
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


def _with_kinds(table: _Table, specs: list[JobSpec], order: list[int]) -> list[JobSpec]:
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
            gpu_type = _text("gpu_type", raw) if raw else ""
        except _FieldError as e:
            raise table.fail(k, f"field '{e.field}' value '{shorten(e.value)}' {e.what}") from None
        out.append(dataclasses.replace(spec, gpu_type=gpu_type) if gpu_type else spec)
    return out


def _features(table: _Table, order: list[int], ts: float) -> Optional[list[tuple]]:
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
            return (_text("account", account) if account else "", _text("job_name", name) if name else "",
                    _nonneg_float("time_limit_s", limit) * ts if limit else None)
        except _FieldError as e:
            raise _field_failure(table, k, e) from None
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
    table = _Table(path)
    if table.format != "project" or not any(c in table.index for c in ACTUAL_COLUMNS):
        return {}
    parsed = _parse_rows(table)  # validates the whole row, finds the time base
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
                rec[name] = (_nonneg_float(name, s) - base) * ts if s else None
            s = row[i_r].strip() if i_r is not None else ""
            rec["requeues"] = _nonneg_int("requeues", s) if s else 0
            rec["state"] = row[i_st].strip() if i_st is not None else ""
            if i_nodes is not None:  # no key for a trace without the column: nothing recorded
                nodes = row[i_nodes].strip() if i_nodes < len(row) else ""
                rec[NODE_LIST_COLUMN] = _text(NODE_LIST_COLUMN, nodes) if nodes else ""
            if i_last is not None:
                s = row[i_last].strip() if i_last < len(row) else ""
                rec[LAST_START_COLUMN] = (_nonneg_float(LAST_START_COLUMN, s) - base) * ts if s else None
        except _FieldError as e:
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
    parsed = _parse_rows(_Table(path))
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
                header = _norm_header(row)
                if "duration" not in header:
                    raise InputError(f"{p}:{reader.line_num}: header '{','.join(header)}' lacks column 'duration'")
                col = header.index("duration")
                continue
            try:
                out.append(_nonneg_float("duration", row[col].strip() if col < len(row) else ""))
            except _FieldError as e:
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

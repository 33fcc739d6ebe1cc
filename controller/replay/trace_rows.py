"""A trace file's rows: the formats' headers and their detection, the CSV table read
once (``FILE:LINE`` for every error), the field rules (the project's number rules,
controller.core.inputs) and the two parsers of the data rows, column-at-a-time for
the clean common case and row by row for the rest, which names a bad value.
controller.replay.traces turns the rows into JobSpecs (and writes traces)."""
from __future__ import annotations

import csv
import math
import os
import re
from datetime import datetime, timezone
from typing import Callable, Iterable, Optional

from controller.core.inputs import MAX_JOB_GPUS, MAX_SECONDS, BadValue, is_ascii_int, parse_float, parse_int, shorten
from controller.core.model import InputError

__all__ = ["FORMATS", "detect_format", "Table", "parse_rows", "bulk_parse"]

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
class FieldError(Exception):
    def __init__(self, field: str, value: str, what: str):
        super().__init__(field, value, what)
        self.field, self.value, self.what = field, value, what


def _positive_int(field: str, s: str, hi: int = MAX_JOB_GPUS) -> int:
    """1..hi in ASCII digits; ``8.0`` is taken as 8 (some exports write integers so)."""
    if not s:
        raise FieldError(field, s, "is empty")
    what = f"is not a positive integer (1..{hi})"
    if is_ascii_int(s):
        v = int(s)
    else:
        try:
            f = parse_float(s, 0.0, float(hi))
        except BadValue:
            raise FieldError(field, s, what) from None
        if not f.is_integer():
            raise FieldError(field, s, what)
        v = int(f)
    if not 1 <= v <= hi:
        raise FieldError(field, s, what)
    return v


def nonneg_int(field: str, s: str, hi: int = 1_000_000) -> int:
    try:
        return parse_int(s, 0, hi, what=f"is not a non-negative integer (0..{hi})")
    except BadValue as e:
        raise FieldError(field, s, e.what) from None


def nonneg_float(field: str, s: str, hi: float = MAX_SECONDS) -> float:
    try:
        return parse_float(s, 0.0, hi, what=f"is not a non-negative number (0..{hi:g})")
    except BadValue as e:
        raise FieldError(field, s, e.what) from None


def _finite_float(field: str, s: str) -> float:
    try:
        return parse_float(s, -MAX_SECONDS, MAX_SECONDS, what="is not a number")
    except BadValue as e:
        raise FieldError(field, s, e.what) from None


def _datetime_s(field: str, s: str) -> float:
    """Seconds since 1970-01-01 (naive times are taken as UTC); ASCII digits only."""
    if not s:
        raise FieldError(field, s, "is empty")
    what = "is not a datetime (YYYY-MM-DD HH:MM:SS)"
    if not s.isascii() or len(s) > 40 or "_" in s:
        raise FieldError(field, s, what)
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise FieldError(field, s, what) from None
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return (dt - _EPOCH).total_seconds()


MAX_TEXT_CHARS = 256  # a job id, partition, user or model name


def text_field(field: str, s: str) -> str:
    if s == "":
        raise FieldError(field, s, "is empty")
    if len(s) > MAX_TEXT_CHARS or not s.isprintable():
        raise FieldError(field, s, f"is not printable text of at most {MAX_TEXT_CHARS} characters")
    return s


# --------------------------------------------------------------------------- reading
def norm_header(row: list[str]) -> list[str]:
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


class Table:
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
        header = norm_header(rows[0])
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


def _convert(table: Table, convert: Callable[[list[str]], tuple]) -> list[tuple]:
    """Row-by-row conversion: the reference path, and the one that names bad rows."""
    out = []
    width = table.width
    for k, row in enumerate(table.rows):
        if len(row) != width:
            table.check_width(row, k)  # raises unless only empty extra fields
        try:
            out.append(convert(row))
        except FieldError as e:
            raise field_failure(table, k, e) from None
    return out


def field_failure(table: Table, k: int, e: FieldError) -> InputError:
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


def bulk_parse(table: Table) -> Optional[list[tuple]]:
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


def parse_rows(table: Table) -> list[tuple]:
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
                prio = nonneg_int("priority", strip(r[i_p])) + 1
            return (
                nonneg_float("submit_time", strip(r[i_t]), MAX_SECONDS / scale) * scale,
                text_field("job_id", strip(r[i_id])),
                _positive_int("num_gpu", strip(r[i_g])),
                nonneg_float("duration", strip(r[i_d]), MAX_SECONDS / scale) * scale,
                None, prio, "default", "", model,
            )
    elif fmt == "itp":
        i_id, i_g, i_t, i_d = ix["job_id"], ix["num_gpu"], ix["submission_time"], ix["duration"]

        def conv(r):
            return (
                nonneg_float("submission_time", strip(r[i_t])),
                text_field("job_id", strip(r[i_id])),
                _positive_int("num_gpu", strip(r[i_g])),
                nonneg_float("duration", strip(r[i_d])),
                None, 1, "default", "", "",
            )
    elif fmt == "philly-pollux":
        i_ts, i_g, i_d, i_c = ix["timestamp"], ix["num_gpus"], ix["duration"], ix["cluster"]

        def conv(r):
            return (
                _datetime_s("timestamp", strip(r[i_ts])),
                None,
                _positive_int("num_gpus", strip(r[i_g])),
                nonneg_float("duration", strip(r[i_d])),
                None, 1, text_field("cluster", strip(r[i_c])), "", "",
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
                        raise FieldError("skew", s, "is not a number in [0, 1]")
            prio = 1
            if i_up is not None:
                s = strip(r[i_up])
                if s:
                    prio = nonneg_int("user_priority", s)
            part = strip(r[i_pa]) if i_pa is not None else ""
            return (
                nonneg_float("submit_time_s", strip(r[i_t])),
                text_field("job_id", strip(r[i_id])),
                _positive_int("num_gpus", strip(r[i_g])),
                nonneg_float("duration_s", d) if d else None,
                skew, prio, part or "default",
                strip(r[i_us]) if i_us is not None else "",
                strip(r[i_m]) if i_m is not None else "",
            )
    else:  # pragma: no cover - detect_format only returns known names
        raise InputError(f"{table.name}: unsupported format {fmt}")

    fast = bulk_parse(table)
    if fast is not None:
        return fast
    return _convert(table, conv)

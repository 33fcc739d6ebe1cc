"""One rule for input: the number and text checks every reader of outside data uses.

Traces, the YAML config, priority expressions, CLI flags, Slurm's squeue/sacct
records, job comments (skew/class hints) and the node hooks' environment all turn
text into numbers here, so they all agree on what a number is:

- ASCII only: ``[0-9]``, an optional sign, for reals a ``.`` and an ``e`` exponent.
  Python's ``int()``/``float()`` also take ``1_0``, full-width ``１`` or
  Arabic-Indic ``٣`` digits and surrounding blanks; ``str.isdigit`` takes ``²``.
  None of these is a number a user meant to write, so each is rejected.
- Length first: a number longer than ``MAX_NUMBER_CHARS`` characters is rejected
  before it is converted (a 5,000-digit integer costs quadratic time to convert).
- Explicit bounds on every value: the caller names them (constants below for the
  common ones), and a value outside them is an error, never clamped.
- Errors are ``InputError`` with one line: ``[WHERE: ]LABEL value 'VALUE' WHAT``,
  the value shortened to ``SHOWN_CHARS`` and with control characters escaped.

Pure: stdlib only, no I/O.
"""
from __future__ import annotations

import math
import re
from typing import Optional

from controller.core.model import InputError

__all__ = [
    "BadValue", "shorten", "parse_int", "parse_float", "check_int", "check_float", "check_text",
    "is_ascii_int", "MAX_NUMBER_CHARS", "SHOWN_CHARS", "MAX_SECONDS", "MAX_JOB_GPUS", "MAX_NODES",
    "MAX_GPUS_PER_NODE", "MAX_COLUMN_WIDTH",
]

MAX_NUMBER_CHARS = 64  # longest accepted number text (a float repr needs at most ~24)
SHOWN_CHARS = 60  # longest value shown in an error message

# Common bounds (inclusive). Anything beyond them is a typo or an attack, not a workload.
MAX_SECONDS = 1e10  # ~317 years: any duration, elapsed time or relative time
MAX_EPOCH_S = 4e9  # year 2096: absolute Unix times
MAX_JOB_GPUS = 1_000_000  # GPUs one job may ask for
MAX_NODES = 100_000  # nodes of a simulated cluster
MAX_GPUS_PER_NODE = 1024
MAX_COLUMN_WIDTH = 1000  # a report column (acct -o Field%N)

_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_REAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_INF_WORDS = ("inf", "+inf", "infinity", "+infinity")


def shorten(value: object, limit: int = SHOWN_CHARS) -> str:
    """``value`` as one printable line of at most about ``limit`` characters."""
    text = value if isinstance(value, str) else _safe_str(value)
    head = text[:limit + 1]
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in head[:limit])
    if len(text) > limit:
        shown += f"...({len(text)} chars)"
    return shown


def _safe_str(value: object) -> str:
    # Only for values already parsed by a trusted reader (YAML, JSON): containers
    # are described by type and size, never rendered (an alias bomb renders forever).
    if isinstance(value, (list, tuple, dict, set)):
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<integer of {value.bit_length()} bits>"
    try:
        return str(value)
    except Exception:  # a hostile __str__: describe it instead
        return f"<{type(value).__name__}>"


class BadValue(InputError):
    """A rejected value: ``label``, the value (shortened in the message) and why.

    Readers that know more context (a file and line) catch it and call ``at``.
    """

    def __init__(self, label: str, value: object, what: str):
        self.label, self.value, self.what = label, value, what
        self.shown = shorten(value)
        super().__init__(f"{label + ' ' if label else ''}value '{self.shown}' {what}")

    def at(self, where: str) -> InputError:
        return InputError(f"{where}: {self}")


def is_ascii_int(text: str) -> bool:
    """True for ``[+-]?[0-9]+`` of bounded length (the only integer spelling accepted)."""
    return isinstance(text, str) and len(text) <= MAX_NUMBER_CHARS and _INT.fullmatch(text) is not None


def parse_int(text: str, lo: int, hi: int, label: str = "", *, what: Optional[str] = None) -> int:
    """An integer in ``lo..hi`` written in ASCII digits (``what`` replaces the default reason)."""
    reason = what or f"is not an integer in {lo}..{hi}"
    if not is_ascii_int(text):
        raise BadValue(label, text, "is empty" if text == "" else reason)
    value = int(text)
    if not lo <= value <= hi:
        raise BadValue(label, text, reason)
    return value


def parse_float(text: str, lo: float, hi: float, label: str = "", *, allow_inf: bool = False,
                lo_open: bool = False, what: Optional[str] = None) -> float:
    """A finite real in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``) in ASCII notation;
    ``inf`` too when ``allow_inf``. ``nan`` never."""
    low = "(" if lo_open else "["
    reason = what or f"is not a number in {low}{lo:g}, {hi:g}]" + (" or inf" if allow_inf else "")
    if not isinstance(text, str) or len(text) > MAX_NUMBER_CHARS:
        raise BadValue(label, text, reason)
    if allow_inf and text.lower() in _INF_WORDS:
        return math.inf
    if _REAL.fullmatch(text) is None:
        raise BadValue(label, text, "is empty" if text == "" else reason)
    value = float(text)
    if not (math.isfinite(value) and (lo < value if lo_open else lo <= value) and value <= hi):
        raise BadValue(label, text, reason)
    return value


def check_int(value: object, lo: int, hi: int, label: str = "") -> int:
    """An already-parsed value (YAML, JSON) that must be an int (not a bool) in ``lo..hi``."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadValue(label, value, f"is not an integer in {lo}..{hi}")
    return value


def check_float(value: object, lo: float, hi: float, label: str = "", *, allow_inf: bool = False,
                lo_open: bool = False) -> float:
    """An already-parsed number (int or float, not bool) in ``[lo, hi]``; ``inf`` when allowed."""
    low = "(" if lo_open else "["
    reason = f"is not a number in {low}{lo:g}, {hi:g}]" + (" or inf" if allow_inf else "")
    if isinstance(value, str) and allow_inf and value.strip().lower() in _INF_WORDS + (".inf",):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadValue(label, value, reason)
    if isinstance(value, int) and value.bit_length() > 1000:
        raise BadValue(label, value, reason)  # float() of it would overflow
    v = float(value)
    if allow_inf and v == math.inf:
        return v
    if not (math.isfinite(v) and (lo < v if lo_open else lo <= v) and v <= hi):
        raise BadValue(label, value, reason)
    return v


def check_text(value: object, label: str = "", *, max_chars: int = 4096, empty_ok: bool = True) -> str:
    """A string without control characters, at most ``max_chars`` long."""
    if not isinstance(value, str):
        raise BadValue(label, value, "is not text")
    if len(value) > max_chars:
        raise BadValue(label, value, f"is longer than {max_chars} characters")
    if not value and not empty_ok:
        raise BadValue(label, value, "is empty")
    if any(not c.isprintable() for c in value):
        raise BadValue(label, value, "holds control characters")
    return value

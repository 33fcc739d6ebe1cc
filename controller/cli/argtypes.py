"""argparse value types: each rejects a bad value with a message naming it.

Numbers go through controller.core.inputs (ASCII digits only, explicit bounds); an
argparse type error makes the command exit with code 2 and one line on stderr.
Every flag has an upper bound: ``--nodes 100000000`` or ``--tournament 1000000000``
would otherwise allocate gigabytes before doing anything useful.
"""
from __future__ import annotations

import argparse
import math
import re
import time

from controller.core.engine import check_thresholds
from controller.core.inputs import (MAX_GPUS_PER_NODE, MAX_NODES, MAX_SECONDS, BadValue, parse_float, parse_int,
                                    shorten)
from controller.core.model import InputError

DEFAULT_MAX_INT = 1_000_000  # a count nobody needs more of on a command line
DEFAULT_MAX_FLOAT = 1e9


def int_in(lo: int, hi: int):
    """An argparse type: an integer in lo..hi."""
    what = f"must be a positive integer (at most {hi})" if lo == 1 else f"must be an integer in {lo}..{hi}"

    def parse(text: str) -> int:
        try:
            return parse_int(text.strip(), lo, hi, what=what)
        except BadValue:
            raise argparse.ArgumentTypeError(f"value '{shorten(text)}' {what}") from None

    parse.__name__ = f"integer {lo}..{hi}"  # what argparse names in "invalid <type> value"
    return parse


def float_in(lo: float, hi: float, *, lo_open: bool = False, allow_inf: bool = False, what: str = ""):
    """An argparse type: a finite number in [lo, hi] ((lo, hi] with lo_open; inf when allowed)."""
    what = what or (f"must be a number in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
                    + (" or inf" if allow_inf else ""))

    def parse(text: str) -> float:
        try:
            return parse_float(text.strip(), lo, hi, lo_open=lo_open, allow_inf=allow_inf, what=what)
        except BadValue:
            raise argparse.ArgumentTypeError(f"value '{shorten(text)}' {what}") from None

    parse.__name__ = "number"
    return parse


positive_int = int_in(1, DEFAULT_MAX_INT)
non_negative_int = int_in(0, DEFAULT_MAX_INT)
seed = int_in(0, 2**32 - 1)
port = int_in(0, 65535)
nodes = int_in(1, MAX_NODES)
gpus_per_node = int_in(1, MAX_GPUS_PER_NODE)
positive_float = float_in(0.0, DEFAULT_MAX_FLOAT, lo_open=True, what="must be a positive finite number (at most 1e9)")
non_negative_float = float_in(0.0, DEFAULT_MAX_FLOAT, what="must be a finite number >= 0 (at most 1e9)")
seconds = float_in(0.0, MAX_SECONDS, lo_open=True, what=f"must be a positive number of seconds (at most {MAX_SECONDS:g})")
non_negative_seconds = float_in(0.0, MAX_SECONDS,
                                what=f"must be a number of seconds >= 0 (at most {MAX_SECONDS:g})")
# A re-plan period under a second is no finer model of a cluster whose trace times are
# whole seconds, and --quantum-s 1e-9 would replan 10^14 times (no end in sight).
quantum_seconds = float_in(1.0, MAX_SECONDS,
                           what=f"must be a number of seconds in 1..{MAX_SECONDS:g} (finer re-planning models nothing)")
unit_float = float_in(0.0, 1.0, what="must be within 0..1")
knob = float_in(0.0, DEFAULT_MAX_FLOAT, lo_open=True, allow_inf=True, what="must be > 0 (or inf)")
knob.__doc__ = "PROMOTEKNOB: a positive number, or inf to disable promotion."

MAX_THRESHOLDS = 64


def thresholds(text: str) -> tuple[float, ...]:
    """Comma-separated increasing MLFQ thresholds in GPU-seconds."""
    parts = text.split(",")
    if len(parts) > MAX_THRESHOLDS:
        raise argparse.ArgumentTypeError(f"value '{shorten(text)}' has more than {MAX_THRESHOLDS} thresholds")
    try:
        values = tuple(parse_float(part.strip(), -math.inf, math.inf, allow_inf=True) for part in parts)
    except BadValue:
        raise argparse.ArgumentTypeError(f"value '{shorten(text)}' is not a comma-separated list of numbers") from None
    try:
        check_thresholds(values)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return values


def slurm_release(text: str) -> tuple[int, int]:
    """A Slurm release as MAJOR.MINOR (22.05, 26.05; a patch level is ignored)."""
    found = re.fullmatch(r"([0-9]{2})\.([0-9]{2})(?:\.[0-9]{1,3})?", text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(f"value '{shorten(text)}' is not a Slurm release like 22.05 or 26.05.3")
    return int(found.group(1)), int(found.group(2))


def objective_weights(text: str) -> tuple[float, float, float]:
    """w1,w2,w3 of the multi-partition objective (C_avg, C_max, 1 - C_util), each >= 0."""
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"value '{shorten(text)}' is not three comma-separated weights w1,w2,w3")
    weights = tuple(non_negative_float(p) for p in parts)
    if not any(weights):  # an objective of 0 scores every allocation alike: nothing is learned or compared
        raise argparse.ArgumentTypeError(f"value '{shorten(text)}': at least one weight must be > 0")
    return weights


# -- sacct's date forms (-S/--starttime, -E/--endtime) ----------------------------------

SACCT_TIME_FORMS = ("YYYY-MM-DD[THH:MM[:SS]], MMDD[YY][-HH:MM[:SS]], MM/DD[/YY][-HH:MM[:SS]], "
                    "MM.DD[.YY][-HH:MM[:SS]], HH:MM[:SS] (today), now[{+|-}N[seconds|minutes|hours|days|weeks]], "
                    "today, midnight, noon, elevenses, fika, teatime, tomorrow, epoch seconds")
_TIME_UNIT_S = {"": 1, "second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
_NOW_FORM = re.compile(r"now(?:([+-])([0-9]{1,9})([a-z]*))?", re.ASCII)
# sacct's named times of day (Slurm's parse_time): hour, minute
_NAMED_TIMES = {"midnight": (0, 0), "today": (0, 0), "noon": (12, 0), "elevenses": (11, 0), "fika": (15, 0),
                "teatime": (16, 0)}
_CLOCK = r"([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?"
_ISO_FORM = re.compile(rf"([0-9]{{4}})-([0-9]{{2}})-([0-9]{{2}})(?:t{_CLOCK})?", re.ASCII)  # the value is lower-cased
_MONTH_DAY_FORMS = tuple(re.compile(rf"([0-9]{{2}}){sep}([0-9]{{2}})(?:{sep}([0-9]{{2}}))?(?:-{_CLOCK})?", re.ASCII)
                         for sep in ("", "/", r"\."))
_CLOCK_FORM = re.compile(_CLOCK, re.ASCII)


def sacct_time(text: str, option: str, now_s: float | None = None) -> float:
    """A -S/-E value in one of sacct's date forms (``SACCT_TIME_FORMS``), as epoch
    seconds. Dates and times are this process's local time, as sacct reads them;
    a date without a year is in this year and a time of day alone is today's (no
    roll-over to yesterday or last year). ``now_s`` fixes "now" (tests). Anything
    else raises InputError naming ``option`` and the value (sacct's AM/PM suffixes
    and its other spellings are not accepted rather than guessed)."""
    value = text.strip().lower()
    now = time.time() if now_s is None else now_s
    today = time.localtime(now)

    def local(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
        # mktime normalizes 02-30 to March: check the fields survived it
        if not (1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59 and second <= 59):
            raise ValueError
        stamp = time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
        back = time.localtime(stamp)
        if (back.tm_year, back.tm_mon, back.tm_mday) != (year, month, day):
            raise ValueError
        return stamp

    def clock(groups: tuple) -> tuple[int, int, int]:
        hour, minute, second = groups
        return (int(hour), int(minute), int(second or 0)) if hour is not None else (0, 0, 0)

    try:
        m = _NOW_FORM.fullmatch(value)
        if m:
            if m.group(1) is None:
                return now
            unit = m.group(3)
            unit = unit[:-1] if unit.endswith("s") else unit
            if unit not in _TIME_UNIT_S:
                raise ValueError
            offset = int(m.group(2)) * _TIME_UNIT_S[unit]
            return now - offset if m.group(1) == "-" else now + offset
        if value in _NAMED_TIMES:
            return local(today.tm_year, today.tm_mon, today.tm_mday, *_NAMED_TIMES[value])
        if value == "tomorrow":
            return local(today.tm_year, today.tm_mon, today.tm_mday) + 86400
        if re.fullmatch(r"[0-9]{9,10}(?:\.[0-9]{1,9})?", value, re.ASCII):
            return float(value)
        m = _ISO_FORM.fullmatch(value)
        if m:
            return local(int(m.group(1)), int(m.group(2)), int(m.group(3)), *clock(m.groups()[3:]))
        for form in _MONTH_DAY_FORMS:
            m = form.fullmatch(value)
            if m:
                year = 2000 + int(m.group(3)) if m.group(3) else today.tm_year
                return local(year, int(m.group(1)), int(m.group(2)), *clock(m.groups()[3:]))
        m = _CLOCK_FORM.fullmatch(value)
        if m:
            return local(today.tm_year, today.tm_mon, today.tm_mday, *clock(m.groups()))
    except (ValueError, OverflowError):
        pass
    raise InputError(f"{option} value '{shorten(text)}' is not a time sacct takes here ({SACCT_TIME_FORMS})")

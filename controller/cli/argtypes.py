"""argparse value types: each rejects a bad value with a message naming it.

Numbers go through controller.core.inputs (ASCII digits only, explicit bounds); an
argparse type error makes the command exit with code 2 and one line on stderr.
Every flag has an upper bound: ``--nodes 100000000`` or ``--tournament 1000000000``
would otherwise allocate gigabytes before doing anything useful.
"""
from __future__ import annotations

import argparse
import math

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


def objective_weights(text: str) -> tuple[float, float, float]:
    """w1,w2,w3 of the multi-partition objective (C_avg, C_max, 1 - C_util), each >= 0."""
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"value '{shorten(text)}' is not three comma-separated weights w1,w2,w3")
    weights = tuple(non_negative_float(p) for p in parts)
    if not any(weights):  # an objective of 0 scores every allocation alike: nothing is learned or compared
        raise argparse.ArgumentTypeError(f"value '{shorten(text)}': at least one weight must be > 0")
    return weights

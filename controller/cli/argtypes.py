"""argparse value types: each rejects a bad value with a message naming it."""
from __future__ import annotations

import argparse
import math

from controller.core.engine import check_thresholds
from controller.core.model import InputError


def _number(text: str, kind=float) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"value {text!r} is not {'an integer' if kind is int else 'a number'}")
    if kind is float and math.isnan(value):
        raise argparse.ArgumentTypeError(f"value {text!r} is not a number")
    return value


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"value {text!r} must be a positive integer")
    return value


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"value {text!r} must be >= 0")
    return value


def positive_float(text: str) -> float:
    value = _number(text)
    if not (0 < value < math.inf):
        raise argparse.ArgumentTypeError(f"value {text!r} must be a positive finite number")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text)
    if not (0 <= value < math.inf):
        raise argparse.ArgumentTypeError(f"value {text!r} must be a finite number >= 0")
    return value


def unit_float(text: str) -> float:
    value = _number(text)
    if not (0 <= value <= 1):
        raise argparse.ArgumentTypeError(f"value {text!r} must be within 0..1")
    return value


def knob(text: str) -> float:
    """PROMOTEKNOB: a positive number, or inf to disable promotion."""
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"value {text!r} must be > 0 (or inf)")
    return value


def thresholds(text: str) -> tuple[float, ...]:
    """Comma-separated increasing MLFQ thresholds in GPU-seconds."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"value {text!r} is not a comma-separated list of numbers")
    try:
        check_thresholds(values)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err))
    return values


def objective_weights(text: str) -> tuple[float, float, float]:
    """w1,w2,w3 of the multi-partition objective (C_avg, C_max, 1 - C_util), each >= 0."""
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"value {text!r} is not three comma-separated weights w1,w2,w3")
    return tuple(non_negative_float(p) for p in parts)

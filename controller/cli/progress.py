"""Progress of long commands on stderr: a tqdm bar (rate, ETA) on a terminal, a plain
line every TIRESIAS_PROGRESS_INTERVAL_S seconds (default 30) when stderr is a file or a
pipe (batch logs), nothing with --quiet or --json.

Long-running functions (learner, tuner, simulator, sacct export) never import this:
they take a plain callback ``progress(done, total)`` (``total`` None when unknown) and
the command passes a ``Progress`` object as that callback. stdout stays the result.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Optional, TextIO

INTERVAL_ENV = "TIRESIAS_PROGRESS_INTERVAL_S"
DEFAULT_INTERVAL_S = 30.0
BAR_DELAY_S = 1.0  # a bar appears only once a run has lasted this long (short runs stay clean)


def interval_s() -> float:
    """Seconds between plain lines (and at most the bar's delay and redraw period); from
    the environment. 0: report every update (tests, debugging)."""
    text = os.environ.get(INTERVAL_ENV, "")
    try:
        value = float(text) if text else DEFAULT_INTERVAL_S
    except ValueError:
        value = DEFAULT_INTERVAL_S
    return value if value >= 0 else DEFAULT_INTERVAL_S


def choose_mode(args, stream: TextIO) -> str:
    """'off' with --quiet/--json/--no-progress, 'bar' on a terminal, else 'lines'."""
    if any(getattr(args, name, False) for name in ("quiet", "json", "no_progress")):
        return "off"
    return "bar" if stream.isatty() else "lines"


def _terminal_columns(stream: TextIO) -> int:
    """Columns of the terminal behind ``stream``; 0 when it reports none (a fresh pty,
    a serial console), where tqdm would draw nothing at all."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """The callback ``progress(done, total=None, note="")`` plus ``close()``.

    ``done`` and ``total`` are in ``unit`` (jobs, expressions, replays, ...); ``note``
    is a short status shown after the bar or line (e.g. the best score so far)."""

    def __init__(self, label: str, unit: str, mode: str, stream: Optional[TextIO] = None,
                 total: Optional[float] = None, byte_units: bool = False):
        if mode not in ("off", "bar", "lines"):
            raise ValueError(f"progress mode {mode!r}")
        self.label, self.unit, self.mode, self.byte_units = label, unit, mode, byte_units
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.done = 0.0
        self.note = ""
        self.interval_s = interval_s()
        self.started = time.monotonic()
        self.last_line = self.started
        self.lines_written = 0
        self._bar = None
        if mode == "bar":
            from tqdm import tqdm  # only the CLI imports tqdm

            width = _terminal_columns(self.stream)
            self._bar = tqdm(total=total, desc=label, unit=unit, file=self.stream, leave=False,
                             delay=min(BAR_DELAY_S, self.interval_s), mininterval=min(0.1, self.interval_s),
                             miniters=1 if self.interval_s == 0 else None,  # 0: every update, whatever the load
                             dynamic_ncols=width > 0, ncols=width or 80,
                             nrows=None if width else 24,
                             unit_scale=byte_units, unit_divisor=1024 if byte_units else 1000)

    def __call__(self, done: float, total: Optional[float] = None, note: str = "") -> None:
        if self.mode == "off":
            return
        if total is not None:
            self.total = total
        self.done, self.note = done, note or self.note
        if self._bar is not None:
            if total is not None and self._bar.total != total:
                self._bar.total = total
            delta = done - self._bar.n
            if note and note != self._bar.postfix:
                self._bar.set_postfix_str(note, refresh=not delta)  # a new note alone is news too
            if delta:
                self._bar.update(delta)
            return
        now = time.monotonic()
        if now - self.last_line >= self.interval_s:
            self.last_line = now
            self._line(now)

    def _line(self, now: float, final: bool = False) -> None:
        elapsed = now - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        scale, unit = (2 ** 20, "MiB") if self.byte_units else (1, self.unit)
        digits = ",.1f" if self.byte_units else ",.0f"
        count = f"{self.done / scale:{digits}}" + (f"/{self.total / scale:{digits}}" if self.total else "")
        parts = [f"{self.label}: {count} {unit}"]
        if self.total:
            parts.append(f"{100 * min(self.done / self.total, 1.0):.0f}%")
        parts.append(f"{rate / scale:,.1f} {unit}/s")
        if final:
            parts.append(f"done in {_duration(elapsed)}")
        elif self.total and rate > 0:
            parts.append(f"ETA {_duration(max(self.total - self.done, 0) / rate)}")
        else:
            parts.append(f"elapsed {_duration(elapsed)}")
        if self.note:
            parts.append(self.note)
        self.stream.write(", ".join(parts) + "\n")
        self.stream.flush()
        self.lines_written += 1

    def close(self) -> None:
        """End the report: the bar is erased; after periodic lines, one closing line."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.mode == "lines" and self.lines_written:
            self._line(time.monotonic(), final=True)
        self.mode = "off"

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_for(args, label: str, unit: str, total: Optional[float] = None,
                 stream: Optional[TextIO] = None, byte_units: bool = False) -> Progress:
    """The Progress a command should use given its parsed arguments."""
    stream = stream if stream is not None else sys.stderr
    return Progress(label, unit, choose_mode(args, stream), stream=stream, total=total, byte_units=byte_units)

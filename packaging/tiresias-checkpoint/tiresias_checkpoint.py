"""Checkpoint helper for preemptible Slurm jobs under Tiresias (one file, stdlib only).

It travels on its own: ``pip install PATH/packaging/tiresias-checkpoint`` (the folder, or
the wheel ``make helper-wheel`` builds from it; no package index carries it),
the copy the admin lays out with ``tiresias install-files`` in
``/usr/local/share/tiresias/`` (``PYTHONPATH=/usr/local/share/tiresias``), or this file
copied next to the training script. The controller's package re-exports it as
``controller.checkpoint``, so ``from controller import checkpoint`` keeps working.

The controller preempts a job by sending it the checkpoint signal (default SIGUSR1),
waiting a grace period (default 30 s, the site's ``preempt_grace_s``) and then requeueing it. A job that uses this
module checkpoints at the next safe point and exits::

    import tiresias_checkpoint as checkpoint
    checkpoint.install()                      # SIGUSR1, or $TIRESIAS_CHECKPOINT_SIGNAL
    for step in range(start, steps):
        train_one_step()
        if checkpoint.requested():
            checkpoint.save_atomically("ckpt.bin", state_bytes())
            checkpoint.exit_for_requeue()     # exit code 85 (see REQUEUE_EXIT_CODE)

``save_atomically`` writes a temp file in the same directory, fsyncs it, renames it
over the target and fsyncs the directory, so a kill at any moment leaves either the
old or the new checkpoint, never a torn one. It then writes the checkpoint marker the
node epilog detects (``checkpoint_seen`` in the usage record): ``$TIRESIAS_CHECKPOINT_MARKER``
(exported by the TaskProlog), else ``$SLURM_SUBMIT_DIR/.tiresias-checkpoint-$SLURM_JOB_ID``.

The bash helper (``checkpoint.sh``, ``tiresias_checkpoint_trap``) is a separate file;
``python3 -m tiresias_checkpoint --shell-helper`` prints the path of the copy this
interpreter can see (exit 1 and one line on stderr when there is none), so a batch
script sources it with ``source "$(python3 -m tiresias_checkpoint --shell-helper)"``.
"""
from __future__ import annotations

import json
import os
import signal
import site
import sys
import sysconfig
import tempfile
import threading
import time
from typing import Callable, List, Optional

DEFAULT_SIGNAL = "USR1"
SIGNAL_ENV = "TIRESIAS_CHECKPOINT_SIGNAL"
# "1": TERM asks for a checkpoint too. scancel and Slurm's time limit send TERM, then KILL
# KillWait seconds later (30 s by default); the controller itself never sends TERM.
ON_TERM_ENV = "TIRESIAS_CHECKPOINT_ON_TERM"
MARKER_ENV = "TIRESIAS_CHECKPOINT_MARKER"
# Exit code after a checkpoint on request. Sites can add RequeueExit=85 to slurm.conf
# so that Slurm itself requeues a job that exits with it before the controller does.
REQUEUE_EXIT_CODE = int(os.environ.get("TIRESIAS_REQUEUE_EXIT", "85") or 85)
SHELL_HELPER_NAME = "checkpoint.sh"
# Where `tiresias install-files /` puts the bash helper (docs/admin.md).
INSTALLED_SHELL_HELPER = "/usr/local/share/tiresias/checkpoint.sh"

_requested = threading.Event()


def signal_number(name: Optional[str] = None) -> int:
    """``"USR1"``, ``"SIGUSR1"`` or ``"10"`` -> the signal number; ValueError otherwise."""
    text = (name or os.environ.get(SIGNAL_ENV) or DEFAULT_SIGNAL).strip().upper()
    if text.isascii() and text.isdigit():
        return signal.Signals(int(text)).value
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return signal.Signals[text].value
    except KeyError:
        raise ValueError(f"checkpoint signal {name!r} is not a signal name") from None


def on_term_wanted() -> bool:
    """Whether ``$TIRESIAS_CHECKPOINT_ON_TERM`` asks for a checkpoint on TERM too."""
    return os.environ.get(ON_TERM_ENV, "").strip().lower() in ("1", "yes", "true", "on")


def install(name: Optional[str] = None, on_signal: Optional[Callable[[int], None]] = None,
            on_term: Optional[bool] = None) -> int:
    """Catch the checkpoint signal: ``requested()`` turns True (and ``on_signal(signum)``
    runs, if given; keep it short, it runs in the signal handler). ``on_term`` (default:
    ``$TIRESIAS_CHECKPOINT_ON_TERM``): TERM does the same, so that a job that is
    cancelled or reaches its time limit saves before Slurm's KILL. Main thread only."""
    signum = signal_number(name)

    def handler(received, _frame):
        _requested.set()
        if on_signal is not None:
            on_signal(received)

    signal.signal(signum, handler)
    if on_term_wanted() if on_term is None else on_term:
        signal.signal(signal.SIGTERM, handler)
    return signum


def requested() -> bool:
    """True once the checkpoint signal arrived."""
    return _requested.is_set()


def clear() -> None:
    """Forget a request (e.g. after a checkpoint when the job keeps running)."""
    _requested.clear()


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes) -> None:
    """temp file in the same directory + fsync + rename + fsync of the directory."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def marker_path() -> Optional[str]:
    """Where this job's checkpoint marker goes, None outside a Slurm job."""
    explicit = os.environ.get(MARKER_ENV)
    if explicit:
        return explicit
    job_id, submit_dir = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_SUBMIT_DIR")
    if job_id and job_id.isascii() and job_id.isdigit() and submit_dir:
        return os.path.join(submit_dir, f".tiresias-checkpoint-{job_id}")
    return None


def write_marker(checkpoint_path: str = "") -> Optional[str]:
    """Record that a checkpoint was completed (the epilog reports it); returns the
    marker path or None when there is nowhere to write it. Never raises OSError."""
    path = marker_path()
    if path is None:
        return None
    body = json.dumps({"checkpoint": os.path.abspath(checkpoint_path) if checkpoint_path else "",
                       "time_s": round(time.time(), 3), "job_id": os.environ.get("SLURM_JOB_ID", "")})
    try:
        write_atomic(path, (body + "\n").encode())
    except OSError as exc:
        print(f"tiresias checkpoint: cannot write marker {path}: {exc}", file=sys.stderr)
        return None
    return path


def save_atomically(path: str, data: bytes) -> None:
    """Write a checkpoint atomically and durably, then the epilog's marker."""
    write_atomic(path, data)
    write_marker(path)


def exit_for_requeue(code: Optional[int] = None) -> None:
    """Leave after a requested checkpoint with the requeue-friendly exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(REQUEUE_EXIT_CODE if code is None else code)


def shell_helper_candidates() -> List[str]:
    """Where the bash helper may be, most specific first: next to this file (both
    copied into one folder, or install-files' share folder), a checkout's ``prolog/``,
    the data folder of this interpreter's install (``pip install packaging/tiresias-checkpoint``
    puts it in ``<prefix>/share/tiresias/``), the user's (``pip install --user``), and
    the system paths install-files and distribution packages use."""
    here = os.path.dirname(os.path.abspath(__file__))
    data_dirs = [sysconfig.get_path("data"), sys.prefix, site.getuserbase(), "/usr/local", "/usr"]
    found = [os.path.join(here, SHELL_HELPER_NAME), os.path.join(here, "prolog", SHELL_HELPER_NAME)]
    for data_dir in data_dirs:
        path = os.path.join(data_dir, "share", "tiresias", SHELL_HELPER_NAME)
        if path not in found:
            found.append(path)
    return found


def shell_helper_path() -> Optional[str]:
    """The first bash helper of ``shell_helper_candidates()`` that is a file, else None."""
    return next((path for path in shell_helper_candidates() if os.path.isfile(path)), None)


def main(argv: Optional[List[str]] = None) -> int:
    """``python3 -m tiresias_checkpoint --shell-helper``: print the bash helper's path."""
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m tiresias_checkpoint",
                                     description="Tiresias checkpoint helper (import it in training jobs).")
    parser.add_argument("--shell-helper", action="store_true",
                        help=f"print the path of the bash helper ({SHELL_HELPER_NAME}) for `source`")
    args = parser.parse_args(argv)
    if not args.shell_helper:
        parser.print_help()
        return 0
    path = shell_helper_path()
    if path is None:
        print(f"tiresias_checkpoint: no {SHELL_HELPER_NAME} found (looked in "
              f"{', '.join(shell_helper_candidates())}); pip install the tiresias-checkpoint folder or wheel, "
              f"or ask the admin for `tiresias install-files /`", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

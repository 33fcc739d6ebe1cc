"""Checks of an output path (--out) made before a command does its work.

A replay or a learning run can take minutes; finding only at the end that --out is
an existing file, or lies under one, or on a file system that refuses writes, loses
that work and used to end in a traceback. These checks write nothing: a folder that
does not exist yet is created only when the results are written.
"""
from __future__ import annotations

import os
from pathlib import Path

from controller.core.inputs import shorten
from controller.core.model import InputError


def _nearest_existing(path: Path) -> Path:
    """The path itself or its closest ancestor that exists (at worst the root)."""
    path = Path(os.path.abspath(path))
    while not os.path.lexists(path) and path.parent != path:
        path = path.parent
    return path


def _read_only_mount(path: Path) -> bool:
    """True on a read-only mount, where even root's writes fail (os.access says yes)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _refuse(flag: str, path: Path | str, why: str) -> InputError:
    return InputError(f"{flag} '{shorten(str(path))}': {why}")


def check_output_dir(path: str | Path, flag: str = "--out") -> Path:
    """``path`` as a folder this process can create or write into, else an InputError
    naming the flag and the path. Nothing is created."""
    path = Path(path)
    if os.path.lexists(path):
        if not path.is_dir():
            raise _refuse(flag, path, "exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK) or _read_only_mount(path):
            raise _refuse(flag, path, "the directory is not writable")
        return path
    ancestor = _nearest_existing(path)
    if not ancestor.is_dir():
        raise _refuse(flag, path, f"cannot create it: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK) or _read_only_mount(ancestor):
        raise _refuse(flag, path, f"cannot create it: {ancestor} is not writable")
    return path


def check_output_file(path: str | Path, flag: str = "--out") -> Path:
    """``path`` as a file this process can create or overwrite, else an InputError
    naming the flag and the path. Nothing is written."""
    path = Path(path)
    if path.is_dir():
        raise _refuse(flag, path, "is a directory, not a file")
    if os.path.lexists(path):
        if not os.access(path, os.W_OK) or _read_only_mount(path):
            raise _refuse(flag, path, "the file is not writable")
        return path
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise _refuse(flag, path, f"folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or _read_only_mount(parent):
        raise _refuse(flag, path, f"folder {parent} is not writable")
    return path


def write_error(flag: str, path: str | Path, err: OSError) -> InputError:
    """An OSError met while writing the results, as one line naming the flag and path
    (what the checks above cannot foresee: /proc, a full disk, a read-only mount)."""
    return _refuse(flag, path, f"cannot write: {err.strerror or err}")

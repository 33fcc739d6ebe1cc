"""Lay out every file an admin installs under DEST, from the installed package.

DEST is usually `/`; a staging folder (a package build root, a configuration-management
checkout) works the same. The layout, each file's mode in parentheses:

  etc/slurm/job_submit.lua                  JobSubmitPlugins=lua (slurmctld host)
  etc/slurm/cli_filter.lua                  CliFilterPlugins=cli_filter/lua (submit hosts)
  etc/slurm/tiresias-policy.conf            the site's policy both lua files read (kept)
  etc/slurm/tiresias/prolog        (0755)   Prolog=
  etc/slurm/tiresias/task_prolog   (0755)   TaskProlog=
  etc/slurm/tiresias/epilog        (0755)   Epilog=
  etc/tiresias/tiresias.yaml                the controller's settings
  etc/systemd/system/tiresias.service       the controller's unit
  usr/lib/sysusers.d/tiresias.conf          its system user
  usr/local/share/tiresias/slurm.conf.fragment   lines to merge into slurm.conf
  usr/local/share/tiresias/checkpoint.sh         the bash checkpoint helper for jobs
  usr/local/share/tiresias/tiresias_checkpoint.py  the Python one (PYTHONPATH)

A file already there with the same bytes is left alone; one that differs (an admin's
edit, an older release) stops the command before anything is written, with one line
naming it, unless --force, which first keeps the old file as FILE.bak (FILE.bak.1, .2,
... when that exists: an earlier backup is never overwritten). A file marked (kept) holds
the site's own settings: it is laid out only where none is, and one already there is
never compared or replaced, --force included. Other files are 0644. Owners are not set: run it as root
for `/`.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

from controller.checkpoint import INSTALLED_SHELL_HELPER
from controller.core.model import InputError

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # controller/
SHARE = os.path.dirname(INSTALLED_SHELL_HELPER).lstrip("/")


class Shipped(NamedTuple):
    source: str  # path in the checkout
    target: str  # path under DEST
    mode: int
    kept: bool = False  # the site's settings: installed only where none is


LAYOUT = (
    Shipped("slurm_plugin/job_submit.lua", "etc/slurm/job_submit.lua", 0o644),
    Shipped("slurm_plugin/cli_filter.lua", "etc/slurm/cli_filter.lua", 0o644),
    Shipped("slurm_plugin/tiresias-policy.conf", "etc/slurm/tiresias-policy.conf", 0o644, kept=True),
    Shipped("prolog/tiresias_prolog.py", "etc/slurm/tiresias/prolog", 0o755),
    Shipped("prolog/task_prolog.py", "etc/slurm/tiresias/task_prolog", 0o755),
    Shipped("epilog/tiresias_epilog.py", "etc/slurm/tiresias/epilog", 0o755),
    Shipped("packaging/tiresias.yaml", "etc/tiresias/tiresias.yaml", 0o644),
    Shipped("packaging/tiresias.service", "etc/systemd/system/tiresias.service", 0o644),
    Shipped("packaging/tiresias.sysusers", "usr/lib/sysusers.d/tiresias.conf", 0o644),
    Shipped("slurm_plugin/slurm.conf.fragment", f"{SHARE}/slurm.conf.fragment", 0o644),
    Shipped("prolog/checkpoint.sh", INSTALLED_SHELL_HELPER.lstrip("/"), 0o644),
    Shipped("tiresias_checkpoint.py", f"{SHARE}/tiresias_checkpoint.py", 0o644),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", metavar="DEST", help="root to lay the files out under (/ for this host)")
    p.add_argument("--force", action="store_true",
                   help="overwrite files that differ from the shipped ones, keeping each as FILE.bak first")
    p.add_argument("--list", action="store_true", help="print where each file goes and write nothing")


def shipped_path(source: str) -> Path:
    """Where the package holds a file: a wheel keeps prolog/, epilog/ and packaging/
    under controller/shipped/ (a top-level `packaging` would shadow PyPA's module), and
    slurm_plugin/ and tiresias_checkpoint.py next to controller/, as a checkout does."""
    for candidate in (PACKAGE_DIR / "shipped" / source, PACKAGE_DIR.parent / source):
        if candidate.is_file():
            return candidate
    raise InputError(f"shipped file {source} is missing from this installation ({PACKAGE_DIR.parent})")


def _write(path: Path, data: bytes, mode: int) -> None:
    """Temp file in the target's folder, then rename: a reader (slurmctld, slurmd
    starting a prolog) sees the old file or the new one, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)  # mkstemp makes 0600; the hooks must not be group-writable
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args) -> int:
    dest = Path(args.dest)
    if args.list:
        for item in LAYOUT:
            print(f"{item.source} -> {dest / item.target} ({item.mode:04o}{', kept' if item.kept else ''})")
        return 0
    if dest.exists() and not dest.is_dir():
        raise InputError(f"DEST {args.dest!r} is not a directory")
    plan = []
    for item in LAYOUT:
        data = shipped_path(item.source).read_bytes()
        target = dest / item.target
        if target.is_dir():
            raise InputError(f"{target} is a directory, where {item.source} goes")
        current = target.read_bytes() if target.is_file() else None
        if current is not None and item.kept:
            current = data = None  # the site's settings, whatever they are: left as they are
        if current is not None and current != data and not args.force:
            # checked for every file before writing any: a refusal leaves DEST as it was
            raise InputError(f"{target} differs from the shipped {item.source} (changed there?); "
                             f"--force overwrites it")
        plan.append((item, target, data, current))
    for item, target, data, current in plan:
        if data is None:
            print(f"kept {target} (the site's settings; the shipped one is {shipped_path(item.source)})")
            continue
        if current == data:
            if (target.stat().st_mode & 0o7777) != item.mode:
                os.chmod(target, item.mode)
            print(f"unchanged {target}")
            continue
        if current is not None:
            backup = _free_backup_name(target)
            _write(backup, current, target.stat().st_mode & 0o7777)
            _write(target, data, item.mode)
            print(f"replaced {target} (the old one kept as {backup})")
        else:
            _write(target, data, item.mode)
            print(f"installed {target}")
    return 0


def _free_backup_name(target: Path) -> Path:
    """FILE.bak, else the first FILE.bak.N not taken: an admin's earlier edit kept by an
    earlier --force is never the one overwritten."""
    candidate = target.with_name(target.name + ".bak")
    n = 0
    while candidate.exists():
        n += 1
        candidate = target.with_name(f"{target.name}.bak.{n}")
    return candidate

"""Packaging that starts (issue 12, item 6): the systemd unit's paths match the
install the admin guide (docs/admin.md) documents, the usage spool is writable under ProtectSystem=strict,
``systemd-analyze verify`` accepts the unit, and the package installed into a fresh
venv exactly as the admin guide says runs the unit's ExecStart command line (``--once``)
against the local Slurm test cluster."""
from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controller.service.ops.config import SCHEMA
from tests.conftest import ROOT
from tests.slurm_fixtures import slurm_cluster  # noqa: F401 - fixture

UNIT = ROOT / "packaging" / "tiresias.service"
ADMIN_GUIDE = (ROOT / "docs" / "admin.md").read_text()
INSTALL = re.search(r"1\. Install: `python3 -m venv (\S+) && (\S+)/bin/pip install \.`", ADMIN_GUIDE)
DEFAULTS = {s.name: s.default for s in SCHEMA}


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in systemd
    parser.read_string(UNIT.read_text())
    return parser


def _exec_start() -> list[str]:
    return shlex.split(_unit()["Service"]["ExecStart"])


def test_unit_paths_match_the_documented_install():
    assert INSTALL, "docs/admin.md's install line changed: update this test and the unit together"
    prefix = INSTALL.group(1)
    assert INSTALL.group(2) == prefix
    argv = _exec_start()
    assert argv[0] == f"{prefix}/bin/tiresias", f"ExecStart runs {argv[0]}, docs/admin.md installs into {prefix}"
    assert argv[1:3] == ["run", "--config"]
    assert argv[3] == "/etc/tiresias/tiresias.yaml"
    assert "Copy `packaging/tiresias.yaml` to `/etc/tiresias/`" in ADMIN_GUIDE


def test_store_and_spool_are_writable_under_protect_system_strict():
    service = _unit()["Service"]
    assert service["ProtectSystem"] == "strict"  # the whole tree read-only except what is listed
    writable = [path.lstrip("-") for path in service.get("ReadWritePaths", "").split()]
    writable += [f"/var/lib/{name}" for name in service.get("StateDirectory", "").split()]
    example = (ROOT / "packaging" / "tiresias.yaml").read_text()
    spool = re.search(r"^usage_spool_dir:\s*(\S+)", example, re.M)
    database = re.search(r"^database_url:\s*sqlite:///(\S+)", example, re.M)
    for path in (spool.group(1) if spool else DEFAULTS["usage_spool_dir"],
                 database.group(1) if database else DEFAULTS["database_url"].split("sqlite:///", 1)[1]):
        assert any(path == w or path.startswith(w.rstrip("/") + "/") for w in writable), (path, writable)


def test_state_directory_is_the_service_users_alone():
    """Job records are the service user's: users see their own through Slurm."""
    service = _unit()["Service"]
    assert service["StateDirectoryMode"] == "0700" and service["UMask"] == "0077"


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    # verify checks that ExecStart's binary exists: point it at this checkout's entry point.
    entry = Path(sys.executable).parent / "tiresias"
    if not entry.exists():
        pytest.skip(f"no tiresias entry point next to {sys.executable} (pip install -e . first)")
    unit = tmp_path / "tiresias.service"
    unit.write_text(UNIT.read_text().replace(_exec_start()[0], str(entry)))
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "is not executable" not in proc.stderr


@pytest.mark.slurm
def test_documented_install_starts_against_the_test_cluster(tmp_path, slurm_cluster):  # noqa: F811
    """The admin guide's install into a fresh venv (a copy of the tree, as a user's checkout),
    then the unit's ExecStart line with --once: one shadow round on the real cluster."""
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info",
                                                                "__pycache__", "out"))
    prefix = tmp_path / "opt-tiresias"
    install = INSTALL.group(0)[len("1. Install: `"):-1].replace(INSTALL.group(1), str(prefix))
    proc = subprocess.run(["bash", "-c", install], cwd=source, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    config = tmp_path / "tiresias.yaml"
    # the admin edits the shipped file's own lines (a key written twice is refused)
    edits = {"database_url": f"sqlite:///{tmp_path}/state/tiresias.db", "usage_spool_dir": f"{tmp_path}/spool/usage",
             "mode": "shadow", "cluster": "packaging-test"}
    shipped = (ROOT / "packaging" / "tiresias.yaml").read_text().splitlines()
    assert all(sum(line.startswith(f"{key}:") for line in shipped) == 1 for key in edits)
    config.write_text("\n".join(next((f"{key}: {value}" for key, value in edits.items()
                                       if line.startswith(f"{key}:")), line) for line in shipped) + "\n")
    argv = [arg.replace(INSTALL.group(1), str(prefix)).replace("/etc/tiresias/tiresias.yaml", str(config))
            for arg in _exec_start()] + ["--once"]
    assert Path(argv[0]).is_file()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run(argv, cwd="/", capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "controller starting: mode shadow" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "state" / "tiresias.db").stat().st_size > 0

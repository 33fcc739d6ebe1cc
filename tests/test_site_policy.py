"""The site's policy for the two lua files lives in tiresias-policy.conf next to them
(issue 38, item 7): cli_filter.lua and job_submit.lua read it with a real Lua
interpreter (tests/test_job_submit_lua.py's fixture) as preflight's parse_policy does;
without it they keep their defaults (no QOS, a 60 s grace); install-files lays it out
only where none is, so a reinstall, --force included, keeps the site's values."""
from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

from controller.cli import install_files
from controller.service.ops.preempt_qos import (cli_filter_policy_findings, installed_cli_filter_findings,
                                                parse_policy, parse_qos)
from tests.test_job_submit_lua import lua  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
PRINT_POLICY = r"""
slurm = { SUCCESS = 0, ERROR = -1, log_user = function() end }
dofile(arg[1])
print(tostring(PREEMPTABLE_QOS) .. " " .. tostring(PREEMPTABLE_QOS_GRACE_S))
"""
POLICIES = [
    # (file text or None for no file, what the lua files read: qos, grace)
    (None, ("nil", "60")),
    ("", ("nil", "60")),
    ((ROOT / "slurm_plugin" / "tiresias-policy.conf").read_text(), ("nil", "60")),  # as shipped: all commented
    ("preemptable_qos = tiresias_ckpt\npreemptable_qos_grace_s = 45\n", ("tiresias_ckpt", "45")),
    ("  preemptable_qos=ckpt   # the QOS\n#preemptable_qos_grace_s = 5\n", ("ckpt", "60")),
    ("preemptable_qos = two words\npreemptable_qos_grace_s = 1m\nPreemptable_QOS = x\n", ("nil", "60")),
    ("preemptable_qos = a\npreemptable_qos = b\npreemptable_qos_grace_s\n", ("b", "60")),
]


def _lua_reads(lua: str, tmp_path: Path, script: str, text: str | None) -> tuple[str, str]:
    folder = tmp_path / script.replace(".", "_")
    folder.mkdir(exist_ok=True)
    shutil.copy(ROOT / "slurm_plugin" / script, folder / script)
    policy = folder / "tiresias-policy.conf"
    policy.unlink(missing_ok=True)
    if text is not None:
        policy.write_text(text)
    probe = tmp_path / "probe.lua"
    probe.write_text(PRINT_POLICY)
    proc = subprocess.run([lua, str(probe), str(folder / script)], capture_output=True, text=True, timeout=30,
                          cwd=tmp_path)  # another folder: the file is found next to the script
    assert proc.returncode == 0, proc.stderr
    qos, grace = proc.stdout.split()
    return qos, grace


def test_both_lua_files_read_the_policy_next_to_them_as_preflight_does(lua, tmp_path):
    for text, (qos, grace) in POLICIES:
        assert _lua_reads(lua, tmp_path, "cli_filter.lua", text) == (qos, grace), text
        assert _lua_reads(lua, tmp_path, "job_submit.lua", text)[0] == qos, text
        values, _ = parse_policy(text or "")
        assert (values.get("preemptable_qos", "nil"), values.get("preemptable_qos_grace_s", "60")) == (qos, grace)


def test_the_lua_files_hold_no_site_value():
    """The policy is never edited into the lua files: their defaults are preemption:
    controller's, and the shipped policy file sets nothing."""
    for script in ("cli_filter.lua", "job_submit.lua"):
        assert "\nPREEMPTABLE_QOS = nil\n" in (ROOT / "slurm_plugin" / script).read_text()
    assert parse_policy((ROOT / "slurm_plugin" / "tiresias-policy.conf").read_text()) == ({}, [])


def test_preflight_names_each_line_the_lua_files_skip_and_checks_the_policy_against_the_qos(tmp_path):
    text = "preemptable_qos = ckpt\npreemptable_qos_grace_s = 1m\nbogus = 1\n"
    found = cli_filter_policy_findings(text, "ckpt", 90.0, "/etc/slurm/tiresias-policy.conf")
    assert [(f.setting, f.value, f.refuses) for f in found] == [
        ("/etc/slurm/tiresias-policy.conf line 2", "preemptable_qos_grace_s = 1m", False),
        ("/etc/slurm/tiresias-policy.conf line 3", "bogus = 1", False)]
    # the default 60 s grace is longer than a 30 s GraceTime; another QOS name is no QOS
    assert [f.setting for f in cli_filter_policy_findings("preemptable_qos = ckpt\n", "ckpt", 30.0)] == [
        "tiresias-policy.conf preemptable_qos_grace_s"]
    assert [f.value for f in cli_filter_policy_findings("preemptable_qos = other\n", "ckpt", 90.0)] == ["other"]
    # read next to the slurm.conf slurmctld names; a host with cli_filter.lua but no
    # policy file runs the defaults (no QOS); a host with neither checks nothing
    settings = {"SLURM_CONF": str(tmp_path / "slurm.conf")}
    rows = parse_qos("ckpt|requeue,within|00:01:30||\n")
    assert installed_cli_filter_findings(settings, rows, "ckpt") == []
    (tmp_path / "cli_filter.lua").write_text("")
    assert [f.value for f in installed_cli_filter_findings(settings, rows, "ckpt")] == ["(unset)"]
    (tmp_path / "tiresias-policy.conf").write_text("preemptable_qos = ckpt\n")
    assert installed_cli_filter_findings(settings, rows, "ckpt") == []


def _install(dest: Path, force: bool = False) -> int:
    return install_files.run(argparse.Namespace(dest=str(dest), force=force, list=False))


def test_install_files_lays_the_policy_out_only_where_none_is(tmp_path, capsys):
    policy = tmp_path / "etc" / "slurm" / "tiresias-policy.conf"
    assert _install(tmp_path) == 0
    assert policy.read_bytes() == (ROOT / "slurm_plugin" / "tiresias-policy.conf").read_bytes()
    site = "preemptable_qos = tiresias_ckpt\npreemptable_qos_grace_s = 45\n"
    policy.write_text(site)
    capsys.readouterr()
    assert _install(tmp_path) == 0  # no refusal for the site's own settings
    assert f"kept {policy}" in capsys.readouterr().out and policy.read_text() == site
    (tmp_path / "etc" / "slurm" / "cli_filter.lua").write_text("-- an older release\n")
    assert _install(tmp_path, force=True) == 0
    assert policy.read_text() == site and not policy.with_name("tiresias-policy.conf.bak").exists()
    assert (tmp_path / "etc" / "slurm" / "cli_filter.lua").read_bytes() == \
        (ROOT / "slurm_plugin" / "cli_filter.lua").read_bytes()

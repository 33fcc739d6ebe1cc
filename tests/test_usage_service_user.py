"""Usage collection as shipped: the epilog runs as root, the collector as the service
user ``tiresias`` (packaging/tiresias.service ``User=tiresias``), in another process.
The test creates that system user (as packaging/tiresias.sysusers does) when missing."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EPILOG = ROOT / "epilog" / "tiresias_epilog.py"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else None
SERVICE_USER = "tiresias"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the hooks run as root; needs root to run them so")

COLLECT = """
import json, sys
from controller.service.state.spool import collect_spool
from controller.service.state.store import Store
store = Store(sys.argv[2])
print(json.dumps({"counts": collect_spool(sys.argv[1], store),
                  "records": [r["record_id"] for r in store.usage_records("tc")]}))
"""


def _service_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/var/lib/tiresias",
                        "--shell", "/usr/sbin/nologin", SERVICE_USER], check=True)
        return pwd.getpwnam(SERVICE_USER)


@pytest.fixture
def site():
    """/var/tmp/<x>: node.conf, the spool, the store directory owned by the service user
    (pytest's tmp_path is root-only, which the service user could not even traverse)."""
    user = _service_user()
    base = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="tiresias-usage-"))
    base.chmod(0o755)
    (base / "state").mkdir(mode=0o750)
    os.chown(base / "state", user.pw_uid, user.pw_gid)
    conf = base / "node.conf"
    conf.write_text(f"run_dir={base}/run\nspool_dir={base}/spool/usage\nlog_file={base}/log/node.log\n"
                    f"spool_group={SERVICE_USER}\n")
    conf.chmod(0o644)
    yield base, conf, user
    shutil.rmtree(base, ignore_errors=True)


def _epilog(conf: Path, job_id: str) -> None:
    env = {"TIRESIAS_NODE_CONF": str(conf), "SLURM_JOB_ID": job_id, "SLURM_JOB_UID": "1001",
           "SLURM_JOB_USER": "alice", "SLURMD_NODENAME": "gpu1", "SLURM_CLUSTER_NAME": "tc",
           "SLURM_JOB_GPUS": "0", "SLURM_JOB_RESTART_COUNT": "0"}
    proc = subprocess.run([PYTHON or "python3", "-I", str(EPILOG)], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr


def _collect_as(user: pwd.struct_passwd, spool: Path, store_url: str) -> dict:
    """The collector in its own process as the service user (its groups, not root's)."""
    proc = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
                           os.environ.get("TIRESIAS_TEST_PYTHON", os.sys.executable), "-c", COLLECT,
                           str(spool), store_url],
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": "/"},
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_service_user_collects_what_the_root_hooks_wrote(site):
    base, conf, user = site
    spool = base / "spool" / "usage"
    # A spool the package made tiresias-owned, with a record not yet collected: the
    # root epilog keeps it (it used to move it aside, records and all).
    spool.parent.mkdir(mode=0o755)
    spool.mkdir()
    os.chown(spool, user.pw_uid, user.pw_gid)
    earlier = spool / "usage-gpu2.jsonl"
    earlier.write_text(json.dumps({"record_id": "tc/7/gpu2/0", "cluster": "tc", "job_id": "7"}) + "\n")
    _epilog(conf, "301")
    _epilog(conf, "302")
    info = spool.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (0, user.pw_gid, 0o2770)
    assert earlier.exists() and not list(spool.parent.glob("usage.unsafe-*"))
    written = spool / "usage-gpu1.jsonl"
    assert written.stat().st_gid == user.pw_gid and written.stat().st_mode & 0o777 == 0o640

    result = _collect_as(user, spool, f"sqlite:///{base}/state/tiresias.db")
    assert result["counts"] == [3, 0, 0]
    assert sorted(result["records"]) == ["tc/301/gpu1/0", "tc/302/gpu1/0", "tc/7/gpu2/0"]
    assert not written.exists() and len(list((spool / "processed").iterdir())) == 2
    # the next epilog still appends, into a spool the collector has rotated
    _epilog(conf, "303")
    assert _collect_as(user, spool, f"sqlite:///{base}/state/tiresias.db")["counts"] == [1, 0, 0]
    # `tiresias usage` reads them back, for this cluster only
    shown = subprocess.run([os.sys.executable, "-m", "controller.cli.main", "usage", "--cluster", "tc",
                            "--database-url", f"sqlite:///{base}/state/tiresias.db"],
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.splitlines()
    assert header.split()[:2] == ["JobID", "Node"]
    assert sorted(row.split()[0] for row in rows) == ["301", "302", "303", "7"]

"""User-side helpers that travel (issue 29, item 3).

- The checkpoint helper is its own one-file distribution: a fresh venv with only
  ``tiresias-checkpoint`` installed (no numpy, no ``controller``) runs the example jobs
  copied outside the checkout: the bash job traps USR1, saves its step, writes the
  epilog's marker and exits with the requeue code, then resumes; so does the Python one.
- Without the helper the example jobs stop at once, with one line saying what is
  missing, before any step (they used to run on without a trap and die on USR1).
- The controller's wheel holds every file an admin installs, and ``tiresias
  install-files DEST`` lays them out as docs/admin.md says, refusing to overwrite a
  changed file without --force.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import tiresias_checkpoint
from controller import checkpoint
from controller.cli.install_files import LAYOUT
from tests.test_node_side import wait_for_handler

ROOT = Path(__file__).resolve().parents[1]
HELPER_PROJECT = ROOT / "packaging" / "tiresias-checkpoint"
JOB_ID = "4242"
MISSING_HELPER = "no Tiresias checkpoint helper"
# The layout docs/admin.md documents: path under DEST -> mode.
DOCUMENTED_LAYOUT = {
    "etc/slurm/job_submit.lua": 0o644,
    "etc/slurm/cli_filter.lua": 0o644,
    "etc/slurm/tiresias-policy.conf": 0o644,
    "etc/slurm/tiresias/prolog": 0o755,
    "etc/slurm/tiresias/task_prolog": 0o755,
    "etc/slurm/tiresias/epilog": 0o755,
    "etc/tiresias/tiresias.yaml": 0o644,
    "etc/systemd/system/tiresias.service": 0o644,
    "usr/lib/sysusers.d/tiresias.conf": 0o644,
    "usr/local/share/tiresias/slurm.conf.fragment": 0o644,
    "usr/local/share/tiresias/checkpoint.sh": 0o644,
    "usr/local/share/tiresias/tiresias_checkpoint.py": 0o644,
}


def _clean_env(**extra: str) -> dict:
    """No PYTHONPATH or venv of the test run leaks into a job: only what the job's
    own PATH gives it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "SLURM_", "TIRESIAS_"))}
    env.update(extra)
    return env


def _pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=_clean_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def _wheel(project: Path, build: Path) -> Path:
    """Build a wheel from a copy of ``project`` (the build writes build/ and
    egg-info next to its sources; the checkout stays as it is)."""
    source = build / "src"
    shutil.copytree(project, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info",
                                                                   "__pycache__", "out"))
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", str(source), "-w", str(build / "wheel"),
         cwd=build)
    (wheel,) = (build / "wheel").glob("*.whl")
    return wheel


def _venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120,
                   env=_clean_env())
    return where / "bin"


@pytest.fixture(scope="module")
def helper_bin(tmp_path_factory) -> Path:
    """bin/ of a fresh venv with only the tiresias-checkpoint wheel installed."""
    build = tmp_path_factory.mktemp("helper-build")
    wheel = _wheel(HELPER_PROJECT, build)
    bin_dir = _venv(build / "venv")
    _pip("--python", str(bin_dir / "python"), "install", "--no-index", "--no-deps", str(wheel), cwd=build)
    return bin_dir


@pytest.fixture(scope="module")
def bare_bin(tmp_path_factory) -> Path:
    """bin/ of a fresh venv with nothing installed."""
    return _venv(tmp_path_factory.mktemp("bare") / "venv")


def _job_dir(tmp_path: Path) -> Path:
    """The example jobs copied into a folder of one's own, outside the checkout."""
    job = tmp_path / "myjob"
    (job / "examples").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "checkpoint_job.sbatch", job)
    for name in ("srun_train.sbatch", "train_loop.py"):
        shutil.copy(ROOT / "examples" / name, job / "examples")
    assert ROOT not in job.parents
    return job


def _job_env(bin_dir: Path, job: Path, **extra: str) -> dict:
    return _clean_env(**{"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": JOB_ID, "SLURM_SUBMIT_DIR": str(job),
                         "SLURM_RESTART_COUNT": "0", **extra})


def test_the_helper_venv_has_the_helper_and_nothing_of_the_controller(helper_bin, tmp_path):
    probe = ("import importlib.util, tiresias_checkpoint; "
             "print(tiresias_checkpoint.__file__); "
             "print([m for m in ('controller', 'numpy', 'sqlalchemy') if importlib.util.find_spec(m)])")
    proc = subprocess.run([str(helper_bin / "python3"), "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    module_file, found = proc.stdout.splitlines()
    assert module_file.startswith(str(helper_bin.parent)) and found == "[]", proc.stdout
    shell = subprocess.run([str(helper_bin / "python3"), "-m", "tiresias_checkpoint", "--shell-helper"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60, env=_clean_env())
    assert shell.returncode == 0, shell.stderr
    installed = Path(shell.stdout.strip())
    assert installed == helper_bin.parent / "share" / "tiresias" / "checkpoint.sh"
    assert installed.read_bytes() == (ROOT / "prolog" / "checkpoint.sh").read_bytes()


def test_bash_example_outside_the_checkout_checkpoints_requeues_and_resumes(helper_bin, tmp_path):
    job = _job_dir(tmp_path)
    script = job / "checkpoint_job.sbatch"
    proc = subprocess.Popen(["bash", str(script)], cwd=job, env=_job_env(helper_bin, job),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert f"job {JOB_ID} restart 0: starting at step 0" in first, (first, proc.stderr.read() if proc.poll() else "")
    time.sleep(2.5)  # two of its one-second steps
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == checkpoint.REQUEUE_EXIT_CODE, (proc.returncode, out, err)
    assert "tiresias checkpoint: signal received" in err
    step = int((job / f"ckpt-demo-{JOB_ID}.txt").read_text())
    assert step >= 1
    marker = json.loads((job / f".tiresias-checkpoint-{JOB_ID}").read_text())  # what the epilog detects
    assert marker["job_id"] == JOB_ID

    resumed = subprocess.run(["bash", str(script)], cwd=job, capture_output=True, text=True, timeout=60,
                             env=_job_env(helper_bin, job, SLURM_RESTART_COUNT="1", STEPS=str(step + 1)))
    assert resumed.returncode == 0, resumed.stderr
    assert f"restart 1: starting at step {step}" in resumed.stdout
    assert f"done at step {step + 1}" in resumed.stdout


def test_python_example_outside_the_checkout_checkpoints_and_resumes(helper_bin, tmp_path):
    """train_loop.py as srun_train.sbatch runs it, with the helper venv's python alone."""
    job = _job_dir(tmp_path)
    ckpt = job / "train.json"
    argv = [str(helper_bin / "python3"), str(job / "examples" / "train_loop.py"), "--step-s", "0.01",
            "--checkpoint", str(ckpt)]
    proc = subprocess.Popen([*argv, "--steps", "100000"], cwd=job, env=_job_env(helper_bin, job),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_handler(proc, signal.SIGUSR1)
    time.sleep(0.1)  # a few of its steps
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == checkpoint.REQUEUE_EXIT_CODE, (out, err)
    step = json.loads(ckpt.read_text())["step"]
    assert 0 < step < 100000 and f"checkpointed at step {step}" in out
    assert (job / f".tiresias-checkpoint-{JOB_ID}").is_file()
    resumed = subprocess.run([*argv, "--steps", str(step + 2)], cwd=job, capture_output=True, text=True,
                             timeout=60, env=_job_env(helper_bin, job))
    assert resumed.returncode == 0 and f"resumed at step {step}" in resumed.stdout, resumed.stderr


@pytest.mark.parametrize("variant", ["no helper", "helper path set but missing"])
def test_bash_example_without_the_helper_stops_before_any_step(bare_bin, tmp_path, variant):
    job = _job_dir(tmp_path)
    extra = {"TIRESIAS_CHECKPOINT_SH": str(tmp_path / "nowhere" / "checkpoint.sh")} if variant != "no helper" else {}
    started = time.monotonic()
    proc = subprocess.run(["bash", str(job / "checkpoint_job.sbatch")], cwd=job, capture_output=True, text=True,
                          timeout=30, env=_job_env(bare_bin, job, **extra))
    assert time.monotonic() - started < 10  # at once, not after a step
    assert proc.returncode not in (0, checkpoint.REQUEUE_EXIT_CODE), proc
    assert "starting at step" not in proc.stdout and not (job / f"ckpt-demo-{JOB_ID}.txt").exists()
    lines = [line for line in proc.stderr.splitlines() if MISSING_HELPER in line]
    assert len(lines) == 1 and "pip install the tiresias-checkpoint folder or wheel" in lines[0], proc.stderr
    if extra:
        assert extra["TIRESIAS_CHECKPOINT_SH"] in lines[0]


def test_srun_example_without_the_helper_stops_before_srun(bare_bin, tmp_path):
    job = _job_dir(tmp_path)
    proc = subprocess.run(["bash", str(job / "examples" / "srun_train.sbatch")], cwd=job, capture_output=True,
                          text=True, timeout=30, env=_job_env(bare_bin, job))
    assert proc.returncode == 2, proc
    assert "has no tiresias_checkpoint module: pip install the tiresias-checkpoint folder or wheel" in proc.stderr
    assert "srun" not in proc.stderr.replace("srun_train:", "")  # never got as far as srun
    assert f"job {JOB_ID}" not in proc.stdout


def test_the_helper_folder_copies_as_plain_files_and_installs_from_the_copy(tmp_path):
    """Users copy packaging/tiresias-checkpoint with cp -r (which keeps links as links):
    the folder holds the files themselves, and pip installs the copy."""
    assert [p.name for p in HELPER_PROJECT.iterdir() if p.is_symlink()] == []
    copy = tmp_path / "helper"
    subprocess.run(["cp", "-r", str(HELPER_PROJECT), str(copy)], check=True)
    (tmp_path / "wheel").mkdir()
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", str(copy), "-w", str(tmp_path / "wheel"),
         cwd=tmp_path)
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    assert wheel.name.startswith("tiresias_checkpoint-")
    with zipfile.ZipFile(wheel) as zipped:
        names = zipped.namelist()
    assert "tiresias_checkpoint.py" in names and any(n.endswith("share/tiresias/checkpoint.sh") for n in names)


def test_controller_checkpoint_is_the_same_helper():
    """Old imports keep working and share the one signal state."""
    assert checkpoint.install is tiresias_checkpoint.install
    assert checkpoint.requested is tiresias_checkpoint.requested
    assert checkpoint.REQUEUE_EXIT_CODE == tiresias_checkpoint.REQUEUE_EXIT_CODE


def test_shell_helper_search_says_where_it_looked(bare_bin, tmp_path):
    """The module copied alone, with no checkpoint.sh anywhere it looks: exit 1 and one
    line naming the places; with checkpoint.sh next to it, that copy is found."""
    if tiresias_checkpoint.INSTALLED_SHELL_HELPER and Path(tiresias_checkpoint.INSTALLED_SHELL_HELPER).exists():
        pytest.skip(f"this host has {tiresias_checkpoint.INSTALLED_SHELL_HELPER}, which the search finds")
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(ROOT / "tiresias_checkpoint.py", alone)
    argv = [str(bare_bin / "python3"), "-m", "tiresias_checkpoint", "--shell-helper"]
    proc = subprocess.run(argv, cwd=alone, capture_output=True, text=True, timeout=60, env=_clean_env())
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and str(alone / "checkpoint.sh") in proc.stderr, proc.stderr
    shutil.copy(ROOT / "prolog" / "checkpoint.sh", alone)
    proc = subprocess.run(argv, cwd=alone, capture_output=True, text=True, timeout=60, env=_clean_env())
    assert proc.returncode == 0 and proc.stdout.strip() == str(alone / "checkpoint.sh"), proc.stderr


# -- what admins install: in the wheel, laid out by install-files ----------------------------

def _in_wheel(source: str) -> str:
    top = source.split("/", 1)[0]
    return f"controller/shipped/{source}" if top in ("prolog", "epilog", "packaging") else source


def _install_files(site: Path, dest: Path, *flags: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.cli.main", "install-files", str(dest), *flags],
                          cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=_clean_env(PYTHONPATH=str(site)))


def test_wheel_ships_every_admin_file_and_install_files_lays_them_out(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    wheel = _wheel(ROOT, build)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        site = tmp_path / "site"
        archive.extractall(site)
    assert {item.source for item in LAYOUT} >= {
        "slurm_plugin/job_submit.lua", "slurm_plugin/cli_filter.lua", "slurm_plugin/slurm.conf.fragment",
        "prolog/tiresias_prolog.py", "prolog/task_prolog.py", "epilog/tiresias_epilog.py", "prolog/checkpoint.sh",
        "packaging/tiresias.service", "packaging/tiresias.sysusers", "packaging/tiresias.yaml",
        "tiresias_checkpoint.py", "slurm_plugin/tiresias-policy.conf"}
    missing = [_in_wheel(item.source) for item in LAYOUT if _in_wheel(item.source) not in names]
    assert not missing, missing

    # the unpacked wheel, not the checkout, provides the files
    probe = subprocess.run([sys.executable, "-c", "from controller.cli.install_files import shipped_path; "
                            "print(shipped_path('prolog/checkpoint.sh'))"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60, env=_clean_env(PYTHONPATH=str(site)))
    assert probe.stdout.strip() == str(site / "controller" / "shipped" / "prolog" / "checkpoint.sh"), probe

    dest = tmp_path / "root"
    proc = _install_files(site, dest, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    laid_out = {str(p.relative_to(dest)): p.stat().st_mode & 0o7777 for p in dest.rglob("*") if p.is_file()}
    assert laid_out == DOCUMENTED_LAYOUT
    for item in LAYOUT:
        assert (dest / item.target).read_bytes() == (ROOT / item.source).read_bytes(), item

    # the share folder is enough on its own: the module finds the bash helper next to it
    share = dest / "usr" / "local" / "share" / "tiresias"
    found = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "import tiresias_checkpoint as t; print(t.shell_helper_path())", str(share)],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == str(share / "checkpoint.sh"), found

    again = _install_files(site, dest, cwd=tmp_path)
    kept = sum(item.kept for item in LAYOUT)  # the site's settings: never compared
    assert again.returncode == 0 and again.stdout.count("unchanged ") == len(LAYOUT) - kept, again.stdout
    assert again.stdout.count("kept ") == kept == 1, again.stdout

    config = dest / "etc" / "tiresias" / "tiresias.yaml"
    config.write_text(config.read_text() + "mode: enforce\n")  # the admin's edit
    (dest / "etc" / "slurm" / "job_submit.lua").unlink()
    refused = _install_files(site, dest, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and str(config) in refused.stderr and "--force" in refused.stderr
    assert config.read_text().endswith("mode: enforce\n")
    assert not (dest / "etc" / "slurm" / "job_submit.lua").exists()  # a refusal writes nothing

    forced = _install_files(site, dest, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert f"replaced {config}" in forced.stdout and f"installed {dest / 'etc/slurm/job_submit.lua'}" in forced.stdout
    assert config.read_bytes() == (ROOT / "packaging" / "tiresias.yaml").read_bytes()
    backup = config.with_name("tiresias.yaml.bak")
    assert f"(the old one kept as {backup})" in forced.stdout and backup.read_text().endswith("mode: enforce\n")
    # a second forced install over a second edit keeps both edits
    config.write_text(config.read_text() + "mode: shadow\n")
    assert _install_files(site, dest, "--force", cwd=tmp_path).returncode == 0
    assert backup.read_text().endswith("mode: enforce\n")
    assert config.with_name("tiresias.yaml.bak.1").read_text().endswith("mode: shadow\n")


def test_admin_guide_documents_the_layout():
    guide = (ROOT / "docs" / "admin.md").read_text()
    assert "tiresias install-files" in guide
    missing = [target for target in DOCUMENTED_LAYOUT if f"/{target}" not in guide]
    assert not missing, missing

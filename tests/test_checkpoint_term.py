"""TERM, which scancel and Slurm's time limit send (then KILL KillWait seconds later),
checkpoints where the job asks for it ($TIRESIAS_CHECKPOINT_ON_TERM=1), in the Python
helper and in the bash helper, and ends the job as before where it does not."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

PYTHON_JOB = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {root!r})
    import tiresias_checkpoint as checkpoint
    checkpoint.install()
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(200):
        if checkpoint.requested():
            checkpoint.save_atomically("ckpt.bin", b"step 7")
            checkpoint.exit_for_requeue()
        time.sleep(0.01)
    sys.exit(3)  # TERM did not ask for a checkpoint
""")

BASH_JOB = textwrap.dedent("""
    source {helper}
    save_state() {{ tiresias_save_atomically ckpt.txt 7; }}
    tiresias_checkpoint_trap save_state
    kill -TERM $$
    sleep 0.2 & wait $!
    exit 3
""")


def _run(argv, tmp_path, on_term: str | None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIRESIAS_", "SLURM_"))}
    if on_term is not None:
        env["TIRESIAS_CHECKPOINT_ON_TERM"] = on_term
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("on_term, exit_code, saved", [("1", 85, True), (None, -signal.SIGTERM, False),
                                                       ("0", -signal.SIGTERM, False)])
def test_python_helper_checkpoints_on_term_only_where_the_job_asks(tmp_path, on_term, exit_code, saved):
    proc = _run([sys.executable, "-c", PYTHON_JOB.format(root=str(ROOT))], tmp_path, on_term)
    assert proc.returncode == exit_code, proc.stderr
    assert (tmp_path / "ckpt.bin").exists() is saved


@pytest.mark.parametrize("on_term, exit_code, saved", [("1", 85, True), (None, -signal.SIGTERM, False)])
def test_bash_helper_checkpoints_on_term_only_where_the_job_asks(tmp_path, on_term, exit_code, saved):
    script = tmp_path / "job.sh"
    script.write_text(BASH_JOB.format(helper=ROOT / "prolog" / "checkpoint.sh"))
    proc = _run(["bash", str(script)], tmp_path, on_term)
    assert proc.returncode == exit_code, proc.stderr
    assert (tmp_path / "ckpt.txt").exists() is saved
    if saved:
        assert (tmp_path / "ckpt.txt").read_text() == "7\n"


def test_install_on_term_false_keeps_terms_default_even_when_the_environment_asks(monkeypatch):
    import tiresias_checkpoint as checkpoint

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setenv("TIRESIAS_CHECKPOINT_ON_TERM", "1")
    previous_usr1 = signal.getsignal(signal.SIGUSR1)
    try:
        checkpoint.install(on_term=False)
        assert signal.getsignal(signal.SIGTERM) is before
        checkpoint.install()
        assert signal.getsignal(signal.SIGTERM) is signal.getsignal(signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGUSR1, previous_usr1)
        checkpoint.clear()

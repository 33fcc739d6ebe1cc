"""Who may read what, on the live Slurm test cluster: alice's `tiresias acct` comes
from sacct run as alice (Slurm decides), so bob's job is not in it; the store, the
service user's (here root's) file, mode 0600, cannot even be opened by her."""
from __future__ import annotations

import contextlib
import os
import pwd
import subprocess
import tempfile
import time
import traceback

import pytest

import _strptime  # noqa: F401 - time.strptime imports it lazily; alice cannot read root's Python
import slurm_plugin.accounting  # noqa: F401 - imported before the fork, for the same reason
from controller.cli.main import main
from controller.service.state.store import JobRecord, Store
from tests.slurm_fixtures import slurm_cluster, submit_as, wait_for  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.slurm


def _in_sacct(ids: list[str]) -> bool:
    """slurmdbd holds these jobs with their TRES (for its first second or two a job
    is there with none: no GPUs known yet)."""
    out = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-j", ",".join(ids), "-o", "JobIDRaw,ReqTRES"],
                         capture_output=True, text=True, timeout=30).stdout.split()
    return set(ids) <= {line.split("|")[0] for line in out if "gres/gpu" in line}


def _as_user(name: str, work) -> tuple[int, str]:
    """Run ``work()`` in a forked child that really is ``name`` (setuid): its exit code
    and everything it printed."""
    user = pwd.getpwnam(name)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            os.setgid(user.pw_gid)
            os.setgroups([])
            os.setuid(user.pw_uid)
            with os.fdopen(write_end, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    code = work()
                except BaseException:  # shown in the assertion, not lost with the child
                    traceback.print_exc(file=out)
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        output = pipe.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output


def test_alice_sees_her_jobs_from_slurm_not_bobs_and_cannot_open_the_store(submit_as):  # noqa: F811
    if os.geteuid() != 0:
        pytest.skip("needs root (becomes alice)")
    mine = submit_as("alice", "-J acct-own --gres=gpu:1 --wrap 'sleep 1'")
    theirs = submit_as("bob", "-J acct-other --gres=gpu:1 --wrap 'sleep 1'")
    # Held: never eligible, so sacct's time window alone would leave it out.
    held = submit_as("alice", "-J acct-held --hold --gres=gpu:1 --wrap 'sleep 1'")
    wait_for(lambda: _in_sacct([mine, theirs]), 120, "slurmdbd to record both jobs")
    state = tempfile.mkdtemp(prefix="tiresias-state-")
    try:
        os.chmod(state, 0o755)  # she may look into the directory, not into the store
        db = os.path.join(state, "tiresias.db")
        with Store(f"sqlite:///{db}") as store:  # what the controller recorded: both jobs
            store.save_jobs("default", [JobRecord(theirs, 1, time.time(), user="bob"),
                                        JobRecord(mine, 1, time.time(), user="alice")])
        url = f"sqlite:///{db}"
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 3600))
        argv = ["acct", "--database-url", url, "-S", start, "-n", "-P", "-o", "JobID,User"]
        assert main(argv) == 0  # as root: an admin reads the store

        def alice_acct() -> int:
            return main([*argv, "-u", "alice,bob"])

        code, output = _as_user("alice", alice_acct)
        assert code == 0, output
        rows = [line for line in output.splitlines() if "|" in line]
        assert f"{mine}|alice" in rows, output
        assert f"{held}|alice" in rows, output  # waiting jobs are what she asks about first
        assert all(not row.startswith(f"{theirs}|") for row in rows), output  # bob's job is not hers to see
        assert {row.split("|")[1] for row in rows} == {"alice"}, output
        assert "showing alice's only" in output

        def alice_opens_the_store() -> int:
            try:
                open(db, "rb").close()
            except PermissionError:
                return 0
            return 1

        assert _as_user("alice", alice_opens_the_store)[0] == 0
        assert oct(os.stat(db).st_mode & 0o777) == "0o600"
    finally:
        subprocess.run(["scancel", held], check=False)
        subprocess.run(["rm", "-rf", state], check=False)

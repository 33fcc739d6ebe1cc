"""SlurmBackend against the local Slurm test cluster (containers/slurm-cluster.sh).

The cluster has 4 nodes x 4 GPUs, partitions batch (gpu[1-4]), urgent and small
(gpu[1-2]), and AuthInfo=cred_expire=10 (a requeued job waits 11 s). Jobs stay
pending either behind a 16-GPU filler job (when sprio must list them) or with
``--begin=now+600``; every job a test submits is cancelled afterwards. A few
tests at the end use recorded 22.05 output instead of the cluster.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest

from controller.service.acting.backend import BackendUnavailable
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult, LeverFailed, subprocess_runner
from tests.slurm_fixtures import slurm_cluster, submit_as, wait_for  # noqa: F401  (pytest fixtures)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm" / "22.05"
ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED"}


class RecordingRunner:
    """Wraps the real runner and remembers every argv it ran."""

    def __init__(self, inner=subprocess_runner):
        self.inner = inner
        self.calls: list[list[str]] = []

    def __call__(self, argv, timeout_s, env):
        self.calls.append(list(argv))
        return self.inner(argv, timeout_s, env)

    def levers(self) -> list[list[str]]:
        return [c for c in self.calls if c[0] in ("scontrol", "scancel")]


def _job(backend: SlurmBackend, job_id: str):
    return next((j for j in backend.observe().jobs if j.job_id == job_id), None)


def _wait_for(backend: SlurmBackend, job_id: str, ok: Callable[[object], bool], timeout_s: float, what: str):
    """Poll observe() until ok(job) holds; bounded by timeout_s."""
    def reached():
        job = _job(backend, job_id)
        return job if job is not None and ok(job) else None

    return wait_for(reached, timeout_s, f"job {job_id}: {what}", 0.3, seen=lambda: _job(backend, job_id))


def _sprio_site(job_id: str) -> int | None:
    out = subprocess.run(["sprio", "-h", "-j", job_id, "-o", "%.20i %.20S"], capture_output=True,
                         text=True, timeout=15).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == job_id:
            return int(parts[1])
    return None


def _scontrol_field(job_id: str, key: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                         timeout=15, check=True).stdout
    for token in out.split():
        if token.startswith(key + "="):
            return token[len(key) + 1:]
    raise AssertionError(f"{key}= not in scontrol show job {job_id}: {out[:200]}")


@pytest.fixture
def jobs(submit_as):
    """submit(user, args) -> job id; cancels every job it submitted afterwards and
    waits (bounded) until they have left the nodes, so the next test finds free GPUs."""
    submitted: list[str] = []

    def submit(user: str, args: str) -> str:
        job_id = submit_as(user, args)
        submitted.append(job_id)
        return job_id

    yield submit
    if not submitted:
        return
    subprocess.run(["scancel", *submitted], capture_output=True, timeout=15)
    backend = SlurmBackend()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        live = [j for j in backend.observe().jobs if j.job_id in submitted and j.state in ACTIVE_STATES]
        if not live:
            break
        time.sleep(0.3)


@pytest.fixture
def filled_cluster(jobs):
    """A running 16-GPU job as bob: every GPU is busy, so later jobs stay pending."""
    filler = jobs("bob", "-N4 --gres=gpu:4 -J filler --wrap 'sleep 300'")
    _wait_for(SlurmBackend(), filler, lambda j: j.state == "RUNNING", 30, "filler RUNNING")
    return filler


@pytest.fixture
def alice_dir():
    """A directory alice can write to (job scripts and their marker files)."""
    path = tempfile.mkdtemp(prefix="tiresias-backend-")
    shutil.chown(path, user="alice", group="alice")
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------- observe

@pytest.mark.slurm
def test_observe_sees_alice_gpu_job(jobs):
    backend = SlurmBackend()
    job_id = jobs("alice", "-N2 --gres=gpu:2 --comment=tiresias:skew=0.25 -J obs --wrap 'sleep 60'")
    job = _wait_for(backend, job_id, lambda j: j.state == "RUNNING", 30, "RUNNING")
    assert job.user == "alice"
    assert job.partition == "batch"
    assert job.gpus == 4
    assert len(job.nodes) == 2
    assert dict(job.gpus_by_node) == {n: 2 for n in job.nodes}
    assert job.comment == "tiresias:skew=0.25"
    assert job.batch and job.requeueable  # JobRequeue=1 on the test cluster
    assert job.restart_count == 0
    assert job.start_time_s is not None and job.submit_time_s is not None
    assert job.end_time_s is None

    observation = backend.observe()
    assert observation.skipped == []
    nodes = {n.name: n for n in observation.nodes}
    assert set(nodes) == {"gpu1", "gpu2", "gpu3", "gpu4"}
    for name in job.nodes:
        assert nodes[name].gpus_total == 4
        assert nodes[name].gpus_free <= 2
        assert nodes[name].available

    # Partition filter: "small" does not see a batch job; a list with batch does.
    assert _job(SlurmBackend(partitions=["small"]), job_id) is None
    assert _job(SlurmBackend(partitions=["nosuch", "batch"]), job_id) is not None
    assert {n.name for n in SlurmBackend(partitions=["small"]).observe().nodes} == {"gpu1", "gpu2"}


@pytest.mark.slurm
def test_observe_multi_partition_job_counts_in_any(jobs):
    job_id = jobs("alice", "-p batch,urgent --begin=now+600 --gres=gpu:1 --wrap 'sleep 5'")
    job = _job(SlurmBackend(partitions=["urgent"]), job_id)
    assert job is not None and job.state == "PENDING"
    assert set(job.partition.split(",")) == {"batch", "urgent"}
    assert _job(SlurmBackend(partitions=["small"]), job_id) is None


# ---------------------------------------------------------------------- site factor

@pytest.mark.slurm
def test_set_site_factors_batches_per_value(jobs, filled_cluster):
    a = jobs("alice", "--gres=gpu:1 -J sf-a --wrap 'sleep 5'")
    b = jobs("bob", "--gres=gpu:2 -J sf-b --wrap 'sleep 5'")
    c = jobs("alice", "--gres=gpu:1 -J sf-c --wrap 'sleep 5'")
    runner = RecordingRunner()
    backend = SlurmBackend(runner=runner)
    for job_id in (a, b, c):
        _wait_for(backend, job_id, lambda j: j.state == "PENDING" and j.site_factor is not None, 10,
                  "PENDING and listed by sprio")

    runner.calls.clear()
    backend.set_site_factors({a: 5000, b: 5000, c: -300})
    levers = runner.levers()
    assert sorted(levers) == sorted([
        ["scontrol", "update", f"JobId={','.join(sorted([a, b], key=int))}", "SiteFactor=5000"],
        ["scontrol", "update", f"JobId={c}", "SiteFactor=-300"],
    ])
    assert _sprio_site(a) == 5000 and _sprio_site(b) == 5000 and _sprio_site(c) == -300

    observed = {j.job_id: j for j in backend.observe().jobs}
    assert observed[a].site_factor == 5000 and observed[c].site_factor == -300

    # Values already in place are not sent again; only the changed one is.
    runner.calls.clear()
    backend.set_site_factors({a: 5000, b: 5000, c: 7})
    assert runner.levers() == [["scontrol", "update", f"JobId={c}", "SiteFactor=7"]]
    assert _sprio_site(c) == 7

    # The extremes of Slurm's range are accepted and read back unclipped.
    backend.set_site_factors({a: 2147483645, b: -2147483645})
    backend.observe()
    assert _sprio_site(a) == 2147483645 and _sprio_site(b) == -2147483645


@pytest.mark.slurm
def test_set_site_factors_vanished_job_raises_lever_failed(jobs, filled_cluster):
    a = jobs("alice", "--gres=gpu:1 --wrap 'sleep 5'")
    backend = SlurmBackend()
    _wait_for(backend, a, lambda j: j.state == "PENDING" and j.site_factor is not None, 10, "PENDING in sprio")
    with pytest.raises(LeverFailed) as info:
        backend.set_site_factors({a: 77, "999999999": 77})
    assert "999999999" in str(info.value) and "\n" not in str(info.value)
    # Slurm still updated the valid id of the list.
    assert _sprio_site(a) == 77


# ---------------------------------------------------------------------- placement, partition

@pytest.mark.slurm
def test_pin_nodes_and_clear(jobs):
    backend = SlurmBackend()
    job_id = jobs("alice", "--begin=now+600 --gres=gpu:1 --wrap 'sleep 5'")
    backend.pin_nodes(job_id, ["gpu3"])
    assert _scontrol_field(job_id, "ReqNodeList") == "gpu3"
    assert _job(backend, job_id).required_nodes == ("gpu3",)
    backend.pin_nodes(job_id, [])
    assert _scontrol_field(job_id, "ReqNodeList") == "(null)"
    assert _job(backend, job_id).required_nodes == ()


@pytest.mark.slurm
def test_move_partition_batch_to_small(jobs):
    backend = SlurmBackend()
    job_id = jobs("alice", "--begin=now+600 --gres=gpu:1 --wrap 'sleep 5'")
    assert _job(backend, job_id).partition == "batch"
    backend.move_partition(job_id, "small")
    assert _job(backend, job_id).partition == "small"
    assert _job(SlurmBackend(partitions=["small"]), job_id) is not None
    with pytest.raises(LeverFailed) as info:
        backend.move_partition(job_id, "nosuchpartition")
    assert job_id in str(info.value)


@pytest.mark.slurm
def test_move_partition_of_running_job_fails(jobs):
    backend = SlurmBackend()
    job_id = jobs("alice", "--gres=gpu:1 --wrap 'sleep 60'")
    _wait_for(backend, job_id, lambda j: j.state == "RUNNING", 30, "RUNNING")
    with pytest.raises(LeverFailed) as info:
        backend.move_partition(job_id, "small")
    message = str(info.value)
    assert job_id in message and "\n" not in message
    assert "pending" in message.lower()  # "Job is no longer pending execution"


# ---------------------------------------------------------------------- preemption cycle

@pytest.mark.slurm
def test_signal_requeue_release_cycle(jobs, alice_dir):
    script = alice_dir / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"DIR={alice_dir}\n"
        "trap 'echo usr1 > $DIR/usr1.${SLURM_RESTART_COUNT:-0}' USR1\n"
        "echo start >> $DIR/started.${SLURM_RESTART_COUNT:-0}\n"
        "for i in $(seq 1 120); do sleep 1; done\n")
    script.chmod(0o755)
    backend = SlurmBackend()
    job_id = jobs("alice", f"--gres=gpu:1 -J cycle -o {alice_dir}/out.%j {script}")
    _wait_for(backend, job_id, lambda j: j.state == "RUNNING", 30, "RUNNING")
    _wait_file(alice_dir / "started.0", 15)  # the trap is installed before this line

    backend.make_requeueable(job_id)
    assert _job(backend, job_id).requeueable

    backend.signal(job_id, "USR1")
    _wait_file(alice_dir / "usr1.0", 10)
    assert _job(backend, job_id).state == "RUNNING"  # the trap caught it: the job lives on

    backend.requeue(job_id)
    pending = _wait_for(backend, job_id, lambda j: j.state == "PENDING" and j.restart_count == 1, 20,
                        "PENDING with restart count 1")
    assert pending.reason == "BeginTime"  # held for cred_expire+1 s after a requeue
    assert pending.nodes == () and pending.gpus_by_node == ()

    # As the controller does (requeue_settle_s): let slurmd finish tearing down the
    # previous run, or it refuses the relaunch ("already killed") and the job fails.
    from controller.service.ops.config import Config

    time.sleep(Config().requeue_settle_s)
    released_at = time.monotonic()
    backend.release_begin_time(job_id)
    running = _wait_for(backend, job_id, lambda j: j.state == "RUNNING", 15, "RUNNING again")
    restart_s = time.monotonic() - released_at
    print(f"job {job_id} running again {restart_s:.1f} s after StartTime=now")
    assert running.restart_count == 1
    _wait_file(alice_dir / "started.1", 15)  # SLURM_RESTART_COUNT=1 in the second run


def _wait_file(path: Path, timeout_s: float) -> None:
    wait_for(path.exists, timeout_s, f"{path} to appear", 0.2)


@pytest.mark.slurm
def test_signal_to_pending_job_fails_fast(jobs):
    # 22.05 scancel --signal retries for over a minute on a pending job; the
    # backend checks the state first and refuses at once.
    job_id = jobs("alice", "--begin=now+600 --gres=gpu:1 --wrap 'sleep 5'")
    started = time.monotonic()
    with pytest.raises(LeverFailed, match=f"job {job_id}: job is PENDING"):
        SlurmBackend(command_timeout_s=5).signal(job_id, "USR1")
    assert time.monotonic() - started < 5


@pytest.mark.slurm
def test_requeue_unknown_job_raises_lever_failed(slurm_cluster):
    with pytest.raises(LeverFailed) as info:
        SlurmBackend().requeue("999999999")
    assert "999999999" in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------------- validation

@pytest.mark.parametrize("call", [
    lambda b: b.set_site_factors({"12; rm -rf /": 1}),
    lambda b: b.set_site_factors({"12": 1, "abc": 2}),
    lambda b: b.set_site_factors({"12": 2147483646}),
    lambda b: b.set_site_factors({"12": "5"}),
    lambda b: b.pin_nodes("12", ["gpu1", "gpu2 --evil"]),
    lambda b: b.pin_nodes("-1", ["gpu1"]),
    lambda b: b.signal("12", "USR1; reboot"),
    lambda b: b.signal("12_", "USR1"),
    lambda b: b.requeue(""),
    lambda b: b.requeue("12.0"),
    lambda b: b.make_requeueable("JobId=12"),
    lambda b: b.release_begin_time("12 13"),
    lambda b: b.move_partition("12", "batch small"),
    lambda b: b.move_partition("12", "batch\nx"),
])
def test_invalid_input_raises_value_error_and_runs_nothing(call):
    runner = RecordingRunner(inner=lambda *a: pytest.fail("no command may run"))
    with pytest.raises(ValueError):
        call(SlurmBackend(runner=runner))
    assert runner.calls == []


def test_valid_array_job_id_and_empty_factor_map():
    runner = RecordingRunner(inner=lambda argv, t, e: CommandResult(0, "", ""))
    backend = SlurmBackend(runner=runner)
    backend.set_site_factors({})
    backend.requeue("123_4")
    assert runner.calls == [["scontrol", "requeue", "123_4"]]


# ---------------------------------------------------------------------- unavailable

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slurm
def test_unreachable_slurmctld_raises_backend_unavailable(slurm_cluster, tmp_path):
    # The shared cluster keeps running: point the commands at a copy of slurm.conf
    # whose slurmctld port has no listener (MessageTimeout=1 keeps it quick).
    conf = tmp_path / "slurm.conf"
    lines = [ln for ln in Path("/etc/slurm/slurm.conf").read_text().splitlines()
             if not ln.startswith(("SlurmctldPort=", "MessageTimeout="))]
    lines += [f"SlurmctldPort={_free_port()}", "MessageTimeout=1"]
    conf.write_text("\n".join(lines) + "\n")
    conf.chmod(0o644)
    backend = SlurmBackend(env={"SLURM_CONF": str(conf)}, command_timeout_s=20)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as info:
        backend.observe()  # 22.05 squeue exits 0 here, with an "errors" entry
    assert "\n" not in str(info.value)
    for lever in (lambda: backend.requeue("1"), lambda: backend.set_site_factors({"1": 3}),
                  lambda: backend.pin_nodes("1", ["gpu1"]), lambda: backend.signal("1", "USR1")):
        with pytest.raises(BackendUnavailable):
            lever()
    assert time.monotonic() - started < 60


def test_missing_slurm_conf_times_out_as_unavailable():
    # With no readable slurm.conf the 22.05 tools retry for 60 s: the time-out applies.
    backend = SlurmBackend(env={"SLURM_CONF": "/nonexistent/slurm.conf"}, command_timeout_s=1)
    if shutil.which("squeue") is None:
        pytest.skip("squeue not installed")
    with pytest.raises(BackendUnavailable, match="did not answer within 1 s"):
        backend.observe()


def test_timeout_raises_backend_unavailable():
    def timing_out(argv, timeout_s, env):
        raise subprocess.TimeoutExpired(argv, timeout_s)

    backend = SlurmBackend(runner=timing_out, command_timeout_s=2)
    with pytest.raises(BackendUnavailable, match="within 2 s"):
        backend.observe()
    with pytest.raises(BackendUnavailable):
        backend.move_partition("5", "small")


# ---------------------------------------------------------------------- recorded output

def _fixture_runner(squeue_text: str, sinfo_text: str, sprio_text: str = ""):
    # scontrol: `show partition -o` of a slurmctld without partition lines (nothing known of their sharing)
    outputs = {"squeue": squeue_text, "sinfo": sinfo_text, "sprio": sprio_text, "scontrol": ""}

    def run(argv, timeout_s, env):
        return CommandResult(0, outputs[argv[0]], "")

    return run


def test_bad_record_is_skipped_and_the_rest_returned():
    squeue = json.loads((FIXTURES / "squeue.json").read_text())
    total = len(squeue["jobs"])
    squeue["jobs"][0]["job_state"] = 42  # unreadable
    sinfo = (FIXTURES / "sinfo.json").read_text()
    backend = SlurmBackend(runner=_fixture_runner(json.dumps(squeue), sinfo, "4 100\n10 -5\n"))
    observation = backend.observe()
    assert len(observation.jobs) == total - 1
    assert len(observation.skipped) == 1 and "job_state" in observation.skipped[0]
    by_id = {j.job_id: j for j in observation.jobs}
    assert by_id["4"].site_factor == 100 and by_id["10"].site_factor == -5
    assert len(observation.nodes) == 4


def test_errors_list_in_json_means_unavailable():
    doc = {"meta": {}, "errors": [{"description": "Failed while looking for jobs", "error_number": -1,
                                   "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []}
    sinfo = (FIXTURES / "sinfo.json").read_text()
    backend = SlurmBackend(runner=_fixture_runner(json.dumps(doc), sinfo))
    with pytest.raises(BackendUnavailable, match="Failed while looking for jobs"):
        backend.observe()
    backend = SlurmBackend(runner=_fixture_runner("garbage", sinfo))
    with pytest.raises(BackendUnavailable, match="not JSON"):
        backend.observe()


def test_failed_command_never_returns_partial_observation():
    def sinfo_fails(argv, timeout_s, env):
        if argv[0] == "sinfo":
            return CommandResult(1, "", "sinfo: error: Unable to contact slurm controller (connect failure)")
        return CommandResult(0, (FIXTURES / "squeue.json").read_text(), "")

    with pytest.raises(BackendUnavailable, match="connect failure"):
        SlurmBackend(runner=sinfo_fails).observe()


def test_gpus_by_node_from_gres_detail_and_even_split():
    squeue = json.loads((FIXTURES / "squeue.json").read_text())
    running = [j for j in squeue["jobs"] if j["job_state"] == "RUNNING"]
    sinfo = (FIXTURES / "sinfo.json").read_text()
    observed = {j.job_id: j for j in SlurmBackend(runner=_fixture_runner(json.dumps(squeue), sinfo)).observe().jobs}
    for raw in running:
        job = observed[str(raw["job_id"])]
        assert sum(n for _, n in job.gpus_by_node) == job.gpus
        assert [name for name, _ in job.gpus_by_node] == list(job.nodes)
    # Without gres_detail the total is split evenly, remainder to the first nodes.
    for raw in running:
        raw.pop("gres_detail", None)
        raw["job_resources"] = None
    observed = {j.job_id: j for j in SlurmBackend(runner=_fixture_runner(json.dumps(squeue), sinfo)).observe().jobs}
    for raw in running:
        job = observed[str(raw["job_id"])]
        counts = [n for _, n in job.gpus_by_node]
        assert sum(counts) == job.gpus and max(counts) - min(counts) <= 1


def test_gpus_by_node_from_2411_allocation_order():
    """24.05+ job_resources (nodes.allocation[].name), normalized by parse_jobs.py: gres_detail
    is read against Slurm's allocation order, not the sorted hostlist."""
    squeue = json.loads((FIXTURES.parent / "24.11" / "squeue.json").read_text())
    record = next(j for j in squeue["jobs"] if j["job_id"] == 5)
    record["nodes"] = "gpu[1-2]"
    record["tres_per_node"] = None
    record["tres_per_job"] = "gres/gpu:4"
    record["gres_detail"] = ["gpu:1(IDX:0)", "gpu:3(IDX:0-2)"]
    record["job_resources"]["nodes"]["allocation"] = [{"name": "gpu2"}, {"name": "gpu1"}]
    sinfo = (FIXTURES.parent / "24.11" / "sinfo.json").read_text()
    observed = {j.job_id: j for j in SlurmBackend(runner=_fixture_runner(json.dumps(squeue), sinfo)).observe().jobs}
    assert observed["5"].gpus_by_node == (("gpu2", 1), ("gpu1", 3))

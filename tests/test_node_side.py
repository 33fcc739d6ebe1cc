"""Node-side hooks run as subprocesses with crafted Slurm environments, the spool
collector, the co-location policy, the checkpoint helpers and the skew profiler.
The MPS control binary is the recording stand-in tests/fakes/nvidia-cuda-mps-control."""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from controller import checkpoint

from controller.core.levers import colocation

from controller.service.ops import skew
from controller.core.model import InputError
from controller.service.state.spool import collect_spool
from controller.service.state.store import Store

ROOT = Path(__file__).resolve().parents[1]
PROLOG = ROOT / "prolog" / "tiresias_prolog.py"
TASK_PROLOG = ROOT / "prolog" / "task_prolog.py"
EPILOG = ROOT / "epilog" / "tiresias_epilog.py"
FAKE = ROOT / "tests" / "fakes" / "nvidia-cuda-mps-control"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


@pytest.fixture
def node(tmp_path):
    """A private node setup: node.conf, run/spool/log dirs, a wrapper around the fake."""
    fake_log = tmp_path / "fake-mps.log"
    wrapper = tmp_path / "mps-control"
    wrapper.write_text(f"#!/bin/sh\nTIRESIAS_FAKE_MPS_LOG={fake_log} exec {FAKE} \"$@\"\n")
    wrapper.chmod(0o755)
    conf = tmp_path / "node.conf"
    conf.write_text(f"mps_control={wrapper}\nrun_dir={tmp_path}/run\nspool_dir={tmp_path}/spool\n"
                    f"log_file={tmp_path}/log/node.log\n")
    conf.chmod(0o644)

    class Node:
        path = tmp_path
        run_dir = tmp_path / "run"
        spool_dir = tmp_path / "spool"
        log_file = tmp_path / "log" / "node.log"

        def env(self, **extra):
            env = {"TIRESIAS_NODE_CONF": str(conf), "SLURM_JOB_ID": "101", "SLURM_JOB_UID": str(os.getuid()),
                   "SLURM_JOB_USER": "alice", "SLURMD_NODENAME": "gpu1", "SLURM_CLUSTER_NAME": "tc",
                   "SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_RESTART_COUNT": "0"}
            env.update({k: v for k, v in extra.items() if v is not None})
            for key in [k for k, v in extra.items() if v is None]:
                env.pop(key, None)
            return env

        def run(self, script, timeout=20, **extra):
            started = time.monotonic()
            proc = subprocess.run([PYTHON, "-I", str(script)], env=self.env(**extra), capture_output=True,
                                  text=True, timeout=timeout)
            proc.elapsed_s = time.monotonic() - started
            return proc

        def calls(self):
            if not fake_log.exists():
                return []
            return [json.loads(line) for line in fake_log.read_text().splitlines()]

        def log(self):
            return self.log_file.read_text() if self.log_file.exists() else ""

        def records(self):
            out = []
            for path in sorted(self.spool_dir.glob("*.jsonl")):
                out += [json.loads(line) for line in path.read_text().splitlines()]
            return out

        def write_conf(self, text):
            conf.write_text(conf.read_text() + text)

    yield Node()
    # stop any fake daemon left behind
    for pid_file in (tmp_path / "run").glob("gpu*/pipe/nvidia-cuda-mps-control.pid"):
        pid_file.unlink()


def commands(calls):
    return [c["argv"] if c["argv"] else c["stdin"] for c in calls]


# -- prolog / task prolog / epilog --------------------------------------------------------

def test_mps_job_full_cycle(node):
    mps = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"}
    proc = node.run(PROLOG, **mps)
    assert proc.returncode == 0, proc.stderr
    pipe, logdir = node.run_dir / "gpu0" / "pipe", node.run_dir / "gpu0" / "log"
    assert pipe.is_dir() and logdir.is_dir()
    calls = node.calls()
    assert commands(calls) == [["-d"], ["set_default_active_thread_percentage 25", f"start_server -uid {os.getuid()}"]]
    assert calls[0]["env"] == {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logdir),
                               "CUDA_VISIBLE_DEVICES": "0"}
    clients = json.loads((node.run_dir / "gpu0" / "clients.json").read_text())
    assert list(clients["jobs"]) == ["101"] and clients["jobs"]["101"]["percent"] == 25

    task = node.run(TASK_PROLOG, **mps)
    assert task.returncode == 0
    assert task.stdout.splitlines() == [
        f"export CUDA_MPS_PIPE_DIRECTORY={pipe}", f"export CUDA_MPS_LOG_DIRECTORY={logdir}",
        "export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
        f"export TIRESIAS_CHECKPOINT_MARKER={node.run_dir}/jobs/101.d/checkpoint"]

    # a second job of the same user on the same GPU reuses the daemon
    assert node.run(PROLOG, SLURM_JOB_ID="102", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50").returncode == 0
    # same user, larger tier: its server's limit is raised through the server's PID
    server = json.loads((pipe / "settings.json").read_text())["servers"][str(os.getuid())]
    assert commands(node.calls())[2:] == [["get_server_list"], [f"set_active_thread_percentage {server['pid']} 50"]]
    assert server["percent"] == 50.0
    assert "reusing MPS control daemon" in node.log() and f"raised uid {os.getuid()}'s server" in node.log()

    (node.run_dir / "jobs" / "101.d" / "checkpoint").write_text("{}")  # the helper's marker
    assert node.run(EPILOG, SLURM_JOB_EXIT_CODE2="3:0", **mps).returncode == 0
    assert len(node.calls()) == 4, "first epilog must not stop the daemon: job 102 still runs"
    assert node.run(EPILOG, SLURM_JOB_ID="102", SLURM_JOB_EXIT_CODE="0", **mps).returncode == 0
    assert commands(node.calls())[4:] == [["set_default_active_thread_percentage 100", "quit"]]
    assert not (node.run_dir / "gpu0").exists()
    assert not (node.run_dir / "jobs" / "101.json").exists() and not (node.run_dir / "jobs" / "101.d").exists()

    first, second = node.records()
    assert first["record_id"] == "tc/101/gpu1/0" and second["record_id"] == "tc/102/gpu1/0"
    assert first["exit_code"] == 3 and first["checkpoint_seen"] is True and first["gpus"] == [0]
    assert first["mps_percent"] == 25 and first["mps_daemon"] == "kept" and second["mps_daemon"] == "stopped"
    assert second["checkpoint_seen"] is False and second["exit_code"] == 0
    assert first["start_s"] <= first["end_s"]


def _daemon_settings(node):
    path = node.run_dir / "gpu0" / "pipe" / "settings.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_prolog_sets_the_limit_at_the_daemon_and_the_epilog_undoes_it(node):
    """The SM quota and the tier's pinned-memory limit are set at the control daemon
    for the job's user's server (not only exported to the job, which can unset it);
    the epilog resets the default once that user's last job on the GPU is gone."""
    node.write_conf("pinned_mem_limits=25:10G\n")
    alice, bob = os.getuid(), os.getuid() + 1
    assert node.run(PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25").returncode == 0
    assert node.run(PROLOG, SLURM_JOB_ID="102", SLURM_JOB_UID=str(bob),
                    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50").returncode == 0
    assert commands(node.calls())[1:] == [
        ["set_default_active_thread_percentage 25", "set_default_device_pinned_mem_limit 0 10G",
         f"start_server -uid {alice}"],
        ["set_default_active_thread_percentage 50", f"start_server -uid {bob}"]]
    servers = _daemon_settings(node)["servers"]
    assert (servers[str(alice)]["percent"], servers[str(alice)]["pinned"]) == (25.0, {"0": "10G"})
    assert servers[str(bob)]["percent"] == 50.0
    assert "daemon-side limit 25% of the SMs" in node.log() and "pinned memory 10G" in node.log()
    assert "names no limit for tiers [10, 50, 75, 100]" in node.log()

    assert node.run(EPILOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25").returncode == 0
    assert commands(node.calls())[3:] == [["set_default_active_thread_percentage 100"]]
    assert _daemon_settings(node)["default_percent"] == 100.0
    clients = json.loads((node.run_dir / "gpu0" / "clients.json").read_text())
    assert clients["limits"] == {str(bob): 50}
    assert node.run(EPILOG, SLURM_JOB_ID="102", SLURM_JOB_UID=str(bob),
                    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50").returncode == 0
    assert commands(node.calls())[4:] == [["set_default_active_thread_percentage 100", "quit"]]
    assert _daemon_settings(node) is None  # gone with the daemon


def test_bad_pinned_mem_limit_is_named_and_ignored(node):
    node.write_conf("pinned_mem_limits=25:lots,33:1G\n")
    assert node.run(PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25").returncode == 0
    assert "pinned_mem_limits entry '25:lots'" in node.log() and "'33:1G'" in node.log()
    assert commands(node.calls())[1] == ["set_default_active_thread_percentage 25", f"start_server -uid {os.getuid()}"]


def test_non_mps_job_makes_no_mps_calls_and_is_fast(node):
    proc = node.run(PROLOG)
    assert proc.returncode == 0 and proc.elapsed_s < 1.0
    assert node.calls() == [] and not (node.run_dir / "gpu0").exists()
    task = node.run(TASK_PROLOG)
    assert task.stdout.splitlines() == [f"export TIRESIAS_CHECKPOINT_MARKER={node.run_dir}/jobs/101.d/checkpoint"]
    assert node.run(EPILOG).returncode == 0
    assert node.calls() == []
    (record,) = node.records()
    assert record["mps_percent"] is None and record["gpus"] == [0]


@pytest.mark.parametrize("value", ["30", "abc", "", "25;rm -rf /", "1000", "-25"])
def test_malformed_quota_gets_default_tier(node, value):
    proc = node.run(PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=value)
    assert proc.returncode == 0
    assert f"MPS percentage {value!r} is not one of the tiers" in node.log()
    clients = json.loads((node.run_dir / "gpu0" / "clients.json").read_text())
    assert clients["jobs"]["101"]["percent"] == 25
    task = node.run(TASK_PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=value)
    assert "export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in task.stdout.splitlines()


def test_tiers_from_node_conf(node):
    node.write_conf("tiers=20,80\ndefault_tier=20\nbogus=1\n")
    assert node.run(PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="80").returncode == 0
    assert json.loads((node.run_dir / "gpu0" / "clients.json").read_text())["jobs"]["101"]["percent"] == 80
    assert "unknown setting 'bogus' ignored" in node.log()


@pytest.mark.parametrize("gpus", ["x", "0;reboot", "../0", "1,a"])
def test_non_numeric_gpu_index_no_mps(node, gpus):
    proc = node.run(PROLOG, SLURM_JOB_GPUS=gpus, CUDA_VISIBLE_DEVICES=gpus, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25")
    assert proc.returncode == 0
    assert node.calls() == []
    assert "is not comma-separated indexes" in node.log()
    assert [p.name for p in node.run_dir.iterdir()] == ["jobs"]
    task = node.run(TASK_PROLOG, SLURM_JOB_GPUS=gpus, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25")
    assert "export TIRESIAS_MPS=unavailable" in task.stdout.splitlines()


@pytest.mark.parametrize("job_id", ["1;rm -rf /", "../../etc", "", "12 34", "$(id)"])
def test_odd_job_id_rejected(node, job_id):
    for script in (PROLOG, EPILOG):
        proc = node.run(script, SLURM_JOB_ID=job_id, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25")
        assert proc.returncode == 0
    assert node.calls() == []
    assert not node.run_dir.exists() and not node.spool_dir.exists()
    assert f"job id {job_id!r} is not a decimal number" in node.log()
    assert node.run(TASK_PROLOG, SLURM_JOB_ID=job_id).stdout == ""


def test_symlinked_pipe_dir_is_moved_aside_not_followed(node, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (node.run_dir / "gpu0").mkdir(parents=True)
    (node.run_dir / "gpu0" / "pipe").symlink_to(target)
    assert node.run(PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25").returncode == 0
    assert (node.run_dir / "gpu0" / "pipe").is_dir() and not (node.run_dir / "gpu0" / "pipe").is_symlink()
    assert list(target.iterdir()) == []
    assert "was an unexpected symlink" in node.log()
    assert commands(node.calls())[0] == ["-d"]


def test_preexisting_pipe_dir_owned_by_someone_else(node):
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
    pipe = node.run_dir / "gpu0" / "pipe"
    pipe.mkdir(parents=True)
    os.chown(pipe, 65534, 65534)
    assert node.run(PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25").returncode == 0
    assert pipe.stat().st_uid == 0
    assert "was an unexpected directory (uid 65534)" in node.log()


def test_unwritable_run_dir_fails_open(node):
    node.write_conf(f"run_dir={node.path}/blocker/run\n")
    (node.path / "blocker").write_text("a file where a directory should be")
    proc = node.run(PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25")
    assert proc.returncode == 0
    assert "fail open" in node.log() and node.calls() == []
    task = node.run(TASK_PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25")
    assert task.stdout.splitlines() == ["export TIRESIAS_MPS=unavailable"]
    assert node.run(EPILOG).returncode == 0  # record still spooled, with no start time
    (record,) = node.records()
    assert record["start_s"] is None


def test_missing_mps_binary_fails_open_and_strict_mode_exits_1(node):
    node.write_conf("mps_control=/nonexistent/nvidia-cuda-mps-control\n")
    proc = node.run(PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25")
    assert proc.returncode == 0 and "runs without MPS (fail open)" in node.log()
    assert "export TIRESIAS_MPS=unavailable" in node.run(TASK_PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25").stdout
    node.write_conf("strict_mps=1\n")
    assert node.run(PROLOG, SLURM_JOB_ID="102", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25").returncode == 1
    assert node.run(PROLOG, SLURM_JOB_ID="103").returncode == 0  # strict only concerns MPS jobs


def test_hard_timeout_exits_0(node, tmp_path):
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    hang.chmod(0o755)
    node.write_conf(f"mps_control={hang}\ntimeout_s=1\nmps_command_timeout_s=20\n")
    proc = node.run(PROLOG, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25")
    assert proc.returncode == 0 and proc.elapsed_s < 5
    assert "ran past its 1 s deadline; exiting 0" in node.log()


def test_config_writable_by_others_is_ignored(node):
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("tiresias_node_test", str(PROLOG))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("tiresias_node_test", loader))
    loader.exec_module(module)
    conf = Path(node.env()["TIRESIAS_NODE_CONF"])
    assert module.load_config(str(conf)).run_dir == str(node.run_dir)
    conf.chmod(0o666)
    config = module.load_config(str(conf))
    assert config.run_dir == "/run/tiresias-mps" and "writable by others" in config.problems[0]


def test_concurrent_epilogs_never_tear_records(node):
    def one(i):
        return node.run(EPILOG, SLURM_JOB_ID=str(1000 + i), SLURM_JOB_COMMENT="x" * 3000).returncode

    with ThreadPoolExecutor(max_workers=20) as pool:
        assert list(pool.map(one, range(20))) == [0] * 20
    records = node.records()  # json.loads of every line: a torn line would raise
    assert sorted(r["job_id"] for r in records) == [str(1000 + i) for i in range(20)]


# -- spool collection ---------------------------------------------------------------------

def _store(tmp_path):
    return Store(f"sqlite:///{tmp_path}/store.db")


def test_spool_collection_idempotent_and_torn_tail(node, tmp_path):
    for i in range(3):
        assert node.run(EPILOG, SLURM_JOB_ID=str(200 + i)).returncode == 0
    spool_file = node.spool_dir / "usage-gpu1.jsonl"
    with open(spool_file, "ab") as handle:  # an epilog that died mid-write
        handle.write(b'{"record_id":"tc/999/gpu1/0","job_')
    store = _store(tmp_path)
    assert collect_spool(str(node.spool_dir), store) == (3, 0, 0)
    assert spool_file.exists(), "a torn last line keeps the file for the next collection"
    assert collect_spool(str(node.spool_dir), store) == (0, 3, 0)
    assert store.usage_record("tc/201/gpu1/0")["job_id"] == "201"
    # the next append ends the fragment; the fragment becomes one bad line, kept
    assert node.run(EPILOG, SLURM_JOB_ID="203").returncode == 0
    assert collect_spool(str(node.spool_dir), store) == (1, 3, 1)
    assert not spool_file.exists()
    (rotated,) = (node.spool_dir / "processed").iterdir()
    assert b'"tc/999/gpu1/0","job_\n' in rotated.read_bytes()
    assert collect_spool(str(node.spool_dir), store) == (0, 0, 0)


def test_controller_down_records_wait(node, tmp_path):
    for i in range(5):
        node.run(EPILOG, SLURM_JOB_ID=str(300 + i))

    class DownStore:
        def add_usage_record(self, record_id, fields):
            from controller.service.state.store import StoreError
            raise StoreError("database down")

    from controller.service.state.store import StoreError
    with pytest.raises(StoreError):
        collect_spool(str(node.spool_dir), DownStore())
    assert len(node.records()) == 5, "nothing rotated or deleted while the store is down"
    store = _store(tmp_path)
    assert collect_spool(str(node.spool_dir), store) == (5, 0, 0)
    assert store.usage_record("tc/304/gpu1/0") is not None


def test_collection_races_appends(node, tmp_path):
    store = _store(tmp_path)
    totals = [0, 0, 0]

    def writer(i):
        return node.run(EPILOG, SLURM_JOB_ID=str(400 + i)).returncode

    with ThreadPoolExecutor(max_workers=10) as pool:
        futures = [pool.submit(writer, i) for i in range(20)]
        while not all(f.done() for f in futures):
            for k, v in enumerate(collect_spool(str(node.spool_dir), store)):
                totals[k] += v
    for k, v in enumerate(collect_spool(str(node.spool_dir), store)):
        totals[k] += v
    assert totals[0] == 20 and totals[2] == 0
    assert all(store.usage_record(f"tc/{400 + i}/gpu1/0") for i in range(20))


# -- co-location policy -------------------------------------------------------------------

def test_latency_class_gets_large_tier_and_best_fit():
    policy = colocation.ColocationPolicy()
    gpus = [colocation.SharedGpu("n1", 0, (colocation.Tenant("1", "alice", 25),)), colocation.SharedGpu("n1", 1)]
    actions = colocation.plan_colocation(
        [colocation.ShareRequest("2", "alice", "tiresias:class=latency"),
         colocation.ShareRequest("3", "alice", requested_percent=25)], gpus, policy)
    assert [(a.kind, a.node, a.gpu, a.tier) for a in actions] == [("place", "n1", 0, 75), ("place", "n1", 1, 25)]
    assert "large tier 75%" in actions[0].reason


def test_one_user_per_gpu_unless_allowed():
    gpus = [colocation.SharedGpu("n1", 0, (colocation.Tenant("1", "alice", 25),))]
    request = [colocation.ShareRequest("2", "bob", requested_percent=25)]
    (wait,) = colocation.plan_colocation(request, gpus)
    assert wait.kind == "wait" and "time-slices different users" in wait.reason
    (place,) = colocation.plan_colocation(request, gpus, colocation.ColocationPolicy(allow_multi_user=True))
    assert place.kind == "place" and "MPS time-slices them" in place.reason


def test_capacity_bad_tier_and_class_hint():
    gpus = [colocation.SharedGpu("n1", 0, (colocation.Tenant("1", "alice", 75, "latency"),))]
    actions = colocation.plan_colocation(
        [colocation.ShareRequest("2", "alice", "tiresias:class=latency"),
         colocation.ShareRequest("3", "alice", "tiresias:class=urgent", requested_percent=30),
         colocation.ShareRequest("4", "alice", requested_percent=10)], gpus)
    assert [a.kind for a in actions] == ["wait", "place", "wait"]
    assert "latency-critical" in actions[0].reason
    assert actions[1].tier == 25 and "not a tier" in actions[1].reason and "'tiresias:class=urgent'" in actions[1].reason
    assert "100% + 10% > 100%" in actions[2].reason or "> 100%" in actions[2].reason


def test_quota_change_only_through_requeue():
    assert colocation.quota_change("1", 25, 50, requeueable=True).kind == "requeue"
    assert colocation.quota_change("1", 25, 50, requeueable=False).kind == "keep"
    assert colocation.quota_change("1", 25, 25, requeueable=True).kind == "keep"
    assert colocation.quota_change("1", 25, 33, requeueable=True).kind == "keep"


# -- checkpoint helpers -------------------------------------------------------------------

def test_save_atomically_writes_marker(tmp_path, monkeypatch):
    marker = tmp_path / "jobdir" / "checkpoint"
    marker.parent.mkdir()
    monkeypatch.setenv("TIRESIAS_CHECKPOINT_MARKER", str(marker))
    target = tmp_path / "ckpt.bin"
    target.write_bytes(b"old")
    checkpoint.save_atomically(str(target), b"new state")
    assert target.read_bytes() == b"new state"
    assert json.loads(marker.read_text())["checkpoint"] == str(target)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def wait_for_handler(proc: subprocess.Popen, signum: int, timeout_s: float = 30.0) -> None:
    """Until ``proc`` catches ``signum`` (its SigCgt mask in /proc): a signal sent
    before the job installed its handler kills it, and under load Python's start-up
    alone took longer than the one second a fixed sleep gave it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
        if caught & (1 << (signum - 1)):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {proc.pid} did not install a handler for signal {signum} in {timeout_s:g} s "
                         f"(exit {proc.poll()})")


def test_signal_handler_and_python_example(tmp_path):
    ckpt = tmp_path / "ckpt.json"
    env = dict(os.environ, TIRESIAS_CHECKPOINT_MARKER=str(tmp_path / "marker"))
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / "train_loop.py"), "--steps", "1000",
                             "--step-s", "0.01", "--checkpoint", str(ckpt)], env=env, stdout=subprocess.PIPE, text=True)
    wait_for_handler(proc, signal.SIGUSR1)
    time.sleep(0.1)  # a few of its steps
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == checkpoint.REQUEUE_EXIT_CODE and "checkpointed at step" in out
    step = json.loads(ckpt.read_text())["step"]
    assert 0 < step < 1000 and (tmp_path / "marker").exists()
    resumed = subprocess.run([sys.executable, str(ROOT / "examples" / "train_loop.py"), "--steps", str(step + 2),
                              "--step-s", "0", "--checkpoint", str(ckpt)], capture_output=True, text=True, timeout=20)
    assert f"resumed at step {step}" in resumed.stdout and resumed.returncode == 0


def test_bash_snippet_traps_and_exits_85(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(f"""source {ROOT}/prolog/checkpoint.sh
save_state() {{ tiresias_save_atomically {tmp_path}/ckpt.txt "$step"; }}
tiresias_checkpoint_trap save_state
step=0
echo ready
while true; do sleep 0.1 & wait $!; step=$((step + 1)); done
""")
    env = dict(os.environ, TIRESIAS_CHECKPOINT_MARKER=str(tmp_path / "marker"))
    proc = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=10) == 85
    assert int((tmp_path / "ckpt.txt").read_text()) > 0 and (tmp_path / "marker").exists()


def test_signal_names():
    assert checkpoint.signal_number("USR2") == signal.SIGUSR2
    assert checkpoint.signal_number("SIGTERM") == signal.SIGTERM
    with pytest.raises(ValueError):
        checkpoint.signal_number("NOPE")


# -- skew profiling -------------------------------------------------------------------------

def _safetensors(path, tensors):
    header, offset = {}, 0
    for name, nbytes in tensors.items():
        header[name] = {"dtype": "F32", "shape": [nbytes // 4], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_skew_npz_and_safetensors(tmp_path):
    import numpy as np

    np.savez(tmp_path / "m.npz", a=np.zeros(300, np.float32), b=np.zeros(100, np.float32))
    assert skew.profile(str(tmp_path / "m.npz")).skew == pytest.approx(0.75)
    _safetensors(tmp_path / "m.safetensors", {"emb": 800, "w": 200})
    result = skew.profile(str(tmp_path / "m.safetensors"))
    assert result.skew == pytest.approx(0.8) and result.largest_name == "emb"


def test_skew_bad_inputs(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(InputError, match="does not fit"):
        skew.profile(str(bad))
    _safetensors(tmp_path / "empty.safetensors", {})
    with pytest.raises(InputError, match="no tensor data"):
        skew.profile(str(tmp_path / "empty.safetensors"))
    (tmp_path / "m.pt").write_bytes(b"x")
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(InputError, match="needs torch"):
            skew.profile(str(tmp_path / "m.pt"))


def test_profile_skew_cli_stores_for_known_job(tmp_path, capsys):
    from controller.cli.main import main
    from controller.service.state.store import JobRecord

    _safetensors(tmp_path / "m.safetensors", {"emb": 700, "w": 300})
    url = f"sqlite:///{tmp_path}/store.db"
    with Store(url) as store:
        store.save_jobs("tc", [JobRecord(job_id="55", num_gpus=1, submit_time_s=1.0)])
    assert main(["profile-skew", str(tmp_path / "m.safetensors"), "--job", "55", "--database-url", url,
                 "--cluster", "tc"]) == 0
    out = capsys.readouterr().out
    assert "skew 0.7000" in out and "--comment=tiresias:skew=0.7000" in out
    with Store(url) as store:
        assert store.load_jobs("tc")["55"].skew == pytest.approx(0.7)
    assert main(["profile-skew", str(tmp_path / "m.safetensors"), "--job", "56", "--database-url", url,
                 "--cluster", "tc"]) == 2


def test_the_controller_collects_and_prunes_old_usage_records(node, tmp_path):
    """A round collects the spool and deletes this cluster's records older than
    usage_max_age_s (never another cluster's)."""
    from controller.service.state.jobs import usage_records
    from tests.test_controller import ScriptedBackend, controller

    store = _store(tmp_path)
    for record_id in ("default/1/gpu1/0", "elsewhere/1/gpu1/0"):
        store.add_usage_record(record_id, {"record_id": record_id})
    with store._tx() as conn:  # noqa: SLF001 - both stored a year ago
        conn.execute(usage_records.update().values(added_s=0.0))
    assert node.run(EPILOG, SLURM_CLUSTER_NAME="default").returncode == 0
    c = controller(store, ScriptedBackend(), usage_spool_dir=str(node.spool_dir), usage_max_age_s=86400.0)
    c.run_round()
    assert [r["record_id"] for r in store.usage_records("default")] == ["default/101/gpu1/0"]
    assert store.usage_record("elsewhere/1/gpu1/0") is not None

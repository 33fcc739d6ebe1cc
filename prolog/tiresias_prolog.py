#!/usr/bin/python3 -I
"""Tiresias Slurm Prolog: per-GPU MPS control daemon for jobs given a shared GPU.

One file on purpose (over 600 lines): nodes get this file alone (configless Slurm ships
single files), and the Epilog and TaskProlog load their shared code from it.

Installed as ``Prolog=/etc/slurm/tiresias/prolog``. Python 3 standard library only,
so it runs on configless nodes where nothing but this file was shipped. This file is
also the node-side library: the Epilog and the TaskProlog load it from next to
themselves (``/etc/slurm/tiresias/prolog``) or from the repository's ``prolog/``.

What it does for one job (Slurm runs it as root, before the batch step):
  * always: validates the job's Slurm environment and writes a small per-job state
    file ``<run_dir>/jobs/<jobid>.json`` (start time, GPUs, MPS outcome) and a
    job-owned directory ``<run_dir>/jobs/<jobid>.d/`` for the checkpoint marker;
  * for a job given a shared GPU (``--gres=mps:N``: Slurm sets
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``) on exactly one GPU: creates
    ``<run_dir>/gpu<IDX>/{pipe,log}``, starts that GPU's MPS control daemon unless it
    already runs (``nvidia-cuda-mps-control -d`` with CUDA_MPS_PIPE_DIRECTORY,
    CUDA_MPS_LOG_DIRECTORY and CUDA_VISIBLE_DEVICES set), sends
    ``start_server -uid <SLURM_JOB_UID>`` on its stdin, and records the job as a
    client in ``<run_dir>/gpu<IDX>/clients.json`` (the Epilog's last-client test).

Failure policy (a non-zero exit or a timeout DRAINS the node and holds the job):
  * Every failure of ours is logged and the prolog exits 0 ("fail open"). A job whose
    MPS daemon could not be started runs without MPS: CUDA then time-slices the GPU
    and the SM quota is not enforced. That costs isolation, not correctness (an MPS
    quota never changes kernel launch configurations, so results are the same). The
    TaskProlog tells the job by exporting ``TIRESIAS_MPS=unavailable``.
  * The one exception is opt-in: ``strict_mps=1`` in node.conf makes "MPS was asked
    for and could not be started" exit 1, for sites where an unenforced quota is
    unacceptable. Slurm then drains the node and requeues the job held; only set it
    where a missing/broken MPS really means a broken node.
  * Malformed job ids, uids, node names or GPU indexes are rejected before any path
    or command is built from them (logged, exit 0, nothing done). No shell is ever
    used; commands get argv lists and their input on stdin.
  * A hard internal deadline (``timeout_s``, signal.alarm) logs and exits 0 before
    Slurm's own PrologEpilogTimeout could drain the node.

Settings: optional ``/etc/tiresias/node.conf`` (``key=value`` lines, ``#`` comments;
path overridable with ``TIRESIAS_NODE_CONF``, which only slurmd's environment can
set: Slurm builds the hook's environment itself). Unknown keys and bad values are
logged and the built-in default is used. Keys and defaults: see ``DEFAULTS``.
"""
from __future__ import annotations

import fcntl
import grp
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time

CONF_ENV = "TIRESIAS_NODE_CONF"
DEFAULT_CONF_PATH = "/etc/tiresias/node.conf"
# Slurm starts the hooks with no PATH at all; search these after PATH.
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
MPS_BINARY = "nvidia-cuda-mps-control"
MPS_PID_FILE = "nvidia-cuda-mps-control.pid"  # written by the control daemon in its pipe dir

DEFAULTS = {
    "tiers": "10,25,50,75,100",          # allowed SM-quota tiers (percent)
    "default_tier": "25",                # used when the job's percentage is not a tier
    "mps_control": "",                   # path of nvidia-cuda-mps-control; "" = search PATH
    "run_dir": "/run/tiresias-mps",      # per-GPU pipe/log dirs, client state, per-job state
    "spool_dir": "/var/spool/tiresias/usage",
    "log_file": "/var/log/tiresias/prolog.log",
    "timeout_s": "8",                    # hard deadline of one prolog/epilog run
    "mps_command_timeout_s": "4",        # one nvidia-cuda-mps-control call
    "strict_mps": "0",                   # 1: exit 1 when MPS was asked for and failed (drains!)
    "spool_group": "tiresias",           # the collector's group: reads and rotates the spool
    "pinned_mem_limits": "",             # per tier pinned-memory limit at the daemon, e.g. "10:4G,25:10G"
}

JOB_ID_RE = re.compile(r"[0-9]{1,12}")
UID_RE = re.compile(r"[0-9]{1,10}")
GPU_INDEX_RE = re.compile(r"[0-9]{1,3}")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PERCENT_RE = re.compile(r"[0-9]{1,3}")


class NodeError(Exception):
    """A node-side step failed; the message is one line for the log."""


# -- configuration --------------------------------------------------------------------


class NodeConfig:
    """Validated node settings; ``problems`` lists what was ignored and why."""

    def __init__(self, values: dict, problems: list):
        self.problems = problems
        self.tiers = _parse_tiers(values["tiers"], problems)
        default_tier = _parse_int(values["default_tier"], "default_tier", problems)
        if default_tier not in self.tiers:
            fallback = min(self.tiers)
            problems.append(f"default_tier {values['default_tier']!r} is not one of the tiers; using {fallback}")
            default_tier = fallback
        self.default_tier = default_tier
        self.mps_control = values["mps_control"]
        self.run_dir = _parse_abs_path(values["run_dir"], "run_dir", DEFAULTS["run_dir"], problems)
        self.spool_dir = _parse_abs_path(values["spool_dir"], "spool_dir", DEFAULTS["spool_dir"], problems)
        self.log_file = _parse_abs_path(values["log_file"], "log_file", DEFAULTS["log_file"], problems)
        self.timeout_s = _parse_int(values["timeout_s"], "timeout_s", problems, low=1, high=300) or 8
        self.mps_command_timeout_s = _parse_int(
            values["mps_command_timeout_s"], "mps_command_timeout_s", problems, low=1, high=60) or 4
        self.strict_mps = values["strict_mps"].strip() in ("1", "yes", "true")
        self.spool_group = values["spool_group"].strip()
        self.pinned_mem_limits = _parse_pinned_limits(values["pinned_mem_limits"], self.tiers, problems)


PINNED_LIMIT_RE = re.compile(r"([0-9]{1,3}):([0-9]{1,7}[MG])")


def _parse_pinned_limits(text: str, tiers, problems: list) -> dict:
    """``tier:limit`` pairs ("25:10G,50:20G"): the pinned device memory the MPS daemon
    grants a server of that tier; a tier not named gets no daemon-side memory limit."""
    limits = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = PINNED_LIMIT_RE.fullmatch(part)
        if not match or int(match.group(1)) not in tiers:
            problems.append(f"pinned_mem_limits entry {part[:64]!r} is not TIER:<n>M|G with a known tier; ignored")
            continue
        limits[int(match.group(1))] = match.group(2)
    unnamed = [t for t in sorted(tiers) if t not in limits]
    if limits and unnamed:  # the daemon keeps a pinned default until it quits
        problems.append(f"pinned_mem_limits names no limit for tiers {unnamed}: their servers inherit the "
                        "pinned-memory default last set on that GPU")
    return limits


def load_config(path: str | None = None) -> NodeConfig:
    """Read node.conf (missing file = built-in defaults). Never raises."""
    path = path or os.environ.get(CONF_ENV) or DEFAULT_CONF_PATH
    values = dict(DEFAULTS)
    problems: list = []
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return NodeConfig(values, problems)
    except OSError as exc:
        problems.append(f"config {path}: {exc.strerror}; using built-in defaults")
        return NodeConfig(values, problems)
    # Root runs this: a config others can write could point mps_control anywhere.
    if info.st_uid != 0 and info.st_uid != os.geteuid() or info.st_mode & 0o022:
        problems.append(f"config {path} is writable by others or not owned by root; using built-in defaults")
        return NodeConfig(values, problems)
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read(65536).splitlines()
    except OSError as exc:
        problems.append(f"config {path}: {exc.strerror}; using built-in defaults")
        return NodeConfig(values, problems)
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in DEFAULTS:
            problems.append(f"config {path}:{number}: unknown setting {key!r} ignored")
            continue
        values[key] = value
    return NodeConfig(values, problems)


def _parse_int(text, name, problems, low=0, high=100):
    text = str(text).strip()
    if re.fullmatch(r"[0-9]{1,6}", text) and low <= int(text) <= high:
        return int(text)
    problems.append(f"{name} {text!r} is not an integer in {low}..{high}; using {DEFAULTS[name]}")
    return int(DEFAULTS[name])


def _parse_tiers(text, problems):
    items = [item.strip() for item in str(text).split(",")]
    if items and all(PERCENT_RE.fullmatch(item) and 1 <= int(item) <= 100 for item in items):
        return tuple(sorted({int(item) for item in items}))
    problems.append(f"tiers {text!r} is not a list of integers 1..100; using {DEFAULTS['tiers']}")
    return tuple(int(item) for item in DEFAULTS["tiers"].split(","))


def _parse_abs_path(text, name, default, problems):
    text = str(text).strip()
    if text.startswith("/") and "\0" not in text and "/../" not in text + "/":
        return os.path.normpath(text)
    problems.append(f"{name} {text!r} is not an absolute path; using {default}")
    return default


# -- logging and deadline ---------------------------------------------------------------


class NodeLog:
    """Appends one line per message to the log file, else to stderr. Never raises."""

    def __init__(self, path: str, tag: str):
        self.path, self.tag, self.context = path, tag, ""

    def __call__(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        line = f"{stamp} {self.tag}[{os.getpid()}]{self.context}: {message}\n".encode("utf-8", "replace")
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o755, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError:
            try:
                sys.stderr.write(line.decode())
            except OSError:
                pass


def arm_deadline(seconds: int, log: NodeLog, what: str) -> None:
    """After ``seconds`` log and exit 0 at once: a hung hook must not drain the node."""

    def expired(_signum, _frame):
        log(f"{what} ran past its {seconds} s deadline; exiting 0 (fail open)")
        os._exit(0)

    signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)


# -- validated job environment -------------------------------------------------------------


class JobEnv:
    """The fields of Slurm's Prolog/Epilog environment this code uses, validated.

    ``error`` is set (and nothing else should be trusted) when an identifier is malformed.
    """

    def __init__(self, env: dict, config: NodeConfig, log: NodeLog):
        self.error = None
        self.notes: list = []
        self.job_id = env.get("SLURM_JOB_ID", "")
        if not JOB_ID_RE.fullmatch(self.job_id):
            self.error = f"job id {self.job_id[:64]!r} is not a decimal number; doing nothing"
            return
        self.uid = env.get("SLURM_JOB_UID", "")
        if not UID_RE.fullmatch(self.uid) or int(self.uid) > 2**31:
            self.error = f"job uid {self.uid[:64]!r} is not a decimal uid; doing nothing"
            return
        self.uid = int(self.uid)
        self.node = env.get("SLURMD_NODENAME", "") or os.uname().nodename.split(".")[0]
        if not NAME_RE.fullmatch(self.node):
            self.error = f"node name {self.node[:64]!r} has unexpected characters; doing nothing"
            return
        self.cluster = env.get("SLURM_CLUSTER_NAME", "") or "cluster"
        if not NAME_RE.fullmatch(self.cluster):
            self.notes.append(f"cluster name {self.cluster[:64]!r} has unexpected characters; using 'cluster'")
            self.cluster = "cluster"
        restart = env.get("SLURM_JOB_RESTART_COUNT", "") or env.get("SLURM_RESTART_COUNT", "") or "0"
        self.restart_count = int(restart) if re.fullmatch(r"[0-9]{1,6}", restart) else 0
        self.user = env.get("SLURM_JOB_USER", "")
        if not NAME_RE.fullmatch(self.user):
            self.user = ""
        self.work_dir = env.get("SLURM_JOB_WORK_DIR", "")
        # GPUs: SLURM_JOB_GPUS ("0,2") for gpu and mps jobs; CUDA_VISIBLE_DEVICES as fallback.
        gpu_text = env.get("SLURM_JOB_GPUS", "") or env.get("CUDA_VISIBLE_DEVICES", "")
        items = [item.strip() for item in gpu_text.split(",")] if gpu_text.strip() else []
        self.gpus_valid = all(GPU_INDEX_RE.fullmatch(item) for item in items)
        self.gpus = [int(item) for item in items] if self.gpus_valid else []
        if not self.gpus_valid:
            self.notes.append(f"GPU list {gpu_text[:64]!r} is not comma-separated indexes; no MPS, no GPUs recorded")
        # A shared GPU: Slurm exports the percentage to the prolog only for --gres=mps.
        raw_percent = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
        self.wants_mps = raw_percent is not None
        self.percent = None
        if self.wants_mps:
            self.percent = quota_tier(raw_percent, config, self.notes)


def quota_tier(raw: str, config: NodeConfig, notes: list) -> int:
    """The SM-quota tier for Slurm's percentage: itself when it is an allowed tier,
    else the configured default tier (and a note naming the value)."""
    text = (raw or "").strip()
    if PERCENT_RE.fullmatch(text) and int(text) in config.tiers:
        return int(text)
    notes.append(f"MPS percentage {(raw or '')[:64]!r} is not one of the tiers {list(config.tiers)}; "
                 f"using default tier {config.default_tier}")
    return config.default_tier


# -- safe paths -----------------------------------------------------------------------------


def gpu_dir(config: NodeConfig, gpu: int) -> str:
    return os.path.join(config.run_dir, f"gpu{int(gpu)}")


def mps_dirs(config: NodeConfig, gpu: int) -> tuple:
    base = gpu_dir(config, gpu)
    return os.path.join(base, "pipe"), os.path.join(base, "log")


def jobs_dir(config: NodeConfig) -> str:
    return os.path.join(config.run_dir, "jobs")


def job_state_path(config: NodeConfig, job_id: str) -> str:
    return os.path.join(jobs_dir(config), f"{job_id}.json")


def job_private_dir(config: NodeConfig, job_id: str) -> str:
    return os.path.join(jobs_dir(config), f"{job_id}.d")


def checkpoint_marker_path(config: NodeConfig, job_id: str) -> str:
    """Where the checkpoint helpers write the marker the Epilog detects."""
    return os.path.join(job_private_dir(config, job_id), "checkpoint")


def ensure_dir(path: str, mode: int, log: NodeLog, owner_uid: int | None = None) -> None:
    """Make ``path`` a real directory owned by us (or ``owner_uid``) with ``mode``.

    A symlink, a non-directory or a directory someone else owns is moved aside (never
    followed, never written into); raises NodeError when that or mkdir fails.
    """
    want_uid = os.geteuid()
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise NodeError(f"cannot inspect {path}: {exc.strerror}") from None
    if info is not None:
        ours = stat.S_ISDIR(info.st_mode) and info.st_uid in (want_uid, owner_uid if owner_uid is not None else want_uid)
        if not ours:
            aside = f"{path}.unsafe-{int(time.time())}-{os.getpid()}"
            kind = "symlink" if stat.S_ISLNK(info.st_mode) else "directory" if stat.S_ISDIR(info.st_mode) else "file"
            try:
                os.rename(path, aside)
            except OSError as exc:
                raise NodeError(f"{path} is an unexpected {kind} (uid {info.st_uid}) and cannot be moved aside: "
                                f"{exc.strerror}") from None
            log(f"{path} was an unexpected {kind} (uid {info.st_uid}); moved it to {aside}")
            info = None
    if info is None:
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            return ensure_dir(path, mode, log, owner_uid)  # lost a race with another hook: re-check
        except OSError as exc:
            raise NodeError(f"cannot create {path}: {exc.strerror}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise NodeError(f"cannot open {path}: {exc.strerror}") from None
    try:
        if owner_uid is not None and os.fstat(fd).st_uid != owner_uid:
            os.fchown(fd, owner_uid, -1)
        os.fchmod(fd, mode)
    except OSError as exc:
        raise NodeError(f"cannot set owner/mode of {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def ensure_run_dirs(config: NodeConfig, log: NodeLog) -> None:
    """The run dir and its jobs/ subdir: root-owned, 0755 (the TaskProlog, running as
    the job's user, reads the per-job state file)."""
    parent = os.path.dirname(config.run_dir)
    try:
        os.makedirs(parent, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise NodeError(f"cannot create {parent}: {exc.strerror}") from None
    ensure_dir(config.run_dir, 0o755, log)
    ensure_dir(jobs_dir(config), 0o755, log)


def write_file_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """temp file + fsync + rename in the same (root-owned) directory."""
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def read_json(path: str, default):
    """A small JSON state file, not following symlinks; ``default`` when absent/bad."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return default
    try:
        with os.fdopen(fd, "rb") as handle:
            return json.loads(handle.read(1 << 20).decode("utf-8"))
    except (OSError, ValueError):
        return default


class GpuLock:
    """flock on ``<run_dir>/gpu<IDX>.lock``: prologs and epilogs of one GPU serialize.
    The lock file lives outside the GPU dir, which the last epilog removes."""

    def __init__(self, config: NodeConfig, gpu: int):
        self.path = os.path.join(config.run_dir, f"gpu{int(gpu)}.lock")
        self.fd = -1

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)  # bounded by the hook's deadline
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def clients_path(config: NodeConfig, gpu: int) -> str:
    return os.path.join(gpu_dir(config, gpu), "clients.json")


def read_clients(config: NodeConfig, gpu: int) -> dict:
    state = read_json(clients_path(config, gpu), {})
    if not isinstance(state, dict) or not isinstance(state.get("jobs"), dict):
        state = {"jobs": {}}
    return state


def write_clients(config: NodeConfig, gpu: int, state: dict) -> None:
    write_file_atomic(clients_path(config, gpu), json.dumps(state, sort_keys=True).encode())


# -- MPS control ------------------------------------------------------------------------------


def find_mps_control(config: NodeConfig) -> str:
    """The control binary: node.conf ``mps_control`` (absolute, executable) or PATH."""
    if config.mps_control:
        path = config.mps_control
        if not path.startswith("/"):
            raise NodeError(f"mps_control {path!r} is not an absolute path")
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise NodeError(f"mps_control {path} is not an executable file")
        return path
    search = [p for p in os.environ.get("PATH", "").split(":") if p.startswith("/")] + list(SYSTEM_PATH)
    for directory in search:
        candidate = os.path.join(directory, MPS_BINARY)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise NodeError(f"{MPS_BINARY} not found (PATH and {':'.join(SYSTEM_PATH)}; set mps_control= in node.conf)")


def mps_env(config: NodeConfig, gpu: int) -> dict:
    pipe, logdir = mps_dirs(config, gpu)
    return {"PATH": ":".join(SYSTEM_PATH), "CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": logdir,
            "CUDA_VISIBLE_DEVICES": str(int(gpu))}


def mps_command(binary: str, config: NodeConfig, gpu: int, args: list, stdin_text: str | None = None) -> str:
    """Run the control binary (argv list, never a shell) for one GPU; returns stdout.

    ``-d`` forks the daemon, which could keep an output pipe open forever: its output
    goes to /dev/null (the daemon logs to CUDA_MPS_LOG_DIRECTORY)."""
    detached = "-d" in args
    out = subprocess.DEVNULL if detached else subprocess.PIPE
    try:
        proc = subprocess.run([binary] + args, input=(stdin_text or "").encode(), env=mps_env(config, gpu),
                              stdout=out, stderr=out, close_fds=True,
                              timeout=config.mps_command_timeout_s, cwd="/")
    except subprocess.TimeoutExpired:
        raise NodeError(f"{binary} {' '.join(args)} (stdin {stdin_text!r}) timed out after "
                        f"{config.mps_command_timeout_s} s") from None
    except OSError as exc:
        raise NodeError(f"cannot run {binary}: {exc.strerror}") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout or b"").decode("utf-8", "replace").strip().splitlines()
        raise NodeError(f"{binary} {' '.join(args)} (stdin {stdin_text!r}) exited {proc.returncode}"
                        f"{': ' + detail[-1] if detail else ''}")
    return (proc.stdout or b"").decode("utf-8", "replace")


def mps_daemon_pid(config: NodeConfig, gpu: int) -> int | None:
    """The running control daemon's pid from its pid file in the pipe dir, else None."""
    pipe, _ = mps_dirs(config, gpu)
    try:
        fd = os.open(os.path.join(pipe, MPS_PID_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            text = handle.read(32).decode("ascii", "replace").strip()
    except OSError:
        return None
    if not re.fullmatch(r"[0-9]{1,10}", text):
        return None
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return int(text)


def start_mps_for_job(job: JobEnv, config: NodeConfig, log: NodeLog) -> dict:
    """Start or reuse the job's GPU's MPS daemon and register the job as its client.
    Returns the MPS part of the job state; raises NodeError."""
    if not job.gpus_valid or len(job.gpus) != 1:
        raise NodeError(f"an MPS job needs exactly one valid GPU index here, got {job.gpus or 'none'}")
    gpu = job.gpus[0]
    binary = find_mps_control(config)
    with GpuLock(config, gpu):
        ensure_dir(gpu_dir(config, gpu), 0o755, log)
        pipe, logdir = mps_dirs(config, gpu)
        # Clients (the job's user) connect through sockets in the pipe dir; the daemon
        # creates them world-accessible, so the directories only need to be traversable.
        ensure_dir(pipe, 0o755, log)
        ensure_dir(logdir, 0o755, log)
        state = read_clients(config, gpu)
        pid = mps_daemon_pid(config, gpu)
        if pid is None:
            if state["jobs"]:
                log(f"gpu{gpu}: MPS daemon gone while jobs {sorted(state['jobs'])} were registered; restarting it")
            mps_command(binary, config, gpu, ["-d"])
            log(f"gpu{gpu}: started MPS control daemon (pipe {pipe})")
        else:
            log(f"gpu{gpu}: reusing MPS control daemon pid {pid}")
        start_user_server(binary, config, gpu, job, state, log)
        other_uids = sorted({entry.get("uid") for entry in state["jobs"].values()} - {job.uid})
        if other_uids:
            # MPS servers of different users on one GPU are time-sliced, not concurrent.
            log(f"gpu{gpu}: users {other_uids} also have clients here; MPS time-slices different users")
        state["jobs"][job.job_id] = {"uid": job.uid, "percent": job.percent, "since_s": round(time.time(), 3)}
        write_clients(config, gpu, state)
    return {"gpu": gpu, "percent": job.percent, "pipe_dir": pipe, "log_dir": logdir, "status": "ok"}


# The SM quota must hold against the job's user: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE in the
# job's environment is a client-side setting the user can unset. So the daemon is told
# the limit for the server it starts for the job's user (a default applies to the next
# server started); a user's later job with a larger tier raises that server's limit.
RESET_THREAD_PERCENTAGE = "set_default_active_thread_percentage 100\n"


def daemon_limit_lines(config: NodeConfig, percent: int) -> str:
    """The control commands that set the daemon-side limits for the next server. Device 0:
    the daemon sees only the job's GPU (CUDA_VISIBLE_DEVICES)."""
    lines = f"set_default_active_thread_percentage {percent}\n"
    if percent in config.pinned_mem_limits:
        lines += f"set_default_device_pinned_mem_limit 0 {config.pinned_mem_limits[percent]}\n"
    return lines


def server_pid_of(binary: str, config: NodeConfig, gpu: int, uid: int) -> int | None:
    """The PID of the MPS server running for ``uid`` (get_server_list, owner from /proc)."""
    for text in mps_command(binary, config, gpu, [], "get_server_list\n").split():
        if not text.isdigit():
            continue
        try:
            with open(f"/proc/{text}/status", encoding="ascii", errors="replace") as handle:
                owner = next((line.split()[1] for line in handle if line.startswith("Uid:")), None)
        except OSError:
            continue
        if owner == str(uid):
            return int(text)
    return None


def start_user_server(binary: str, config: NodeConfig, gpu: int, job: "JobEnv", state: dict, log: NodeLog) -> None:
    """Start the job's user's MPS server with the job's tier set at the daemon; record
    the limit in clients.json (``limits``) so the epilog can undo it."""
    limits = state.setdefault("limits", {})
    current = limits.get(str(job.uid))
    if current is None:
        mps_command(binary, config, gpu, [], daemon_limit_lines(config, job.percent) + f"start_server -uid {job.uid}\n")
        limits[str(job.uid)] = job.percent
        log(f"gpu{gpu}: daemon-side limit {job.percent}% of the SMs for uid {job.uid}"
            + (f", pinned memory {config.pinned_mem_limits[job.percent]}" if job.percent in config.pinned_mem_limits else ""))
        return
    if job.percent <= current:
        return  # the server's limit already covers this job; its client setting lowers it further
    pid = server_pid_of(binary, config, gpu, job.uid)
    if pid is None:
        log(f"gpu{gpu}: uid {job.uid}'s MPS server not found; its limit stays {current}% (job asked {job.percent}%)")
        return
    mps_command(binary, config, gpu, [], f"set_active_thread_percentage {pid} {job.percent}\n")
    limits[str(job.uid)] = job.percent
    log(f"gpu{gpu}: raised uid {job.uid}'s server {pid} to {job.percent}% of the SMs")


# -- usage spool ------------------------------------------------------------------------------

def spool_file(config: NodeConfig, node: str) -> str:
    return os.path.join(config.spool_dir, f"usage-{node}.jsonl")


def ensure_spool_dir(config: NodeConfig, log: NodeLog) -> int:
    """Make the spool root:<spool_group> 2770 (the setgid bit gives new files the group)
    so the collector, running as the service user in that group, reads the records and
    renames collected files into processed/. A real directory is kept whoever owns it:
    it holds records not yet read (a package may have made it tiresias-owned); only a
    symlink or a file there is moved aside. Returns the mode for new spool files."""
    os.makedirs(os.path.dirname(config.spool_dir), mode=0o755, exist_ok=True)
    try:
        gid = grp.getgrnam(config.spool_group).gr_gid if config.spool_group else None
    except KeyError:
        log(f"spool_group {config.spool_group[:64]!r} does not exist; spool {config.spool_dir} is 0755, "
            "which the collector can read but not rotate")
        gid = None
    mode = 0o2770 if gid is not None else 0o755
    try:
        info = os.lstat(config.spool_dir)
    except FileNotFoundError:
        info = None
    if info is None or not stat.S_ISDIR(info.st_mode):
        ensure_dir(config.spool_dir, mode, log)
    try:
        fd = os.open(config.spool_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise NodeError(f"cannot open {config.spool_dir}: {exc.strerror}") from None
    try:
        now = os.fstat(fd)
        if (now.st_uid, now.st_gid) != (os.geteuid(), gid if gid is not None else now.st_gid):
            os.fchown(fd, os.geteuid(), -1 if gid is None else gid)
        if stat.S_IMODE(now.st_mode) != mode:
            os.fchmod(fd, mode)
    except OSError as exc:
        log(f"cannot make {config.spool_dir} ours with group {config.spool_group!r}: {exc.strerror}")
    finally:
        os.close(fd)
    return 0o640 if gid is not None else 0o644


def append_record(config: NodeConfig, node: str, record: dict, log: NodeLog) -> str:
    """Append one JSON line to this node's spool file; returns the file path.

    One ``write()`` on an O_APPEND descriptor under an exclusive flock, then fsync:
    concurrent epilogs never interleave, and a crash can only leave a torn LAST line.
    The next append first ends such a fragment with a newline so it stays one bad
    line instead of corrupting this record. When the collector renamed the file
    away between our open() and flock() (it rotates under the same lock), reopen.
    """
    file_mode = ensure_spool_dir(config, log)
    path = spool_file(config, node)
    line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
    for _attempt in range(20):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, file_mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            info = os.fstat(fd)
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            if current is None or (current.st_dev, current.st_ino) != (info.st_dev, info.st_ino):
                continue  # rotated away under us
            data = line
            if info.st_size > 0:
                with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as reader:
                    reader.seek(info.st_size - 1)
                    if reader.read(1) != b"\n":
                        data = b"\n" + line
            written = os.write(fd, data)
            while written < len(data):  # never seen on local files; still never half a record
                written += os.write(fd, data[written:])
            os.fsync(fd)
            if info.st_size == 0:
                dir_fd = os.open(config.spool_dir, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            return path
        finally:
            os.close(fd)
    raise NodeError(f"{path} kept being rotated away; record not written")


# -- the prolog ---------------------------------------------------------------------------------


def prolog(env: dict, config: NodeConfig, log: NodeLog) -> int:
    job = JobEnv(env, config, log)
    if job.error:
        log(job.error)
        return 0
    log.context = f" job={job.job_id} node={job.node}"
    for note in job.notes:
        log(note)
    try:
        ensure_run_dirs(config, log)
    except NodeError as exc:
        log(f"{exc}; no per-job state{', no MPS' if job.wants_mps else ''} (fail open)")
        return 1 if job.wants_mps and config.strict_mps else 0
    state = {"job_id": job.job_id, "uid": job.uid, "node": job.node, "gpus": job.gpus,
             "start_s": round(time.time(), 3), "restart_count": job.restart_count, "mps": None}
    exit_code = 0
    if job.wants_mps:
        try:
            state["mps"] = start_mps_for_job(job, config, log)
            log(f"MPS ready on gpu{state['mps']['gpu']} with {job.percent}% of the SMs for uid {job.uid}")
        except NodeError as exc:
            state["mps"] = {"status": "unavailable", "percent": job.percent, "reason": str(exc)}
            if config.strict_mps:
                log(f"MPS setup failed: {exc}; strict_mps=1: exit 1 (Slurm drains the node)")
                exit_code = 1
            else:
                log(f"MPS setup failed: {exc}; the job runs without MPS (fail open)")
    try:
        ensure_dir(job_private_dir(config, job.job_id), 0o700, log, owner_uid=job.uid)
        try:  # a marker left by an earlier run of this job must not count for this one
            os.unlink(checkpoint_marker_path(config, job.job_id))
        except FileNotFoundError:
            pass
        write_file_atomic(job_state_path(config, job.job_id), json.dumps(state, sort_keys=True).encode())
    except (NodeError, OSError) as exc:
        log(f"cannot write the per-job state: {exc} (fail open)")
    return exit_code


def hook_setup(tag: str):
    """Config, log and deadline for one hook run; shared by the three entry points."""
    os.umask(0o022)
    config = load_config()
    log = NodeLog(config.log_file, tag)
    for problem in config.problems:
        log(problem)
    arm_deadline(config.timeout_s, log, tag)
    return config, log


def main() -> int:
    try:
        config, log = hook_setup("tiresias-prolog")
        return prolog(dict(os.environ), config, log)
    except Exception as exc:  # noqa: BLE001 - a bug of ours must not drain the node
        try:
            NodeLog(DEFAULTS["log_file"], "tiresias-prolog")(f"internal error {type(exc).__name__}: {exc}; exit 0")
        except Exception:  # noqa: BLE001
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3 -I
"""Tiresias Slurm Epilog: release the job's MPS client slot, stop the GPU's MPS
daemon after its last client, and spool a usage record for the controller.

Installed as ``Epilog=/etc/slurm/tiresias/epilog`` next to the prolog, whose file
holds the shared node code (see prolog/tiresias_prolog.py for the failure policy:
log and exit 0, a hard deadline, validated identifiers, no shell).

Steps, in this order (the record comes last so that it can say what happened):
  1. MPS: under the GPU's lock, remove the job from ``<run_dir>/gpu<IDX>/clients.json``;
     when no job is left, send ``quit`` on the control binary's stdin and remove
     ``<run_dir>/gpu<IDX>``. If ``quit`` fails the directories stay, so the next
     prolog finds and reuses the still-running daemon.
  2. Usage record, appended to ``<spool_dir>/usage-<node>.jsonl`` (O_APPEND + flock +
     one write + fsync). ``record_id`` = ``cluster/job/node/restart_count``: unique per
     run of a job on a node, so collecting twice stores it once.
  3. The per-job state file and the job's private directory are removed.

Checkpoint detection (``checkpoint_seen``): the helpers (controller/checkpoint.py,
prolog/checkpoint.sh) write a marker file after each completed checkpoint:
  * at ``$TIRESIAS_CHECKPOINT_MARKER``, which the TaskProlog exports as
    ``<run_dir>/jobs/<jobid>.d/checkpoint`` (a directory the prolog created for the
    job's user and cleared of old markers); or, outside such a job environment,
  * at ``$SLURM_SUBMIT_DIR/.tiresias-checkpoint-<jobid>``; the epilog only lstat()s
    it (regular file, owned by the job's user, modified after this run started) under
    ``SLURM_JOB_WORK_DIR`` (the submit directory unless --chdir was used), in a
    thread bounded to 1 s because that directory may sit on a slow network filesystem.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import stat
import sys
import threading
import time


def load_node_module():
    """The shared node code: the installed prolog next to this file, or the repo copy.
    Only a file owned by root (or us) and not writable by others is loaded."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "prolog"), os.path.join(here, "tiresias_prolog.py"),
                      os.path.join(os.path.dirname(here), "prolog", "tiresias_prolog.py")):
        try:
            info = os.stat(candidate)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_uid not in (0, os.geteuid()) or info.st_mode & 0o022:
            continue
        sys.dont_write_bytecode = True
        loader = importlib.machinery.SourceFileLoader("tiresias_node", candidate)
        spec = importlib.util.spec_from_loader("tiresias_node", loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module
    raise ImportError(f"tiresias node code (prolog) not found next to {here}")


def release_mps(node, job, state: dict, config, log) -> dict:
    """Drop the job from its GPU's client list; stop the daemon after the last client.
    Returns what happened, for the usage record."""
    mps = state.get("mps") or {}
    gpu = mps.get("gpu")
    if gpu is None:
        # No state (prolog failed or ran elsewhere): fall back to Slurm's view.
        if not (job.wants_mps and job.gpus_valid and len(job.gpus) == 1):
            return {}
        gpu = job.gpus[0]
    if not isinstance(gpu, int) or not 0 <= gpu < 1000:
        log(f"job state names GPU {gpu!r}; ignoring it")
        return {}
    if not os.path.isdir(node.gpu_dir(config, gpu)):
        return {"gpu": gpu, "daemon": "absent"}
    result = {"gpu": gpu}
    with node.GpuLock(config, gpu):
        clients = node.read_clients(config, gpu)
        clients["jobs"].pop(job.job_id, None)
        undo = undo_limit_lines(node, job, clients)
        if clients["jobs"]:
            if undo:
                _send_undo(node, config, gpu, undo, log)
            node.write_clients(config, gpu, clients)
            log(f"gpu{gpu}: {len(clients['jobs'])} MPS client job(s) remain; daemon kept")
            result["daemon"] = "kept"
            return result
        pid = node.mps_daemon_pid(config, gpu)
        if pid is not None:
            try:
                binary = node.find_mps_control(config)
                node.mps_command(binary, config, gpu, [], undo + "quit\n")
            except node.NodeError as exc:
                node.write_clients(config, gpu, clients)
                log(f"gpu{gpu}: stopping the MPS daemon (pid {pid}) failed: {exc}; directories kept")
                result["daemon"] = "quit failed"
                return result
            log(f"gpu{gpu}: last MPS client gone; daemon pid {pid} told to quit")
        import shutil

        shutil.rmtree(node.gpu_dir(config, gpu), ignore_errors=True)  # never follows symlinks
        result["daemon"] = "stopped" if pid is not None else "not running"
    return result


def undo_limit_lines(node, job, clients: dict) -> str:
    """The control commands that undo the daemon-side limit the prolog set for the job's
    user, once that user's last job on the GPU is gone ("" while one remains)."""
    limits = clients.get("limits") or {}
    if str(job.uid) not in limits or any(e.get("uid") == job.uid for e in clients["jobs"].values()):
        return ""
    limits.pop(str(job.uid))
    return node.RESET_THREAD_PERCENTAGE


def _send_undo(node, config, gpu: int, undo: str, log) -> None:
    try:
        node.mps_command(node.find_mps_control(config), config, gpu, [], undo)
        log(f"gpu{gpu}: daemon-side limit of this job's user undone")
    except node.NodeError as exc:
        log(f"gpu{gpu}: undoing the daemon-side limit failed: {exc}")


def checkpoint_seen(node, job, state: dict, config) -> str:
    """Where a checkpoint marker of this run was found: "marker", "work_dir" or ""."""
    marker = node.checkpoint_marker_path(config, job.job_id)
    try:
        if stat.S_ISREG(os.lstat(marker).st_mode):
            return "marker"
    except OSError:
        pass
    work_dir = job.work_dir
    if not work_dir.startswith("/") or "\0" in work_dir:
        return ""
    since = float(state.get("start_s") or 0)
    found = []

    def probe():
        try:
            info = os.lstat(os.path.join(work_dir, f".tiresias-checkpoint-{job.job_id}"))
        except OSError:
            return
        if stat.S_ISREG(info.st_mode) and info.st_uid == job.uid and info.st_mtime >= since - 1:
            found.append("work_dir")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(1.0)
    return found[0] if found else ""


EXIT_CODE2_RE = re.compile(r"([0-9]{1,3}):([0-9]{1,3})")  # ASCII only: "²:0".isdigit() is True
WAIT_STATUS_RE = re.compile(r"[0-9]{1,10}")


def exit_status(env: dict) -> tuple:
    """(exit code, signal) of the batch script from SLURM_JOB_EXIT_CODE2 ("3:0") or the
    raw wait status SLURM_JOB_EXIT_CODE; (None, None) when Slurm gave neither (or
    gave something that is not ASCII digits in range)."""
    match = EXIT_CODE2_RE.fullmatch(env.get("SLURM_JOB_EXIT_CODE2", ""))
    if match and int(match.group(1)) <= 255 and int(match.group(2)) <= 127:
        return int(match.group(1)), int(match.group(2))
    raw = env.get("SLURM_JOB_EXIT_CODE", "")
    if WAIT_STATUS_RE.fullmatch(raw) and int(raw) < 2**32:
        status = int(raw)
        return (status >> 8) & 0xFF, status & 0x7F
    return None, None


def _clean_state(state) -> dict:
    """The prolog's per-job state as far as it is well-formed; a corrupt file (edited,
    truncated, or written by another version) must not cost the usage record."""
    if not isinstance(state, dict):
        return {}
    clean = {}
    mps = state.get("mps")
    if isinstance(mps, dict):
        clean["mps"] = {k: v for k, v in mps.items()
                        if (k == "gpu" and isinstance(v, int) and not isinstance(v, bool))
                        or (k == "percent" and isinstance(v, int) and not isinstance(v, bool))
                        or (k == "status" and isinstance(v, str) and len(v) <= 64)}
    start = state.get("start_s")
    if isinstance(start, (int, float)) and not isinstance(start, bool) and 0 <= start < 4e9:
        clean["start_s"] = float(start)
    gpus = state.get("gpus")
    if isinstance(gpus, list) and len(gpus) <= 1024 and all(
            isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 1000 for g in gpus):
        clean["gpus"] = gpus
    return clean


def epilog(node, env: dict, config, log) -> int:
    job = node.JobEnv(env, config, log)
    if job.error:
        log(job.error)
        return 0
    log.context = f" job={job.job_id} node={job.node}"
    try:
        _record_run(node, job, env, config, log)
    finally:  # whatever failed above, the job's files go
        import shutil

        shutil.rmtree(node.job_private_dir(config, job.job_id), ignore_errors=True)
        try:
            os.unlink(node.job_state_path(config, job.job_id))
        except OSError:
            pass
    return 0


def _record_run(node, job, env: dict, config, log) -> None:
    state = _clean_state(node.read_json(node.job_state_path(config, job.job_id), {}))
    try:
        mps_result = release_mps(node, job, state, config, log)
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort; the record must still be written
        log(f"MPS cleanup failed: {type(exc).__name__}: {exc} (fail open)")
        mps_result = {"error": str(exc)[:200]}
    exit_code, exit_signal = exit_status(env)
    try:
        seen = checkpoint_seen(node, job, state, config)
    except Exception as exc:  # noqa: BLE001
        log(f"checkpoint probe failed: {type(exc).__name__}: {exc}")
        seen = ""
    mps_state = state.get("mps") or {}
    record = {
        "record_id": f"{job.cluster}/{job.job_id}/{job.node}/{job.restart_count}",
        "cluster": job.cluster, "job_id": job.job_id, "node": job.node, "restart_count": job.restart_count,
        "user": job.user, "uid": job.uid,
        "gpus": state.get("gpus", job.gpus),
        "mps_percent": mps_state.get("percent", job.percent), "mps_status": mps_state.get("status"),
        "mps_daemon": mps_result.get("daemon"),
        "start_s": state.get("start_s"), "end_s": round(time.time(), 3),
        "exit_code": exit_code, "exit_signal": exit_signal,
        "checkpoint_seen": bool(seen), "checkpoint_source": seen or None,
    }
    try:
        path = node.append_record(config, job.node, record, log)
        log(f"usage record {record['record_id']} appended to {path}")
    except (node.NodeError, OSError) as exc:
        log(f"cannot spool the usage record {record['record_id']}: {exc} (record lost; fail open)")


def main() -> int:
    try:
        node = load_node_module()
        config, log = node.hook_setup("tiresias-epilog")
        return epilog(node, dict(os.environ), config, log)
    except Exception as exc:  # noqa: BLE001 - a bug of ours must not drain the node
        try:
            line = f"tiresias-epilog[{os.getpid()}]: internal error {type(exc).__name__}: {exc}; exit 0\n"
            sys.stderr.write(line)
            fd = os.open("/var/log/tiresias/prolog.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            os.write(fd, line.encode())
            os.close(fd)
        except Exception:  # noqa: BLE001
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())

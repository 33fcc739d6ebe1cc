"""Running Slurm's commands and the levers (``SlurmCommands``, a part of slurm_plugin.backend's
SlurmBackend): one argument list per call (never a shell string), its time-out, its
failure read as "slurmctld did not answer" (BackendUnavailable) or "Slurm said no"
(LeverFailed), the count of commands run per name (the round's RPC cost), and every
``scontrol update``/``scontrol requeue``/``scancel`` lever, SiteFactor batched by value within
the RPC budget.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional, Sequence

from controller.service.acting.backend import QOS_LIMIT_FIELDS, BackendUnavailable

JOB_ID_RE = re.compile(r"[0-9]{1,19}(?:_[0-9]{1,9})?", re.ASCII)
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-\[\],]+")
_SIGNAL_RE = re.compile(r"(?:SIG)?[A-Z][A-Z0-9+\-]*|[0-9]{1,3}", re.ASCII)
SITE_FACTOR_LIMIT = 2147483645  # Slurm's documented +- range for SiteFactor
ADMIN_COMMENT_MAX_CHARS = 1024  # ours is ~80; the rest is what the site keeps there
MPS_SHARES_PER_GPU = 100  # Gres=gpu:N,mps:100*N: one MPS share = 1% of one GPU's SMs
# Stderr fragments that mean "slurmctld did not answer", not "Slurm said no".
# 22.05 prints "Unexpected message received for job N" for `scontrol requeue`
# and SiteFactor updates when it cannot connect at all.
_UNREACHABLE_MARKERS = (
    "unable to contact slurm controller",
    "connect failure",
    "socket timed out",
    "connection refused",
    "unexpected message received",
    "zero bytes were transmitted or received",
    "slurm_persist_conn",
)
# sacctmgr's QOS limit table (controller.service.ops.qos_limits reads it) and the associations'
# default QOS, as qos_limits() and qos_limit_table() read them
QOS_LIMITS_COMMAND = ["sacctmgr", "-n", "-P", "show", "qos", "format=name," + ",".join(QOS_LIMIT_FIELDS)]
DEFAULT_QOS_COMMAND = ["sacctmgr", "-n", "-P", "show", "association", "format=defaultqos"]
# Stop one comma list from growing without bound (argv and RPC size); far above
# any realistic number of jobs that share one SiteFactor value in a round.
MAX_IDS_PER_UPDATE = 1000
# ...and from outliving command_timeout_s: scontrol sends one RPC per id, and under
# rl_enable (a bucket of 30 refilled 2 a second per user by default; the controller's
# Operator user is not exempt) a command that finds the bucket empty waits for each id's
# token. At most this many ids a second of command_timeout_s (half the default refill:
# the polls take the rest), so such a command still ends in time: 15 ids at 15 s.
RL_IDS_PER_S = 1.0


class LeverFailed(RuntimeError):
    """Slurm refused a lever (job vanished, no longer pending, ...): one line with
    the job id(s) and Slurm's stderr."""


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


# runner(argv, timeout_s, env) -> CommandResult-like (returncode/stdout/stderr);
# raises subprocess.TimeoutExpired on a time-out, OSError when the tool is missing.
Runner = Callable[[Sequence[str], float, Optional[Mapping[str, str]]], object]


def subprocess_runner(argv: Sequence[str], timeout_s: float,
                      env: Optional[Mapping[str, str]] = None) -> CommandResult:
    """Run one command (argument list, no shell) and capture its text output. Bytes that
    are not UTF-8 (a job name or comment written in another encoding, which squeue
    prints as it is) become U+FFFD: decoding strictly raised in every round while such a
    job was in the queue, and the controller observed nothing."""
    proc = subprocess.run(list(argv), capture_output=True, encoding="utf-8", errors="replace", timeout=timeout_s,
                          env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL)
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def one_line(text: str, limit: int = 300) -> str:
    line = " | ".join(part.strip() for part in (text or "").strip().splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# scontrol's line per outcome of an update of a whole array (stderr): 22.05 prints
# every outcome ("12_4-50: No error" too), 23.02+ only the failed ones, each maybe with
# slurmctld's message in parentheses
_ARRAY_OUTCOME_RE = re.compile(r"([0-9]{1,19})_[0-9,\-]+(?:\.\.\.)?: (No error|Job has already finished)"
                               r"(?: \(.*\))?", re.ASCII)


def _only_ended_tasks(result: CommandResult, job_ids: Iterable[str]) -> bool:
    """Whether a failed answer to an update naming ``job_ids`` says only that tasks of
    arrays among them had ended (they keep no SiteFactor worth setting; slurmctld set it
    on the rest): every line scontrol wrote to stderr "ARRAYID_TASKS: Job has already
    finished" (or "...: No error") for an ArrayJobId of ``job_ids``."""
    ids = set(job_ids)
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    for line in lines:
        match = _ARRAY_OUTCOME_RE.fullmatch(line)
        if match is None or match.group(1) not in ids:
            return False
    return bool(lines)


def check_job_id(job_id: object) -> str:
    text = str(job_id) if isinstance(job_id, int) and not isinstance(job_id, bool) else job_id
    if not isinstance(text, str) or not JOB_ID_RE.fullmatch(text):
        raise ValueError(f"invalid Slurm job id {job_id!r}: expected digits, optionally _digits")
    return text


def check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise ValueError(f"invalid {what} {value!r}: allowed characters are A-Z a-z 0-9 _ . - [ ] ,")
    return value


class SlurmCommands:
    """SlurmBackend's commands: running one (time-out, failure reading, the count per
    command), and the levers, each an ``scontrol``/``scancel`` call, SiteFactor batched by
    value within the RPC budget (state set up by SlurmBackend.__init__)."""


    def _run(self, argv: list[str], timeout_s: Optional[float] = None) -> CommandResult:
        """Run one command (within ``timeout_s``, default command_timeout_s); time-outs and
        a missing tool raise BackendUnavailable."""
        self.commands_run[os.path.basename(argv[0])] += 1
        timeout_s = self.command_timeout_s if timeout_s is None else timeout_s
        try:
            result = self.runner(argv, timeout_s, self.env)
        except subprocess.TimeoutExpired:
            raise BackendUnavailable(
                f"{argv[0]} did not answer within {timeout_s:g} s: {' '.join(argv)}") from None
        except OSError as exc:
            raise BackendUnavailable(f"cannot run {argv[0]}: {exc}") from None
        return CommandResult(int(result.returncode), result.stdout or "", result.stderr or "")

    @staticmethod
    def _unreachable(result: CommandResult) -> bool:
        text = (result.stderr + "\n" + result.stdout).lower()
        return any(marker in text for marker in _UNREACHABLE_MARKERS)

    def _read(self, argv: list[str]) -> str:
        result = self._run(argv)
        if result.returncode != 0:
            raise BackendUnavailable(
                f"{' '.join(argv)} exited {result.returncode}: {one_line(result.stderr) or 'no message'}")
        return result.stdout

    def _query(self, argv: list[str], what: str,
               accept: Optional[Callable[[CommandResult], bool]] = None) -> str:
        """Run a command that must succeed and return its stdout: a slurmctld that does
        not answer is BackendUnavailable (act on nothing), any other failure LeverFailed
        (``accept``: a failed answer that says what was wanted was done all the same)."""
        result = self._run(argv)
        if result.returncode == 0 or (accept is not None and accept(result)):
            return result.stdout
        message = one_line(result.stderr) or one_line(result.stdout) or f"exit status {result.returncode}"
        if self._unreachable(result):
            raise BackendUnavailable(f"{what}: slurmctld unreachable: {message}")
        raise LeverFailed(f"{what}: {' '.join(argv)} failed ({result.returncode}): {message}")

    def _lever(self, argv: list[str], what: str, shows: Optional[Mapping[str, Mapping[str, object]]] = None,
               accept: Optional[Callable[[CommandResult], bool]] = None) -> None:
        """Run a lever. ``shows``: job id -> the fields of its squeue --json record the
        lever sets, as observe() would read them (repeat_observation lays them over the
        last observation); None, or a lever that failed: records changed unknowably.
        ``accept``: as for _query."""
        if self.fence is not None:
            self.fence()
        if shows is None or not self._plain_ids.issuperset(shows):
            self._records_changed = True
        try:
            self._query(argv, what, accept)
        except Exception:
            self._records_changed = True  # Slurm may have applied part of it
            raise
        for job_id, values in (shows or {}).items():
            self._set_since.setdefault(job_id, {}).update(values)


    def _task_id(self, job_id: object, array_ok: bool = False) -> str:
        """A checked id to send a lever to. Never a pending task still inside its array's
        record ("ARRAYID_TASKID" without a record of its own): Slurm would split it off
        into a record of its own (slurm_plugin.arrays). A pending array's bare
        ArrayJobId only with ``array_ok`` (its SiteFactor): Slurm applies any other lever
        on it to every task of the array."""
        text = check_job_id(job_id)
        head, _, task = text.partition("_")
        if task and head in self._arrays and text not in self._task_records.get(head, ()):
            raise ValueError(f"job {text} is a pending task still in job array {head}'s record: a lever naming it "
                             f"would split it off (the array's SiteFactor goes to {head})")
        if not task and text in self._arrays and not array_ok:
            raise ValueError(f"job id {text} is a job array: a lever names one task (ARRAYID_TASKID)")
        return text

    def set_site_factors(self, factors: dict[str, int]) -> None:
        """Set SiteFactor (added unweighted to the multifactor priority) per job id.

        One ``scontrol update JobId=a,b,c SiteFactor=N`` per distinct value; jobs
        whose last observed SiteFactor already equals the value are left out.
        All ids and values are validated before anything runs. When some calls
        fail the others still run; LeverFailed then names every failed group
        (Slurm still updates the valid ids of a list that names a vanished job).

        An ArrayJobId takes the value for the tasks inside its pending record: Slurm
        updates that record whole (no task is split off) and every other record of the
        array as well, its running tasks and its pending tasks with records of their own.
        So the arrays go first, what they set on those task records is taken as theirs,
        and the other ids then (the caller's own values for those tasks included) are
        compared with that. scontrol answers such an update with one line per outcome and
        exit status 1 when some task of the array had ended ("12_1-3: Job has already
        finished", "12_4-50: No error"): that is success for the tasks that are left.
        """
        first: dict[int, list[str]] = {}  # the arrays' values
        checked: dict[str, int] = {}
        for raw_id, value in factors.items():
            job_id = self._task_id(raw_id, array_ok=True)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"job {job_id}: SiteFactor must be an integer, got {value!r}")
            if not -SITE_FACTOR_LIMIT <= value <= SITE_FACTOR_LIMIT:
                raise ValueError(f"job {job_id}: SiteFactor {value} outside +-{SITE_FACTOR_LIMIT}")
            checked[job_id] = value
        failures: list[str] = []
        for job_id, value in checked.items():
            if "_" not in job_id and (job_id in self._arrays or job_id in self._task_records) \
                    and self._site_factors.get(job_id) != value:
                first.setdefault(value, []).append(job_id)
        self._send_site_factors(first, failures)
        for value, array_ids in first.items():
            for array_id in array_ids:
                for task_id in self._task_records.get(array_id, ()):  # what Slurm holds for them now
                    if self._site_factors.get(array_id) == value:
                        self._site_factors[task_id] = value
                    else:  # the update failed: it may have reached some
                        self._site_factors.pop(task_id, None)
        groups: dict[int, list[str]] = {}
        for job_id, value in checked.items():
            if any(job_id in ids for ids in first.values()) or self._site_factors.get(job_id) == value:
                continue
            groups.setdefault(value, []).append(job_id)
        self._send_site_factors(groups, failures)
        if failures:
            raise LeverFailed("; ".join(failures))

    def ids_per_update(self) -> int:
        """Most job ids one ``scontrol update`` names: MAX_IDS_PER_UPDATE, and no more
        than RL_IDS_PER_S x command_timeout_s (one RPC per id, rl_enable's refill)."""
        return max(1, min(MAX_IDS_PER_UPDATE, int(self.command_timeout_s * RL_IDS_PER_S)))

    def _send_site_factors(self, groups: dict[int, list[str]], failures: list[str]) -> None:
        """One ``scontrol update`` per value and per ids_per_update() ids; the values
        sent are known after, those of a failed call forgotten."""
        per_command = self.ids_per_update()
        for value in sorted(groups):
            ids = sorted(groups[value], key=lambda j: [int(p) for p in j.split("_")])
            for start in range(0, len(ids), per_command):
                chunk = ids[start:start + per_command]
                try:
                    self._lever(["scontrol", "update", f"JobId={','.join(chunk)}", f"SiteFactor={value}"],
                                f"SiteFactor={value} for job(s) {','.join(chunk)}",
                                shows={job_id: {"site_factor": value} for job_id in chunk},
                                accept=lambda result, chunk=chunk: _only_ended_tasks(result, chunk))
                except LeverFailed as exc:
                    failures.append(str(exc))
                    for job_id in chunk:  # some may have changed: forget what we knew
                        self._site_factors.pop(job_id, None)
                else:
                    for job_id in chunk:
                        self._site_factors[job_id] = value

    def pin_nodes(self, job_id: str, nodes: list[str]) -> None:
        """ReqNodeList= for a pending job; an empty list clears it."""
        job_id = self._task_id(job_id)
        names = [check_name(n, "node name") for n in nodes]
        what = f"pin job {job_id} to [{','.join(names)}]"
        # On a job that started since the observation, the same update is a resize of
        # the running job (Slurm marks it RESIZING and keeps that start time for its
        # later runs): ask first, as signal() does. A window of one squeue remains.
        states = self._states(job_id, what)
        if states != {"PENDING"}:
            raise LeverFailed(f"{what}: job is {','.join(sorted(states)) or 'not listed'}, not PENDING; nothing set")
        self._lever(["scontrol", "update", f"JobId={job_id}", f"ReqNodeList={','.join(names)}"], what)

    def _states(self, job_id: str, what: str) -> set[str]:
        """The job's state(s) from ``squeue -j`` (one per array task; ``-t all``: 24.11
        lists an ended job under -j only so)."""
        states = self._query(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], what)
        return {s.strip().upper() for s in states.split()}

    def signal(self, job_id: str, signal_name: str, batch_only: bool = True) -> None:
        """Deliver the checkpoint signal the way Slurm delivers a job's ``--signal``:
        ``batch_only`` (``B:``) to the batch shell (``scancel --batch``), otherwise to
        every step but not the batch shell (plain ``scancel --signal``), so a batch
        script that traps nothing is not killed by a signal meant for its ``srun``
        tasks."""
        job_id = self._task_id(job_id)
        if not isinstance(signal_name, str) or not _SIGNAL_RE.fullmatch(signal_name):
            raise ValueError(f"invalid signal name {signal_name!r}: expected e.g. USR1, SIGTERM or 10")
        # 22.05 `scancel --signal` on a job that is not running does not fail: it
        # retries for over a minute, which would look like slurmctld being down.
        # Ask for the state first (squeue honours -j outside --json).
        states = self._states(job_id, f"signal {signal_name} to job {job_id}")
        if "RUNNING" not in states:
            raise LeverFailed(f"signal {signal_name} to job {job_id}: job is "
                              f"{','.join(sorted(states)) or 'not listed'}, not RUNNING; nothing sent")
        argv = ["scancel", f"--signal={signal_name}", *(["--batch"] if batch_only else []), job_id]
        self._lever(argv, f"signal {signal_name} to job {job_id}")

    def batch_script(self, job_id: str) -> str:
        """The job's batch script (``scontrol write batch_script JOB -``): its #SBATCH
        lines are where Slurm 22.05 keeps a job's ``--signal`` visible."""
        job_id = check_job_id(job_id)  # a read, not a lever
        return self._query(["scontrol", "write", "batch_script", job_id, "-"], f"batch script of job {job_id}")

    def requeue(self, job_id: str) -> None:
        """Requeue a running batch job (needs Requeue=1); it comes back PENDING."""
        job_id = self._task_id(job_id)
        self._lever(["scontrol", "requeue", job_id], f"requeue job {job_id}")

    def make_requeueable(self, job_id: str) -> None:
        job_id = self._task_id(job_id)
        self._lever(["scontrol", "update", f"JobId={job_id}", "Requeue=1"], f"make job {job_id} requeueable")

    def hold(self, job_id: str) -> None:
        """``scontrol hold N``: an admin hold (Priority=0, Reason=JobHeldAdmin) on a
        pending job, which a user cannot release; a job that started since the
        observation is left alone (a hold on a running job changes nothing now)."""
        job_id = self._task_id(job_id)
        what = f"hold job {job_id}"
        states = self._states(job_id, what)
        if states != {"PENDING"}:
            raise LeverFailed(f"{what}: job is {','.join(sorted(states)) or 'not listed'}, not PENDING; nothing set")
        self._lever(["scontrol", "hold", job_id], what)

    def release_hold(self, job_id: str) -> None:
        """``scontrol release N``: undo ``hold``."""
        job_id = self._task_id(job_id)
        self._lever(["scontrol", "release", job_id], f"release job {job_id}")

    def release_begin_time(self, job_id: str) -> None:
        """StartTime=now: clears the cred_expire+1 s BeginTime hold after a requeue."""
        job_id = self._task_id(job_id)
        self._lever(["scontrol", "update", f"JobId={job_id}", "StartTime=now"],
                    f"release begin time of job {job_id}")

    def move_partition(self, job_id: str, partition: str) -> None:
        """Move a pending job (``a,b`` lets Slurm pick the earliest start)."""
        job_id = self._task_id(job_id)
        partition = check_name(partition, "partition name")
        self._lever(["scontrol", "update", f"JobId={job_id}", f"Partition={partition}"],
                    f"move job {job_id} to partition {partition}")

    def set_nice(self, job_id: str, nice: int) -> None:
        """``scontrol update JobId=N Nice=V``: slurmctld lowers the job's priority by V
        (an operator, as the controller is, may set any of -2147483645..2147483645)."""
        job_id = self._task_id(job_id)
        if isinstance(nice, bool) or not isinstance(nice, int) or not -2147483645 <= nice <= 2147483645:
            raise ValueError(f"job {job_id}: Nice must be an int in -2147483645..2147483645, got {nice!r}")
        self._lever(["scontrol", "update", f"JobId={job_id}", f"Nice={nice}"], f"Nice={nice} of job {job_id}")

    def set_admin_comment(self, job_id: str, text: str) -> None:
        """``scontrol update JobId=N AdminComment=TEXT`` (one argument, no shell: spaces
        and '=' inside TEXT are kept). One line, printable, at most
        ADMIN_COMMENT_MAX_CHARS; the job's owner reads it with ``scontrol show job``."""
        job_id = self._task_id(job_id)
        if not isinstance(text, str) or len(text) > ADMIN_COMMENT_MAX_CHARS or not text.isprintable():
            raise ValueError(f"job {job_id}: AdminComment must be one printable line of at most "
                             f"{ADMIN_COMMENT_MAX_CHARS} characters, got {text[:80]!r}")
        self._lever(["scontrol", "update", f"JobId={job_id}", f"AdminComment={text}"],
                    f"AdminComment of job {job_id}", shows={job_id: {"admin_comment": text}})

    def set_mps_share(self, job_id: str, shares: int) -> None:
        """Set a pending job's MPS share per node (= its percent of one GPU's SMs).

        ``scontrol update JobId=X TresPerNode=gres:mps:N``. Checked on 22.05.8: this
        form rewrites both TresPerNode and the job's TRES, and the job then starts
        with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=N. ``TresPerNode=gres/mps:N`` and
        ``TresPerNode=mps:N`` also exit 0 but only rewrite the string: TRES and the
        allocation keep the old share. Slurm accepts any count (0, 101, 500) for a
        pending job, hence the 1..100 check here. A running job is refused ("Job is
        no longer pending execution") -> LeverFailed.
        """
        job_id = self._task_id(job_id)
        if isinstance(shares, bool) or not isinstance(shares, int):
            raise ValueError(f"job {job_id}: MPS share must be an integer, got {shares!r}")
        if not 1 <= shares <= MPS_SHARES_PER_GPU:
            raise ValueError(f"job {job_id}: MPS share {shares} outside 1..{MPS_SHARES_PER_GPU}")
        self._lever(["scontrol", "update", f"JobId={job_id}", f"TresPerNode=gres:mps:{shares}"],
                    f"set MPS share of job {job_id} to {shares}")

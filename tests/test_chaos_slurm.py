"""Chaos on the real cluster: a busy run (jobs as alice and bob, preemptions, requeues,
finishing jobs) while `tiresias run --mode enforce` is SIGKILLed at 20 random points
and restarted, slurmctld is restarted, and the store is locked for 60 s. Afterwards,
from Slurm's own records (the instance's jobcomp file: one line per run, requeued runs
included) and the store:
- every job finished exactly once (one COMPLETED run, closed once in the store), but
  for a job that ended COMPLETED inside the grace period of a preemption: that run may
  have been its checkpoint's exit, so it is requeued (preempt_requeue_ended) and ends
  again from its checkpoint;
- no job was requeued twice for one decision (Slurm's restarts <= requeued preemptions);
- every job's attained service is within one poll interval (plus Slurm's 1 s time
  stamps) of GPUs x the seconds its runs really lasted;
- no stale pin (a pending job's ReqNodeList the store does not know of, or expired)
  and no hold; nothing acted while the store was locked; the controller caught up.
The figures are printed (docs/admin.md, "Reliability"). Isolated Slurm instance, SQLite store.
"""
from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from bench.slurm_harness import ControllerProcess, Instance, write_config
from controller.service.state.clusters import round_counters
from controller.service.state.lever_rows import preemptions
from controller.service.state.store import Store
from tests.slurm_fixtures import ACTIVE, instance_fixture, wait_for

pytestmark = pytest.mark.slurm

POLL_S, INTERVAL_S = 0.5, 1.0
# How long past its expiry a pin may still stand before the watcher calls it stale: a few
# rounds, and the 2 s between two of the watcher's looks (3 rounds + 2 s once saw one
# pin a sample late with three releases' suites running on 2 cores)
STALE_PIN_S = 6 * INTERVAL_S + 4
KILLS = 20
# The random jobs stop here: the drain below must fit, and a 60-job seed once needed
# more than a fixed drain allowance (CI saw its last job still running).
MAX_JOBS = 40
CLUSTER_GPUS = 16
OUTAGE_S = 60
SETTINGS = dict(queues_gpu_s=[40.0], preempt_grace_s=3.0, preempt_min_runtime_s=2.0, requeue_settle_s=2.0,
                pin_expiry_s=20.0, preempt_max_per_job=3)
PREEMPTABLE = "--signal=B:USR1@5"  # the contract: a declared checkpoint signal (no --time: never sent by Slurm)

cluster = instance_fixture("tc")


def jobcomp_runs(instance: Instance) -> dict[str, list[tuple[str, float, float]]]:
    """Job id -> [(state, start, end)] of every run slurmctld logged (requeued ones too)."""
    runs: dict[str, list] = {}
    path = Path(f"/var/log/slurm-{instance.name}/jobcomp.txt")
    for line in path.read_text().splitlines() if path.exists() else []:
        fields = dict(token.split("=", 1) for token in line.split() if "=" in token)
        try:
            start = datetime.strptime(fields["StartTime"], "%Y-%m-%dT%H:%M:%S").timestamp()
            end = datetime.strptime(fields["EndTime"], "%Y-%m-%dT%H:%M:%S").timestamp()
        except (KeyError, ValueError):
            continue
        if fields.get("JobState") == "RESIZING":
            continue  # a record of a size change, not a run
        job_runs = runs.setdefault(fields["JobId"], [])
        if fields.get("JobState") == "PENDING" and job_runs and job_runs[-1][1] == start:
            # A requeued run is logged PENDING; but a job requeued after it had ended was
            # logged at its end already, and its requeue repeats that run's start: not a run.
            continue
        job_runs.append((fields.get("JobState", ""), start, end))
    return runs


def slurmctld_lines(instance: Instance, job_ids) -> list[str]:
    """What slurmctld logged about these jobs (the instance's files go with it)."""
    path = Path(f"/var/log/slurm-{instance.name}/slurmctld.log")
    wanted = tuple(f"JobId={j} " for j in job_ids) + tuple(f"JobId={j}\n" for j in job_ids)
    lines = path.read_text(errors="replace").splitlines(keepends=True) if path.exists() else []
    return [line.rstrip() for line in lines if any(w in line for w in wanted) and "AdinPrio" not in line][-40:]


def print_job_story(instance: Instance, chaos: "Chaos", job_id: str) -> None:
    """Everything Slurm and the job itself say about one job, for CI's log: pytest
    shortens an assertion's message, and the instance's files go with it."""
    print(f"--- job {job_id}: sbatch {chaos.extras.get(job_id)!r}")
    shown = subprocess.run(["scontrol", "show", "job", "-d", job_id], env=instance.env, capture_output=True,
                           text=True, timeout=15)
    print(shown.stdout.strip() or shown.stderr.strip())
    print("\n".join(slurmctld_lines(instance, [job_id])))
    for log in sorted(Path(f"/var/log/slurm-{instance.name}").glob("slurmd-*.log")):
        lines = [line.rstrip() for line in log.read_text(errors="replace").splitlines()
                 if f"JobId={job_id} " in line or f"StepId={job_id}." in line or f"job {job_id} " in line
                 or f"JobId={job_id}\n" in line or f"job{job_id}" in line]
        if lines:
            print(f"--- {log.name}:\n" + "\n".join(lines[-30:]))
    procs = subprocess.run(["ps", "-eo", "pid,ppid,etimes,stat,args"], capture_output=True, text=True).stdout
    print("--- processes:\n" + "\n".join(line for line in procs.splitlines()
                                         if "slurmstepd" in line or "job.sh" in line or "prolog" in line
                                         or "epilog" in line or "sleep" in line))
    if chaos.log.exists():
        mentions = [line for line in chaos.log.read_text(errors="replace").splitlines()
                    if re.search(rf"\b{job_id}\b", line)]
        print("--- the controller's lines about it:\n" + "\n".join(mentions[-30:]))
    out = chaos.outputs.get(job_id)
    print(f"--- its output {out}:\n" + (out.read_text(errors="replace") if out and out.exists() else "(none)"))


class Chaos:
    def __init__(self, instance: Instance, tmp: Path, rng: random.Random):
        self.instance, self.tmp, self.rng = instance, tmp, rng
        self.db = tmp / "tiresias.db"
        self.url = f"sqlite:///{self.db}"
        self.config = write_config(tmp / "tiresias.yaml", self.url, instance.name, **SETTINGS)
        self.log = tmp / "controller.log"
        self.proc: ControllerProcess | None = None
        self.jobs: dict[str, int] = {}  # job id -> GPUs
        self.work: dict[str, int] = {}  # job id -> seconds of work it asked for
        self.outputs: dict[str, Path] = {}  # job id -> its output file (kept until the module ends)
        self.extras: dict[str, str] = {}  # job id -> what it asked for
        self.no_usr1: set[str] = set()
        self.problems: list[str] = []
        self.stop = threading.Event()
        # Until then the controller cannot clear an expired pin (slurmctld or the store
        # is down on purpose): the watcher does not count it.
        self.excused_until = 0.0

    def start(self) -> None:
        self.proc = ControllerProcess(self.instance, self.config, self.log, interval_s=INTERVAL_S,
                                      poll_s=POLL_S).start()

    def submit(self, user: str, gpus: int, work_s: int, extra: str = "") -> str:
        job_id, workdir = self.instance.submit(user, gpus, work_s, "chaos", extra=extra)
        self.jobs[job_id] = gpus
        self.work[job_id] = work_s
        self.outputs[job_id] = Path(workdir) / f"{job_id}.out"
        self.extras[job_id] = f"{gpus} GPUs, {work_s} s, {extra}"
        return job_id

    def submit_random(self, k: int) -> str:
        """Every other job preemptable (declares its checkpoint signal, traps it and
        checkpoints); some skew-sensitive (pinned where the plan places them)."""
        gpus = self.rng.choice([1, 1, 2, 2, 4, 8])
        extra = PREEMPTABLE if k % 2 else ""
        if k % 7 == 3:
            gpus, extra = 8, "--comment=tiresias:skew=0.9"
        elif k % 7 == 5:  # also asks Slurm for the signal 30 s before its 2-minute limit
            # (not 1 minute: Slurm may send --signal up to 60 s early, so with --time=1 it
            # came at the start, before the script's trap existed, and bash died of it)
            extra = "--time=2 --signal=B:USR1@30"
        return self.submit("alice" if k % 2 else "bob", gpus, self.rng.randint(10, 40), extra)

    def records(self, ids) -> dict:
        with Store(self.url) as store:
            found = store.load_jobs(self.instance.name)
        return {j: found.get(j) or type("Missing", (), {"state": "missing"})() for j in ids}

    def round_id(self) -> int:
        try:
            with sqlite3.connect(self.db, timeout=10) as conn:
                row = conn.execute("SELECT last_round_id FROM round_counters").fetchone()
        except sqlite3.OperationalError:  # not created yet
            return 0
        return row[0] if row else 0

    def watch(self) -> None:
        """Every 2 s: a pending job pinned (ReqNodeList) without a live pin in the store,
        or held, is a problem. The controller clears an expired pin once the job waits
        (changing a running job's ReqNodeList resizes it; a requeued job keeps it), so
        a pin is stale 3 rounds + 2 s after its expiry or after the job was first seen
        pending again, whichever is later, once 3 rounds have run since then (a pin that expired while the job ran, before
        the controller requeued it, once counted from its expiry)."""
        pending_since: dict[str, float] = {}
        rounds_seen: list[tuple[float, int]] = []  # (time, last round id begun) per look

        def rounds_since(since: float, now_round: int) -> int:
            """Rounds begun since ``since`` (counted from the first look at or after it)."""
            later = [r for t, r in rounds_seen if t >= since]
            return now_round - later[0] if later else 0

        while not self.stop.wait(2.0):
            try:
                shown = self.instance.show_jobs()
                with sqlite3.connect(self.db, timeout=10) as conn:
                    pins = dict(conn.execute("SELECT job_id, expires_s FROM pins").fetchall())
                    row = conn.execute("SELECT last_round_id FROM round_counters").fetchone()
            except (subprocess.SubprocessError, sqlite3.Error, OSError):
                continue  # slurmctld restarting or the store locked on purpose
            now = time.time()
            now_round = row[0] if row else 0
            rounds_seen.append((now, now_round))
            for job_id, fields in shown.items():
                if fields.get("JobState") == "PENDING":
                    pending_since.setdefault(job_id, now)
                else:
                    pending_since.pop(job_id, None)
            if now < self.excused_until:
                continue
            for job_id, fields in shown.items():
                if job_id not in self.jobs or fields.get("JobState") != "PENDING":
                    continue
                if "Held" in fields.get("Reason", ""):
                    self.problems.append(f"job {job_id} held: {fields.get('Reason')}")
                pinned = fields.get("ReqNodeList", "(null)") not in ("(null)", "")
                # an expired pin is cleared within a few rounds; rounds stretch when the
                # machine runs the other releases' suites at the same time, so the bound is
                # generous: what must never happen is a pin left behind for good
                # ... and only once the controller ran rounds after it: killed again and again
                # in its start-up (the kill phase), no controller is there to clear it
                since = max(pins.get(job_id, 0.0), pending_since[job_id])
                if pinned and (job_id not in pins or (since < now - STALE_PIN_S
                                                      and rounds_since(since, now_round) >= 4)):
                    self.problems.append(f"job {job_id} stale pin {fields.get('ReqNodeList')} (store: "
                                         f"{pins.get(job_id)}, {now - max(pins.get(job_id, now), pending_since[job_id]):.1f} s "
                                         "past its expiry or the job's return to pending)")


def test_chaos_kills_slurmctld_restart_and_store_outage(cluster, tmp_path):
    cluster.cancel_all()
    seed = int(os.environ.get("TIRESIAS_CHAOS_SEED", time.time()))
    chaos = Chaos(cluster, tmp_path, random.Random(seed))
    watcher = threading.Thread(target=chaos.watch, daemon=True)
    t0 = time.time()
    try:
        chaos.start()
        # Two long jobs take half the cluster and demote, so short ones preempt them.
        chaos.submit("alice", 8, 40, PREEMPTABLE)
        chaos.submit("bob", 8, 35, PREEMPTABLE)
        watcher.start()

        # -- 1. SIGKILL at 20 random points while jobs keep arriving --------------------
        mid_round = 0
        submitted = 2
        for kill in range(KILLS):
            before = chaos.round_id()
            deadline = time.monotonic() + chaos.rng.uniform(1.0, 6.0)
            while time.monotonic() < deadline:
                if kill < 17 and submitted < MAX_JOBS - 2 and chaos.rng.random() < 0.3:
                    chaos.submit_random(submitted)
                    submitted += 1
                time.sleep(0.5)
            chaos.proc.kill9()
            mid_round += chaos.round_id() > before  # rounds happened since the restart
            chaos.start()
        wait_for(lambda: chaos.round_id() > 0 and chaos.proc.alive(), 30, "the last restart to run")
        killed_at = time.time()

        # -- 2. slurmctld restarted mid-run --------------------------------------------
        ctld_pid = int(Path(f"/run/slurmctld-{cluster.name}.pid").read_text())
        chaos.excused_until = float("inf")
        os.kill(ctld_pid, signal.SIGTERM)
        wait_for(lambda: not Path(f"/proc/{ctld_pid}").exists(), 30, "slurmctld to exit")
        ctld_down = time.time()
        time.sleep(12)
        restarted = subprocess.run(["slurmctld"], env=cluster.env, capture_output=True, text=True, timeout=30)
        assert restarted.returncode == 0, restarted.stderr
        wait_for(lambda: subprocess.run(["scontrol", "ping"], env=cluster.env, capture_output=True, timeout=15)
                 .returncode == 0, 60, "slurmctld to answer again")
        ctld_down_s = time.time() - ctld_down
        rounds = chaos.round_id()
        wait_for(lambda: chaos.round_id() > rounds, 30, "a round after slurmctld is back")
        assert chaos.proc.alive()
        chaos.excused_until = time.time() + 3 * INTERVAL_S + 2

        # -- 3. the store locked for OUTAGE_S (the controller can read, not write) ------
        lock = sqlite3.connect(chaos.db, timeout=30, isolation_level=None)
        chaos.excused_until = float("inf")
        lock.execute("BEGIN EXCLUSIVE")
        locked_at = time.time()
        restarts_before = {j: v["restart_cnt"] for j, v in cluster.squeue().items()}
        urgent = [chaos.submit("bob", 4, 10), chaos.submit("alice", 2, 10)]  # the plan would preempt for these
        time.sleep(OUTAGE_S - 10)
        restarts_during = {j: v["restart_cnt"] for j, v in cluster.squeue().items()}
        time.sleep(10)
        rounds_before_unlock = chaos.round_id()
        lock.execute("ROLLBACK")
        lock.close()
        unlocked_at = time.time()
        wait_for(lambda: chaos.round_id() > rounds_before_unlock, 30, "a round after the store came back")
        caught_up_s = time.time() - unlocked_at
        chaos.excused_until = time.time() + 3 * INTERVAL_S + 2

        # -- drain ------------------------------------------------------------------------
        ids = list(chaos.jobs)
        # The allowance grows with the work still queued: at worst each active job starts
        # over, and packing 8-GPU jobs, grace periods and requeues cost up to 2.5x.
        active = [j for j, v in cluster.squeue().items() if j in chaos.jobs and v["job_state"] in ACTIVE]
        queued_gpu_s = sum(chaos.jobs[j] * chaos.work[j] for j in active)
        drain_allowance_s = 90 + 2.5 * queued_gpu_s / CLUSTER_GPUS
        drain_from = time.time()
        try:
            wait_for(lambda: all(cluster.squeue().get(j, {}).get("job_state") not in ACTIVE for j in ids),
                     drain_allowance_s,
                     "every job to finish", interval_s=2,
                     seen=lambda: {j: v["job_state"] for j, v in cluster.squeue().items() if v["job_state"] in ACTIVE})
        except AssertionError:
            stuck = [j for j, v in cluster.squeue().items() if j in chaos.jobs and v["job_state"] in ACTIVE]
            print(f"\nchaos (seed {seed}): jobs still active after the drain ({len(active)} jobs, "
                  f"{queued_gpu_s} GPU-s queued at its start): {stuck}")
            for job_id in stuck:
                print_job_story(cluster, chaos, job_id)
            raise
        drained_s = time.time() - drain_from
        wait_for(lambda: all(r.state == "DONE" for r in chaos.records(ids).values()), 30,
                 "the store to close every job", seen=lambda: {j: r.state for j, r in chaos.records(ids).items()})
        time.sleep(3 * INTERVAL_S)  # pins of finished jobs dropped
        assert chaos.proc.alive()
        assert watcher.is_alive(), "the stale-pin watcher died (its exception is printed above)"
    finally:
        chaos.stop.set()
        if chaos.proc is not None:
            chaos.proc.stop()
        log_tail = chaos.log.read_text()[-3000:] if chaos.log.exists() else ""

    # -- figures and checks -------------------------------------------------------------
    runs = jobcomp_runs(cluster)  # MinJobAge may have dropped early jobs from squeue: Slurm's log of runs
    restarts = {j: max(0, len(runs.get(j, [])) - 1) for j in chaos.jobs}
    with Store(chaos.url) as store:
        records = store.load_jobs(cluster.name)
        with store._tx() as conn:
            rows = [dict(r) for r in conn.execute(preemptions.select()).mappings()]
            rounds = conn.execute(round_counters.select()).mappings().first()["last_round_id"]
        samples = len(store.service_samples(cluster.name))
        pins_left = store.load_pins(cluster.name)
    lost = [j for j in chaos.jobs if not runs.get(j) or runs[j][-1][0] != "COMPLETED" or records.get(j) is None
            or records[j].end_state != "COMPLETED"]
    signalled = {}
    for row in rows:
        if row["outcome"] == "requeued":
            signalled.setdefault(row["job_id"], []).append(row["signalled_at_s"])

    def ended_in_grace(job_id: str, end_s: float) -> bool:
        # the longest grace here is a job's own @30 lead; Slurm's stamps are whole seconds
        return any(at - 1.0 <= end_s <= at + 30.0 + 2 * INTERVAL_S for at in signalled.get(job_id, []))

    rerun_from_checkpoint = [j for j in chaos.jobs
                             if any(state == "COMPLETED" and ended_in_grace(j, end) for state, _, end in runs.get(j, [])[:-1])]
    finished_twice = [j for j in chaos.jobs
                      if sum(state == "COMPLETED" and not (i < len(runs[j]) - 1 and ended_in_grace(j, end))
                             for i, (state, _, end) in enumerate(runs.get(j, []))) > 1]
    requeues = sum(restarts.values())
    double = {j: (restarts[j], sum(r["job_id"] == j and r["outcome"] == "requeued" for r in rows))
              for j in chaos.jobs}
    double = {j: v for j, v in double.items() if v[0] > v[1]}
    errors = {}
    for job_id, gpus in chaos.jobs.items():
        really = gpus * sum(end - start for _, start, end in runs.get(job_id, []))
        errors[job_id] = (records[job_id].attained_gpu_s - really if job_id in records else float("inf"), gpus,
                          really)
    worst = max(errors, key=lambda j: abs(errors[j][0]))
    worst_s = max(abs(e) / g for e, g, _ in errors.values())
    during = {j: n for j, n in restarts_during.items() if n > restarts_before.get(j, n)}
    print(f"\nchaos (seed {seed}, {time.time() - t0:.0f} s): {KILLS} SIGKILLs survived ({mid_round} after rounds "
          f"had run, {KILLS - mid_round} during start-up), {len(chaos.jobs)} jobs, {len(lost)} lost, "
          f"{len(finished_twice)} finished twice ({len(rerun_from_checkpoint)} ended in grace and reran from "
          f"their checkpoint), {requeues} requeues by {len([r for r in rows if r['outcome'] == 'requeued'])} "
          f"preemption decisions, {len(double)} double requeues, {rounds} rounds; max service error "
          f"{abs(errors[worst][0]):.1f} GPU-s (job {worst}, {errors[worst][1]} GPUs, really {errors[worst][2]:.0f} GPU-s; "
          f"{worst_s:.2f} s of run time, poll_s {POLL_S}); slurmctld down {ctld_down_s:.0f} s; store locked "
          f"{unlocked_at - locked_at:.0f} s: {len(during)} requeues during it, caught up {caught_up_s:.1f} s after; "
          f"stale pins/holds {len(chaos.problems)}; samples {samples}; kill phase ended {killed_at - t0:.0f} s in; "
          f"drained {len(active)} jobs ({queued_gpu_s} GPU-s) in {drained_s:.0f} s of {drain_allowance_s:.0f}")
    if lost:  # the whole story in CI's log: pytest shortens the assertion's message
        for job_id in lost:
            print(f"--- lost job {job_id}: runs {runs.get(job_id)}")
            print_job_story(cluster, chaos, job_id)
        print("--- controller log tail:\n" + log_tail)
    assert not lost, (lost, {j: runs.get(j) for j in lost}, slurmctld_lines(cluster, lost), log_tail)
    assert not finished_twice, {j: runs.get(j) for j in finished_twice}
    assert not double, double
    assert samples >= len(chaos.jobs)
    # Slurm's start/end stamps are whole seconds: one second each run on top of one poll interval.
    bound = {j: g * (POLL_S + 1.0) * (1 + restarts[j]) for j, (_, g, _) in errors.items()}
    closest = max(errors, key=lambda j: abs(errors[j][0]) / bound[j])
    print(f"service error closest to its bound: job {closest}, {abs(errors[closest][0]):.1f} of "
          f"{bound[closest]:.1f} GPU-s ({restarts[closest]} requeues)")
    beyond = [j for j in errors if abs(errors[j][0]) > bound[j]]
    for job_id in beyond[:3]:  # the whole story in CI's log
        record = records.get(job_id)
        print(f"--- service error of job {job_id}: {errors[job_id][0]:+.1f} GPU-s; runs {runs.get(job_id)}; store: "
              f"attained {getattr(record, 'attained_gpu_s', None)}, executed {getattr(record, 'executed_s', None)} s, "
              f"first start {getattr(record, 'first_start_s', None)}, finished {getattr(record, 'finished_s', None)}")
        print_job_story(cluster, chaos, job_id)
    assert not beyond, {j: errors[j] for j in beyond}
    assert not chaos.problems, chaos.problems[:10]
    assert not pins_left, pins_left
    assert not during, during  # nothing requeued while the store could not be written
    assert caught_up_s < 15
    assert all(runs[j][-1][0] == "COMPLETED" for j in urgent)

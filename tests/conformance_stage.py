"""The site-conformance suite's runner (tests/conformance.py has the cases): one group's
cases on its isolated instance, under one `tiresias run`, in as few rounds of waiting as
the cases allow.

The stage: on every node bob's kept job (outside the contract) and his checkpointable
victim, pinned there, the victims in queue 2 within seconds (a 10 GPU-s threshold).
Then all the group's ``no`` jobs at once, several of the controller's rounds: any
preemption is charged to the job its reason names. Then the ``yes`` jobs in batches
whose nodes do not overlap, so each preemption is charged by its victim's node; a victim
that yielded is replaced before the next batch. What each job's request was read as
(ObservedJob.unmodelled_reasons) comes from the product's own backend on the same
slurmctld. The outcomes feed one test per case and side (tests/test_conformance_*.py).
"""
from __future__ import annotations

import re
import shlex
import sys
import time

import pytest
from dataclasses import dataclass, field
from pathlib import Path

from bench.slurm_harness import Instance
from controller.service.acting.backend import ObservedJob
from slurm_plugin.backend import SlurmBackend
from tests.conformance import CONFIGS, RESULTS_DIR, Case, cases_of
from tests.slurm_fixtures import Run, attained, instance_fixture, sbatch_in, wait_for

THRESHOLD_GPU_S = 10.0  # queue 1 -> 2: a 3-GPU victim gets there in about 4 s
NO_ROUNDS_S = 10.0  # how long the jobs nobody may be preempted for wait (about 10 rounds)
START_TIMEOUT_S = 60.0
STARTED = ("RUNNING", "COMPLETING", "COMPLETED")


@dataclass
class Outcome:
    """What happened to one case's two jobs."""

    no_id: str = ""
    yes_id: str = ""
    no_preemptions: list = field(default_factory=list)  # applied preempt decisions naming the no job
    yes_preempted: list = field(default_factory=list)  # victims preempted on the yes job's nodes
    yes_started: bool = False
    no_reasons: tuple | None = None  # unmodelled codes as observed while pending (None: not seen pending)
    yes_reasons: tuple | None = None
    stray: list = field(default_factory=list)  # preemptions in its batch charged to no case
    error: str = ""  # a job that could not be submitted
    release: str = ""  # the instance's Slurm, "22.05" (where a passed side is recorded)
    slurm_said: str = ""  # a yes job that did not start: its records' states and reasons
    controller_said: str = ""  # and `tiresias explain` of it


def node_name(instance: Instance, k: int) -> str:
    return f"{instance.name}g{k}"


def _options(instance: Instance, text: str) -> str:
    return text.replace("{inst}", instance.name)


def submit(instance: Instance, user: str, options: str, name: str, work_s: int = 30, requeue: bool = True) -> str:
    """sbatch the harness's checkpointing job (tests' job.sh) with OPTIONS as USER; a het
    job's components are separated by ' : ' in OPTIONS (the script goes last). Without
    ``requeue`` the job is outside the contract: never a victim itself."""
    workdir = instance.workdir(user)
    args = (f"-J {shlex.quote(name)} --output=%j.out --open-mode=append"
            f" {'--requeue' if requeue else '--no-requeue'} {options}"
            f" ./job.sh {int(work_s)}")
    return sbatch_in(instance, user, workdir, args)


def _records_of(jobs: dict, job_id: str) -> list[dict]:
    """squeue's records of a job, of its array's tasks or of its het components."""
    return [r for jid, r in jobs.items()
            if jid == job_id or str(r.get("array_job_id") or "") == job_id or str(r.get("het_job_id") or "") == job_id]


def started(instance: Instance, job_id: str) -> bool:
    return any(r["job_state"] in STARTED for r in _records_of(instance.squeue(), job_id))


def observed_reasons(instance: Instance, job_ids) -> dict[str, tuple | None]:
    """The unmodelled codes the product's backend reads off each pending job (its array's
    tasks and het components under its id); None where no pending record of it is seen."""
    observation = SlurmBackend(env=instance.env).observe()
    out: dict[str, tuple | None] = {j: None for j in job_ids}
    for job in observation.jobs:
        if job.state != "PENDING":
            continue
        for j in job_ids:
            if _belongs(job, j):
                out[j] = tuple(sorted(set(out[j] or ()) | set(job.unmodelled_reasons)))
    return out


def _belongs(job: ObservedJob, job_id: str) -> bool:
    return job.job_id == job_id or job.job_id.split("_", 1)[0] == job_id or getattr(job, "het_job_id", "") == job_id


def _names(reason: str, job_id: str) -> bool:
    return re.search(rf"(?<!\d){re.escape(job_id)}(?!\d)", reason) is not None


class Stage:
    """The kept jobs and victims of a group's configuration, and the controller."""

    def __init__(self, instance: Instance, tmp: Path, group: str):
        self.instance = instance
        self.config = CONFIGS[group]
        self.run = Run(instance, tmp)
        self.victims: dict[int, str] = {}  # node index -> bob's victim there
        self.kept: dict[int, str] = {}
        # node index -> the reservation over it (made by a group's prepare): a victim that
        # replaces one there must be submitted into it, or Slurm keeps it off the node
        self.reservations: dict[int, str] = {}

    def start(self) -> None:
        self.instance.cancel_all()
        self.run.start(queues_gpu_s=[THRESHOLD_GPU_S], preempt_grace_s=2.0)
        for k, (kept, _) in self.config.stage.items():
            if kept:
                self.kept[k] = submit(self.instance, "bob", f"-w {node_name(self.instance, k)} {kept}", f"kept{k}",
                                      3600, requeue=False)
        wait_for(lambda: all(self._state(j) == "RUNNING" for j in self.kept.values()), 40, "bob's kept jobs to start",
                 seen=self.instance.squeue)
        self.refill()

    def _state(self, job_id: str) -> str:
        return self.instance.squeue().get(job_id, {}).get("job_state", "GONE")

    def refill(self) -> None:
        """Every node's victim running and in queue 2: one that yielded (or restarted) is
        cancelled and replaced by a new one."""
        jobs = self.instance.squeue()
        for k, (_, victim) in self.config.stage.items():
            if not victim:
                continue
            old = self.victims.get(k)
            record = jobs.get(old or "", {})
            if old and record.get("job_state") == "RUNNING" and not record.get("restart_cnt"):
                continue
            if old:
                self.instance.run(["scancel", old], check=False)
            into = f"--reservation={self.reservations[k]} " if k in self.reservations else ""
            self.victims[k] = submit(self.instance, "bob", f"-w {node_name(self.instance, k)} {into}{victim}",
                                     f"victim{k}", 3600)
        ids = list(self.victims.values())
        wait_for(lambda: all(self._state(j) == "RUNNING" for j in ids), 40, "bob's victims to start",
                 seen=self.instance.squeue)
        wait_for(lambda: all(attained(self.run, j) > THRESHOLD_GPU_S for j in ids), 40,
                 "bob's victims to reach queue 2")

    def preemptions(self) -> list[dict]:
        # (decision ids, not positions: the store lists the newest first)
        return [d for d in self.run.decisions() if d["kind"] == "preempt" and d["applied"]]

    def cancel_alice(self) -> None:
        self.instance.run(["scancel", "--full", "-u", "alice"], check=False)
        self.instance.run(["scancel", "-u", "alice"], check=False)
        wait_for(lambda: not any(r["job_state"] in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING")
                                 for r in self.instance.squeue().values() if r.get("user_name") == "alice"),
                 40, "alice's jobs to end")

    def submit_case(self, case: Case, side: str) -> str:
        options = _options(self.instance, case.yes if side == "yes" else case.no)
        if case.pin and len(case.nodes) == 1 and (side == "yes" or " -w " not in f" {options}"):
            options = f"-w {node_name(self.instance, case.nodes[0])} {options}"
        # alice's jobs are never victims: a yes job that started first would reach queue 2 and
        # yield to a slower one of its batch
        job_id = submit(self.instance, "alice", options, f"{case.key}-{side}", requeue=False)
        if case.setup == "split":
            # Slurm splits a pending task off its array's record on any update naming it
            self.instance.run(["scontrol", "hold", f"{job_id}_0"])
            self.instance.run(["scontrol", "release", f"{job_id}_0"])
        return job_id


def run_group(instance: Instance, tmp: Path, group: str, prepare=None) -> dict[str, Outcome]:
    """Every case of ``group`` on ``instance``: the outcomes by case key. ``prepare(stage)``
    runs once the stage holds every node (reservations over running jobs)."""
    cases = cases_of(group)
    version = instance.run(["sinfo", "--version"]).stdout  # "slurm-wlm 22.05.8", "slurm 24.11.5"
    found = re.search(r"(\d+)\.(\d+)", version)
    release = f"{int(found.group(1))}.{int(found.group(2)):02d}" if found else "unknown"
    outcomes = {case.key: Outcome(release=release) for case in cases}
    (RESULTS_DIR / f"passed-{release}-{group}.txt").unlink(missing_ok=True)  # this run's alone
    stage = Stage(instance, tmp, group)
    stage.start()
    try:
        if prepare is not None:
            prepare(stage)
        _no_phase(stage, cases, outcomes)
        for batch in _batches(cases):
            stage.refill()
            _yes_batch(stage, batch, outcomes)
    finally:
        stage.run.stop_all()
    return outcomes


def _no_phase(stage: Stage, cases: list[Case], outcomes: dict[str, Outcome]) -> None:
    before = {d["decision_id"] for d in stage.preemptions()}
    for case in cases:
        try:
            outcomes[case.key].no_id = stage.submit_case(case, "no")
        except RuntimeError as exc:
            outcomes[case.key].error = f"no job: {exc}"
    ids = [o.no_id for o in outcomes.values() if o.no_id]
    time.sleep(3)
    reasons = observed_reasons(stage.instance, ids)
    time.sleep(NO_ROUNDS_S)
    done = [d for d in stage.preemptions() if d["decision_id"] not in before]
    for case in cases:
        out = outcomes[case.key]
        out.no_reasons = reasons.get(out.no_id)
        out.no_preemptions = [d for d in done if out.no_id and _names(d["reason"], out.no_id)]
    stage.cancel_alice()


def _batches(cases: list[Case]) -> list[list[Case]]:
    """The cases in batches whose yes jobs' nodes do not overlap, in order."""
    batches: list[list[Case]] = []
    for case in cases:
        for batch in batches:
            if not any(set(case.nodes) & set(other.nodes) for other in batch):
                batch.append(case)
                break
        else:
            batches.append([case])
    return batches


def _yes_batch(stage: Stage, batch: list[Case], outcomes: dict[str, Outcome]) -> None:
    before = {d["decision_id"] for d in stage.preemptions()}
    for case in batch:
        try:
            outcomes[case.key].yes_id = stage.submit_case(case, "yes")
        except RuntimeError as exc:
            outcomes[case.key].error = f"yes job: {exc}"
    submitted = [c for c in batch if outcomes[c.key].yes_id]
    submitted_at = time.monotonic()
    time.sleep(1.5)
    reasons = observed_reasons(stage.instance, [outcomes[c.key].yes_id for c in submitted])
    release = outcomes[batch[0].key].release
    modelled = [c for c in submitted if c.expected_on(release) == "modelled"]
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and not all(started(stage.instance, outcomes[c.key].yes_id) for c in modelled):
        time.sleep(1)
    if len(modelled) < len(submitted):
        time.sleep(max(0.0, submitted_at + NO_ROUNDS_S - time.monotonic()))
        later = observed_reasons(stage.instance, [outcomes[c.key].yes_id for c in submitted])
        reasons = {j: (later.get(j) if reasons.get(j) is None else reasons[j]) for j in reasons}
    done = [d for d in stage.preemptions() if d["decision_id"] not in before]
    by_node = {v: k for k, v in stage.victims.items()}
    charged = set()
    for case in submitted:
        out = outcomes[case.key]
        out.yes_started = started(stage.instance, out.yes_id)
        out.yes_reasons = reasons.get(out.yes_id)
        if not out.yes_started:  # what Slurm and the controller said of it, for the failure's message
            records = _records_of(stage.instance.squeue(), out.yes_id)
            out.slurm_said = ", ".join(f"{r.get('job_id')}_{r.get('array_task_id') or ''} {r.get('job_state')} "
                                       f"{r.get('state_reason')}" for r in records)
            out.controller_said = stage.instance.run(
                [sys.executable, "-m", "controller.cli.main", "explain", out.yes_id, "--config", str(stage.run.tmp / "tiresias.yaml")],
                check=False).stdout[-1500:]
        out.yes_preempted = [d["job_id"] for d in done if by_node.get(d["job_id"]) in case.nodes]
        charged.update(out.yes_preempted)
    stray = [d["job_id"] for d in done if d["job_id"] not in charged]
    for case in submitted:
        outcomes[case.key].stray = stray
    stage.cancel_alice()


def check_no(case: Case, out: Outcome) -> None:
    """The job Slurm would not start: nobody preempted for it; an unmodelled request
    reported with its code."""
    assert not out.error, out.error
    assert out.no_preemptions == [], f"{case.key}: preempted for a job Slurm would not start: {out.no_preemptions}"
    expected = case.expected_on(out.release)
    if expected.startswith("unmodelled:"):
        code = expected.split(":", 1)[1]
        assert out.no_reasons is not None and code in out.no_reasons, (case.key, out.no_reasons)
    record_pass(case, out, "no")


def check_yes(case: Case, out: Outcome) -> None:
    """The job Slurm would start on what one victim frees: exactly one victim yields
    and it starts (modelled); or it is reported with its code and nobody yields."""
    assert not out.error, out.error
    assert out.stray == [], f"{case.key}: its batch preempted victims no case of it may use: {out.stray}"
    expected = case.expected_on(out.release)
    if expected.startswith("waits:"):  # Slurm keeps it at a reason the controller never preempts for
        assert out.yes_preempted == [], f"{case.key}: preempted for a job Slurm keeps waiting: {out.yes_preempted}"
        assert out.yes_started or f" {expected.split(':', 1)[1]}" in out.slurm_said, (case.key, out.slurm_said)
        record_pass(case, out, "yes")
        return
    if expected == "modelled":
        assert out.yes_reasons in (None, ()), f"{case.key}: read as unmodelled {out.yes_reasons}"
        assert out.yes_started, (f"{case.key}: did not start; preempted on its nodes: {out.yes_preempted}; "
                                 f"Slurm: {out.slurm_said}; explain: {out.controller_said}")
        assert len(out.yes_preempted) == 1, f"{case.key}: {len(out.yes_preempted)} preemptions: {out.yes_preempted}"
        record_pass(case, out, "yes")
        return
    assert out.yes_preempted == [], f"{case.key}: preempted for an unplanned job: {out.yes_preempted}"
    if expected.startswith("unmodelled:"):
        code = expected.split(":", 1)[1]
        assert out.yes_reasons is not None and code in out.yes_reasons, (case.key, out.yes_reasons)
    record_pass(case, out, "yes")


def record_pass(case: Case, out: Outcome, side: str) -> None:
    """One passed side of a case on this release, for the docs table
    (``python -m tests.conformance --record`` reads RESULTS_DIR; the release roots bind
    this checkout at its own path, so their results land here too)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with open(RESULTS_DIR / f"passed-{out.release}-{case.group}.txt", "a") as results:
        results.write(f"{case.key} {side}\n")


def instance_of(group: str):
    """The module fixture ``cluster``: the group's isolated instance, its slurm.conf lines."""
    config = CONFIGS[group]
    return instance_fixture(config.prefix, extra_env={"TIRESIAS_INSTANCE_CONF_EXTRA": config.conf, **config.env})


def group_module(group: str, prepare=None) -> tuple:
    """What a tests/test_conformance_<group>.py module holds: its instance fixture
    ``cluster``, the module fixture ``outcomes`` (one run of the group's stage), and the
    two tests every case gets, by side. ``prepare(stage)`` as in run_group."""
    cluster = instance_of(group)

    @pytest.fixture(scope="module")
    def outcomes(cluster, tmp_path_factory):
        return run_group(cluster, tmp_path_factory.mktemp(group), group, prepare=prepare)

    @pytest.mark.parametrize("case", cases_of(group), ids=lambda c: c.key)
    def test_a_job_slurm_would_not_start_preempts_nobody(case, outcomes):
        check_no(case, outcomes[case.key])

    @pytest.mark.parametrize("case", cases_of(group), ids=lambda c: c.key)
    def test_a_job_slurm_would_start_on_one_victim_gets_exactly_one(case, outcomes):
        check_yes(case, outcomes[case.key])

    return (cluster, outcomes, test_a_job_slurm_would_not_start_preempts_nobody,
            test_a_job_slurm_would_start_on_one_victim_gets_exactly_one)

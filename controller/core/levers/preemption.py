"""A preemption's levers: the checkpoint signal, then the requeue once the grace period is over.
Pure: the book of open preemptions, the rule that signals the plan's victims and the one
that requeues them when their grace is over. controller.service.round.preemption loads
the book from the store's open rows, builds the view (the contract's reads of batch
scripts, the job's counted preemptions), carries the actions out through the executor and
persists each transition; every time given here is an argument (``now``).

Two strategies carry out the plan's victims (``strategy_for``, chosen once from the
``preemption`` setting): the controller's own (signal, grace, requeue: the functions
below) and slurmctld's (``preemption: slurm``: the bands rank running jobs too, the
plan's victims are recorded as expected of slurmctld, citing the band decisions sent,
and a decision is logged when Slurm's requeue of such a job is observed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional

from controller.core.actions import Requeue, Signal
from controller.core.plan import Plan, Preempt
from controller.core.ids import caused_id, decision_id

# end states a job reaches by itself during its grace period (its handler exited)
ENDED_IN_GRACE = frozenset({"COMPLETED", "FAILED"})
ACTIVE = frozenset({"RUNNING", "PENDING"})


def signal_for(preempt: Preempt, signal_name: str, batch_only: bool, how: str) -> Signal:
    """The checkpoint signal a preemption sends before its requeue."""
    return Signal(caused_id(preempt.decision_id, "signal"), preempt.job_id, signal_name, batch_only,
                  reason=f"checkpoint before the requeue: {how}", cause_id=preempt.decision_id)


def requeue_after_grace(decision_id: str, job_id: str, grace_s: float, cause_id: str) -> Requeue:
    """The requeue that ends a preemption's grace period; cites the preemption."""
    return Requeue(decision_id, job_id, reason=f"grace period of {grace_s:g}s over", cause_id=cause_id)


@dataclass(frozen=True)
class OpenPreemption:
    """A preemption signalled and not yet seen through (requeue or job end): the store's open row."""

    job_id: str
    signalled_at_s: float
    restart_count: int
    decision_id: str = ""  # the preemption decision (the requeue cites it)


class PreemptionBook:
    """``open``: job id -> its OpenPreemption (any object with those four fields: the
    service reads them from the store's open rows, oldest first)."""

    def __init__(self, rows: Iterable = ()):
        self.open = {row.job_id: row for row in rows}

    def leaving(self) -> set[str]:
        """Job ids signalled and not yet requeued: their GPUs are neither free nor plannable."""
        return set(self.open)


@dataclass(frozen=True)
class VictimView:
    """What the service read of one victim: why it must not be preempted now ('' when it
    may), its declared signal (None: preempt_undeclared) as name, batch-only flag and
    text, and its grace period (s) if signalled now."""

    protected: str
    signal_name: Optional[str] = None
    batch_only: bool = True
    signal_text: str = ""
    grace_s: float = 0.0


@dataclass(frozen=True)
class VictimStep:
    """One victim's course this round. ``kept``: why it stays running ('' when it is
    preempted); ``signal``: the lever to pull first (None: requeued without one);
    ``how``: what the preemption does; ``said``: the requeue after the grace, for an
    executor that opens no row (it is only said)."""

    preempt: Preempt
    kept: str = ""
    signal: Optional[Signal] = None
    how: str = ""
    said: Optional[Requeue] = None


def victims_to_signal(plan: Plan, kept: Mapping[str, str], in_progress: set[str]) -> list[Preempt]:
    """The plan's victims the controller looks at now: not kept by the handoff rule and
    not signalled already (``in_progress``: e.g. before a controller restart)."""
    return [action for action in plan.of_kind("preempt")
            if action.job_id not in kept and action.job_id not in in_progress]


def preemption_step(action: Preempt, view: VictimView) -> VictimStep:
    """One victim's step: kept running (protected) or its signal (or none) and the
    requeue after its grace (``view.grace_s``, counted from the signal, sent now)."""
    if view.protected:
        return VictimStep(action, kept=f"kept running: {view.protected}")
    how = (f"signal {view.signal_text}, requeue after {view.grace_s:g}s" if view.signal_name is not None
           else "requeue without a signal (preempt_undeclared)")
    signal = signal_for(action, view.signal_name, view.batch_only, how) if view.signal_name is not None else None
    said = requeue_after_grace(caused_id(action.decision_id, "requeue_after_grace"), action.job_id,
                               view.grace_s, action.decision_id)
    return VictimStep(action, signal=signal, how=how, said=said)


def plan_preemptions(victims: list[Preempt], views: Mapping[str, VictimView], now: float) -> list[VictimStep]:
    """Each victim's step (``preemption_step``); ``now`` (epoch s): the signals' time.
    (The service takes them one at a time: a victim's view may read its batch script,
    and a failed signal changes what the contract says.)"""
    return [preemption_step(action, views[action.job_id]) for action in victims]


@dataclass(frozen=True)
class RequeueSettings:
    """The settings the requeue rule reads: ``requeue_ended`` (preempt_requeue_ended)
    and ``interval_s`` (a round's length, the slack on an end time)."""

    requeue_ended: bool
    interval_s: float


@dataclass(frozen=True)
class Resolution:
    """What becomes of one open preemption this round. ``kind``: "requeue" (close it,
    counted, then pull ``requeue``; ``credit``: the run's service is credited up to
    now first, the job still runs), "finished" (the job left: closed uncounted) or
    "requeued" (Slurm requeued it already: closed, counted)."""

    kind: str
    job_id: str
    requeue: Optional[Requeue] = None
    credit: bool = False


def ended_in_grace(job, signalled_at_s: float, grace_s: Optional[float], settings: RequeueSettings) -> bool:
    """The job ended by itself after the signal and before its grace ran out."""
    if not settings.requeue_ended or job.state not in ENDED_IN_GRACE:
        return False
    # no lower bound: the open row says it ran when signalled, and after a requeue of a
    # COMPLETED job Slurm 22.05 may still report the earlier run's end time
    ended = job.end_time_s if job.end_time_s is not None else signalled_at_s
    return ended <= signalled_at_s + grace_s + settings.interval_s


def needs_grace(job, row, settings: RequeueSettings) -> bool:
    """Whether ``resolve_preemptions`` reads the grace of this open row's job (the
    service reads it for those only: a running job's grace may read its batch script)."""
    if job is None:
        return False
    if settings.requeue_ended and job.state in ENDED_IN_GRACE:
        return True
    return job.state == "RUNNING" and job.restart_count <= row.restart_count


def resolve_preemptions(book: PreemptionBook, jobs: Mapping, graces: Mapping[str, float], now: float,
                        round_id: int, settings: RequeueSettings, active_states: Iterable[str]) -> list[Resolution]:
    """Requeue signalled jobs whose grace period is over (or that ended inside it); close
    what resolved itself. ``jobs``: job id -> the observed job (state, restart_count,
    end_time_s); ``graces``: job id -> its grace (s), for the rows ``needs_grace`` names;
    ``active_states``: the states in which a job still holds or waits for GPUs. Each
    requeue cites the preemption decision that signalled the job."""
    active = set(active_states)
    resolutions: list[Resolution] = []
    requeued = 0
    for row in book.open.values():
        job = jobs.get(row.job_id)
        if job is not None and row.job_id in graces and ended_in_grace(job, row.signalled_at_s,
                                                                       graces[row.job_id], settings):
            requeued += 1
            resolutions.append(Resolution("requeue", row.job_id, Requeue(
                decision_id(round_id, "requeue", requeued), row.job_id, reason="ended during its grace period",
                cause_id=row.decision_id)))
            continue
        if job is None or job.state not in active:
            resolutions.append(Resolution("finished", row.job_id))
            continue
        if job.restart_count > row.restart_count or job.state == "PENDING":
            # Requeued, but the process that did it died before recording it:
            # count the preemption now, so preempt_max_per_job still holds.
            resolutions.append(Resolution("requeued", row.job_id))
            continue
        if job.state == "RUNNING" and now >= row.signalled_at_s + graces[row.job_id]:
            grace = graces[row.job_id]
            requeued += 1
            resolutions.append(Resolution("requeue", row.job_id, requeue_after_grace(
                decision_id(round_id, "requeue", requeued), row.job_id, grace, row.decision_id), credit=True))
    return resolutions


# -- the two strategies ------------------------------------------------------------------------

SLURM_PREEMPTS = ("left to slurmctld (preemption: slurm): it preempts a running job of a lower priority "
                  "for a pending one, by the SiteFactor bands")


@dataclass(frozen=True)
class Expected:
    """A victim left to slurmctld: the decision that expects it and the job's restart count then."""

    decision_id: str
    restart_count: int


class SlurmBook:
    """Under ``preemption: slurm``: the victims left to slurmctld (job id -> Expected,
    the latest decision), the band decision sent last for each job (job id -> its
    SetBand) and those already logged, so the story of a job slurmctld preempted goes
    from the bands on to the observed requeue. Kept in memory: a restarted controller
    starts it afresh (the bands it sends again, the plan's victims it expects again)."""

    def __init__(self):
        self.expected: dict[str, Expected] = {}
        self.bands: dict[str, object] = {}
        self.logged: set[str] = set()

    def note_bands(self, actions: Iterable) -> None:
        """Remember the SetBand actions among a round's levers (kind "band")."""
        for action in actions:
            if action.kind == "band":
                self.bands[action.job_id] = action

    def forget(self, job_id: str) -> None:
        self.expected.pop(job_id, None)
        band = self.bands.pop(job_id, None)
        if band is not None:
            self.logged.discard(band.decision_id)


class ControllerPreempts:
    """``preemption: controller``: the controller signals and requeues the plan's victims
    itself; the bands rank pending jobs only."""

    name = "controller"
    running_banded = False  # slurmctld picks no victim: running jobs need no band
    by_qos = False  # slurmctld preempts no job: preempt_qos (its GraceTime, who may preempt it) is not read
    # the lever kinds slurmctld carries out itself (the controller pulls none of them): none
    slurm_carries: frozenset[str] = frozenset()

    def counted_preemptions(self, counted: int, restart_count: int) -> int:
        """The preemptions preempt_max_per_job counts: the controller's own."""
        return counted

    def own_victims(self, plan: Plan) -> list[Preempt]:
        """The plan's victims the controller signals itself: all of them."""
        return plan.of_kind("preempt")

    def left_to_slurm(self, plan: Plan, jobs: Mapping, book: SlurmBook, bands_applied: bool) -> list[dict]:
        """The decision entries of the victims left to slurmctld: none."""
        return []

    def requeues_seen(self, jobs: Mapping, book: SlurmBook, round_id: int) -> list[dict]:
        """Decision entries of Slurm's requeues of the victims it was left: none."""
        return []

    def kept_running(self, jobs: Mapping, protected: Callable[[object], str]) -> set[str]:
        """The running jobs slurmctld must not preempt (kept above every pending job): none."""
        return set()


class SlurmPreempts(ControllerPreempts):
    """``preemption: slurm``: slurmctld chooses, signals and requeues by the bands (running
    jobs' too); the plan's victims are what the controller expects of it."""

    name = "slurm"
    running_banded = True  # slurmctld picks victims by priority: running jobs banded in the plan's order
    by_qos = True  # ... among preempt_qos's jobs, for jobs whose QOS may preempt it, after its GraceTime
    slurm_carries = frozenset({Signal.kind, Requeue.kind})  # slurmctld signals (GraceTime) and requeues

    def counted_preemptions(self, counted: int, restart_count: int) -> int:
        # slurmctld's preemptions are requeues this controller never counted: Slurm's
        # restart count holds them (and this controller's, and any other requeue)
        return max(counted, restart_count)

    def own_victims(self, plan: Plan) -> list[Preempt]:
        return []

    def left_to_slurm(self, plan: Plan, jobs: Mapping, book: SlurmBook, bands_applied: bool) -> list[dict]:
        """One entry per victim, not applied, citing the band decisions that rank it below
        a pending job: the victim's and those of the jobs the plan starts, the last each
        was sent (each logged once, before the first entry citing it; ``bands_applied``:
        whether bands are really sent, enforce). Each victim becomes what slurmctld is
        expected to do (``requeues_seen``)."""
        starts = [a.job_id for a in plan.of_kind("start")]
        entries: list[dict] = []
        for action in plan.of_kind("preempt"):
            cited = []
            for job_id in [action.job_id] + starts:
                band = book.bands.get(job_id)
                if band is None:
                    continue
                cited.append(band.decision_id)
                if band.decision_id not in book.logged:
                    book.logged.add(band.decision_id)
                    entries.append({"decision_id": band.decision_id, "job_id": job_id, "kind": band.kind,
                                    "reason": band.reason, "applied": bands_applied,
                                    "detail": "logged when a victim first cites it: slurmctld ranks running "
                                              "and pending jobs by the bands (preemption: slurm)", "cause_id": ""})
            entries.append({"decision_id": action.decision_id, "job_id": action.job_id, "kind": action.kind,
                            "reason": action.reason, "applied": False, "detail": SLURM_PREEMPTS,
                            "cause_id": ",".join(dict.fromkeys(cited))})
            job = jobs.get(action.job_id)
            if job is not None:
                book.expected[action.job_id] = Expected(action.decision_id, job.restart_count)
        return entries

    def requeues_seen(self, jobs: Mapping, book: SlurmBook, round_id: int) -> list[dict]:
        """A decision for each victim left to slurmctld that Slurm requeued since (its
        restart count rose, or it is pending again), citing the latest expectation; a
        victim that left otherwise is forgotten."""
        entries = []
        for job_id, expected in list(book.expected.items()):
            job = jobs.get(job_id)
            if job is None or job.state not in ACTIVE:
                del book.expected[job_id]
                continue
            if job.restart_count > expected.restart_count or job.state == "PENDING":
                del book.expected[job_id]
                entries.append({"decision_id": decision_id(round_id, "slurm_requeue", len(entries) + 1),
                                "job_id": job_id, "kind": "requeue", "applied": False,
                                "reason": "requeued by slurmctld (preemption: slurm), as the plan expected",
                                "detail": f"observed: restart count {expected.restart_count} -> "
                                          f"{job.restart_count}, {job.state}",
                                "cause_id": expected.decision_id})
        return entries

    def kept_running(self, jobs: Mapping, protected: Callable[[object], str]) -> set[str]:
        # (protected: the contract, and preempt_min_runtime_s / preempt_max_per_job with
        # slurmctld's own requeues counted)
        return {j for j, job in jobs.items() if job.state == "RUNNING" and protected(job)}


STRATEGIES = {"controller": ControllerPreempts(), "slurm": SlurmPreempts()}


def strategy_for(preemption: str) -> ControllerPreempts:
    """The strategy the ``preemption`` setting names (config validates the name)."""
    return STRATEGIES[preemption]

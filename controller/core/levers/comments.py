"""The line each managed job carries in its Slurm AdminComment, so that its owner sees
why it waits with the tools they already have (``scontrol show job``):

    site text [tiresias: queue 2/3 · 5,400 GPU-s attained · position 4 · preemptable]

Ours is the bracketed part; whatever else the field holds is the site's and is kept as
it is (a site that rewrites the field loses only our part, which the next round puts
back after theirs). Written only when the text differs from what Slurm shows, and
bounded: a change of queue level or of pending/running goes out in the same round,
other changes (attained service, position) at most every ``refresh_s`` per job, and
at most ``max_per_round`` writes per round and what Slurm's RPC budget leaves after
the bands, level changes first. Only when the
executor pulls levers: observe and shadow write nothing (this is information, not a
scheduling decision).

Pure: the lever planner (controller.core.levers.planner.LeverPlanner.comments) plans the
writes from the view; ``CommentBook.settle`` books the lines the executor wrote.
"""
from __future__ import annotations

import heapq
import itertools
import math
import operator
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

from controller.core.actions import SetAdminComment
from controller.core.ids import decision_id
from controller.core.levers.view import JobFacts

OUR_PART = re.compile(r"\s*\[tiresias: [^\[\]]*\]")
SEPARATOR = " · "


# Memoized for the rounds that look at many jobs (a full round, a burst): most show a
# comment seen before. Small: a round looks only at the jobs whose record or level
# changed (CommentBook.plan), and a memo of 65,536 comments held 0.13 KB a job at 12,000
# jobs for rounds that hardly ask it.
MEMO_SIZE = 1 << 12
# The due refreshes a backlog leaves unlooked-at are counted (CommentBook.waiting) at most
# this often: an approximate count for the metric between, not a pass every round.
WAITING_COUNTED_EVERY_S = 60.0


@lru_cache(maxsize=MEMO_SIZE)
def rounded_gpu_s(value: float) -> str:
    """Attained service with two significant digits (5,400; 130,000): stable between
    rounds, so the line does not change every time a running job gains a little."""
    value = max(0.0, float(value))
    if value < 100:
        return f"{int(value):,}"
    digits = len(str(int(value))) - 2
    return f"{int(value) // 10 ** digits * 10 ** digits:,}"


def our_line(level: int, queues: int, attained_gpu_s: float, position: Optional[int], running: bool,
             preemptable: bool) -> str:
    """Our part of the AdminComment, without brackets. ``level`` is 0-based; ``queues``
    0 leaves the queue out (a policy without MLFQ queues); ``position`` is the job's
    place in the plan order, as ``tiresias queue`` shows it."""
    head, tail = _line_parts(level, queues, rounded_gpu_s(attained_gpu_s), running, preemptable)
    return head + tail if position is None else f"{head}{SEPARATOR}position {position}{tail}"


@lru_cache(maxsize=1024)
def _line_parts(level: int, queues: int, attained: str, running: bool, preemptable: bool) -> tuple[str, str]:
    """our_line's text before and after the position. Memoized without the position,
    which is every job's own: a memo of whole lines held one line per job (0.3 KB a
    job at 12,000 jobs) for the few rounds that rebuild a line."""
    parts = [f"queue {level + 1}/{queues}"] if queues else []
    parts.append(f"{attained} GPU-s attained")
    head = "tiresias: " + SEPARATOR.join(parts)
    if not running:
        return head, ""
    return head, f"{SEPARATOR}{'preemptable' if preemptable else 'not preemptable'}"


def site_part(current: str) -> str:
    """What the site wrote: the field without our bracketed part(s)."""
    return OUR_PART.sub("", current or "").strip()


@lru_cache(maxsize=MEMO_SIZE)
def ours_in(current: str) -> str:
    """Our part as Slurm shows it now ('' when there is none)."""
    match = OUR_PART.search(current or "")
    return match.group(0).strip()[1:-1] if match else ""


def combined(current: str, line: str) -> str:
    """The full AdminComment: the site's text first, then ours in brackets."""
    site = site_part(current)
    return f"{site} [{line}]" if site else f"[{line}]"


@dataclass(slots=True)
class _Written:
    at_s: float
    urgent_key: tuple  # (level, running): a change here is written at once
    # the JobFacts last found to show this line (its comment and state as then):
    # while the job is that object, at that level and not due, it is not looked at again
    checked: Optional[JobFacts] = None


class CommentBook:
    """Decides which jobs' AdminComment to write this round (the diffing and bounds),
    and remembers what was written; the caller carries the writes out through the
    executor and settles the book with what it did.

    A round looks only at what changed: a job whose record (the JobFacts object the
    backend keeps while the record's text is unchanged) and level are those it was last
    found up to date with is skipped at one identity test; the routine refreshes come
    from a heap of due times, not from a pass over every job. The writes share Slurm's
    RPC budget with the bands (the LeverBook's RpcBudget, controller.core.levers.bands:
    one RPC each, after the bands took theirs)."""

    def __init__(self, refresh_s: float = 300.0, max_per_round: int = 50):
        self.refresh_s = refresh_s
        self.max_per_round = max_per_round
        self.hold: set[str] = set()  # job ids no line is written to this round (the controller's)
        self._written: dict[str, _Written] = {}
        self._keys: dict[tuple, tuple] = {}  # the urgent keys (level, running) written: each one object
        self._due_at: tuple[float, float] = (math.nan, math.nan)  # (now, now + refresh_s) of the last write
        self._due: list[tuple[float, str]] = []  # heap of (written at + refresh_s, job id); stale rows skipped
        self._positions: tuple[object, dict[str, int]] = (None, {})  # (plan, job id -> place): per plan
        self.backlog = False  # the last round left lines to write (over max_per_round or the budget)
        self._waiting = 0  # urgent lines the last round left to write (see waiting)
        self._unlooked_at = math.nan  # now of the last plan, whose due rows not looked at wait too
        self._counted: tuple[float, int] = (math.nan, 0)  # (when, how many) of those, last counted
        # What the last pass looked at (see plan): its plan, its jobs (job id -> the JobFacts
        # object), the jobs it held and those it left wanting a line (the cap, the budget, a
        # failed write). None: the next pass looks at every job.
        self._passed: object = None
        self._shown: Optional[dict[str, JobFacts]] = None
        self._held: set[str] = set()
        self._left: set[str] = set()

    def updates(self, wanted: dict[str, tuple[Optional[str], tuple]], observed: dict[str, JobFacts],
                now: float, limit: Optional[float] = None,
                line_of: Optional[Callable[[str], str]] = None) -> dict[str, str]:
        """``wanted``: job id -> (our line, urgent key); a line None is a first line
        (never written, none shown: urgent), made by ``line_of(job_id)`` only if written
        now. Returns job id -> full new AdminComment for the jobs to write now (at most
        max_per_round, and ``limit``)."""
        urgent, routine = [], []
        for job_id, (line, key) in wanted.items():
            if line is None:
                urgent.append(job_id)
                continue
            job = observed.get(job_id)
            if job is None or ours_in(job.admin_comment) == line:
                continue
            last = self._written.get(job_id)
            if last is None or last.urgent_key != key or not ours_in(job.admin_comment):
                urgent.append(job_id)
            elif now - last.at_s >= self.refresh_s:
                routine.append((last.at_s, job_id))
        chosen = urgent + [job_id for _, job_id in sorted(routine)]
        cap = self._cap(limit)
        self.backlog = len(chosen) > cap
        self._waiting = max(len(chosen) - cap, 0)
        self._unlooked_at = math.nan
        return {job_id: combined(observed[job_id].admin_comment,
                                 wanted[job_id][0] if wanted[job_id][0] is not None else line_of(job_id))
                for job_id in chosen[:cap]}

    def _cap(self, limit: Optional[float]) -> int:
        """The lines a round writes at most: ``max_per_round`` and the RPCs the budget leaves."""
        return self.max_per_round if limit is None else max(int(min(self.max_per_round, limit)), 0)

    @property
    def waiting(self) -> int:
        """Lines the last round left to write: the urgent ones over the cap, and the routine
        refreshes due that it did not look at (some of them may find their line unchanged
        when looked at). Those are counted from the heap at most every WAITING_COUNTED_EVERY_S
        of the rounds' clock (a Python pass over every row, while the metric asks every
        round)."""
        if math.isnan(self._unlooked_at):
            return self._waiting
        now = self._unlooked_at
        if not now - WAITING_COUNTED_EVERY_S < self._counted[0] <= now:
            written, refresh_s = self._written, self.refresh_s
            unlooked = 0
            for at, job_id in self._due:
                if at <= now:
                    last = written.get(job_id)
                    unlooked += last is not None and last.at_s + refresh_s == at
            self._counted = (now, unlooked)
        return self._waiting + self._counted[1]

    def _position(self, plan) -> dict[str, int]:
        """Job id -> its place in the plan order, built once per plan (a quiet round keeps
        the last plan, and so the map)."""
        if self._positions[0] is not plan:
            self._positions = (plan, dict(zip(plan.order, itertools.count(1))))
        return self._positions[1]

    def plan(self, plan, observed: dict[str, JobFacts], attained_gpu_s: Callable[[str], float], queues: int,
             preemptable, now: float, limit: Optional[float] = None, hold=None) -> tuple[list, dict, list]:
        """This round's AdminComment changes: (SetAdminComment actions, ids
        ``r<round>.c<n>``; job id -> its urgent key; the due refresh rows to settle).
        ``queues``: K, or 0 for a policy without queues; ``attained_gpu_s(job_id)``: its
        service; ``preemptable(job) -> bool`` for running jobs; ``limit``: the RPCs the
        budget leaves (one a line); ``hold``: jobs no line is written to this round.

        The jobs looked at are those whose record (JobFacts object) or level changed since
        the last pass, with those it held or left wanting a line; the others were found up
        to date or written then, and looking again would skip them (their refreshes come
        from the heap). Looked at in the plan's order, they make the writes a look at every
        job makes. (At 110,000 jobs the look at every job was 0.18 s of a round; the
        changes are found by identity tests in C.)"""
        wanted, written = {}, self._written
        hold = self.hold if hold is None else hold
        levels = plan.levels
        shown, last_plan = self._shown, self._passed
        if shown is None or last_plan is None:
            looked_at = levels.items()
        else:
            changed = set(itertools.compress(observed, map(operator.is_not, observed.values(),
                                                           map(shown.get, observed))))
            if last_plan is not plan:  # (a quiet round's pass has the plan of the last)
                changed.update(job_id for job_id, _ in levels.items() - last_plan.levels.items())
            changed |= self._held
            changed |= self._left
            looked_at = ((job_id, levels[job_id]) for job_id in filter(changed.__contains__, levels))
        held: set[str] = set()

        def line_of(job_id: str, job: JobFacts, level: int, running: bool) -> str:
            return our_line(level, queues, attained_gpu_s(job_id), self._position(plan).get(job_id), running,
                            running and preemptable(job))

        for job_id, level in looked_at:
            job = observed.get(job_id)
            if job is None or not job.lever_id:  # a write naming the task would split it off its array
                continue
            if job_id in hold:  # first seen unjudged: Slurm's judgement first (RoundInput.first_seen_unjudged)
                held.add(job_id)
                continue
            last = written.get(job_id)
            if last is not None and last.checked is job and last.urgent_key[0] == level:
                continue  # found up to date before, and neither the record nor its level changed since
            state = job.state
            if state != "RUNNING" and state != "PENDING":
                continue
            running = state == "RUNNING"
            if last is not None and last.urgent_key == (level, running) and ours_in(job.admin_comment):
                last.checked = job
                continue  # not urgent (as updates() rules); its refresh comes from the heap when due
            shown = ours_in(job.admin_comment) if job.admin_comment else ""
            if last is None and not shown:
                # a first line: urgent whatever its text, which is made only if written this
                # round (a site of 110,000 jobs has a backlog of first lines for hours at 50 a
                # round, and making every one each round cost 1.2 s of it)
                wanted[job_id] = (None, (level, running))
                continue
            line = line_of(job_id, job, level, running)
            if shown != line:  # what updates() skips, left out before it (most jobs)
                wanted[job_id] = (line, (level, running))
            elif last is None:  # Slurm shows our line already (written by a run before this one)
                self.written(job_id, (level, running), now)
                written[job_id].checked = job
        # (settle() takes out of _left the lines written)
        self._passed, self._shown, self._held, self._left = plan, dict(observed), held, set(wanted)
        due: list[tuple[float, str]] = []
        rested: list[tuple[float, str]] = []  # looked at, line unchanged: due a refresh later
        # the routine refreshes now due, oldest first (the order updates() writes them), and
        # only as many as the round can write after the urgent lines: the rest stay in the heap
        # unlooked-at (a site of 110,000 jobs had a heap of due lines whose every line was made
        # each round for 50 to be written, 1.4 s of a round)
        room = self._cap(limit) - len(wanted)
        while self._due and self._due[0][0] <= now and len(due) < room:
            at, job_id = heapq.heappop(self._due)
            last, job, level = written.get(job_id), observed.get(job_id), plan.levels.get(job_id)
            if last is None or last.at_s + self.refresh_s != at or job_id in wanted:
                continue  # a stale row (rewritten or forgotten since), or already wanted
            if job is None or level is None or not job.lever_id or job.state not in ("RUNNING", "PENDING"):
                continue
            running = job.state == "RUNNING"
            line = line_of(job_id, job, level, running)
            if ours_in(job.admin_comment) != line:
                wanted[job_id] = (line, (level, running))
                due.append((at, job_id))
            else:
                last.at_s = now  # nothing to write: due again a refresh later (pushed after the loop:
                rested.append((now + self.refresh_s, job_id))  # with refresh_s 0 it would be due again now)
        for row in rested:
            heapq.heappush(self._due, row)
        texts = self.updates(wanted, observed, now, limit,
                             lambda job_id: line_of(job_id, observed[job_id], *wanted[job_id][1]))
        if self._due and self._due[0][0] <= now:  # due rows the cap left unlooked-at: they wait too
            self.backlog, self._unlooked_at = True, now
        actions = [SetAdminComment(decision_id(plan.round_id, "comment", number), job_id, text,
                                   reason="the line users see in scontrol show job")
                   for number, (job_id, text) in enumerate(texts.items(), 1)]
        return actions, {job_id: wanted[job_id][1] for job_id in texts}, due

    def settle(self, actions: list, keys: dict, due: list, applied: Callable[[object], bool], now: float) -> int:
        """Book the lines the executor wrote (``applied(action)``); the due rows not
        written (the cap, the budget) stay due, next round. Returns the lines written."""
        count = 0
        for action in actions:
            if applied(action):
                self.written(action.job_id, keys[action.job_id], now)
                self._left.discard(action.job_id)
                count += 1
        written = self._written
        for row in due:  # due and not written (the cap, the budget): due still, next round
            last = written.get(row[1])
            if last is not None and last.at_s + self.refresh_s == row[0]:
                heapq.heappush(self._due, row)
        return count

    def next_refresh_s(self) -> float:
        """When the next line is due for its routine refresh (inf: none; a stale row may
        say sooner, which costs one look)."""
        return self._due[0][0] if self._due else math.inf

    def written(self, job_id: str, key: tuple, now: float) -> None:
        # (the few distinct keys held once, not a tuple a job; one due time a round)
        self._written[job_id] = _Written(now, self._keys.setdefault(key, key))
        if self._due_at[0] != now:
            self._due_at = (now, now + self.refresh_s)
        heapq.heappush(self._due, (self._due_at[1], job_id))

    def forget(self, job_id: str) -> None:
        self._written.pop(job_id, None)

    def look_at_all(self) -> None:
        """The next pass looks at every job (a full round; a test comparing the two)."""
        self._shown = None

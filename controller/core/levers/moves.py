"""Partition moves' levers and book: the per-job cooldown and the backoff after a refusal,
and the MovePartition actions of the moves planned (controller.partitions.moves plans
them: a pure room the core may not import, so the service hands its moves in). Pure:
every time is an argument (``now``); controller.service.round.partition_moves reads the
partition map from the backend and the last moves from the decision log, and pulls the
levers built here.

A move Slurm refused starts no cooldown: it is tried again after a backoff that doubles
with each refusal (one round, two, four, ... at most the cooldown), so a transient
refusal costs a round and a lasting one costs slurmctld little.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional, Sequence

from controller.core.actions import MovePartition
from controller.core.ids import decision_id


@dataclass(frozen=True)
class PendingGpuJob:
    """A pending GPU job as the move planner sees it.

    ``allowed``: the partitions listed at submission; ``current``: the partitions it is
    in now (Slurm starts it in the earliest of them); ``rank``: its position in the
    engine's plan order (0 = first); ``queued_s``: seconds waited so far;
    ``frozen``: why it must stay where it is this round ('' = it may move).
    """

    job_id: str
    gpus: int
    allowed: tuple[str, ...]
    current: tuple[str, ...]
    rank: int
    queued_s: float = 0.0
    frozen: str = ""


@dataclass(frozen=True)
class RunningGpuJob:
    """A running GPU job: where it holds GPUs and how long it has run (seconds)."""

    job_id: str
    gpus_by_node: tuple[tuple[str, int], ...]
    ran_s: float


def split_partitions(text: str) -> tuple[str, ...]:
    """``"a,b"`` -> ``("a", "b")``; order kept, empties and repeats dropped."""
    out: list[str] = []
    for name in (text or "").split(","):
        name = name.strip()
        if name and name not in out:
            out.append(name)
    return tuple(out)


def elsewhere_allowed(job: PendingGpuJob) -> bool:
    return bool(set(job.allowed) - set(job.current))


def is_candidate(job: PendingGpuJob) -> bool:
    """Could this job move this round: not frozen, some allowed partition it is not in now."""
    return not job.frozen and elsewhere_allowed(job)


def pending_for_moves(order: Iterable[str], jobs: Mapping, allowed_of: Callable[[str], Optional[str]], now: float,
                      frozen: Callable[[object], str]) -> list[PendingGpuJob]:
    """The move planner's pending jobs, in the plan's order (``order``): each pending job
    of ``jobs`` (job id -> a job with state, gpus, partition, submit_time_s) whose allowed
    set is known (``allowed_of``: the partitions listed at submission, None: not known),
    ranked in that order; ``frozen``: why a job stays where it is ('' when it may move)."""
    pending: list[PendingGpuJob] = []
    for job_id in order:
        job = jobs.get(job_id)
        allowed = allowed_of(job_id) if job is not None and job.state == "PENDING" else None
        if allowed is None:
            continue
        pending.append(PendingGpuJob(job_id, job.gpus, split_partitions(allowed), split_partitions(job.partition),
                                     rank=len(pending), queued_s=now - (job.submit_time_s or now),
                                     frozen=frozen(job)))
    return pending


def running_for_moves(jobs: Iterable, now: float) -> list[RunningGpuJob]:
    """The running GPU jobs as the move planner sees them (where they hold GPUs, how long they ran)."""
    return [RunningGpuJob(job.job_id, job.gpus_by_node,
                          now - job.start_time_s if job.start_time_s is not None else 0.0)
            for job in jobs if job.state == "RUNNING" and job.gpus_by_node]


def planned_moves(order: Iterable[str], jobs: Mapping, allowed_of: Callable[[str], Optional[str]], now: float,
                  book: "MoveBook", pinned: Iterable[str], members: Callable[[], Optional[Mapping]],
                  plan_moves: Callable, nodes: Sequence, load_last: Callable[[str], None] = lambda job_id: None
                  ) -> list:
    """The moves planned now (none: no candidate, no partition map): the pending jobs in
    the plan's order (``pending_for_moves``, frozen by the book), the partition map
    (``members``, read only when a job is a candidate), each candidate's last move
    (``load_last`` for those the book does not know yet), and ``plan_moves`` (controller.
    partitions.moves.plan_moves with its settings bound: a room the core may not import,
    so its callers hand it in) called as ``plan_moves(now, members, nodes, pending,
    running, cooldowns)``; returns its moves."""
    pending = pending_for_moves(order, jobs, allowed_of, now, lambda job: book.frozen(job, pinned, now))
    candidates = [p.job_id for p in pending if is_candidate(p)]
    if not candidates:
        return []
    partition_map = members()
    if partition_map is None:
        return []
    running = running_for_moves(jobs.values(), now)
    for job_id in book.unknown(candidates):
        load_last(job_id)
    return plan_moves(now, partition_map, nodes, pending, running, book.cooldowns()).moves


class MoveBook:
    """``last_move_s``: job id -> epoch s of its last move (or would-move in shadow);
    -inf: the decision log was read and holds none. ``refused``: job id -> (refusals in a
    row, epoch s before which it is not tried again)."""

    def __init__(self):
        self.last_move_s: dict[str, float] = {}
        self.refused: dict[str, tuple[int, float]] = {}

    def frozen(self, job, pinned: Iterable[str], now: float) -> str:
        """Why a pending job is not moved this round ('' when it may be): a task inside its
        array's record, a job pinned to nodes (by this controller or its user), a job
        whose last move was refused and whose backoff runs."""
        if not job.lever_id:  # a move naming the task would split it off its array's record
            return f"a pending task in array {job.band_id}'s record"
        if job.job_id in pinned or job.required_nodes:
            return "pinned to nodes"
        return self.refused_text(job.job_id, now)

    def refused_text(self, job_id: str, now: float) -> str:
        """Why a job whose last move was refused is not tried this round ("" if it may be)."""
        count, retry_s = self.refused.get(job_id, (0, now))
        if now >= retry_s:
            return ""
        return f"Slurm refused its last move ({count} in a row): tried again in {retry_s - now:.0f}s"

    def unknown(self, job_ids: Iterable[str]) -> list[str]:
        """The jobs whose last move is not known yet (the service reads it from the decision log)."""
        return [j for j in job_ids if j not in self.last_move_s]

    def cooldowns(self) -> dict[str, float]:
        """job id -> its last move (epoch s), for the jobs that moved."""
        return {j: t for j, t in self.last_move_s.items() if t > -math.inf}

    def settle(self, job_id: str, failed: bool, now: float, interval_s: float, cooldown_s: float) -> None:
        """A move's result: a refusal backs off (doubling, at most the cooldown); anything
        else (applied, or said by a read-only executor) starts the cooldown."""
        if failed:
            count = self.refused.get(job_id, (0, now))[0] + 1
            # the exponent capped: a job refused for days must not overflow the float
            backoff = min(interval_s * 2.0 ** min(count - 1, 40), cooldown_s)
            self.refused[job_id] = (count, now + backoff)
        else:
            self.last_move_s[job_id] = now
            self.refused.pop(job_id, None)

    def forget(self, job_id: str) -> None:
        self.last_move_s.pop(job_id, None)
        self.refused.pop(job_id, None)


def move_actions(moves: Iterable, round_id: int) -> list[MovePartition]:
    """One MovePartition per planned move (job_id, from_partition, to_partition, reason),
    ids ``r<round>.m<n>``."""
    return [MovePartition(decision_id(round_id, "move", number), move.job_id, move.from_partition,
                          move.to_partition, reason=f"{move.from_partition} -> {move.to_partition}: {move.reason}")
            for number, move in enumerate(moves, 1)]


def last_move_logged(logged: Iterable[dict], ours: Callable[[dict], bool]) -> float:
    """A job's last move from its logged decisions, newest first (-inf: none). ``ours``
    (the executor's ``is_ours``) says which rows count: a would-move in shadow only, a
    refused move nowhere."""
    for row in logged:
        if row["kind"] == "move" and ours(row):
            return float(row["now_s"])
    return -math.inf

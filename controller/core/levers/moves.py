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
from typing import Callable, Iterable

from controller.core.actions import MovePartition
from controller.core.ids import decision_id


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

"""The round's partition moves: pending jobs moved among the partitions their users
allowed, as controller.partitions.moves plans them (that module is pure; this one reads
the partition map from the backend, keeps the per-job cooldown and pulls the levers).

The cooldown survives a restart: a job's last move is read from the decision log once.
A move Slurm refused starts no cooldown: it is tried again after a backoff that
doubles with each refusal (one round, two, four, ... at most the cooldown), so a
transient refusal costs a round and a lasting one costs slurmctld little. Seen: on a
cluster without associations (no slurmdbd) slurmctld answers a partition update with
the errno its RPC thread last had, because job_mgr.c's _update_job takes errno as the
error when _retrieve_new_assoc finds no association (which sets none): 24.11 and
26.05 refused with a stale EAGAIN ("Resource temporarily unavailable") or EINTR for
up to 28 s; with associations, as sites with accounting have, the first try is taken.
"""
from __future__ import annotations

import logging
import math
from typing import Callable, Optional

from controller.core.actions import MovePartition
from controller.core.plan import Plan
from controller.partitions.moves import MoveSettings, PendingGpuJob, RunningGpuJob, is_candidate, plan_moves, \
    split_partitions
from controller.service.round.accounting import Accounts
from controller.service.acting.backend import Backend, ObservedJob
from controller.service.ops.config import Config
from controller.service.acting.executor import LeverExecutor
from controller.service.ops.report import RoundReport, entry
from controller.service.state.store import Store
from controller.core.ids import decision_id

log = logging.getLogger("tiresias.controller")


class PartitionMover:
    """``last_move_s``: job id -> epoch s of its last move (or would-move in shadow);
    -inf: the decision log was read and holds none. ``refused``: job id -> (refusals in a
    row, epoch s before which it is not tried again)."""

    def __init__(self, config: Config, backend: Backend, store: Store, executor: LeverExecutor, accounts: Accounts,
                 log_once: Callable[[str], None] = log.warning):
        self.config = config
        self.backend = backend
        self.store = store
        self.executor = executor
        self.accounts = accounts
        self.log_once = log_once
        self.last_move_s: dict[str, float] = {}
        self.refused: dict[str, tuple[int, float]] = {}

    def partition_nodes(self) -> Optional[dict[str, list[str]]]:
        """Partition name -> node names from the backend (``sinfo``), limited to the
        configured partitions; None when the backend offers no such map."""
        members = self.backend.partition_nodes() if self.backend.offers("partition_nodes") else None
        if not isinstance(members, dict):
            self.log_once("the backend offers no partition map (partition_nodes): no partition moves")
            return None
        wanted = set(self.config.partitions)
        return {name: list(nodes) for name, nodes in members.items() if not wanted or name in wanted}

    def apply(self, plan: Plan, observed: dict[str, ObservedJob], nodes: list, now: float, report: RoundReport,
              pinned: set[str] = frozenset()) -> None:
        """Move pending jobs (``pinned``: job ids this controller pinned to nodes: never moved)."""
        cfg = self.config
        if not cfg.partition_moves:
            return
        records = self.accounts.records
        pending, running = [], []
        for job_id in plan.order:
            job = observed.get(job_id)
            if job is None or job.state != "PENDING" or job_id not in records:
                continue
            if job.array_record:  # a move naming the task would split it off its array's record
                frozen = f"a pending task in array {job.array_record}'s record"
            elif job_id in pinned or job.required_nodes:
                frozen = "pinned to nodes"
            else:
                frozen = self._refused_text(job_id, now)
            pending.append(PendingGpuJob(
                job_id, job.gpus, split_partitions(records[job_id].partition), split_partitions(job.partition),
                rank=len(pending), queued_s=now - (job.submit_time_s or now), frozen=frozen))
        candidates = [p.job_id for p in pending if is_candidate(p)]
        if not candidates:
            return
        members = self.partition_nodes()
        if members is None:
            return
        for job in observed.values():
            if job.state == "RUNNING" and job.gpus_by_node:
                ran = now - job.start_time_s if job.start_time_s is not None else 0.0
                running.append(RunningGpuJob(job.job_id, job.gpus_by_node, ran))
        for job_id in candidates:
            self._load_last_move(job_id)
        settings = MoveSettings(cfg.partition_allocator, cfg.partition_move_min_gain_s, cfg.partition_move_cooldown_s,
                                cfg.partition_duration_estimate_s)
        try:
            moves = plan_moves(now, members, nodes, pending, running, settings,
                               {j: t for j, t in self.last_move_s.items() if t > -math.inf})
        except Exception as err:  # an optional layer: never lose the round over it
            self.log_once(f"partition moves skipped: {type(err).__name__}: {err}")
            return
        for number, move in enumerate(moves.moves, 1):
            action = MovePartition(decision_id(report.round_id, "move", number), move.job_id, move.from_partition,
                                   move.to_partition, reason=f"{move.from_partition} -> {move.to_partition}: {move.reason}")
            outcome = self.executor.apply(action)
            if outcome.failed:
                self._refuse(move.job_id, now)
            else:
                self.last_move_s[move.job_id] = now
                self.refused.pop(move.job_id, None)
            if outcome.applied:
                self.accounts.count_move(move.job_id)
            report.applied.append(entry(action, applied=outcome.applied, detail=outcome.detail))

    def _load_last_move(self, job_id: str) -> None:
        if job_id in self.last_move_s:
            return
        last = -math.inf
        for logged in self.store.decisions(self.config.cluster, job_id=job_id, limit=200):
            # a would-move counts in shadow only; a refused move counts nowhere
            if logged["kind"] == "move" and self.executor.is_ours(logged):
                last = float(logged["now_s"])
                break
        self.last_move_s[job_id] = last

    def _refuse(self, job_id: str, now: float) -> None:
        count = self.refused.get(job_id, (0, now))[0] + 1
        # the exponent capped: a job refused for days must not overflow the float
        backoff = min(self.config.interval_s * 2.0 ** min(count - 1, 40), self.config.partition_move_cooldown_s)
        self.refused[job_id] = (count, now + backoff)

    def _refused_text(self, job_id: str, now: float) -> str:
        """Why a job whose last move was refused is not tried this round ("" if it may be)."""
        count, retry_s = self.refused.get(job_id, (0, now))
        if now >= retry_s:
            return ""
        return f"Slurm refused its last move ({count} in a row): tried again in {retry_s - now:.0f}s"

    def forget(self, job_id: str) -> None:
        self.last_move_s.pop(job_id, None)
        self.refused.pop(job_id, None)

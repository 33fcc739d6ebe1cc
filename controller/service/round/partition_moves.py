"""The round's partition moves: pending jobs moved among the partitions their users
allowed, as controller.partitions.moves plans them (that module is pure; the cooldown,
the backoff and the levers are controller.core.levers.moves', planned by the lever
planner and carried out by controller.service.round.levers; this one reads the partition
map from the backend and the last moves from the decision log).

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
from typing import Callable, Optional

from controller.core.levers.moves import MoveBook, last_move_logged, planned_moves
from controller.core.plan import Plan
from controller.partitions.moves import MovePlan, MoveSettings, plan_moves
from controller.service.round.accounting import Accounts
from controller.service.acting.backend import Backend, ObservedJob
from controller.service.ops.config import Config
from controller.service.acting.executor import LeverExecutor
from controller.service.ops.report import RoundReport
from controller.service.round import levers
from controller.service.state.store import Store

log = logging.getLogger("tiresias.controller")


class PartitionMover:
    """The book (controller.core.levers.moves.MoveBook): ``last_move_s`` and ``refused``."""

    def __init__(self, config: Config, backend: Backend, store: Store, executor: LeverExecutor, accounts: Accounts,
                 log_once: Callable[[str], None] = log.warning, book: Optional[MoveBook] = None):
        """``book``: the LeverBook's (controller.core.levers.book); a new one by default."""
        self.config = config
        self.backend = backend
        self.store = store
        self.executor = executor
        self.accounts = accounts
        self.log_once = log_once
        self.book = book if book is not None else MoveBook()
        self.last_move_s = self.book.last_move_s
        self.refused = self.book.refused

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
        """Move pending jobs (``pinned``: job ids this controller pinned to nodes: never
        moved); the round's lever module does it (controller.service.round.levers.move_partitions)."""
        levers.move_partitions(levers.planner_for(self.config), self, plan, observed, nodes, now, report, pinned)

    def planned(self, plan: Plan, observed: dict[str, ObservedJob], nodes: list, now: float,
                pinned: set[str] = frozenset()) -> list:
        """The moves controller.partitions.moves plans now (none: the layer is off, no
        candidate, no partition map, or it failed), from the partition map (read only when
        a job is a candidate) and the candidates' last moves (read once from the decision log)."""
        cfg = self.config
        if not cfg.partition_moves:
            return []
        records = self.accounts.records
        settings = MoveSettings(cfg.partition_allocator, cfg.partition_move_min_gain_s, cfg.partition_move_cooldown_s,
                                cfg.partition_duration_estimate_s)
        def planner(now_s, members, nodes_, pending, running, cooldowns):
            try:
                return plan_moves(now_s, members, nodes_, pending, running, settings, cooldowns)
            except Exception as err:  # an optional layer: never lose the round over it
                self.log_once(f"partition moves skipped: {type(err).__name__}: {err}")
                return MovePlan()

        return planned_moves(plan.order, observed, lambda job_id: records[job_id].partition if job_id in records
                             else None, now, self.book, pinned, self.partition_nodes, planner, nodes,
                             self._load_last_move)

    def settle(self, action, outcome, now: float) -> None:
        """A move carried out (or said, or refused): its cool-down or backoff, the job's moves counted."""
        self.book.settle(action.job_id, outcome.failed, now, self.config.interval_s,
                         self.config.partition_move_cooldown_s)
        if outcome.applied:
            self.accounts.count_move(action.job_id)

    def _load_last_move(self, job_id: str) -> None:
        """The job's last move, read once from the decision log (the cooldown survives a restart)."""
        if job_id not in self.last_move_s:
            self.last_move_s[job_id] = last_move_logged(
                self.store.decisions(self.config.cluster, job_id=job_id, limit=200), self.executor.is_ours)

    def _refuse(self, job_id: str, now: float) -> None:
        self.book.settle(job_id, True, now, self.config.interval_s, self.config.partition_move_cooldown_s)

    def _refused_text(self, job_id: str, now: float) -> str:
        """Why a job whose last move was refused is not tried this round ("" if it may be)."""
        return self.book.refused_text(job_id, now)

    def forget(self, job_id: str) -> None:
        self.book.forget(job_id)

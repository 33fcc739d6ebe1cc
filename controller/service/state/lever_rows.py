"""What the store keeps of the levers this controller set on Slurm jobs, so that a
restarted or standby controller, and ``tiresias restore``, know them: the open
preemptions (one at most a job), the ReqNodeList pins with their expiry, the handoffs
(watched, or failed with their brake), and ``levers_set``, every lever restore undoes.
Each row is written before the lever is carried out."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, Optional

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text, select, update
from sqlalchemy.exc import IntegrityError

from controller.service.state.engine import StoreError, metadata, upsert
from controller.service.state.jobs import job_service

preemptions = Table(
    "preemptions", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(128), nullable=False),
    Column("job_id", String(128), nullable=False),
    Column("signalled_at_s", Float, nullable=False),
    Column("restart_count", Integer, nullable=False),
    Column("outcome", String(64)),  # NULL while the preemption is in progress
    Column("finished_s", Float),
    Column("decision_id", String(128)),  # the preemption decision; the requeue cites it
)
# At most one open preemption per job: a restarted controller sees it and does not
# signal/requeue a second time. Partial unique indexes exist in SQLite and PostgreSQL.
Index(
    "uq_preemptions_open", preemptions.c.cluster, preemptions.c.job_id, unique=True,
    sqlite_where=preemptions.c.outcome.is_(None), postgresql_where=preemptions.c.outcome.is_(None),
)

# ReqNodeList pins this controller set, with their expiry, so that a restarted or
# standby controller still clears them (written before the pin is set).
pins = Table(
    "pins", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("job_id", String(128), primary_key=True),
    Column("expires_s", Float, nullable=False),
    Column("decision_id", String(128)),  # the start that pinned the job (its expiry cites it)
)

# Handoffs (controller.service.round.handoff): the job a preemption made room for, watched
# until it starts, and, once it did not start in time, what must change before a
# preemption is made for it again (controller.core.levers.handoffs.Brake). Kept here so that
# a restarted or standby controller does not signal again for a job whose handoff is
# pending or failed.
handoffs = Table(
    "handoffs", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("job_id", String(128), primary_key=True),
    Column("signalled_s", Float, nullable=False),
    Column("victims", Text, nullable=False),  # comma-separated job ids
    Column("blocked_until_s", Float),  # schema < 6: a failed handoff's end of block; not written since
    Column("brake", Text),  # a failed handoff's brake (JSON, Brake.to_json); NULL while pending
)

# The levers on Slurm jobs that ``tiresias restore`` undoes (controller.service.acting.restore):
# one row per job and lever ("site_factor", "pin", "admin_comment"), written before the
# lever is carried out; ``value`` is what was set (the SiteFactor, the pinned nodes
# comma-joined; "ours" for an AdminComment line, whose text restore reads from Slurm).
# A row goes when restore has reset the lever
# (or found the job gone) or, for a pin, when the controller cleared it itself.
levers_set = Table(
    "levers_set", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("job_id", String(128), primary_key=True),
    Column("lever", String(32), primary_key=True),
    Column("value", Text, nullable=False),
    Column("set_s", Float, nullable=False),
)


@dataclass(frozen=True)
class PendingPreemption:
    """A preemption signalled but not yet seen through (requeue or job end)."""

    job_id: str
    signalled_at_s: float
    restart_count: int
    decision_id: str = ""  # the preemption decision (the requeue cites it)


class LeverRows:
    """The lever-row methods of ``Store`` (a part of it: ``self`` is the store)."""

    # -- preemptions ---------------------------------------------------------------------

    def begin_preemption(self, cluster: str, job_id: str, signalled_at_s: float, restart_count: int,
                         decision_id: str = "") -> bool:
        """Open a preemption (``decision_id``: the decision that made it); False when
        one is already open for this job."""
        row = {"cluster": cluster, "job_id": str(job_id), "signalled_at_s": float(signalled_at_s),
               "restart_count": int(restart_count), "decision_id": str(decision_id) or None}
        try:
            with self._tx() as conn:
                conn.execute(preemptions.insert(), [row])
        except StoreError as exc:
            if isinstance(exc.__cause__, IntegrityError):
                return False
            raise
        return True

    def pending_preemptions(self, cluster: str) -> list[PendingPreemption]:
        """Preemptions of ``cluster`` still in progress, oldest first."""
        query = (select(preemptions.c.job_id, preemptions.c.signalled_at_s, preemptions.c.restart_count,
                        preemptions.c.decision_id)
                 .where(preemptions.c.cluster == cluster, preemptions.c.outcome.is_(None))
                 .order_by(preemptions.c.signalled_at_s, preemptions.c.id))
        with self._tx() as conn:
            return [PendingPreemption(r.job_id, float(r.signalled_at_s), int(r.restart_count), r.decision_id or "")
                    for r in conn.execute(query)]

    def finish_preemption(self, cluster: str, job_id: str, outcome: str, finished_s: Optional[float] = None) -> bool:
        """Close the open preemption of a job with ``outcome``; False if none was open."""
        stmt = (update(preemptions)
                .where(preemptions.c.cluster == cluster, preemptions.c.job_id == str(job_id),
                       preemptions.c.outcome.is_(None))
                .values(outcome=str(outcome), finished_s=time.time() if finished_s is None else finished_s))
        with self._tx() as conn:
            return conn.execute(stmt).rowcount > 0

    # -- pins -------------------------------------------------------------------------------

    def set_pin(self, cluster: str, job_id: str, expires_s: float, decision_id: str = "") -> None:
        """Record a pin this controller sets (``decision_id``: the start that pinned it)."""
        with self._tx() as conn:
            upsert(conn, pins, [{"cluster": cluster, "job_id": str(job_id), "expires_s": float(expires_s),
                                 "decision_id": str(decision_id) or None}],
                   ["cluster", "job_id"], ["expires_s", "decision_id"])

    def clear_pin(self, cluster: str, job_id: str) -> None:
        with self._tx() as conn:
            conn.execute(pins.delete().where(pins.c.cluster == cluster, pins.c.job_id == str(job_id)))

    def load_pins(self, cluster: str) -> dict[str, float]:
        """Job id -> expiry (epoch s) of the pins this controller set and has not cleared."""
        with self._tx() as conn:
            return {r.job_id: float(r.expires_s) for r in conn.execute(select(pins).where(pins.c.cluster == cluster))}

    # -- handoffs ---------------------------------------------------------------------------

    def save_handoff(self, cluster: str, job_id: str, signalled_s: float, victims: Iterable[str],
                     brake: Optional[str] = None) -> None:
        """A watched handoff (``brake`` None) or a failed one (``brake``: what must change
        before a preemption is made for the job again, as text)."""
        row = {"cluster": cluster, "job_id": str(job_id), "signalled_s": float(signalled_s),
               "victims": ",".join(victims), "blocked_until_s": None, "brake": brake}
        with self._tx() as conn:
            upsert(conn, handoffs, [row], ["cluster", "job_id"], ["signalled_s", "victims", "blocked_until_s",
                                                                    "brake"])

    def clear_handoff(self, cluster: str, job_id: str) -> None:
        with self._tx() as conn:
            conn.execute(handoffs.delete().where(handoffs.c.cluster == cluster, handoffs.c.job_id == str(job_id)))

    def load_handoffs(self, cluster: str) -> list[tuple[str, float, tuple[str, ...], Optional[str]]]:
        """(job id, signalled_s, victims, brake or None while pending) of every stored
        handoff; a failed one an older schema recorded (a time, no brake) reads as "{}"."""
        with self._tx() as conn:
            rows = conn.execute(select(handoffs).where(handoffs.c.cluster == cluster)).all()
        return [(r.job_id, float(r.signalled_s), tuple(v for v in r.victims.split(",") if v),
                 r.brake if r.brake is not None else (None if r.blocked_until_s is None else "{}")) for r in rows]

    def pin_decisions(self, cluster: str) -> dict[str, str]:
        """Job id -> the decision that pinned it, for the pins that recorded one."""
        with self._tx() as conn:
            return {r.job_id: r.decision_id for r in conn.execute(select(pins).where(pins.c.cluster == cluster))
                    if r.decision_id}

    # -- levers set (what restore undoes) -----------------------------------------------------

    def record_levers(self, cluster: str, lever: str, values: dict[str, str], now_s: float) -> None:
        """Job id -> the value this controller sets now for ``lever`` (upserted)."""
        rows = [{"cluster": cluster, "job_id": str(job_id), "lever": lever, "value": str(value),
                 "set_s": float(now_s)} for job_id, value in values.items()]
        if rows:
            with self._tx() as conn:
                upsert(conn, levers_set, rows, ["cluster", "job_id", "lever"], ["value", "set_s"])

    def forget_levers(self, cluster: str, lever: str, job_ids: Iterable[str]) -> None:
        """Drop the rows of ``lever`` for these jobs (reset, or the job is gone)."""
        wanted = [str(j) for j in job_ids]
        with self._tx() as conn:
            for start in range(0, len(wanted), 500):
                conn.execute(levers_set.delete().where(
                    levers_set.c.cluster == cluster, levers_set.c.lever == lever,
                    levers_set.c.job_id.in_(wanted[start:start + 500])))

    def levers(self, cluster: str) -> dict[str, dict[str, str]]:
        """Lever -> {job id: value set} of every lever still recorded for ``cluster``."""
        with self._tx() as conn:
            rows = conn.execute(select(levers_set.c.lever, levers_set.c.job_id, levers_set.c.value)
                                .where(levers_set.c.cluster == cluster)).all()
        out: dict[str, dict[str, str]] = {}
        for lever, job_id, value in rows:
            out.setdefault(lever, {})[job_id] = value
        return out

    def prune_levers_of_finished(self, cluster: str) -> int:
        """Drop the lever rows of jobs the accounts closed (they ended): nothing to undo."""
        finished = select(job_service.c.job_id).where(job_service.c.cluster == cluster,
                                                      job_service.c.finished_s.is_not(None))
        with self._tx() as conn:
            return max(conn.execute(levers_set.delete().where(
                levers_set.c.cluster == cluster, levers_set.c.job_id.in_(finished))).rowcount, 0)

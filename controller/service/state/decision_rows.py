"""What the store keeps of decisions: the decision log, one row per decision a round
made (its id, the job, kind, reason, whether it was applied, the decision(s) that
caused it), read back by `tiresias explain` and the reports. What goes in and how long
it stays: controller.service.state.decision_log."""
from __future__ import annotations

from typing import Any, Iterable, Optional

from sqlalchemy import Boolean, Column, Float, Index, Integer, String, Table, Text, or_, select

from controller.service.state.engine import metadata

decision_log = Table(
    "decision_log", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(128), nullable=False),
    Column("round_id", Integer, nullable=False),
    Column("now_s", Float, nullable=False),
    Column("mode", String(32), nullable=False),
    Column("decision_id", String(128), nullable=False),
    Column("job_id", String(128), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("reason", Text, nullable=False),
    Column("applied", Boolean, nullable=False),
    Column("detail", Text),
    Column("cause_id", String(512)),  # the decision(s) that caused this one, comma-separated; NULL: none
    Index("ix_decision_log_job", "cluster", "job_id"),
)


class DecisionRows:
    """The decision-log methods of ``Store`` (a part of it: ``self`` is the store)."""

    def log_decisions(
        self, cluster: str, round_id: int, now_s: float, mode: str, actions: Iterable[Any],
        applied: bool = True,
    ) -> int:
        """Append one round's actions. ``applied``: for the actions that do not say (a
        dict action carries its own ``applied``/``detail``: the round's entries always do,
        as the executor, the one holder of the mode, judged them); ``mode`` is stored only."""
        default_applied = bool(applied)
        rows = []
        for action in actions:
            item = dict(action) if isinstance(action, dict) else _action_to_dict(action)
            rows.append({
                "cluster": cluster, "round_id": int(round_id), "now_s": float(now_s), "mode": mode,
                "decision_id": str(item["decision_id"]), "job_id": str(item["job_id"]),
                "kind": str(item["kind"]), "reason": str(item.get("reason", "")),
                "applied": bool(item.get("applied", default_applied)), "detail": item.get("detail"),
                "cause_id": item.get("cause_id") or None,
            })
        if rows:
            with self._tx() as conn:
                conn.execute(decision_log.insert(), rows)
        return len(rows)

    def prune_decisions(self, cluster: str, *, now_s: float, max_age_s: float = 0.0, max_rows: int = 0) -> int:
        """Delete ``cluster``'s decisions older than ``max_age_s`` (by their round time) and
        all but the newest ``max_rows``; 0 disables either bound. Returns rows deleted."""
        deleted = 0
        with self._tx() as conn:
            if max_age_s > 0:
                deleted += conn.execute(decision_log.delete().where(
                    decision_log.c.cluster == cluster, decision_log.c.now_s < now_s - max_age_s)).rowcount
            if max_rows > 0:
                boundary = conn.execute(
                    select(decision_log.c.id).where(decision_log.c.cluster == cluster)
                    .order_by(decision_log.c.id.desc()).offset(int(max_rows)).limit(1)).scalar()
                if boundary is not None:
                    deleted += conn.execute(decision_log.delete().where(
                        decision_log.c.cluster == cluster, decision_log.c.id <= boundary)).rowcount
        return max(deleted, 0)

    def decisions(self, cluster: str, job_id: Optional[str] = None, limit: int = 50) -> list[dict]:
        """Logged decisions of ``cluster`` (of one job if given), newest first."""
        query = select(decision_log).where(decision_log.c.cluster == cluster)
        if job_id is not None:
            query = query.where(decision_log.c.job_id == str(job_id))
        query = query.order_by(decision_log.c.id.desc()).limit(int(limit))
        with self._tx() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    def decisions_caused_by(self, cluster: str, decision_ids: Iterable[str], limit: int = 1000) -> list[dict]:
        """Logged decisions of ``cluster`` that cite one of these ids as a cause,
        oldest first (at most ``limit``; a CLI query, not indexed)."""
        wanted = {str(d) for d in decision_ids}
        if not wanted:
            return []
        query = (select(decision_log).where(decision_log.c.cluster == cluster,
                                            or_(*[decision_log.c.cause_id.contains(d) for d in sorted(wanted)]))
                 .order_by(decision_log.c.id).limit(int(limit)))
        with self._tx() as conn:
            rows = [dict(row) for row in conn.execute(query).mappings()]
        return [r for r in rows if wanted & set((r["cause_id"] or "").split(","))]  # r1.2 is not r1.23

    def decisions_by_id(self, cluster: str, decision_ids: Iterable[str]) -> list[dict]:
        """Logged decisions of ``cluster`` with these ids, oldest first (a shadow
        decision repeated in later rounds is one row per round it was logged)."""
        wanted = sorted({str(d) for d in decision_ids})
        if not wanted:
            return []
        query = (select(decision_log).where(decision_log.c.cluster == cluster, decision_log.c.decision_id.in_(wanted))
                 .order_by(decision_log.c.id))
        with self._tx() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]


def _action_to_dict(action: Any) -> dict:
    item = {"decision_id": action.decision_id, "job_id": action.job_id, "kind": action.kind,
            "reason": action.reason}
    placement = getattr(action, "placement", None)
    if placement:
        item["detail"] = "placement " + ",".join(f"{node}:{gpus}" for node, gpus in placement)
    return item

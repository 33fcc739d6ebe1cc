"""What the store keeps of each cluster's controller: its round ids (1, 2, 3...
across restarts), the lease of a standby pair (the fence every write passes is in
engine.py, beside the transaction) and the mode it last started in."""
from __future__ import annotations

from typing import Optional

from sqlalchemy import Column, Float, Integer, String, Table, select, update

from controller.service.state.engine import db_now, insert_ignore, leases, metadata, upsert

round_counters = Table(
    "round_counters", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("last_round_id", Integer, nullable=False),
)

# The mode each cluster's controller last started in: a start in shadow/observe after
# enforce runs restore (the documented way back leaves nothing behind).
controller_modes = Table(
    "controller_modes", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("mode", String(32), nullable=False),
    Column("since_s", Float, nullable=False),
)


class ClusterRows:
    """The round, lease and mode methods of ``Store`` (a part of it: ``self`` is the store)."""

    # -- rounds ---------------------------------------------------------------------------

    def next_round_id(self, cluster: str) -> int:
        """A new round id for ``cluster``: 1, 2, 3... persisted across restarts."""
        with self._tx() as conn:
            upsert(conn, round_counters, [{"cluster": cluster, "last_round_id": 1}], ["cluster"],
                   increment={"last_round_id": round_counters.c.last_round_id + 1})
            return int(conn.execute(
                select(round_counters.c.last_round_id).where(round_counters.c.cluster == cluster)
            ).scalar_one())

    # -- controller lease (standby pair) --------------------------------------------------

    def hold_lease(self, cluster: str, holder: str, ttl_s: float, epoch: Optional[int]) -> Optional[int]:
        """Take or renew the controller lease of ``cluster`` for ``ttl_s`` seconds.

        Renewed when ``holder`` holds it at ``epoch`` (even just expired: nobody wrote
        since); taken with epoch + 1 when it expired or was released; None while
        another holder's lease runs. Returns the epoch now held. Never fenced.
        """
        fence, self.fence = self.fence, None
        try:
            with self._tx() as conn:
                now = db_now(conn)
                row = conn.execute(select(leases).where(leases.c.cluster == cluster).with_for_update()).first()
                if row is None:
                    insert_ignore(conn, leases, [{"cluster": cluster, "holder": holder, "epoch": 1,
                                                  "expires_s": now + ttl_s}], ["cluster"])
                    row = conn.execute(select(leases).where(leases.c.cluster == cluster).with_for_update()).first()
                    return 1 if row.holder == holder else None
                if row.holder == holder and row.epoch == epoch:
                    conn.execute(update(leases).where(leases.c.cluster == cluster).values(expires_s=now + ttl_s))
                    return int(epoch)
                if row.expires_s > now:
                    return None
                conn.execute(update(leases).where(leases.c.cluster == cluster)
                             .values(holder=holder, epoch=row.epoch + 1, expires_s=now + ttl_s))
                return int(row.epoch) + 1
        finally:
            self.fence = fence

    def release_lease(self, cluster: str, holder: str, epoch: int) -> None:
        """End the lease now (a clean shutdown), so the standby need not wait out the TTL."""
        with self._tx() as conn:
            conn.execute(update(leases).where(leases.c.cluster == cluster, leases.c.holder == holder,
                                              leases.c.epoch == epoch).values(expires_s=0.0))

    def lease(self, cluster: str) -> Optional[dict]:
        """The lease row of ``cluster`` (holder, epoch, expires_s) or None."""
        with self._tx() as conn:
            row = conn.execute(select(leases).where(leases.c.cluster == cluster)).mappings().first()
        return dict(row) if row is not None else None

    # -- controller mode ----------------------------------------------------------------------

    def last_mode(self, cluster: str) -> Optional[str]:
        """The mode ``cluster``'s controller last started in (None: never recorded)."""
        with self._tx() as conn:
            return conn.execute(select(controller_modes.c.mode)
                                .where(controller_modes.c.cluster == cluster)).scalar_one_or_none()

    def record_mode(self, cluster: str, mode: str, now_s: float) -> None:
        with self._tx() as conn:
            upsert(conn, controller_modes, [{"cluster": cluster, "mode": mode, "since_s": float(now_s)}],
                   ["cluster"], ["mode", "since_s"])

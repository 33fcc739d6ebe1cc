"""What goes into the decision log, and how long it stays there (issue 12, item 7).

- Shadow mode repeats itself: nothing is applied, so the same "would preempt job 7"
  comes back every round. ``ShadowRepeats`` passes an entry on only when the job's
  decision of that kind changed (a new kind, a new target or detail) or came back
  after a round without it; the round's report itself still lists everything.
- Retention: ``Store.prune_decisions`` deletes rows older than
  ``decision_log_max_age_s`` and all but the newest ``decision_log_max_rows`` of the
  cluster (0 = no limit of that kind), at most once per ``PRUNE_EVERY_S``.
"""
from __future__ import annotations

from typing import Iterable

PRUNE_EVERY_S = 3600.0  # pruning is an indexed DELETE; hourly keeps the table near its bounds


class ShadowRepeats:
    """Remembers each job's last logged decision per kind (``(job_id, kind) -> detail``)."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, str], object] = {}

    def changed(self, entries: Iterable[dict]) -> list[dict]:
        """The entries to log this round; call once per round with all of them."""
        now: dict[tuple[str, str], object] = {}
        out = []
        for item in entries:
            key = (str(item["job_id"]), str(item["kind"]))
            signature = (item.get("detail"), bool(item.get("applied", False)))
            if self.last.get(key) != signature and key not in now:
                out.append(item)
            now[key] = signature
        self.last = now  # a decision absent this round is logged again when it comes back
        return out

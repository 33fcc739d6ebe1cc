"""How the controller's log lines look (config ``log_format``), and the one line per
applied decision.

- ``text``: level, logger, message, and the job/decision/round fields when the record
  has them. Under systemd (``JOURNAL_STREAM`` set: stderr goes to the journal, which
  stamps every line itself) without a timestamp of its own, elsewhere with one.
- ``json``: one JSON object a line with ``time``, ``level``, ``logger``, ``message``,
  ``job_id``, ``decision_id``, ``round`` (null when the line is about no job), for a
  log shipper that indexes fields.
- ``auto`` (the default): ``text``.
A decision's fields travel as the record's ``extra`` (``decision_fields``), so every
formatter shows them and a test reads them off the record.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Mapping, Optional

FORMATS = ("auto", "json", "text")
FIELDS = ("job_id", "decision_id", "round")


def under_systemd(env: Mapping[str, str]) -> bool:
    """stderr is the journal's stream: systemd sets JOURNAL_STREAM for the unit."""
    return bool(env.get("JOURNAL_STREAM"))


class TextFormatter(logging.Formatter):
    def __init__(self, timestamps: bool):
        super().__init__(("%(asctime)s " if timestamps else "") + "%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [f"{name}={getattr(record, name)}" for name in FIELDS if getattr(record, name, None) is not None]
        return f"{line} [{' '.join(fields)}]" if fields else line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": round(record.created, 3), "level": record.levelname, "logger": record.name,
                 "message": record.getMessage()}
        entry.update({name: getattr(record, name, None) for name in FIELDS})
        if record.exc_info or record.exc_text:
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, sort_keys=True, default=str)


def formatter(log_format: str, env: Optional[Mapping[str, str]] = None) -> logging.Formatter:
    env = os.environ if env is None else env
    if log_format == "json":
        return JsonFormatter()
    return TextFormatter(timestamps=not under_systemd(env))


def setup(log_format: str, level: str, stream, env: Optional[Mapping[str, str]] = None) -> logging.Handler:
    """One handler on the root logger (where every tiresias.* record ends up); a
    second call (``run`` twice in one process) replaces the first one's."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(log_format, env))
    handler.tiresias = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "tiresias", False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def decision_fields(entry: Mapping, round_id: int) -> dict:
    return {"job_id": entry.get("job_id"), "decision_id": entry.get("decision_id"), "round": round_id}


def log_decisions(logger: logging.Logger, applied: list, round_id: int) -> None:
    """Every decision the round applied (start band, preemption, requeue, pin, move,
    MPS share) as one INFO line with the job and the reason; one not applied at DEBUG."""
    for entry in applied:
        level = logging.INFO if entry.get("applied") else logging.DEBUG
        if not logger.isEnabledFor(level):
            continue
        detail = f" ({entry['detail']})" if entry.get("detail") else ""
        logger.log(level, "%s %s job %s: %s%s", entry.get("decision_id"), entry.get("kind"), entry.get("job_id"),
                   entry.get("reason"), detail if entry.get("applied") else f"{detail}, not applied",
                   extra=decision_fields(entry, round_id))



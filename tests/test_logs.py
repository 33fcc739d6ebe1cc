"""Logs an operator can use (issue 20, item 5): under systemd no timestamp of the
controller's own (the journal stamps each line), JSON lines with job_id, decision_id
and round, and every applied decision one INFO line with the job and the reason."""
from __future__ import annotations

import io
import json
import logging
import re

import pytest

from controller.service.ops import logs
from controller.service.ops.config import from_mapping
from controller.core.model import InputError
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401 - store is a fixture


def _line(log_format: str, env: dict, **extra) -> str:
    record = logging.LogRecord("tiresias.controller", logging.INFO, __file__, 1, "preempt job %s", ("7",), None)
    record.__dict__.update(extra)
    return logs.formatter(log_format, env).format(record)


def test_text_has_no_timestamp_of_its_own_under_systemd():
    journal = _line("auto", {"JOURNAL_STREAM": "8:12345"})
    assert journal == "INFO tiresias.controller: preempt job 7"
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO ", _line("text", {}))


def test_json_lines_carry_job_decision_and_round():
    entry = json.loads(_line("json", {"JOURNAL_STREAM": "8:1"}, job_id="7", decision_id="r3.1", round=3))
    assert entry["message"] == "preempt job 7" and entry["level"] == "INFO"
    assert (entry["job_id"], entry["decision_id"], entry["round"]) == ("7", "r3.1", 3)
    assert json.loads(_line("json", {}))["job_id"] is None  # a line about no job still has the field
    assert _line("text", {"JOURNAL_STREAM": "1"}, job_id="7", decision_id="r3.1", round=3).endswith(
        "[job_id=7 decision_id=r3.1 round=3]")


def test_log_format_is_checked():
    assert from_mapping({"log_format": "json"}).log_format == "json"
    with pytest.raises(InputError, match="log_format"):
        from_mapping({"log_format": "xml"})


def test_every_applied_decision_is_one_info_line(store, caplog):  # noqa: F811
    """A preemption round at INFO: the start band, the preemption, and later the requeue,
    each one line naming the job and the reason (main logged none of them)."""
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    c = controller(store, backend)
    caplog.set_level(logging.INFO, logger="tiresias")
    c.run_round()
    backend.add("2", 4)
    c.run_round()
    backend.now += 11
    c.run_round()
    decided = [r for r in caplog.records if getattr(r, "decision_id", None) and r.levelno == logging.INFO]
    kinds = {(r.job_id, r.getMessage().split()[1]) for r in decided}
    assert {("1", "preempt"), ("1", "requeue")} <= kinds, kinds
    applied = [d for d in store.decisions("default") if d["applied"]]
    assert len(decided) == len(applied)
    for record in decided:
        assert f"job {record.job_id}: " in record.getMessage() and isinstance(record.round, int)
        reason = record.getMessage().split(": ", 1)[1]
        assert reason.strip(), record.getMessage()


def test_setup_writes_json_to_the_stream():
    stream = io.StringIO()
    handler = logs.setup("json", "INFO", stream, env={})
    try:
        logs.log_decisions(logging.getLogger("tiresias.controller"),
                           [{"decision_id": "r9.2", "job_id": "42", "kind": "pin", "reason": "skew 0.8",
                             "applied": True, "detail": "gpu1"}], 9)
    finally:
        logging.getLogger().removeHandler(handler)
    (entry,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert entry["message"] == "r9.2 pin job 42: skew 0.8 (gpu1)" and entry["round"] == 9
    first, second = io.StringIO(), io.StringIO()
    logs.setup("text", "INFO", first, env={})
    handler = logs.setup("text", "INFO", second, env={})  # replaces, never doubles
    try:
        logging.getLogger("tiresias.controller").info("once")
    finally:
        logging.getLogger().removeHandler(handler)
    assert first.getvalue() == "" and second.getvalue().count("once") == 1

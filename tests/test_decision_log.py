"""Decision log: retention by age and by rows, and shadow mode logging a repeated
decision once per change (issue 12, item 7)."""
from __future__ import annotations

from controller.service.state.decision_log import ShadowRepeats
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401 - store is a fixture


def _fill(store, cluster, times):  # noqa: F811
    for round_id, now in enumerate(times, start=1):
        store.log_decisions(cluster, round_id, now, "enforce",
                            [{"decision_id": f"d{round_id}", "job_id": "1", "kind": "start", "reason": "r"}])


def test_prune_by_age_then_rows(store):  # noqa: F811
    _fill(store, "a", [100.0 * k for k in range(1, 11)])  # rounds at 100 .. 1000 s
    _fill(store, "b", [100.0])
    assert store.prune_decisions("a", now_s=1000.0, max_age_s=450.0) == 5  # 100..500 are before 550
    assert [d["now_s"] for d in store.decisions("a", limit=100)] == [1000.0, 900.0, 800.0, 700.0, 600.0]
    assert store.prune_decisions("a", now_s=1000.0, max_rows=2) == 3
    assert [d["now_s"] for d in store.decisions("a", limit=100)] == [1000.0, 900.0]
    assert store.prune_decisions("a", now_s=1000.0, max_rows=5) == 0
    assert store.prune_decisions("a", now_s=1000.0) == 0  # both bounds off
    assert len(store.decisions("b")) == 1  # another cluster's log is untouched


def test_controller_prunes_with_the_configured_bounds(store):  # noqa: F811
    _fill(store, "default", [10.0, 20.0, 30.0])
    backend = ScriptedBackend()
    backend.now = 10_000.0
    c = controller(store, backend, decision_log_max_age_s=5000, decision_log_max_rows=0)
    c.run_round()
    assert store.decisions("default", limit=100) == []  # all three older than 5000 s


def test_shadow_logs_a_repeated_decision_once_per_change(store):  # noqa: F811
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    c = controller(store, backend, mode="shadow")
    c.run_round()
    backend.add("2", 4)
    reports = []
    for _ in range(6):  # shadow applies nothing: the plan says the same every round
        backend.now += 10
        reports.append(c.run_round())
    would = [r for report in reports for r in report.applied if r["job_id"] == "1"]
    assert len(would) >= 6  # the round reports still carry every decision
    logged = [d for d in store.decisions("default", job_id="1", limit=100) if d["kind"] == would[0]["kind"]]
    assert len(logged) == 1
    del backend.jobs["2"]  # the reason goes away ...
    backend.now += 10
    c.run_round()
    backend.add("2", 4)  # ... and comes back: logged again
    backend.now += 10
    c.run_round()
    logged = [d for d in store.decisions("default", job_id="1", limit=100) if d["kind"] == would[0]["kind"]]
    assert len(logged) == 2


def test_shadow_repeats_rules():
    s = ShadowRepeats()
    a = {"job_id": "1", "kind": "start", "detail": "placement gpu1:2"}
    assert s.changed([a]) == [a]
    assert s.changed([a]) == []
    b = dict(a, detail="placement gpu2:2")
    assert s.changed([b]) == [b]  # a new target is a change
    assert s.changed([]) == []
    assert s.changed([b]) == [b]  # back after a round without it

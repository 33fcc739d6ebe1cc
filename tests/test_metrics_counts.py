"""Metrics an operator can use (issue 20, item 5, part): failed rounds are counted,
an outage counts once however many rounds and polls fail during it, the set of jobs
whose queue wait was observed and the handoff delays stay bounded, and the metrics
listen on metrics_address (default 127.0.0.1)."""
from __future__ import annotations

import pytest

from controller.service.acting.backend import BackendUnavailable
from controller.service.round.daemon import Controller
from controller.service.ops.metrics import Metrics
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401 - store is a fixture


def value(metrics: Metrics, name: str) -> float:
    return metrics.registry.get_sample_value(name, {"mode": "enforce"}) or 0.0


def with_metrics(store, backend):  # noqa: F811
    c = controller(store, backend)
    metrics = Metrics(mode="enforce")
    return Controller(c.config, backend, store, clock=lambda: backend.now, metrics=metrics), metrics


def test_failed_rounds_are_counted(store):  # noqa: F811
    backend = ScriptedBackend()
    backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
    c, metrics = with_metrics(store, backend)
    c._round_failed("round", KeyError("gpu[1-9]"))
    c._round_failed("round", KeyError("gpu[1-9]"))
    assert value(metrics, "tiresias_failed_rounds_total") == 2


def test_an_outage_counts_once(store):  # noqa: F811
    backend = ScriptedBackend()
    backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
    c, metrics = with_metrics(store, backend)
    c.run_round()
    backend.down = True
    for _ in range(5):
        with pytest.raises(BackendUnavailable):
            c.run_round()
    assert value(metrics, "tiresias_backend_unavailable_total") == 1
    backend.down, backend.now = False, 1100.0
    c.run_round()
    backend.down = True
    with pytest.raises(BackendUnavailable):
        c.run_round()
    assert value(metrics, "tiresias_backend_unavailable_total") == 2  # a second outage


def test_started_jobs_set_stays_bounded(store):  # noqa: F811
    backend = ScriptedBackend()
    c, metrics = with_metrics(store, backend)
    for n in range(1, 31):
        backend.add(str(n), 1, "RUNNING", start=backend.now, nodes=[("gpu1", 1)])
        c.run_round()
        backend.jobs.pop(str(n))  # gone from Slurm: finished, then forgotten by the controller
        backend.now += 60
        c.run_round()
    assert len(metrics._started) <= 2, metrics._started
    assert value(metrics, "tiresias_queue_wait_seconds_count") == 30


def test_metrics_address_is_configurable_and_checked():
    from controller.core.model import InputError
    from controller.service.ops.config import from_mapping

    assert from_mapping({}).metrics_address == "127.0.0.1"
    assert from_mapping({"metrics_address": "::1"}).metrics_address == "::1"
    with pytest.raises(InputError, match="key 'metrics_address' value 'localhost:9100' is not an IP address"):
        from_mapping({"metrics_address": "localhost:9100"})


def test_metrics_served_on_the_configured_address():
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    metrics = Metrics(mode="enforce")
    metrics.observe_failed_round()
    metrics.serve(port, addr="127.0.0.1")
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'tiresias_failed_rounds_total{mode="enforce"} 1.0' in body


def test_handoff_delays_stay_bounded(tmp_path):
    from controller.service.state.store import Store
    from controller.service.acting.backend import ObservedJob
    from controller.service.ops.config import from_mapping
    from controller.service.round.handoff import MAX_DELAYS_KEPT, Handoffs, Watch
    from controller.service.ops.report import RoundReport

    handoffs = Handoffs(from_mapping({}), Store(f"sqlite:///{tmp_path / 'store.db'}"))
    for n in range(MAX_DELAYS_KEPT + 50):
        job = ObservedJob(job_id=str(n), user="alice", partition="gpu", state="RUNNING", reason="None", gpus=1,
                          submit_time_s=0.0, start_time_s=float(n) + 5.0)
        handoffs.watching[str(n)] = Watch(signalled_s=float(n), victims=("v",))
        handoffs.check({str(n): job}, float(n) + 10.0, RoundReport(round_id=n, observed_at_s=float(n) + 10.0, plan=None))
    assert handoffs.landed == MAX_DELAYS_KEPT + 50
    assert len(handoffs.delays_s) == MAX_DELAYS_KEPT and handoffs.delays_s[-1] == 5.0


def test_rounds_that_fail_on_a_locked_store_are_counted_and_the_heartbeat_stops(tmp_path):
    """Issue 28, item 6: a round the store cuts short (SQLite locked by another process
    past the busy timeout) is a failed round like any other; the heartbeat an alert
    reads (packaging/prometheus/tiresias-alerts.yml) stays at the last completed round."""
    import sqlite3

    from bench.scripted_slurm import VirtualTime
    from controller.service.state.store import Store

    path = tmp_path / "t.db"
    with Store(f"sqlite:///{path}", busy_timeout_s=0.05) as store:  # noqa: F811
        backend = ScriptedBackend()
        backend.add("1", 2, "RUNNING", start=1000.0, nodes=[("gpu1", 2)])
        c, metrics = with_metrics(store, backend)
        clock = c.clock = VirtualTime(backend.now)
        outcomes = []
        real_round = c.run_round

        def counted_round(observation=None):
            try:
                report = real_round(observation)
            except Exception:
                outcomes.append("failed")
                raise
            outcomes.append("ran")
            return report
        c.run_round = counted_round

        def run_for(seconds):
            def tick():
                backend.now = clock.now_s
            c.run_forever(clock.stop_after(seconds, 1.0, tick))

        heartbeat = lambda: value(metrics, "tiresias_last_round_timestamp_seconds")  # noqa: E731
        run_for(10.0)
        assert outcomes and set(outcomes) == {"ran"} and value(metrics, "tiresias_failed_rounds_total") == 0
        beat = heartbeat()
        other = sqlite3.connect(path)
        other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        try:
            del outcomes[:]
            run_for(20.0)
        finally:
            other.rollback()
            other.close()
        assert outcomes.count("failed") >= 5 and "ran" not in outcomes
        assert value(metrics, "tiresias_failed_rounds_total") == outcomes.count("failed")
        assert heartbeat() == beat  # no round completed: the heartbeat stands still
        failed = outcomes.count("failed")
        run_for(4.0)  # the lock released: rounds complete again
        assert outcomes[-1] == "ran" and heartbeat() > beat
        assert value(metrics, "tiresias_failed_rounds_total") == failed

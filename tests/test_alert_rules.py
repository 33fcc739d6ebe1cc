"""packaging/prometheus/tiresias-alerts.yml: valid rule groups whose expressions name
only metrics the controller exports (checked as the dashboard's are), and the
stopped-controller alert fires on a heartbeat that stopped, not on a live one."""
from __future__ import annotations

from pathlib import Path

import yaml

from controller.service.ops.metrics import Metrics
from tests.test_grafana_dashboard import check, exported_names

RULES = Path(__file__).resolve().parent.parent / "packaging" / "prometheus" / "tiresias-alerts.yml"
SCRAPE_LABELS = {"job", "instance"}  # added by Prometheus to every scraped series


def rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_rules_are_well_formed_and_query_exported_metrics():
    exported = {name: labels | SCRAPE_LABELS for name, labels in exported_names().items()}
    exported["up"] = set(SCRAPE_LABELS)  # Prometheus' own per-target series
    found = rules()
    assert {r["alert"] for r in found} == {"TiresiasControllerStalled", "TiresiasControllerDown"}
    used = set()
    for rule in found:
        assert rule["labels"]["severity"] and rule["annotations"]["summary"] and rule["for"]
        used |= check(rule["expr"], exported)
    assert "tiresias_last_round_timestamp_seconds" in used


def test_heartbeat_is_the_time_of_the_last_round():
    """The gauge the alert reads is set by every round, to the controller's clock."""
    from controller.service.round.daemon import Controller
    from controller.service.ops.config import from_mapping
    from controller.service.state.store import Store
    from tests.test_controller import ScriptedBackend

    backend = ScriptedBackend()
    backend.add("1", 2)
    metrics = Metrics(mode="shadow")
    value = lambda: metrics.registry.get_sample_value("tiresias_last_round_timestamp_seconds", {"mode": "shadow"})
    with Store("sqlite://") as store:
        controller = Controller(from_mapping({"mode": "shadow"}), backend, store, clock=lambda: backend.now,
                                metrics=metrics)
        assert value() is None
        controller.run_round()
        assert value() == backend.now
        backend.now += 42.0
        controller.run_round()
        assert value() == backend.now

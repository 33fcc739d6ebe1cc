"""packaging/grafana/tiresias.json queries only what the controller exports.

Every PromQL expression of the dashboard (panels and template variables) is
tokenized and checked: brackets balance, every function is a PromQL function,
every metric name is one the controller's real registry exposes (names derived
from each metric family's type, as the exposition format writes them), and every
label matched on a metric is one of that metric's labels.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from controller.service.ops.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parent.parent / "packaging" / "grafana" / "tiresias.json"

FUNCTIONS = {"sum", "avg", "min", "max", "count", "rate", "irate", "increase", "histogram_quantile",
             "label_values", "topk", "bottomk", "abs", "clamp_min", "clamp_max", "delta", "deriv", "time", "absent"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool"}
# identifiers, strings, durations / numbers, Grafana variables, operators and brackets
TOKEN = re.compile(r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<var>\$\{?\w+\}?)|(?P<number>\d+(?:\.\d+)?[smhdwy]?)"""
                   r"""|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)|(?P<op>=~|!~|!=|==|>=|<=|[-+*/^%<>=,(){}\[\]]))""")


def exported_names() -> dict[str, set[str]]:
    """Sample name -> label names, from the real registry (every metric family)."""
    registry = Metrics(mode="enforce").registry
    suffixes = {"counter": ["_total", "_created"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count", "_created"],
                "summary": ["", "_sum", "_count", "_created"]}
    names: dict[str, set[str]] = {}
    for collector in list(registry._collector_to_names):  # prometheus_client keeps no public list of collectors
        for family in collector.describe():
            labels = set(getattr(collector, "_labelnames", ()))
            for suffix in suffixes[family.type]:
                names[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return names


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        m = TOKEN.match(expr, pos)
        assert m and m.end() > pos, f"cannot read PromQL at {expr[pos:]!r} in {expr!r}"
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def check(expr: str, exported: dict[str, set[str]]) -> set[str]:
    """Raise AssertionError on anything wrong in ``expr``; return the metric names it uses."""
    toks = tokens(expr)
    depth = {"(": 0, "{": 0, "[": 0}
    closing = {")": "(", "}": "{", "]": "["}
    used: set[str] = set()
    current_metric = None
    in_grouping = False  # inside by (...) / without (...)
    for i, (kind, text) in enumerate(toks):
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        prev = toks[i - 1][1] if i else ""
        if kind == "op":
            if text in depth:
                depth[text] += 1
            elif text in closing:
                depth[closing[text]] -= 1
                assert depth[closing[text]] >= 0, f"unbalanced {text!r} in {expr!r}"
                if text == ")":
                    in_grouping = False
                if text == "}":
                    current_metric = None
            continue
        if kind != "ident":
            continue
        if text in KEYWORDS:
            in_grouping = text in ("by", "without", "on", "ignoring")
            continue
        if (nxt == "(" or nxt in ("by", "without")) and not in_grouping:  # sum by (l) (...) too
            assert text in FUNCTIONS, f"unknown PromQL function {text!r} in {expr!r}"
            continue
        if depth["{"] > 0:  # a label name in a matcher
            if nxt in ("=", "!=", "=~", "!~") and current_metric is not None:
                assert text in exported[current_metric], \
                    f"label {text!r} is not a label of {current_metric} in {expr!r}"
            continue
        if in_grouping or prev == ",":
            continue  # a label in by (...), or a label_values argument
        assert text in exported, f"metric {text!r} is not exported by the controller ({expr!r})"
        used.add(text)
        current_metric = text
    assert all(v == 0 for v in depth.values()), f"unbalanced brackets in {expr!r}"
    return used


def dashboard_expressions() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    found = [(f"panel {p['title']!r}", t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found.append((f"variable {var['name']}", query))
    return found


def test_every_dashboard_metric_is_exported():
    exported = exported_names()
    assert "tiresias_slurm_calls_per_round_bucket" in exported and "tiresias_requeues_total" in exported
    expressions = dashboard_expressions()
    assert len(expressions) >= 10
    used = set()
    for where, expr in expressions:
        try:
            used |= check(expr, exported)
        except AssertionError as err:
            raise AssertionError(f"{where}: {err}") from None
    # the panels the issue asks for are there
    for name in ("tiresias_jobs", "tiresias_preemptions_total", "tiresias_requeues_total",
                 "tiresias_round_duration_seconds_bucket", "tiresias_slurm_calls_per_round_bucket",
                 "tiresias_job_completion_time_seconds_bucket", "tiresias_last_round_timestamp_seconds"):
        assert name in used, name


@pytest.mark.parametrize("expr, problem", [
    ('sum(rate(tiresias_round_seconds_bucket[5m]))', "not exported"),
    ('sum by (level) (tiresias_jobs{queue="1"})', "not a label"),
    ('histogram_quantile(0.5, sum by (le) (rate(tiresias_round_duration_seconds_bucket[5m]))', "unbalanced"),
    ('median(tiresias_jobs)', "unknown PromQL function"),
])
def test_checker_finds_mistakes(expr, problem):
    with pytest.raises(AssertionError, match=problem):
        check(expr, exported_names())


def test_dashboard_is_importable_json():
    doc = json.loads(DASHBOARD.read_text())
    assert doc["id"] is None and doc["uid"]  # import creates it; the uid keeps re-imports in place
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for p in doc["panels"]:
        assert p["description"] and p["datasource"]["uid"] == "${datasource}"
        assert {t["refId"] for t in p["targets"]} == {chr(65 + i) for i in range(len(p["targets"]))}

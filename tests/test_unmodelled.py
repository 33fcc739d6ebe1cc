"""Not modelled is never silent (issue 35, item 2): a pending GPU job whose request the
plan cannot express is counted per reason each round (tiresias_unmodelled_jobs, and
the share of pending GPU jobs that cannot cause a preemption), said in the log at most
every LOG_EVERY_S with examples (a WARNING that the controller is not reordering this
site above a fifth), and named with its code by ``tiresias explain``.

The controller is the real one over the scripted backend of tests/test_controller.py
(nodes that report no CPUs, memory or features, as a backend without them does); the
OR-constraint job is what the Slurm adapter makes of recorded job 4 with
``--constraint=a100|v100``."""
import dataclasses
import logging

import pytest

from controller.cli import queue as cmd_queue
from controller.cli.main import main
from controller.core.model import MIXED_TYPES
from controller.service.ops.metrics import Metrics
from controller.service.acting.backend import unmodelled_fields
from controller.service.ops.unmodelled import LOG_EVERY_S, REASONS
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)
from tests.test_resources_model import adapter_view, pending_record

NOT_REORDERING = "the controller is not reordering this site"


def cluster_full():
    """One long-served 16-GPU job holds every GPU: any modelled 4-GPU newcomer preempts it."""
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    return backend


def add_or_constraint(backend, job_id):
    seen = adapter_view("24.11", pending_record("24.11", 4, features="a100|v100"))
    backend.add(job_id, 4)
    backend.jobs[job_id] = dataclasses.replace(backend.jobs[job_id], features=seen.features,
                                               unmodelled=seen.unmodelled, unmodelled_reasons=seen.unmodelled_reasons)


def add_mixed_with_cpus(backend, job_id):
    """GPUs of two types, and CPUs the record does not report: two reasons."""
    backend.add(job_id, 8)
    backend.jobs[job_id] = dataclasses.replace(
        backend.jobs[job_id], gpu_type=MIXED_TYPES, gpu_types=("a100", "v100"),
        **unmodelled_fields([("cpus", "its CPUs (not reported, or --cpus-per-gpu of another kind)")]))


def add_cpus_no_node_reports(backend, job_id):
    backend.add(job_id, 4)
    backend.jobs[job_id] = dataclasses.replace(backend.jobs[job_id], cpus_per_node=8)


def unmodelled_gauge(metrics, reason):
    return metrics.registry.get_sample_value("tiresias_unmodelled_jobs", {"mode": "enforce", "reason": reason})


def share_gauge(metrics):
    return metrics.registry.get_sample_value("tiresias_unmodelled_pending_ratio", {"mode": "enforce"})


def signalled(backend):
    return [call[1] for call in backend.calls if call[0] == "signal"]


def test_metric_counts_each_reason_and_drops_to_zero(store):
    backend = cluster_full()
    c = controller(store, backend)
    c.metrics = Metrics(mode="enforce")
    c.run_round()
    add_or_constraint(backend, "2")
    add_mixed_with_cpus(backend, "3")
    add_cpus_no_node_reports(backend, "4")
    backend.add("5", 20, reason="JobHeldUser")  # waits on Slurm: not weighed by the plan, not counted
    backend.now += 600
    c.run_round()
    counts = {code: unmodelled_gauge(c.metrics, code) for code in REASONS}
    assert counts == {**dict.fromkeys(REASONS, 0.0), "constraint": 1.0, "mixed_gpu_types": 1.0, "cpus": 1.0,
                      "unreported_nodes": 1.0}
    assert share_gauge(c.metrics) == 1.0  # 3 of the 3 pending GPU jobs the plan weighs
    assert signalled(backend) == []  # none of them is a reason to preempt job 1
    assert c.unmodelled.jobs["3"][0] == ("mixed_gpu_types", "cpus")
    # the OR-constraint job leaves, a modelled one comes: its reason drops to 0, the share to 2 of 3
    del backend.jobs["2"]
    backend.add("6", 4)
    backend.now += 10
    c.run_round()
    assert unmodelled_gauge(c.metrics, "constraint") == 0.0 and unmodelled_gauge(c.metrics, "cpus") == 1.0
    assert share_gauge(c.metrics) == pytest.approx(2 / 3)
    assert signalled(backend) == ["1"]  # the modelled newcomer preempts


def census_lines(caplog):
    return [r for r in caplog.records if "cannot cause a preemption" in r.getMessage()]


def test_census_line_is_rate_limited_and_names_examples(store, caplog):
    caplog.set_level(logging.INFO, logger="tiresias.controller")
    backend = cluster_full()
    add_or_constraint(backend, "2")
    add_cpus_no_node_reports(backend, "3")
    for job_id in ("4", "5", "6", "7"):
        backend.add(job_id, 4, reason="Resources")
    c = controller(store, backend, mode="shadow")  # shadow: nothing preempted, the queue stays
    c.run_round()
    [first] = census_lines(caplog)
    text = first.getMessage()
    assert first.levelno == logging.WARNING and text.startswith(f"{NOT_REORDERING}: 2 of 6 pending GPU jobs (33%)")
    caplog.clear()
    for step in (10, 100, LOG_EVERY_S - 120):  # rounds within LOG_EVERY_S of the line: nothing more
        backend.now += step
        c.run_round()
    assert census_lines(caplog) == []
    backend.now += 10  # LOG_EVERY_S since the first line
    c.run_round()
    assert len(census_lines(caplog)) == 1


def test_warning_over_a_fifth_names_the_top_reasons(store, caplog):
    caplog.set_level(logging.INFO, logger="tiresias.controller")
    backend = cluster_full()
    add_or_constraint(backend, "2")
    add_cpus_no_node_reports(backend, "3")
    add_mixed_with_cpus(backend, "4")
    backend.add("5", 4)
    c = controller(store, backend, mode="shadow")
    c.run_round()
    [line] = census_lines(caplog)
    text = line.getMessage()
    assert line.levelno == logging.WARNING and text.startswith(
        f"{NOT_REORDERING}: 3 of 4 pending GPU jobs (75%) cannot cause a preemption")
    # a tie of counts in REASONS order; each reason with what it means
    assert ("top reasons: cpus (1 job: CPUs the record does not report, or a --cpus-per-gpu form not read), "
            "constraint (1 job: ") in text and "mixed_gpu_types (1 job" in text
    assert "job 2: --constraint=a100|v100" in text and "job 3: its CPUs, which no node reports" in text


def test_a_fifth_or_less_is_an_info_line_without_the_warning(store, caplog):
    caplog.set_level(logging.INFO, logger="tiresias.controller")
    backend = cluster_full()
    add_or_constraint(backend, "2")
    for job_id in ("3", "4", "5", "6"):  # 1 of 5: a fifth, not more
        backend.add(job_id, 4)
    c = controller(store, backend, mode="shadow")
    c.run_round()
    [line] = census_lines(caplog)
    assert line.levelno == logging.INFO and NOT_REORDERING not in line.getMessage()
    assert line.getMessage().startswith("unmodelled requests: 1 of 5 pending GPU jobs (20%) cannot cause")
    assert "constraint 1 (e.g. job 2: --constraint=a100|v100" in line.getMessage()
    # the job leaves: one line says every job is modelled again, then nothing
    del backend.jobs["2"]
    caplog.clear()
    for _ in range(3):
        backend.now += 10
        c.run_round()
    assert [r.getMessage() for r in caplog.records if "unmodelled requests" in r.getMessage()] == [
        "unmodelled requests: none among 4 pending GPU jobs: each may cause a preemption again"]


def test_explain_names_the_reason_text_and_code(tmp_path, monkeypatch, capsys):
    config_file = tmp_path / "c.yaml"
    config_file.write_text(f"database_url: sqlite:///{tmp_path}/t.db\nmode: shadow\nqueues_gpu_s: [100.0]\n")
    backend = cluster_full()
    add_or_constraint(backend, "2")
    add_mixed_with_cpus(backend, "3")
    backend.add("4", 4)
    monkeypatch.setattr(cmd_queue, "_backend_factory", lambda config: backend)
    assert main(["explain", "2", "--config", str(config_file)]) == 0
    out = capsys.readouterr().out
    assert ("  not modelled: --constraint=a100|v100 (an OR (|): which nodes satisfy it is Slurm's choice) "
            "(reason constraint): no job is preempted for it") in out
    assert main(["explain", "3", "--config", str(config_file)]) == 0
    out = capsys.readouterr().out
    assert ("not modelled: GPUs of several types (a100, v100; 8 in all); its CPUs (not reported, or --cpus-per-gpu "
            "of another kind) (reason mixed_gpu_types, cpus): no job is preempted for it") in out
    assert main(["explain", "4", "--config", str(config_file)]) == 0
    assert "not modelled" not in capsys.readouterr().out


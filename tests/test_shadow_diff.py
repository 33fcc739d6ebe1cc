"""`tiresias shadow-diff` over the scripted backend and a real SQLite store: Slurm's own
order (its priorities, as sprio gives them) against the plan's, the jobs that would
move, the preemption enforce would make; nothing written, nothing done in Slurm."""
from __future__ import annotations

import json

import pytest

from controller.cli import queue as cmd_queue
from controller.cli.main import main
from controller.service.state.store import JobRecord, Store
from tests.test_controller import ScriptedBackend


class PriorityBackend(ScriptedBackend):
    def __init__(self):
        super().__init__()
        self.slurm_priorities: dict[str, int] = {}

    def priorities(self):
        return dict(self.slurm_priorities)


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """Job 1 holds all 16 GPUs since t=0 (queue 2); pending: 5 (oldest, 500 GPU-s
    attained before a requeue: queue 2), 6 and 7 (new: queue 1). Slurm orders them
    by age: 5, 6, 7; the plan puts queue 1 first: 6, 7, 5."""
    url = f"sqlite:///{tmp_path}/t.db"
    config_file = tmp_path / "c.yaml"
    config_file.write_text(f"database_url: {url}\nmode: shadow\nqueues_gpu_s: [100.0]\npreempt_min_runtime_s: 0\n")
    backend = PriorityBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    for job_id, submitted in (("5", 500.0), ("6", 900.0), ("7", 950.0)):
        backend.now = submitted
        backend.add(job_id, 4)
    backend.now = 1000.0
    with Store(url) as store:
        store.save_jobs("default", [JobRecord("5", 4, 500.0, user="alice", first_start_s=510.0, attained_gpu_s=500.0,
                                              queue_service_gpu_s=500.0, executed_s=125.0,
                                              restart_count=1)])
    backend.slurm_priorities = {"5": 3000, "6": 2000, "7": 1000}
    monkeypatch.setattr(cmd_queue, "_backend_factory", lambda config: backend)
    return str(config_file), backend


def test_moves_and_preemptions_against_slurms_order(cluster, capsys):
    config_file, backend = cluster
    assert main(["shadow-diff", "--config", config_file, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["compared"] == 3
    assert [(m["job_id"], m["slurm_rank"], m["controller_rank"], m["level"]) for m in doc["moves"]] == \
        [("5", 1, 3, 2), ("6", 2, 1, 1), ("7", 3, 2, 1)]  # the biggest move first
    assert [p["job_id"] for p in doc["preemptions"]] == ["1"]
    assert [s["job_id"] for s in doc["starts"]] == ["6", "7", "5"]  # in the 16 GPUs job 1 yields
    assert backend.calls == []  # read-only


def test_the_table_names_ranks_and_the_preemption(cluster, capsys):
    config_file, _ = cluster
    assert main(["shadow-diff", "--config", config_file, "--top", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("cluster default, policy dlas: 3 of 3 pending GPU jobs would move against Slurm's order "
                        "(sprio); enforce would preempt 1 and start 3 job(s) now")
    header = lines.index("the 1 biggest moves (rank 1 starts first):")
    assert lines[header + 1].split() == ["JOBID", "USER", "GPUS", "SLURM_RANK", "->", "TIRESIAS_RANK", "LEVEL",
                                         "SLURM_PRIORITY"]
    assert lines[header + 2].split() == ["5", "alice", "4", "1", "->", "3", "2", "3000"]
    assert lines[header + 3] == ""  # --top 1
    preempt = lines.index("preemptions enforce would make:")
    assert lines[preempt + 1].startswith("  job 1 (alice, 16 GPUs): ")


def test_same_order_moves_nothing_and_unknown_jobs_are_left_out(cluster, capsys):
    config_file, backend = cluster
    backend.slurm_priorities = {"6": 3000, "7": 2000, "5": 1000, "99": 5}  # 99: not a GPU job of the plan
    assert main(["shadow-diff", "--config", config_file, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["compared"] == 3 and doc["moves"] == []


def test_slurm_down_or_without_priorities(cluster, capsys):
    config_file, backend = cluster

    def refused():
        raise RuntimeError("sprio: Unable to get priority factors: priority/basic")

    backend.priorities = refused
    assert main(["shadow-diff", "--config", config_file]) == 1
    assert "Slurm's priority order unavailable: sprio: Unable" in capsys.readouterr().err
    backend.down = True
    assert main(["shadow-diff", "--config", config_file]) == 1
    assert "Slurm did not answer" in capsys.readouterr().err

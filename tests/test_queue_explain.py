"""queue and explain over a scripted backend (tests.test_controller.ScriptedBackend)
and a real SQLite store; one end-to-end check against the local Slurm cluster."""
import subprocess
import time

import pytest

from controller.cli import queue as cmd_queue
from controller.cli.main import main
from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.state.store import Store
from tests.slurm_fixtures import slurm_cluster, submit_as  # noqa: F401  (pytest fixtures)
from tests.test_controller import ScriptedBackend

SETTINGS = {"mode": "shadow", "queues_gpu_s": [100.0], "preempt_min_runtime_s": 0}


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A store with history (one round, job 1 in queue 2) and the scripted backend
    that queue/explain will read."""
    url = f"sqlite:///{tmp_path}/t.db"
    config_file = tmp_path / "c.yaml"
    config_file.write_text(f"database_url: {url}\nmode: shadow\nqueues_gpu_s: [100.0]\npreempt_min_runtime_s: 0\n"
                           "promote_knob: 2\n")
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    with Store(url) as store:
        Controller(from_mapping({**SETTINGS, "database_url": url}), backend, store,
                   clock=lambda: backend.now).run_round()
        backend.add("2", 4)
        Controller(from_mapping({**SETTINGS, "database_url": url}), backend, store,
                   clock=lambda: backend.now).run_round()  # logs "would preempt 1"
    backend.add("3", 4, reason="JobHeldUser")
    monkeypatch.setattr(cmd_queue, "_backend_factory", lambda config: backend)
    return str(config_file), backend


def test_queue_lists_plan_order_actions_and_reasons(cluster, capsys):
    config_file, backend = cluster
    assert main(["queue", "--config", config_file]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["JOBID", "USER", "PARTITION", "GPUS", "ST", "PRIORITY(QUEUE:POS)", "ACTION", "REASON"]
    assert lines[-1].startswith("GPUs: ")  # the free-GPU line explain prints too
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert list(rows) == ["2", "1", "3"]  # plan order, the job waiting on Slurm (held) last
    assert rows["2"][4:7] == ["PD", "1:1", "start"]  # queue 1, first in the controller's order
    assert rows["1"][4:7] == ["R", "2:2", "preempt"]
    # held: it keeps its level (its SiteFactor band) but only waits, naming Slurm's reason
    assert rows["3"][5:7] == ["1:3", "wait"] and "Slurm reason JobHeldUser" in lines[3]
    # nothing was written by the preview, nothing done in "Slurm"
    assert backend.calls == []


def test_queue_json_and_filters(cluster, capsys):
    import json
    config_file, _ = cluster
    assert main(["queue", "--config", config_file, "--json", "-t", "R"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [j["job_id"] for j in doc["jobs"]] == ["1"] and doc["jobs"][0]["action"] == "preempt"


def test_queue_empty_and_unavailable(tmp_path, monkeypatch, capsys):
    backend = ScriptedBackend()
    monkeypatch.setattr(cmd_queue, "_backend_factory", lambda config: backend)
    url = f"sqlite:///{tmp_path}/none.db"
    assert main(["queue", "--database-url", url]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("no pending or running GPU jobs")
    assert "no store at" in captured.err and not (tmp_path / "none.db").exists()
    backend.down = True
    assert main(["queue", "--database-url", url]) == 1
    assert "Slurm did not answer" in capsys.readouterr().err


def test_explain_says_why_a_running_job_is_not_preemptable(cluster, capsys):
    config_file, backend = cluster
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)], signal="")
    assert main(["explain", "1", "--config", config_file]) == 0
    out = capsys.readouterr().out
    assert "preemption: not preemptable: declared no checkpoint signal" in out
    assert "this round: keeps running" in out  # the plan does not preempt it either


def test_explain_waiting_job(cluster, capsys):
    config_file, backend = cluster
    backend.now += 30  # job 2 has waited; job 1 keeps running
    assert main(["explain", "2", "--config", config_file]) == 0
    out = capsys.readouterr().out
    assert out.startswith("job 2 (alice, batch, 4 GPUs): PENDING in queue 1 of 2")
    assert "this round: start" in out
    assert "starvation: already in queue 1" in out
    assert "next threshold 100 GPU-s" in out


def test_explain_running_job_shows_decisions_and_promotion(cluster, capsys):
    config_file, backend = cluster
    assert main(["explain", "1", "--config", config_file]) == 0
    out = capsys.readouterr().out
    assert "job 1 (alice, batch, 16 GPUs): RUNNING in queue 2 of 2" in out
    assert "this round: preempt" in out
    assert "in the last queue" in out
    assert "last decisions (newest first):" in out and "r2.1" in out and "would signal B:USR1" in out
    assert "preemption: preemptable: signal B:USR1@0 (--signal), requeue after 30s" in out


def test_explain_promotion_timing(cluster, capsys, monkeypatch):
    """A job in queue 2 waiting: promoted once waited >= knob x executed."""
    config_file, backend = cluster
    import dataclasses
    # job 1 was preempted (now pending, in queue 2); it executed 1000 s, knob 2 -> 2000 s of waiting
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="PENDING", gpus_by_node=(), reason="Priority")
    backend.jobs.pop("2")
    backend.now += 500
    backend.add("4", 16, "RUNNING", start=backend.now - 1, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    assert main(["explain", "1", "--config", config_file]) == 0
    out = capsys.readouterr().out
    assert "starvation: would be promoted in 1500 s" in out, out
    assert "GPUs: needs 16, 0 free now" in out
    assert "1 job(s) ahead (1 running, 0 pending): 4" in out


def test_explain_names_slurms_reason_for_a_job_slurm_would_not_start(cluster, capsys):
    config_file, _ = cluster
    assert main(["explain", "3", "--config", config_file]) == 0
    out = capsys.readouterr().out
    assert out.startswith("job 3 (alice, batch, 4 GPUs): PENDING in queue 1 of 2")
    assert "this round: wait: Slurm reason JobHeldUser: Slurm does not start it now" in out


def test_explain_knob_inf(cluster, tmp_path, capsys):
    config_file, backend = cluster
    text = open(config_file).read().replace("promote_knob: 2", "promote_knob: .inf")
    path = tmp_path / "inf.yaml"
    path.write_text(text)
    import dataclasses
    backend.jobs["1"] = dataclasses.replace(backend.jobs["1"], state="PENDING", gpus_by_node=(), reason="Priority")
    backend.add("4", 16, "RUNNING", start=backend.now, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    assert main(["explain", "1", "--config", str(path)]) == 0
    assert "promotion disabled (promote_knob=inf)" in capsys.readouterr().out


def test_explain_unknown_and_malformed(cluster, capsys):
    config_file, _ = cluster
    assert main(["explain", "999", "--config", config_file]) == 1
    err = capsys.readouterr().err
    assert "job 999 is known neither to Slurm nor to the store" in err and len(err.strip().splitlines()) == 1
    assert main(["explain", "12;rm", "--config", config_file]) == 2
    assert "job id '12;rm' is malformed" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["explain"])
    assert exit_info.value.code == 2


@pytest.mark.slurm
def test_queue_against_real_slurm(submit_as, tmp_path, capsys):
    job_id = submit_as("alice", "--hold --gres=gpu:2 -J queue-e2e --wrap 'sleep 30'")
    try:
        deadline = time.monotonic() + 20
        while True:
            code = main(["queue", "--database-url", f"sqlite:///{tmp_path}/none.db"])
            out = capsys.readouterr().out
            line = next((l for l in out.splitlines() if l.split()[:1] == [job_id]), None)
            if line is not None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert code == 0
        assert line is not None, out
        fields = line.split()
        assert fields[1:5] == ["alice", "batch", "2", "PD"]
        assert "Slurm reason JobHeld" in line and fields[6] == "wait"  # a held job only waits
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=15)


def test_explain_shows_the_index_its_key_and_sample_count(cluster, tmp_path, capsys):
    config_file, backend = cluster
    text = open(config_file).read()
    url = text.split("database_url: ")[1].split("\n")[0]
    with Store(url) as store:
        for i in range(300):
            store.add_service_sample("default", f"s{i}", 50.0, finished_s=float(i), features=("alice", "batch", "", 4))
    with open(config_file, "a") as f:
        f.write("policy: dgittins\n")
    assert main(["explain", "2", "--config", config_file]) == 0
    out = capsys.readouterr().out
    assert "index: 0.02 (Gittins, from the distribution of key account+gpus=batch,4: 300 samples)" in out


QOS_ROW = "tiresias_ckpt|requeue,within|00:01:00|00:00:00|\n"  # sacctmgr -n -P show qos format=name,...


def test_explain_under_slurm_preemption_says_slurmctld_chooses(cluster, capsys):
    config_file, backend = cluster
    with open(config_file, "a") as f:
        f.write("preemption: slurm\n")
    backend.qos_config = lambda: QOS_ROW  # job 1's lead time (0 s) fits in the grace: slurmctld's to preempt
    assert main(["explain", "1", "--config", config_file]) == 0
    out = capsys.readouterr().out
    assert "preemption: slurmctld's (preemption: slurm)" in out
    assert "this round: preempt" in out and "slurmctld chooses its victims" in out

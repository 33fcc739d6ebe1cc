"""Slurm's habits in the `tiresias` command line (issue 29, item 4): --version, the
command list for a bare `tiresias`, squeue's options on `queue`, one free-GPU count for
`queue` and `explain`, and a --levers replay that says when it stopped early."""
import dataclasses
import json
import re
import tomllib
from importlib import metadata

import pytest

from controller.cli import queue as cmd_queue
from controller.cli.main import SUBCOMMANDS, main, package_version
from controller.cli.simulate import levers_cut_short
from controller.core.engine import EngineConfig
from controller.core.model import JobSpec
from controller.replay.run_config import SimConfig
from controller.replay.lever_replay import LeverSettings, replay_levers
from controller.cli.reports import format_elapsed
from tests.conftest import ROOT
from tests.test_controller import ScriptedBackend
from tests.test_queue_explain import cluster  # noqa: F401  (pytest fixture)

PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


# -- --version and a bare `tiresias` ---------------------------------------------------------


def test_version_prints_the_installed_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"tiresias {metadata.version('tiresias-slurm')}\n"


def test_version_falls_back_to_pyproject_when_the_package_is_not_installed():
    assert package_version("no-such-distribution-tiresias") == PYPROJECT_VERSION


def test_bare_tiresias_prints_the_command_list_instead_of_simulating(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tiresias")
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("    ") and line.split()}
    assert set(SUBCOMMANDS) <= listed
    assert "avg JCT" not in out  # no simulation ran


def test_options_without_a_command_name_the_simulate_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--seed", "3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "'--seed'" in err and "'tiresias simulate'" in err


def test_the_quick_starts_demo_names_a_command():
    # README's first command is `make demo`: a bare `tiresias` no longer simulates.
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:", 1)[1].splitlines()[1].split()
    assert recipe[0].endswith("/tiresias") and recipe[1] in SUBCOMMANDS


# -- queue: squeue's options -------------------------------------------------------------------


def _queue(capsys, config_file, *options):
    assert main(["queue", "--config", config_file, *options]) == 0
    return capsys.readouterr().out.splitlines()


def test_queue_prints_squeues_state_codes_unless_long(cluster, capsys):  # noqa: F811
    config_file, _ = cluster
    short = _queue(capsys, config_file)
    assert short[0].split()[4] == "ST"
    assert [line.split()[4] for line in short[1:4]] == ["PD", "R", "PD"]
    long = _queue(capsys, config_file, "--long")
    assert long[0].split()[4] == "STATE"
    assert [line.split()[4] for line in long[1:4]] == ["PENDING", "RUNNING", "PENDING"]


def test_queue_priority_column_is_queue_and_position(cluster, capsys):  # noqa: F811
    config_file, _ = cluster
    lines = _queue(capsys, config_file, "-o", "jobid,level,position,priority")
    assert lines[0].split() == ["JOBID", "LEVEL", "POSITION", "PRIORITY(QUEUE:POS)"]
    for line in lines[1:4]:
        job, level, position, priority = line.split()
        assert priority == f"{level}:{position}"
    with pytest.raises(SystemExit):
        main(["queue", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "PRIORITY(QUEUE:POS) is the job's Tiresias queue (1 is served first) and its position" in help_text


def test_queue_format_takes_column_names_or_squeue_specifiers(cluster, capsys):  # noqa: F811
    config_file, _ = cluster
    named = _queue(capsys, config_file, "-o", "JobID,st,GPUS")
    assert [line.split() for line in named[:4]] == [["JOBID", "ST", "GPUS"], ["2", "PD", "4"], ["1", "R", "16"],
                                                    ["3", "PD", "4"]]
    squeue_like = _queue(capsys, config_file, "--format", "%.18i %u %P %T %t %b %Q")
    assert squeue_like[0].split() == ["JOBID", "USER", "PARTITION", "STATE", "ST", "GPUS", "PRIORITY(QUEUE:POS)"]
    assert squeue_like[2].split() == ["1", "alice", "batch", "RUNNING", "R", "16", "2:2"]


@pytest.mark.parametrize("text, named", [("%i %Z", "'%Z'"), ("jobid,bogus", "'bogus'"), ("%i,jobid", "'jobid'")])
def test_queue_format_names_what_it_does_not_know(cluster, capsys, text, named):  # noqa: F811
    config_file, backend = cluster
    assert main(["queue", "--config", config_file, "-o", text]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "-o/--format" in err and named in err
    assert backend.calls == []


def test_queue_parsable_and_noheader(cluster, capsys):  # noqa: F811
    config_file, _ = cluster
    parsable = _queue(capsys, config_file, "--parsable", "-o", "jobid,st,action")
    assert parsable == ["JOBID|ST|ACTION|", "2|PD|start|", "1|R|preempt|", "3|PD|wait|"]
    assert _queue(capsys, config_file, "--parsable", "-h", "-o", "%i") == ["2|", "1|", "3|"]
    bare = _queue(capsys, config_file, "-h", "-o", "jobid,st")
    assert [line.split() for line in bare] == [["2", "PD"], ["1", "R"], ["3", "PD"]]  # no header, no GPU line


def test_queue_short_h_is_noheader_and_help_stays_long(cluster, capsys):  # noqa: F811
    config_file, _ = cluster
    assert _queue(capsys, config_file, "-h")[0].split()[0] == "2"
    with pytest.raises(SystemExit) as exit_info:
        main(["queue", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tiresias queue") and "-h, --noheader" in out


# -- one free-GPU count ----------------------------------------------------------------------------


def test_queue_and_explain_print_the_same_free_gpu_count(tmp_path, monkeypatch, capsys):
    """16 GPUs, 10 held by job 1; the round starts job 2 (1 GPU), so job 3 (8 GPUs)
    waits with 5 left of Slurm's 6 free. Queue used to say 5 (the plan's) and explain
    6 (Slurm's), both calling it 'free'."""
    backend = ScriptedBackend()
    backend.add("1", 10, "RUNNING", start=900.0, nodes=[("gpu1", 4), ("gpu2", 4), ("gpu3", 2)])
    backend.add("2", 1)
    backend.add("3", 8)
    monkeypatch.setattr(cmd_queue, "_backend_factory", lambda config: backend)
    source = ["--database-url", f"sqlite:///{tmp_path}/none.db"]

    assert main(["queue", *source]) == 0
    queue_lines = capsys.readouterr().out.splitlines()
    assert main(["explain", "3", *source]) == 0
    explain_gpus = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  GPUs: "))

    queue_gpus = queue_lines[-1]
    assert queue_gpus.startswith("GPUs: 6 free now, 5 after this round's starts and preemptions (of 16 ")
    assert explain_gpus == "  GPUs: needs 8, " + queue_gpus[len("GPUs: "):]
    waiting = next(line for line in queue_lines if line.split()[0] == "3")
    assert re.search(r"needs 8 GPUs, 5 free$", waiting)  # the plan's reason counts the same 5

    assert main(["queue", *source, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus_free"] == {"now": 6, "after_round": 5, "total": 16}


# -- --levers at its round limit ---------------------------------------------------------------------


def _lever_replay(max_rounds):
    sim = SimConfig(nodes=1, gpus_per_node=4, round_interval_s=1.0,
                    engine=EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,)))
    return replay_levers(sim, [JobSpec("1", 1, 0.0, duration_s=5.0)], LeverSettings(), max_rounds=max_rounds)


def test_levers_says_when_it_stops_at_its_round_limit():
    cut = _lever_replay(max_rounds=3)
    assert (len(cut.levers), cut.unfinished_jobs) == (3, 1)
    assert levers_cut_short(cut).startswith("--levers stopped at 3 rounds with 1 job(s) not finished")
    whole = _lever_replay(max_rounds=100)
    assert whole.unfinished_jobs == 0 and levers_cut_short(whole) == ""


def test_queue_takes_squeues_filters_and_its_default_format(cluster, capsys):  # noqa: F811
    """squeue's -p is --partition and -j --jobs; its default -o works as it is."""
    config_file, backend = cluster
    for job_id in ("1", "2"):
        backend.jobs[job_id] = dataclasses.replace(backend.jobs[job_id], name=f"train{job_id}")
    backend.jobs["3"] = dataclasses.replace(backend.jobs["3"], partition="other", name="sweep")
    assert [line.split()[0] for line in _queue(capsys, config_file, "-h", "-o", "%i", "-p", "batch")] == ["2", "1"]
    assert [line.split()[0] for line in _queue(capsys, config_file, "-h", "-o", "%i", "-p", "other")] == ["3"]
    assert [line.split()[0] for line in _queue(capsys, config_file, "-h", "-o", "%i", "-j", "3,1")] == ["1", "3"]
    lines = _queue(capsys, config_file, "-o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R")
    assert lines[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:4]}
    ran_s = backend.now - backend.jobs["1"].start_time_s
    assert rows["1"] == ["batch", "train1", "alice", "R", format_elapsed(ran_s), "4", "gpu1,gpu2,gpu3,gpu4"]
    assert rows["3"] == ["other", "sweep", "alice", "PD", "00:00:00", "1", "(JobHeldUser)"]

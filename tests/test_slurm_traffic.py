"""Slurm traffic grows with changes, not with the queue: the real controller and the
real Slurm backend against the scripted slurmctld of bench/scripted_slurm.py
(22.05 JSON shapes), counting the commands each round sends."""
from pathlib import Path

import pytest

from bench.bench_slurm_traffic import rounds
from bench.scripted_slurm import ScriptedSlurm
from controller.service.acting.backend import BackendUnavailable
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult


def test_steady_round_sends_no_scontrol_and_one_start_at_most_five():
    result = rounds("dlas", pending=300, running=60, minutes=True)
    # one per (level, class) value and per 15 ids (command_timeout_s x RL_IDS_PER_S: a
    # command that finds Slurm's rl_enable bucket empty still ends within its time-out)
    assert result["first"][1]["scontrol update SiteFactor"] <= 4 + 300 // 15
    assert result["steady"][0] == 0 and "sprio" not in result["steady"][1]
    assert result["after one start"][0] <= 5
    assert result["after one start"][1].get("scontrol write batch_script") == 1  # the new running job's --signal
    # a minute of Controller.run_forever: the light poll every poll_s, a round every
    # interval_s with the node poll; nothing changed, so one full observation (the first)
    full_rounds, calls = result["minute steady"]
    assert full_rounds == 6
    assert calls == {'squeue -h -o "%i %t %r" (poll)': 30, 'sinfo -h -o "%T %N" (poll)': 6, "squeue --json": 1,
                     "sinfo --json": 1}


def test_the_rank_ordering_of_continuous_policies_is_what_costs():
    result = rounds("las", pending=300, running=60)
    assert result["after one start"][0] > 100  # every pending job below the started one moves up a rank


def test_sprio_is_read_again_only_for_new_pending_jobs():
    slurm = ScriptedSlurm(pending=20, running=4, nodes=10)
    backend = SlurmBackend(runner=slurm)
    backend.observe()
    backend.observe()
    assert slurm.calls["sprio"] == 1
    slurm.submit(999, 1)
    backend.observe()
    assert slurm.calls["sprio"] == 2


def test_a_new_pending_job_is_asked_of_sprio_again_after_an_observation_that_failed_there():
    """observe() asks sprio only for records it parsed anew; one that failed on sprio
    (slurmctld gone meanwhile) must not leave the new job's record parsed but never asked."""
    slurm = ScriptedSlurm(pending=20, running=4, nodes=10)
    down = {"sprio": False}

    def runner(argv, timeout_s, env):
        if down["sprio"] and argv[0] == "sprio":
            return CommandResult(1, "", "sprio: error: Unable to contact slurm controller (connect failure)")
        return slurm(argv, timeout_s, env)

    backend = SlurmBackend(runner=runner)
    backend.observe()
    slurm.submit(999, 1)
    down["sprio"] = True
    with pytest.raises(BackendUnavailable):
        backend.observe()
    down["sprio"] = False
    asked = slurm.calls["sprio"]
    observation = backend.observe()
    assert slurm.calls["sprio"] == asked + 1  # asked again, though job 999's record is unchanged since
    assert any(job.job_id == "999" for job in observation.jobs)


def test_the_readme_quotes_the_commands_a_steady_minute_sends():
    """README's figure is what the real loop sends (the count does not grow with the queue)."""
    steady = sum(rounds("dlas", pending=300, running=60, minutes=True)["minute steady"][1].values())
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert f"{steady} Slurm commands a minute when nothing changes" in " ".join(readme.split())

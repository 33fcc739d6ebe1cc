"""Preflight (controller.service.preflight, `tiresias preflight`, the check at `tiresias run`'s start).

tests/fixtures/slurm/22.05/scontrol_show_config.txt is `scontrol show config` of the
test cluster (containers/slurm-cluster.sh up, Slurm 22.05.8), recorded with
`scontrol show config > tests/fixtures/slurm/22.05/scontrol_show_config.txt`;
scontrol_show_config_broken.txt is that file with six values changed by sed
(PriorityWeightFairShare 100000, JobRequeue 0, RequeueExit (null), SchedulerType
sched/builtin, PreemptType preempt/qos, PreemptMode REQUEUE).
tests/fixtures/slurm/26.05/scontrol_show_config.txt is the same cluster's on Slurm
26.05.5, recorded by tests/fixtures/slurm/record.sh (26.05/RECORDED).
"""
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cli.main import main
from controller.service.backend import BackendUnavailable
from controller.service.preflight import PRIORITY_WEIGHTS, at_start, check, exit_codes, parse_show_config
from tests.slurm_fixtures import slurm_cluster  # noqa: F401  (pytest fixture)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm" / "22.05"
GOOD = FIXTURES / "scontrol_show_config.txt"
BROKEN = FIXTURES / "scontrol_show_config_broken.txt"
GOOD_2605 = FIXTURES.parent / "26.05" / "scontrol_show_config.txt"
BAND = 100000


def settings_of(path: Path, **changes) -> dict:
    return {**parse_show_config(path.read_text()), **changes}


def lines(settings, band=BAND) -> list[str]:
    return [f.line() for f in check(settings, band, 85)]


def test_the_recorded_test_cluster_passes():
    settings = settings_of(GOOD)
    assert settings["PriorityType"] == "priority/multifactor" and settings["RequeueExit"] == "85"
    assert settings["SchedulerParameters"] == "sched_interval=2,bf_interval=2,sched_min_interval=100000"
    assert "Slurmctld(primary) at vm is UP" not in settings and "Configuration data as of" not in " ".join(settings)
    assert check(settings, BAND, 85) == []


def test_the_recorded_26_05_test_cluster_passes():
    """26.05 prints indexed keys (Prolog[0], Epilog[0]), keys 22.05 lacks (TLSType,
    MetricsType, ...), an empty PriorityFlags, and PreemptType (null) where 22.05 printed
    preempt/none; the settings preflight judges read as on 22.05."""
    settings = settings_of(GOOD_2605)
    assert settings["SLURM_VERSION"] == "26.05.5" and settings["TLSType"] == "tls/none"
    assert (settings["PriorityType"], settings["SchedulerType"], settings["SelectType"]) == \
        ("priority/multifactor", "sched/backfill", "select/cons_tres")
    assert (settings["JobRequeue"], settings["RequeueExit"]) == ("1", "85")
    assert (settings["PreemptType"], settings["PreemptMode"]) == ("(null)", "OFF")
    assert (settings["PriorityWeightAge"], settings["PriorityWeightPartition"], settings["PriorityWeightTRES"]) == \
        ("1", "1000", "(null)")
    assert settings["Prolog[0]"] == "/etc/slurm/tiresias/prolog" and settings["PriorityFlags"] == ""
    assert not any(key.startswith(("Configuration", "Slurmctld(")) for key in settings)
    old = settings_of(GOOD)
    for key in ("PriorityType", *PRIORITY_WEIGHTS, "PriorityWeightTRES", "JobRequeue", "RequeueExit",
                "SchedulerType", "SchedulerParameters", "PreemptMode", "SelectType"):
        assert settings[key] == old[key], key
    assert check(settings, BAND, 85) == []


def test_an_unset_preempt_type_is_no_preemption():
    """26.05 prints a PreemptType that slurm.conf leaves out as (null): no preemption
    plugin, whatever PreemptMode says, as preempt/none."""
    assert lines(settings_of(GOOD_2605, PreemptMode="GANG")) == []
    assert lines(settings_of(GOOD, PreemptMode="GANG")) == []
    [line] = lines(settings_of(GOOD_2605, PreemptType="preempt/qos", PreemptMode="REQUEUE"))
    assert line.startswith("PreemptType=preempt/qos (PreemptMode=REQUEUE): needs preempt/none")


def test_the_broken_variant_names_each_wrong_setting_its_value_and_what_it_needs():
    assert lines(settings_of(BROKEN)) == [
        "PriorityWeight*=101001 (Age 1+FairShare 100000+Partition 1000): needs a sum below 50000 (half of "
        "site_factor_band 100000, so that no weighted factor reorders the SiteFactor bands)",
        "JobRequeue=0: needs 1 (batch jobs must be requeueable for a preemption to resume them)",
        "RequeueExit=(null): needs a list containing 85 (a job that checkpoints and exits 85 must be requeued, "
        "not ended FAILED)",
        "SchedulerType=sched/builtin: needs sched/backfill (the plan backfills GPUs a waiting gang cannot use)",
        "PreemptType=preempt/qos (PreemptMode=REQUEUE): needs preempt/none (or PreemptMode=OFF) (Slurm's own "
        "preemption picks victims by QOS or partition, not by attained service, and outside the checkpoint "
        "contract)",
    ]


@pytest.mark.parametrize("changes, wrong", [
    ({"PriorityType": "priority/basic"}, "PriorityType=priority/basic: needs priority/multifactor"),
    ({"RequeueExit": "86"}, "RequeueExit=86: needs a list containing 85"),
    ({"RequeueExit": "1-9,300"}, "RequeueExit=1-9,300: needs a list containing 85"),
    ({"PriorityWeightTRES": "CPU=1000,GRES/gpu=60000"}, "PriorityWeight*=62001 (Age 1+Partition 1000+"
                                                         "TRES[CPU] 1000+TRES[GRES/gpu] 60000)"),
    ({"PriorityWeightAge": "lots"}, "PriorityWeightAge=lots: needs a whole number"),
    ({"PreemptType": "preempt/partition_prio", "PreemptMode": "SUSPEND,GANG"}, "PreemptType=preempt/partition_prio"),
])
def test_one_wrong_setting_one_line(changes, wrong):
    [line] = lines(settings_of(GOOD, **changes))
    assert line.startswith(wrong), line


@pytest.mark.parametrize("changes", [
    {"RequeueExit": "1-9,85"}, {"RequeueExit": "80-90"},
    {"PreemptType": "preempt/partition_prio", "PreemptMode": "OFF"},
    {"PriorityWeightTRES": "GRES/gpu=1000"},
])
def test_settings_that_are_right_in_another_form(changes):
    assert lines(settings_of(GOOD, **changes)) == []


def test_weights_are_judged_against_the_configured_band():
    # the test cluster's weights add up to 1001: below half of 2004, not below half of 2002
    assert lines(settings_of(GOOD), band=2004) == []
    [line] = lines(settings_of(GOOD), band=2002)
    assert line.startswith("PriorityWeight*=1001 (Age 1+Partition 1000): needs a sum below 1001")


def test_exit_codes():
    assert exit_codes("(null)") == set() and exit_codes("85") == {85} and exit_codes("1-3,85") == {1, 2, 3, 85}
    with pytest.raises(ValueError):
        exit_codes("x")


class ConfigBackend:
    def __init__(self, text=None):
        self.text = text

    def slurm_config(self):
        if self.text is None:
            raise BackendUnavailable("scontrol show config exited 1: Unable to contact slurm controller")
        return self.text


def test_enforce_refuses_to_start_shadow_and_observe_warn(caplog):
    log = logging.getLogger("tiresias.test")
    with caplog.at_level(logging.WARNING):
        assert at_start("enforce", ConfigBackend(BROKEN.read_text()), BAND, 85, log) is False
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 6 and errors[1].startswith("preflight: JobRequeue=0: needs 1")
    assert "enforce mode refuses to start" in errors[-1]
    for mode in ("shadow", "observe"):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert at_start(mode, ConfigBackend(BROKEN.read_text()), BAND, 85, log) is True
        assert [r.levelno for r in caplog.records] == [logging.WARNING] * 5
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert at_start("enforce", ConfigBackend(GOOD.read_text()), BAND, 85, log) is True
        assert at_start("enforce", ConfigBackend(None), BAND, 85, log) is True  # unreadable: starts, says so
    assert [r.getMessage() for r in caplog.records] == [
        "preflight: slurm.conf settings not checked, slurmctld did not answer: scontrol show config exited 1: "
        "Unable to contact slurm controller"]


def test_tiresias_run_in_enforce_mode_refuses_a_broken_slurm_conf(tmp_path, monkeypatch, caplog):
    import slurm_plugin.backend

    class BrokenSlurm(ConfigBackend):
        def __init__(self, partitions=None, command_timeout_s=None):
            super().__init__(BROKEN.read_text())

        def observe(self):
            raise AssertionError("a refused controller must not observe")

    monkeypatch.setattr(slurm_plugin.backend, "SlurmBackend", BrokenSlurm)
    url = f"sqlite:///{tmp_path}/t.db"
    with caplog.at_level(logging.ERROR):
        assert main(["run", "--once", "--mode", "enforce", "--database-url", url]) == 1
    assert any("preflight: SchedulerType=sched/builtin" in r.getMessage() for r in caplog.records)


def test_preflight_command_on_saved_output(capsys):
    assert main(["preflight", "--from-file", str(GOOD)]) == 0
    assert capsys.readouterr().out.startswith("preflight passed")
    assert main(["preflight", "--from-file", str(GOOD_2605)]) == 0
    assert capsys.readouterr().out.startswith("preflight passed")
    assert main(["preflight", "--from-file", str(BROKEN)]) == 1
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 5 and "5 setting(s) wrong" in captured.err
    assert main(["preflight", "--from-file", "/nonexistent/x"]) == 2
    assert "--from-file '/nonexistent/x'" in capsys.readouterr().err


@pytest.mark.slurm
def test_preflight_passes_on_the_test_cluster(slurm_cluster):  # noqa: F811
    proc = subprocess.run([sys.executable, "-m", "controller.cli.main", "preflight"], capture_output=True,
                          text=True, timeout=60, cwd=str(Path(__file__).resolve().parents[1]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("preflight passed") and "(scontrol show config)" in proc.stdout

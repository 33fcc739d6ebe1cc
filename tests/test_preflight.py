"""Preflight (controller.service.ops.preflight, `tiresias preflight`, the check at `tiresias run`'s start).

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
from controller.service.acting.backend import BackendReader, BackendUnavailable
from controller.service.ops.preflight import Pending, at_start
from controller.service.ops.slurm_conf import PRIORITY_WEIGHTS, check, exit_codes, parse_show_partitions
from controller.service.acting.backend import parse_show_config
from tests.slurm_fixtures import slurm_cluster  # noqa: F401  (pytest fixture)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm" / "22.05"
GOOD = FIXTURES / "scontrol_show_config.txt"
BROKEN = FIXTURES / "scontrol_show_config_broken.txt"
GOOD_2605 = FIXTURES.parent / "26.05" / "scontrol_show_config.txt"
BAND = 100000


def settings_of(path: Path, **changes) -> dict:
    return {**parse_show_config(path.read_text()), **changes}


def lines(settings, band=BAND, partitions=None) -> list[str]:
    """The findings that refuse enforce."""
    return [f.line() for f in check(settings, band, 85, partitions) if f.refuses]


def warnings(settings, band=BAND, partitions=None) -> list[str]:
    """The findings enforce starts with."""
    return [f.line() for f in check(settings, band, 85, partitions) if not f.refuses]


# The one warning of the recorded test cluster: it installs no cli_filter plugin.
NO_CLI_FILTER = ("CliFilterPlugins=(null): needs cli_filter/lua (slurm_plugin/cli_filter.lua on every submit host) "
                 "(without it a --signal given only on the sbatch command line or in SBATCH_SIGNAL is invisible to "
                 "the controller: those jobs look undeclared and are never preempted)")


def test_the_recorded_test_cluster_passes():
    settings = settings_of(GOOD)
    assert settings["PriorityType"] == "priority/multifactor" and settings["RequeueExit"] == "85"
    assert settings["SchedulerParameters"] == "sched_interval=2,bf_interval=2,sched_min_interval=100000"
    assert "Slurmctld(primary) at vm is UP" not in settings and "Configuration data as of" not in " ".join(settings)
    assert lines(settings) == [] and warnings(settings) == [NO_CLI_FILTER]


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
    assert lines(settings) == [] and warnings(settings) == [NO_CLI_FILTER]


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


class ConfigBackend(BackendReader):
    """The preflight's reads only (the stand-ins below that run a controller observe)."""

    def __init__(self, text=None):
        self.text = text

    def observe(self):
        raise AssertionError("the preflight does not observe")

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
    assert "5 slurm.conf setting(s) wrong: enforce mode refuses to start" in errors[-1]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"preflight: warning: {NO_CLI_FILTER}"]  # a warning stays one in enforce
    for mode in ("shadow", "observe"):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert at_start(mode, ConfigBackend(BROKEN.read_text()), BAND, 85, log) is True
        assert [r.levelno for r in caplog.records] == [logging.WARNING] * 6
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert at_start("enforce", ConfigBackend(GOOD.read_text()), BAND, 85, log) is True
        assert at_start("enforce", ConfigBackend(None), BAND, 85, log) is None  # unreadable: pending, says so
    assert [r.getMessage() for r in caplog.records] == [
        f"preflight: warning: {NO_CLI_FILTER}",
        "preflight: slurm.conf settings not checked yet, slurmctld did not answer: scontrol show config exited 1: "
        "Unable to contact slurm controller; enforce acts on nothing until they are (retried before every round)"]


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
    assert len(captured.out.splitlines()) == 6 and captured.out.splitlines()[-1] == f"warning: {NO_CLI_FILTER}"
    assert "5 setting(s) wrong" in captured.err and "(1 more warning(s))" in captured.err
    assert main(["preflight", "--from-file", "/nonexistent/x"]) == 2
    assert "--from-file '/nonexistent/x'" in capsys.readouterr().err


@pytest.mark.slurm
def test_preflight_passes_on_the_test_cluster(slurm_cluster):  # noqa: F811
    proc = subprocess.run([sys.executable, "-m", "controller.cli.main", "preflight"], capture_output=True,
                          text=True, timeout=60, cwd=str(Path(__file__).resolve().parents[1]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("preflight passed") and "(scontrol show config; preemption: " in proc.stdout


# --- issue 28, item 6: what the preflight checks besides the settings above ------------------------------------

def config_text(path: Path, **changes) -> str:
    """``path``'s recorded `scontrol show config` with the named settings' values replaced
    (or added), laid out as scontrol prints them."""
    text, seen = [], set()
    for line in path.read_text().splitlines():
        key = line.partition("=")[0].strip()
        if key in changes and "=" in line:
            line, seen = f"{key:<23} = {changes[key]}", seen | {key}
        text.append(line)
    text += [f"{key:<23} = {value}" for key, value in changes.items() if key not in seen]
    return "\n".join(text) + "\n"


def _checked(path, preemption):
    from controller.cli.preflight import _checked as checked

    return checked(path, preemption)


@pytest.mark.parametrize("path", [GOOD, GOOD_2605])
def test_tiresias_preflight_names_a_missing_cli_filter_plugin(path, tmp_path, capsys):
    """Without cli_filter/lua a --signal given only on the command line is invisible: the
    recorded clusters set no CliFilterPlugins, and `tiresias preflight` names it (a
    warning: enforce starts, exit 0); with the plugin set the line is gone."""
    assert main(["preflight", "--from-file", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("preflight passed") and out[0].endswith("with 1 warning(s):")
    assert out[1:] == [f"warning: {NO_CLI_FILTER}"]
    for plugins in ("cli_filter/lua", "lua", "cli_filter/syslog,cli_filter/lua"):
        fixed = tmp_path / "fixed.txt"
        fixed.write_text(config_text(path, CliFilterPlugins=plugins))
        assert main(["preflight", "--from-file", str(fixed)]) == 0
        assert capsys.readouterr().out.splitlines() == [
            f"preflight passed: every slurm.conf setting the controller depends on is right ({fixed}; "
            f"{_checked(None, 'controller')})"]
    other = tmp_path / "other.txt"
    other.write_text(config_text(path, CliFilterPlugins="cli_filter/syslog"))
    assert main(["preflight", "--from-file", str(other)]) == 0
    assert "warning: CliFilterPlugins=cli_filter/syslog: needs cli_filter/lua" in capsys.readouterr().out


@pytest.mark.parametrize("flags, refused, warned", [
    ("INCR_ONLY", "PriorityFlags=INCR_ONLY: needs no INCR_ONLY (a job's priority then never decreases", None),
    ("SMALL_RELATIVE_TO_TIME,INCR_ONLY", "PriorityFlags=SMALL_RELATIVE_TO_TIME,INCR_ONLY: needs no INCR_ONLY",
     None),
    # the recorded cluster weighs the partition factor (1000): unnormalized, its size is unknown
    ("NO_NORMAL_PART", None, "PriorityFlags=NO_NORMAL_PART: needs no NO_NORMAL_* flag for a weighted factor "
                             "(Partition)"),
    ("NO_NORMAL_ALL", None, "PriorityFlags=NO_NORMAL_ALL: needs no NO_NORMAL_* flag for a weighted factor "
                            "(Partition)"),
    ("NO_NORMAL_QOS,NO_NORMAL_ASSOC,NO_NORMAL_TRES", None, None),  # weights 0 and no TRES weight: harmless
    ("ACCRUE_ALWAYS,SMALL_RELATIVE_TO_TIME,CALCULATE_RUNNING,DEPTH_OBLIVIOUS,NO_FAIR_TREE,MAX_TRES", None, None),
])
def test_priority_flags_that_break_the_bands(flags, refused, warned):
    settings = settings_of(GOOD, PriorityFlags=flags, CliFilterPlugins="cli_filter/lua")
    assert [line[:len(refused)] for line in lines(settings)] == ([refused] if refused else [])
    assert [line[:len(warned)] for line in warnings(settings)] == ([warned] if warned else [])


def test_a_weighted_tres_factor_not_normalized_is_a_warning():
    settings = settings_of(GOOD, PriorityFlags="NO_NORMAL_TRES", PriorityWeightTRES="GRES/gpu=100",
                           CliFilterPlugins="lua")
    [line] = warnings(settings)
    assert line.startswith("PriorityFlags=NO_NORMAL_TRES: needs no NO_NORMAL_* flag for a weighted factor (TRES)")


# `scontrol show partition -o` of the test cluster's partitions, urgent with a PreemptMode of its own
PARTITIONS = (
    "PartitionName=batch AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Default=YES PriorityJobFactor=1 "
    "PriorityTier=1 OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=16 Nodes=gpu[1-4] "
    "TRES=cpu=16,mem=4G,node=4,billing=16,gres/gpu=16\n"
    "PartitionName=urgent AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Default=NO PriorityJobFactor=10 "
    "PriorityTier=1 OverSubscribe=NO OverTimeLimit=NONE PreemptMode=REQUEUE State=UP TotalCPUs=16 "
    "Nodes=gpu[1-4]\n"
    "PartitionName=small AllowGroups=ALL Default=NO PriorityJobFactor=1 PreemptMode=OFF State=UP Nodes=gpu[1-2]\n")


def test_partitions_parse_in_both_layouts():
    one_line = parse_show_partitions(PARTITIONS)
    assert {name: p["PreemptMode"] for name, p in one_line.items()} == {
        "batch": "OFF", "urgent": "REQUEUE", "small": "OFF"}
    assert one_line["batch"]["TRES"] == "cpu=16,mem=4G,node=4,billing=16,gres/gpu=16"
    multi_line = "\n\n".join(line.replace(" Default=", "\n   Default=").replace(" OverTimeLimit", "\n   OverTimeLimit")
                             for line in PARTITIONS.splitlines())
    assert parse_show_partitions(multi_line) == one_line


def test_a_partition_preempt_mode_of_its_own_is_named():
    """A partition's own PreemptMode overrides the cluster's OFF: under a preemption
    plugin slurmctld then preempts there behind the controller (a refusal naming the
    partition); under preempt/none no plugin picks victims (a warning)."""
    partitions = parse_show_partitions(PARTITIONS)
    plugin = settings_of(GOOD, PreemptType="preempt/partition_prio", PreemptMode="OFF")
    assert lines(plugin) == []  # the cluster's OFF alone looked right
    [line] = lines(plugin, partitions=partitions)
    assert line.startswith("PartitionName=urgent PreemptMode=REQUEUE: needs OFF (or no PreemptMode of its own) "
                           "(PreemptType=preempt/partition_prio preempts in this partition")
    none = settings_of(GOOD)  # preempt/none
    assert lines(none, partitions=partitions) == []
    assert warnings(none, partitions=partitions)[0].startswith("PartitionName=urgent PreemptMode=REQUEUE: needs OFF")
    # a partition printing the cluster's own mode has none of its own
    inherited = parse_show_partitions(PARTITIONS.replace("PreemptMode=REQUEUE", "PreemptMode=GANG"))
    assert warnings(settings_of(GOOD, PreemptMode="GANG", CliFilterPlugins="lua"), partitions=inherited) == []


def test_tiresias_preflight_reads_saved_partitions(tmp_path, capsys):
    config = tmp_path / "config.txt"
    config.write_text(config_text(GOOD, PreemptType="preempt/qos", PreemptMode="OFF", CliFilterPlugins="lua"))
    partitions = tmp_path / "partitions.txt"
    partitions.write_text(PARTITIONS)
    assert main(["preflight", "--from-file", str(config)]) == 0
    capsys.readouterr()
    assert main(["preflight", "--from-file", str(config), "--partitions-from-file", str(partitions)]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("PartitionName=urgent PreemptMode=REQUEUE: needs OFF")
    assert "1 setting(s) wrong" in captured.err
    assert main(["preflight", "--partitions-from-file", str(partitions)]) == 2


class SlurmOnLater(ConfigBackend):
    """slurmctld that does not answer `scontrol show config` until ``text`` is set;
    counts the reads, and its partitions when ``partitions`` is set."""

    def __init__(self, text=None, partitions=None):
        super().__init__(text)
        self.partitions = partitions
        self.reads = 0

    def slurm_config(self):
        self.reads += 1
        return super().slurm_config()

    def partition_config(self):
        return self.partitions


def test_a_pending_preflight_is_tried_until_slurmctld_answers_and_logged_once_per_change(caplog):
    log = logging.getLogger("tiresias.test")
    backend = SlurmOnLater()
    with caplog.at_level(logging.WARNING):
        assert at_start("enforce", backend, BAND, 85, log) is None
        pending = Pending("enforce", backend, BAND, 85, log)
        assert [pending.attempt() for _ in range(3)] == [None] * 3
    assert backend.reads == 4 and len(caplog.records) == 1  # the first failure only
    caplog.clear()
    backend.text = config_text(GOOD, CliFilterPlugins="cli_filter/lua")
    with caplog.at_level(logging.WARNING):
        assert pending.attempt() is True
    assert [r.getMessage() for r in caplog.records] == [
        "preflight: slurmctld answers: slurm.conf settings checked (all right), enforce acts from now on"]
    # a late check refuses as the check at start does, partitions included
    backend = SlurmOnLater(config_text(GOOD, PreemptType="preempt/qos", PreemptMode="OFF"), PARTITIONS)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert Pending("enforce", backend, BAND, 85, log).attempt() is False
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING", "ERROR"]
    assert caplog.records[0].getMessage().startswith("preflight: PartitionName=urgent PreemptMode=REQUEUE")
    assert Pending("shadow", backend, BAND, 85, log).attempt() is True  # shadow only warns


def test_tiresias_run_once_in_enforce_without_slurmctld_acts_on_nothing(tmp_path, monkeypatch, caplog):
    """slurmctld does not answer `scontrol show config` at start: the round is not run
    (before, the controller started unchecked and observed, planned and acted)."""
    import slurm_plugin.backend

    observed = []

    class NoConfigYet(ConfigBackend):
        def __init__(self, partitions=None, command_timeout_s=None):
            super().__init__(None)

        def observe(self):
            observed.append(1)
            raise BackendUnavailable("slurmctld: connection refused")

    monkeypatch.setattr(slurm_plugin.backend, "SlurmBackend", NoConfigYet)
    url = f"sqlite:///{tmp_path}/t.db"
    with caplog.at_level(logging.WARNING):
        assert main(["run", "--once", "--mode", "enforce", "--database-url", url]) == 1
    assert observed == []
    assert any("round not run" in r.getMessage() and "preflight has not run yet" in r.getMessage()
               for r in caplog.records)

"""Preflight of the site's own settings and queue (issue 35, items 2 and 10).

- ``PrioritySiteFactorPlugin`` set: another writer of SiteFactor, a refusal.
- partitions of different ``PriorityTier`` sharing nodes: a warning naming both and the nodes.
- ``partition_moves`` without associations (no slurmdbd): a warning naming the key.
- the queue: per unmodelled reason, its count, the slurm.conf line or job option behind
  it; above a fifth, that the controller is not reordering this site.

Settings are the recorded `scontrol show config` of the 22.05 test cluster with one
value changed; the queue is what the real SlurmBackend makes of recorded job 4 (22.05)
with sbatch's fields set, answered by a scripted slurmctld."""
import copy
import json
import logging
from pathlib import Path

import pytest

import slurm_plugin.backend
from controller.cli.main import main
from controller.service.acting.backend import BackendReader
from controller.service.ops.preflight import at_start
from controller.service.ops.queue_census import queue_findings, unmodelled_source
from controller.service.ops.slurm_conf import check, parse_show_partitions
from controller.service.acting.backend import parse_show_config
from controller.service.ops.unmodelled import Census
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm" / "22.05"
GOOD = FIXTURES / "scontrol_show_config.txt"
NOT_REORDERING = "the controller is not reordering this site"

# a100 (tier 2) shares ab1 and ab2 with gpu (tier 1); v100 (tier 1) shares ab3 with gpu
TIERED = ("PartitionName=gpu PriorityTier=1 Nodes=ab[1-4] PreemptMode=OFF\n"
          "PartitionName=a100 PriorityTier=2 Nodes=ab[1-2] PreemptMode=OFF\n"
          "PartitionName=v100 PriorityTier=1 Nodes=ab3 PreemptMode=OFF\n")


def settings_of(**changes) -> dict:
    return {**parse_show_config(GOOD.read_text()), **changes}


def findings(settings, partitions=None, **kwargs):
    return [(f.setting, f.refuses, f.line()) for f in check(settings, 100000, 85, partitions, **kwargs)]


def named(found, setting):
    return [(refuses, line) for name, refuses, line in found if name == setting]


# ------------------------------------------------------------------ PrioritySiteFactorPlugin

def test_a_site_factor_plugin_refuses_enforce_naming_it(caplog):
    assert named(findings(settings_of()), "PrioritySiteFactorPlugin") == []  # (null): the recorded cluster
    [(refuses, line)] = named(findings(settings_of(PrioritySiteFactorPlugin="site_factor/example")),
                              "PrioritySiteFactorPlugin")
    assert refuses and line.startswith("PrioritySiteFactorPlugin=site_factor/example: needs (null)")
    assert "writes every job's SiteFactor" in line

    class Backend(BackendReader):
        def slurm_config(self):
            return GOOD.read_text().replace("PrioritySiteFactorPlugin = (null)",
                                            "PrioritySiteFactorPlugin = site_factor/example")

        def observe(self):
            raise AssertionError("the preflight does not observe")

    assert at_start("enforce", Backend(), 100000, 85, logging.getLogger("t")) is False
    assert any("PrioritySiteFactorPlugin=site_factor/example" in r.getMessage() and r.levelno == logging.ERROR
               for r in caplog.records)
    assert at_start("shadow", Backend(), 100000, 85, logging.getLogger("t")) is True


# ------------------------------------------------------------------ PriorityTier

def test_priority_tiers_sharing_nodes_are_a_warning_naming_partitions_and_nodes():
    partitions = parse_show_partitions(TIERED)
    expanded = {"gpu": ["ab1", "ab2", "ab3", "ab4"], "a100": ["ab1", "ab2"], "v100": ["ab3"]}
    found = findings(settings_of(), partitions, partition_nodes=expanded)
    [(refuses, line)] = named(found, "PartitionName=a100,gpu PriorityTier")
    assert not refuses and line.startswith("PartitionName=a100,gpu PriorityTier=2,1 (sharing nodes ab1,ab2): "
                                           "needs one PriorityTier for partitions that share nodes")
    assert "the controller's order" in line and "does not hold across these partitions" in line
    assert [f for f in found if "PriorityTier" in f[0]] == [f for f in found if f[0].endswith("a100,gpu PriorityTier")]
    # the same tier, or no node shared: nothing
    same = parse_show_partitions(TIERED.replace("PriorityTier=2", "PriorityTier=1"))
    assert not [f for f in findings(settings_of(), same, partition_nodes=expanded) if "PriorityTier" in f[0]]
    apart = {**expanded, "a100": ["ab9"]}
    assert not [f for f in findings(settings_of(), partitions, partition_nodes=apart) if "PriorityTier" in f[0]]


def test_priority_tiers_without_a_node_map_compare_the_node_words():
    partitions = parse_show_partitions("PartitionName=a PriorityTier=1 Nodes=n[1-2],m1\n"
                                       "PartitionName=b PriorityTier=3 Nodes=m1,x[1-2]\n")
    [(refuses, line)] = named(findings(settings_of(), partitions), "PartitionName=a,b PriorityTier")
    assert not refuses and "(sharing nodes m1)" in line


def test_tiresias_preflight_expands_saved_partition_hostlists(tmp_path, capsys):
    saved = tmp_path / "partitions.txt"
    saved.write_text(TIERED)
    assert main(["preflight", "--from-file", str(GOOD), "--partitions-from-file", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "warning: PartitionName=a100,gpu PriorityTier=2,1 (sharing nodes ab1,ab2)" in out
    assert "PartitionName=gpu,v100" not in out  # the same tier


# ------------------------------------------------------------------ partition_moves

@pytest.mark.parametrize("accounting, moves, warned", [
    ("accounting_storage/none", True, True), ("(null)", True, True),
    ("accounting_storage/slurmdbd", True, False), ("accounting_storage/none", False, False)])
def test_partition_moves_without_associations_names_the_key(accounting, moves, warned):
    found = named(findings(settings_of(AccountingStorageType=accounting), partition_moves=moves), "partition_moves")
    assert [refuses for refuses, _ in found] == ([False] if warned else [])
    if warned:
        assert found[0][1].startswith("partition_moves=true: needs AccountingStorageType=accounting_storage/slurmdbd")
        assert "stale errno" in found[0][1]


def test_tiresias_preflight_reads_partition_moves_from_the_config(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("partition_moves: true\npartitions: [batch, urgent]\n")
    saved = tmp_path / "show_config.txt"
    saved.write_text(GOOD.read_text().replace("accounting_storage/slurmdbd", "accounting_storage/none"))
    assert main(["preflight", "--config", str(config), "--from-file", str(saved)]) == 0
    assert "warning: partition_moves=true" in capsys.readouterr().out
    assert main(["preflight", "--from-file", str(saved)]) == 0
    assert "partition_moves" not in capsys.readouterr().out


# ------------------------------------------------------------------ the queue

def test_the_slurm_conf_line_behind_a_reason_is_named():
    settings = settings_of(JobDefaults="DefCpuPerGPU=2,DefMemPerGPU=1000", DefMemPerCPU="UNLIMITED")
    assert unmodelled_source("cpus", settings).startswith("slurm.conf JobDefaults=DefCpuPerGPU=2 (filled into")
    assert unmodelled_source("memory", settings).startswith("slurm.conf JobDefaults=DefMemPerGPU=1000 (")
    assert unmodelled_source("memory", settings_of(DefMemPerCPU="2000")).startswith("slurm.conf DefMemPerCPU=2000")
    assert unmodelled_source("cpus", settings_of()) == "the jobs' --cpus-per-gpu / --cpus-per-task"
    forced = parse_show_partitions("PartitionName=gpu OverSubscribe=FORCE:4 Nodes=ab1\n")
    assert unmodelled_source("oversubscribe", settings_of(), forced).startswith(
        "slurm.conf PartitionName=gpu OverSubscribe=FORCE:4")
    assert unmodelled_source("exclusive", settings_of()) == "the jobs' --exclusive=user / mcs / topo"


def test_queue_findings_per_reason_and_the_warning_only_above_a_fifth():
    one_of_five = Census(5, {"7": (("constraint",), "--constraint=a|b (an OR (|): ...)")})
    found = queue_findings(one_of_five, settings_of())
    assert [f.line() for f in found] == [
        "unmodelled constraint=1 of 5 pending GPU jobs: needs a request the plan can express (from the jobs' "
        "--constraint with OR (|), brackets ([]) or counts (*N)) (a --constraint with OR, brackets or counts "
        "(which nodes satisfy it is Slurm's choice): no job is preempted for them; e.g. job 7: --constraint=a|b "
        "(an OR (|): ...))"]
    assert not any(f.refuses for f in found)
    two_of_five = Census(5, {"7": (("constraint",), "x"), "8": (("cpus", "memory"), "y")})
    first, *per_reason = queue_findings(two_of_five, settings_of(JobDefaults="DefCpuPerGPU=2"))
    assert first.line().startswith(f"unmodelled pending GPU jobs=2 of 5 (40%): needs at most 20% ({NOT_REORDERING}")
    assert "top reasons: cpus (1 job" in first.line()
    assert [f.setting for f in per_reason] == ["unmodelled cpus", "unmodelled memory", "unmodelled constraint"]
    assert "JobDefaults=DefCpuPerGPU=2" in per_reason[0].line()
    assert queue_findings(Census(5, {}), settings_of()) == []


def job_record(job_id, **fields):
    """Recorded pending job 4 (22.05) asking for 4 GPUs, waiting on priority, with ``fields``."""
    doc = json.loads((FIXTURES / "squeue.json").read_text())
    record = copy.deepcopy(next(j for j in doc["jobs"] if j["job_id"] == 4))
    record.update(job_id=job_id, tres_per_node="gres:gpu:4", tres_req_str="cpu=1,node=1,billing=1,gres/gpu=4",
                  **{"state_reason": "Priority", **fields})
    return record


def scripted_slurm(jobs, config_text, partitions_text):
    """The real SlurmBackend over a scripted slurmctld: recorded sinfo, these jobs."""
    outputs = {("squeue",): json.dumps({"jobs": jobs}), ("sinfo",): (FIXTURES / "sinfo.json").read_text(),
               ("scontrol", "show", "config"): config_text, ("scontrol", "show", "partition"): partitions_text}

    def runner(argv, timeout_s, env):
        for key, text in outputs.items():
            if tuple(argv[:len(key)]) == key:
                return CommandResult(0, text, "")
        return CommandResult(1, "", f"unexpected {argv}")

    class Scripted(SlurmBackend):
        def __init__(self, **kwargs):
            super().__init__(runner=runner, **kwargs)

    return Scripted


def test_tiresias_preflight_reports_the_unmodelled_share_of_the_queue_it_sees(monkeypatch, capsys):
    partitions = ("PartitionName=batch PriorityTier=1 Nodes=gpu[1-4] PreemptMode=OFF\n"
                  "PartitionName=small PriorityTier=2 Nodes=gpu[1-2] PreemptMode=OFF\n")
    jobs = [job_record(41, features="a100|v100"), job_record(42, shared="user"), job_record(43), job_record(44),
            job_record(45, state_reason="JobHeldUser", features="a100|v100")]  # held: not weighed
    monkeypatch.setattr(slurm_plugin.backend, "SlurmBackend", scripted_slurm(jobs, GOOD.read_text(), partitions))
    assert main(["preflight"]) == 0  # warnings only
    out = capsys.readouterr().out
    assert ("queue: 2 of 4 pending GPU jobs (50%) cannot cause a preemption (requests the plan does not model): "
            f"{NOT_REORDERING}") in out
    assert f"warning: unmodelled pending GPU jobs=2 of 4 (50%): needs at most 20% ({NOT_REORDERING}" in out
    assert "warning: unmodelled constraint=1 of 4 pending GPU jobs" in out and "e.g. job 41: --constraint=a100|v100" in out
    assert "warning: unmodelled exclusive=1 of 4 pending GPU jobs" in out and "--exclusive=user" in out
    # the tiers, from sinfo's expanded node names
    assert "warning: PartitionName=batch,small PriorityTier=1,2 (sharing nodes gpu1,gpu2)" in out
    # every job modelled: no warning, the share said
    monkeypatch.setattr(slurm_plugin.backend, "SlurmBackend",
                        scripted_slurm([job_record(43), job_record(44)], GOOD.read_text(), partitions))
    assert main(["preflight"]) == 0
    out = capsys.readouterr().out
    assert "queue: every one of 2 pending GPU jobs may cause a preemption" in out and "unmodelled" not in out

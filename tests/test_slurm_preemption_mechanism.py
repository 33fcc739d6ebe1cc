"""``preemption: slurm`` (issue 30): slurmctld chooses, signals and requeues the victims;
the controller keeps the accounts and sets the bands, on running jobs too, so that
preempt/qos's priority rule (WITHIN, PRIORITY) follows the Tiresias levels. Unit tests
with the scripted backend; the real-Slurm facts are in tests/test_slurm_native_preemption.py."""
from dataclasses import replace

from controller.core.levers.bands import running_site_factors, site_factors
from controller.service.ops.slurm_conf import check
from controller.service.acting.backend import parse_show_config
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)

BAND = 100000


def test_a_running_job_outranks_every_pending_job_of_its_level_and_none_of_the_level_above():
    levels = {"run0": 0, "run1": 1, "new0": 0, "old0": 0, "new1": 1}
    running = running_site_factors(levels, ["run0", "run1"], queue_count=3, band=BAND)
    pending = site_factors(["new0", "old0", "new1"], levels, {"new0", "old0", "new1"}, {"old0"}, 3, BAND)
    # preflight keeps Slurm's weighted factors under half a band; preempt/qos preempts
    # only for a strictly higher priority, so a tie preempts nobody
    worst_pending = {j: v + BAND // 2 - 1 for j, v in pending.items()}
    assert running["run0"] >= max(worst_pending["new0"], worst_pending["old0"])  # same level: no preemption
    assert running["run1"] >= worst_pending["new1"]
    assert pending["new0"] > running["run1"] and pending["old0"] > running["run1"]  # a level up: preempts
    assert running == {"run0": 4 * BAND - 1, "run1": 3 * BAND - 1}


def test_slurm_mechanism_bands_running_jobs_and_never_signals_nor_requeues(store):
    backend = ScriptedBackend()
    backend.add("1", 16, "RUNNING", start=0.0, nodes=[(f"gpu{i}", 4) for i in range(1, 5)])
    backend.qos_config = lambda: QOS_ROW  # its lead time, 0 s, fits in tiresias_ckpt's 60 s grace
    c = controller(store, backend, preemption="slurm")
    c.run_round()  # job 1 attains 1000 s x 16 GPUs: queue 2
    backend.add("2", 4)
    c.run_round()
    backend.now += 30
    c.run_round()
    kinds = [call[0] for call in backend.calls]
    assert "signal" not in kinds and "requeue" not in kinds, backend.calls
    sent = {}
    for call in backend.calls:
        if call[0] == "set_site_factors":
            sent.update(call[1])
    assert sent["1"] == 2 * BAND - 1  # running, queue 2 of 2: the top of its band
    assert sent["2"] == 2 * BAND  # pending, queue 1: above it, so Slurm may preempt job 1 for it
    preempts = [d for d in store.decisions("default", job_id="1") if d["kind"] == "preempt"]
    assert preempts and not any(d["applied"] for d in preempts)
    assert "left to slurmctld" in preempts[0]["detail"]


QOS_ROW = "tiresias_ckpt|requeue,within|00:01:00|00:00:00|\n"  # sacctmgr -n -P show qos format=name,...
KEPT = 4 * BAND - 1  # (K + 2) x band - 1 with K = 2 queues: above every pending job


def sent_factors(backend) -> dict:
    sent = {}
    for call in backend.calls:
        if call[0] == "set_site_factors":
            sent.update(call[1])
    return sent


def test_slurm_mechanism_keeps_a_job_slurmctld_must_not_preempt_above_every_pending_job(store):
    """slurmctld signals at preemption and requeues one GraceTime later, whatever the job's
    lead time, and preempts only preempt_qos's jobs: a running job whose lead time is
    longer than the grace, one in another QOS, one that opted in by its comment alone
    (slurmctld sends only the job's own --signal) and, until slurmdbd has told the
    grace, every one, is banded above every pending job, so that no pending job has the
    strictly higher priority preempt/qos needs; the plan does not count on it either."""
    nodes = [(f"gpu{i}", 4) for i in range(1, 5)]
    backend = ScriptedBackend()
    backend.add("fits", 4, "RUNNING", start=0.0, nodes=nodes[:1], signal="B:USR1@60")
    backend.add("long", 4, "RUNNING", start=0.0, nodes=nodes[1:2], signal="B:USR1@61")
    backend.add("other", 4, "RUNNING", start=0.0, nodes=nodes[2:3])
    backend.jobs["other"] = replace(backend.jobs["other"], qos="normal")
    backend.add("bare", 4, "RUNNING", start=0.0, nodes=nodes[3:], signal="", comment="tiresias:preemptable")
    for job_id in ("fits", "long", "bare"):
        backend.jobs[job_id] = replace(backend.jobs[job_id], qos="tiresias_ckpt")
    answers = [""]  # sacctmgr has not answered with the QOS yet
    backend.qos_config = lambda: answers[-1]
    c = controller(store, backend, preemption="slurm")
    c.run_round()
    assert all(v == KEPT for v in sent_factors(backend).values()) and len(sent_factors(backend)) == 4
    answers.append(QOS_ROW)
    backend.now += 700  # QOS_READ_EVERY_S later: read again; all four reach queue 2
    c.run_round()
    backend.add("new", 4)
    c.run_round()
    sent = sent_factors(backend)
    assert sent["fits"] == 2 * BAND - 1  # queue 2's top: a queue-1 job outranks it
    assert sent["long"] == sent["other"] == sent["bare"] == KEPT
    assert sent["new"] < KEPT
    preempts = [d["job_id"] for d in store.decisions("default") if d["kind"] == "preempt"]
    assert preempts and set(preempts) == {"fits"}, preempts
    why = c.contract.why_not(backend.jobs["long"])
    assert "lead time 61 s is longer than QOS tiresias_ckpt's GraceTime 60 s" in why


def test_controller_mechanism_keeps_running_jobs_unbanded(store):
    backend = ScriptedBackend()
    backend.add("1", 4, "RUNNING", start=0.0, nodes=[("gpu1", 4)])
    c = controller(store, backend)
    c.run_round()
    assert not any(call[0] == "set_site_factors" and "1" in call[1] for call in backend.calls)


SLURM_PREEMPT_CONF = """
PriorityType = priority/multifactor
PriorityWeightAge = 1
JobRequeue = 1
RequeueExit = 85
SchedulerType = sched/backfill
PreemptType = preempt/qos
PreemptMode = REQUEUE
SlurmctldParameters = preempt_send_user_signal
CliFilterPlugins = cli_filter/lua
AccountingStorageType = accounting_storage/slurmdbd
AccountingStorageEnforce = associations,qos
"""


def findings(text, preemption="slurm", partitions=None):
    return {f.setting: f for f in check(parse_show_config(text), BAND, 85, partitions, preemption)}


def test_preflight_for_slurm_preemption_passes_the_documented_settings_and_refuses_the_controllers():
    assert findings(SLURM_PREEMPT_CONF) == {}
    assert "PreemptType" in findings(SLURM_PREEMPT_CONF, preemption="controller")  # Slurm's preemption on
    stock = SLURM_PREEMPT_CONF.replace("preempt/qos", "preempt/none").replace("REQUEUE", "OFF")
    assert findings(stock, preemption="controller") == {}
    refused = findings(stock)
    assert refused["PreemptType"].refuses and refused["PreemptMode"].refuses


def test_preflight_for_slurm_preemption_names_the_accounting_lines_it_needs():
    """QOS live in slurmdbd, and AccountingStorageEnforce must hold associations and qos
    (issue 38): each missing piece refuses, naming the line, its value and the fix."""
    limits = SLURM_PREEMPT_CONF.replace("associations,qos", "associations,limits,qos,safe")
    assert findings(limits) == {}
    for enforce, needs in (("none", "a list with associations and qos"), ("associations,limits", "a list with qos"),
                           ("qos,limits", "a list with associations")):
        found = findings(SLURM_PREEMPT_CONF.replace("associations,qos", enforce))
        assert list(found) == ["AccountingStorageEnforce"] and found["AccountingStorageEnforce"].refuses
        assert found["AccountingStorageEnforce"].line().startswith(f"AccountingStorageEnforce={enforce}: needs {needs}")
        assert "restart slurmctld" in found["AccountingStorageEnforce"].why
    found = findings(SLURM_PREEMPT_CONF.replace("slurmdbd", "none").replace("associations,qos", "none"))
    assert found["AccountingStorageType"].value == "accounting_storage/none"
    assert set(found) == {"AccountingStorageType", "AccountingStorageEnforce"}
    # preemption: controller needs no accounting
    stock = SLURM_PREEMPT_CONF.replace("preempt/qos", "preempt/none").replace("REQUEUE", "OFF")
    assert findings(stock.replace("associations,qos", "none"), preemption="controller") == {}


def test_preflight_for_slurm_preemption_names_a_mode_that_kills_and_a_missing_user_signal():
    found = findings(SLURM_PREEMPT_CONF.replace("PreemptMode = REQUEUE", "PreemptMode = CANCEL")
                     .replace("preempt_send_user_signal", "enable_configless"))
    assert found["PreemptMode"].value == "CANCEL" and "kills" in found["PreemptMode"].why
    assert "preempt_send_user_signal" in found["SlurmctldParameters"].needs
    newer = SLURM_PREEMPT_CONF.replace("SlurmctldParameters = preempt_send_user_signal",
                                       "PreemptParameters = send_user_signal")
    assert findings(newer) == {}  # the 24.11+ spelling
    partitions = {"gpu": {"PreemptMode": "SUSPEND"}, "cpu": {"PreemptMode": "REQUEUE"}, "all": {}}
    assert list(findings(SLURM_PREEMPT_CONF, partitions=partitions)) == ["PartitionName=gpu PreemptMode"]


# sacctmgr -n -P show qos format=name,preemptmode,gracetime,preemptexempttime,preempt,
# as the test instance's slurmdbd printed it (22.05; tests/test_slurm_native_preemption.py)
QOS_ROWS = """normal|cluster|00:00:00||
tpreempt|within,requeue|00:00:10||
texempt|within,requeue|00:00:00|00:00:40|
tcross|cluster|00:00:00||tpreempt
twithin|within|00:00:00||
"""


def qos_found(name, cluster_exempt="00:01:00"):
    from controller.service.ops.preempt_qos import parse_qos, qos_findings

    return {f.setting: f for f in qos_findings(parse_qos(QOS_ROWS), name, cluster_exempt)}


def test_preflight_checks_the_declared_jobs_qos():
    assert list(qos_found("tpreempt")) == ["QOS tcross Preempt"]  # a Preempt list that ignores the bands: warned
    assert not qos_found("tpreempt")["QOS tcross Preempt"].refuses
    # no minimum run time, the QOS's nor slurm.conf's: a job may be preempted before it has set its trap
    no_exempt = qos_found("tpreempt", cluster_exempt="00:00:00")["QOS tpreempt PreemptExemptTime"]
    assert not no_exempt.refuses and no_exempt.value == "00:00:00"
    assert "QOS texempt PreemptExemptTime" not in qos_found("texempt", cluster_exempt="")  # its own 00:00:40
    assert qos_found("twithin")["QOS twithin PreemptMode"].refuses  # within alone: never preempted
    assert qos_found("normal")["QOS normal PreemptMode"].refuses
    assert not qos_found("texempt")["QOS texempt GraceTime"].refuses  # no grace: warned
    assert qos_found("tiresias_ckpt")["QOS tiresias_ckpt"].refuses  # missing


def test_tiresias_preflight_reads_the_qos_from_a_file(tmp_path, capsys):
    from controller.cli.main import main

    conf, qos, config = tmp_path / "conf.txt", tmp_path / "qos.txt", tmp_path / "t.yaml"
    conf.write_text(SLURM_PREEMPT_CONF)
    qos.write_text(QOS_ROWS)
    config.write_text("preemption: slurm\npreempt_qos: twithin\n")
    assert main(["preflight", "--config", str(config), "--from-file", str(conf), "--qos-from-file", str(qos)]) == 1
    assert "QOS twithin PreemptMode=within: needs requeue,within" in capsys.readouterr().out
    config.write_text("preemption: slurm\npreempt_qos: tpreempt\n")
    assert main(["preflight", "--config", str(config), "--from-file", str(conf), "--qos-from-file", str(qos)]) == 0


def test_the_simulator_charges_slurms_requeue_lag_and_no_controller_caps_under_slurm_preemption():
    from controller.cli.simulate import SLURM_REQUEUE_LAG_S, controller_costs
    from controller.service.ops.config import from_mapping

    own = controller_costs(from_mapping({"preempt_grace_s": 10.0}))
    config = from_mapping({"preempt_grace_s": 10.0, "preemption": "slurm"})
    slurm = controller_costs(config)
    assert own["preempt_grace_s"] == 10.0 and own["requeue_ended_in_grace"] and own["preempt_max_per_job"] == 10
    assert slurm["preempt_grace_s"] == 10.0 + SLURM_REQUEUE_LAG_S and slurm["preempt_max_per_job"] is None
    # a victim that ends in its grace: requeued from 24.05 (bench/ab_preemption.py saw it rerun on 26.05),
    # left ended before (22.05: TIMEOUT)
    assert slurm["requeue_ended_in_grace"] and controller_costs(config, (24, 5))["requeue_ended_in_grace"]
    assert not controller_costs(config, (22, 5))["requeue_ended_in_grace"]
    assert not controller_costs(config, (23, 11))["requeue_ended_in_grace"]


def test_preflight_reads_the_qos_grace_and_checks_cli_filters_policy_against_it(tmp_path):
    from controller.service.ops.preempt_qos import (cli_filter_path, cli_filter_policy_findings,
                                                    installed_cli_filter_findings, parse_qos, qos_grace_s)

    rows = parse_qos("a|requeue,within|00:01:30||\nb|requeue,within|1-00:00:05||\nc|requeue|||\nd|requeue|soon||\n")
    assert [qos_grace_s(rows, q) for q in "abcde"] == [90.0, 86405.0, 0.0, None, None]
    shipped = open("slurm_plugin/tiresias-policy.conf").read()
    unset = cli_filter_policy_findings(shipped, "a", 90.0)  # as shipped: no preemptable_qos
    assert [(f.setting, f.value, f.refuses) for f in unset] == [("tiresias-policy.conf preemptable_qos", "(unset)",
                                                                 False)]
    site = shipped + "preemptable_qos = a\n"
    assert cli_filter_policy_findings(site, "a", 90.0) == []  # its 60 s fits in a's 90 s
    assert [f.setting for f in cli_filter_policy_findings(site, "a", 30.0)] == \
        ["tiresias-policy.conf preemptable_qos_grace_s"]
    assert [f.value for f in cli_filter_policy_findings(site, "b", 90.0)] == ["a"]
    # found next to the slurm.conf slurmctld names; a host without it checks nothing
    (tmp_path / "tiresias-policy.conf").write_text(site)
    settings = {"SLURM_CONF": str(tmp_path / "slurm.conf")}
    assert cli_filter_path(settings) == str(tmp_path / "cli_filter.lua")
    assert len(installed_cli_filter_findings(settings, parse_qos("a|requeue,within|00:00:10||\n"), "a")) == 1
    assert installed_cli_filter_findings({"SLURM_CONF": "/nonexistent/slurm.conf"}, rows, "a") == []


def test_simulate_takes_the_slurm_release_and_names_a_bad_one(capsys):
    import argparse

    from controller.cli.argtypes import slurm_release

    assert slurm_release("22.05") == (22, 5) and slurm_release("26.05.3") == (26, 5)
    for bad in ("22", "22.5", "v26.05", "26.05.x"):
        try:
            slurm_release(bad)
        except argparse.ArgumentTypeError as err:
            assert f"'{bad}' is not a Slurm release" in str(err)
        else:
            raise AssertionError(bad)


def test_a_plain_preflight_checks_the_mechanism_the_controllers_yaml_names(tmp_path, capsys, monkeypatch):
    """No --config: the controller's own YAML (/etc/tiresias/tiresias.yaml) says which
    mechanism to check, and the verdict names the mechanism and the file (issue 38: an
    admin could not tell which mechanism a plain preflight had checked)."""
    from controller.cli.main import main
    from controller.service.ops import config as settings_module

    conf = tmp_path / "show_config"
    conf.write_text(SLURM_PREEMPT_CONF)
    installed = tmp_path / "tiresias.yaml"
    monkeypatch.setattr(settings_module, "DEFAULT_PATH", str(installed))
    assert main(["preflight", "--from-file", str(conf)]) == 1  # no YAML: the default, controller
    err = capsys.readouterr().err
    assert f"preemption: controller, the default: no {installed}; --config names the YAML" in err
    installed.write_text("preemption: slurm\n")
    assert main(["preflight", "--from-file", str(conf)]) == 0
    assert f"(show_config; preemption: slurm, from {installed})" in capsys.readouterr().out.replace(str(conf), "show_config")
    other = tmp_path / "other.yaml"
    other.write_text("preemption: controller\n")
    assert main(["preflight", "--config", str(other), "--from-file", str(conf)]) == 1
    assert f"preemption: controller, from {other}" in capsys.readouterr().err

"""``preemption: slurm`` installed from docs/admin.md alone (issue 38, item 7).

The blocks of "Install `preemption: slurm`" marked ``<!-- install-slurm-preemption: NAME
-->`` are what an admin types. On a real instance (prefix "si", the default cluster's
slurmdbd) this test runs the ``sacctmgr`` block as the instance's accounting set-up
(containers/slurm-cluster.sh TIRESIAS_INSTANCE_ACCOUNTING_SETUP, in place of the
harness's own rows), gives slurmctld the ``slurm.conf`` block, writes the
``tiresias-policy.conf`` block next to cli_filter.lua and starts the controller with the
``tiresias.yaml`` block, with the site's choices below put in the blocks' variables and
nothing else. Then a declared job is preempted by slurmctld for a higher-priority one,
and the time slurmctld takes from the grace's end to the requeue, and what it records
of a victim that finishes in its grace, are measured for the docs.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from controller.service.ops.preempt_qos import parse_policy
from controller.service.ops.slurm_conf import slurm_preemption_findings
from tests.slurm_fixtures import attained, isolated_instance, iso, output_of, run, slurm_cluster, wait_for  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
ADMIN = ROOT / "docs" / "admin.md"
# The site's choices this test makes, put in the sacctmgr block's variables (CLUSTER is
# the instance's ClusterName): a short grace and exemption keep the test short.
GRACE_S = 15
EXEMPT = "00:00:20"
BAND = 100000  # bench.slurm_harness.write_config's site_factor_band; queues_gpu_s [40]: two queues


def docs_block(name: str) -> str:
    """The fenced block after ``<!-- install-slurm-preemption: NAME -->`` in docs/admin.md."""
    found = re.findall(r"<!-- install-slurm-preemption: " + re.escape(name) + r" -->\n```[a-z]*\n(.*?)```",
                       ADMIN.read_text(), re.S)
    assert len(found) == 1, f"docs/admin.md has {len(found)} blocks marked install-slurm-preemption: {name}"
    return found[0]


def with_variables(script: str, **values: str) -> str:
    """The script with each ``NAME=...`` line's value replaced (its comment kept)."""
    for name, value in values.items():
        script, count = re.subn(rf"^{name}=\S+", f"{name}={value}", script, flags=re.M)
        assert count == 1, f"the sacctmgr block sets {name} {count} times"
    return script


def variables(script: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z]+)=(\S+)", script, re.M))


def conf_lines(text: str) -> list[str]:
    """``KEY=VALUE`` lines of a slurm.conf block, comments dropped."""
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def site_policy() -> str:
    text, count = re.subn(r"^(preemptable_qos_grace_s\s*=\s*)[0-9]+", rf"\g<1>{GRACE_S}", docs_block(
        "tiresias-policy.conf"), flags=re.M)
    assert count == 1
    return text


# -- the blocks agree with each other and with what preflight checks (no Slurm) ---------

def test_the_install_blocks_name_one_qos_one_grace_and_the_lines_preflight_needs():
    sacctmgr = variables(docs_block("sacctmgr"))
    assert set(sacctmgr) == {"CLUSTER", "ACCOUNT", "USERS", "QOS", "GRACE", "EXEMPT"}
    policy, skipped = parse_policy(docs_block("tiresias-policy.conf"))
    assert skipped == []
    settings = yaml.safe_load(docs_block("tiresias.yaml"))
    assert settings["preemption"] == "slurm"
    assert policy["preemptable_qos"] == settings["preempt_qos"] == sacctmgr["QOS"]
    assert policy["preemptable_qos_grace_s"] == sacctmgr["GRACE"]
    # a bare PreemptExemptTime is minutes: the block writes HH:MM:SS, and says it
    assert re.fullmatch(r"[0-9]{2}:[0-9]{2}:[0-9]{2}", sacctmgr["EXEMPT"])
    assert "PreemptExemptTime=\"$EXEMPT\"" in docs_block("sacctmgr") and "GraceTime=\"$GRACE\"" in docs_block("sacctmgr")
    # slurm.conf's block is everything preflight needs for the mechanism
    conf = dict(line.split("=", 1) for line in conf_lines(docs_block("slurm.conf")))
    assert slurm_preemption_findings(conf, {}) == []
    assert conf["AccountingStorageEnforce"] == "associations,qos"
    assert "systemctl restart slurmctld" in docs_block("restart")


def test_the_slurmdbd_conf_block_has_the_keys_the_test_hosts_slurmdbd_runs_with():
    """slurmdbd.conf and the database are not run by the real test (the default
    cluster's slurmdbd is shared): they are the harness's own, key for key."""
    harness = (ROOT / "containers" / "slurm-cluster.sh").read_text()
    made = re.search(r'write_if_changed "\$ETC/slurmdbd.conf" 600 slurm:slurm <<EOF \|\| true\n(.*?)\nEOF', harness, re.S)
    assert made is not None
    keys = {line.split("=", 1)[0] for line in made.group(1).splitlines()}
    assert {line.split("=", 1)[0] for line in conf_lines(docs_block("slurmdbd.conf"))} == keys
    assert "chown slurm:slurm /etc/slurm/slurmdbd.conf && chmod 600 /etc/slurm/slurmdbd.conf" in \
        docs_block("slurmdbd-start")
    for statement in ("CREATE DATABASE IF NOT EXISTS", "CREATE USER IF NOT EXISTS", "GRANT ALL ON"):
        assert statement in docs_block("database") and statement in harness


# -- on real Slurm ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(slurm_cluster, tmp_path_factory):
    """An instance whose accounting, associations and QOS are docs/admin.md's commands."""
    name = f"si{os.getpid()}"
    script = tmp_path_factory.mktemp("install") / "accounting.sh"
    script.write_text(with_variables(docs_block("sacctmgr"), CLUSTER=f"t{name}", GRACE=str(GRACE_S), EXEMPT=EXEMPT))
    extra = {"TIRESIAS_INSTANCE_ACCOUNTING": "1", "TIRESIAS_INSTANCE_CLI_FILTER": "1",
             "TIRESIAS_INSTANCE_ACCOUNTING_SETUP": str(script),
             "TIRESIAS_INSTANCE_CONF_EXTRA": ";".join(conf_lines(docs_block("slurm.conf")))}
    for instance in isolated_instance(name, keep=False, extra_env=extra):
        (Path(instance.conf).parent / "tiresias-policy.conf").write_text(site_policy())
        yield instance


def job_states(iso, ids) -> dict:
    jobs = iso.squeue()
    return {j: (jobs[j]["job_state"], jobs[j].get("qos"), jobs[j].get("restart_cnt"), jobs[j].get("priority"))
            for j in ids if j in jobs}


def priority(job: dict) -> int:
    value = job.get("priority")
    return value.get("number", 0) if isinstance(value, dict) else int(value or 0)


def start_controller(run):
    return run.start(**yaml.safe_load(docs_block("tiresias.yaml")))


def declared_jobs_in_queue_2(iso, run, work_s: int, min_run_s: float) -> list[str]:
    """bob's four declared 4-GPU jobs, one per node, running in the docs' QOS, demoted to
    queue 2 and older than ``min_run_s`` (PreemptExemptTime)."""
    qos = variables(docs_block("sacctmgr"))["QOS"]
    jobs = [iso.submit("bob", 4, work_s, f"ckpt{k}", extra=f"-w {iso.name}g{k + 1}")[0] for k in range(4)]
    wait_for(lambda: all(iso.squeue()[j]["job_state"] == "RUNNING" for j in jobs), 30, "bob's jobs to start",
             seen=lambda: job_states(iso, jobs))
    started = time.monotonic()
    assert {iso.squeue()[j]["qos"] for j in jobs} == {qos}, job_states(iso, jobs)  # tiresias-policy.conf
    wait_for(lambda: all(attained(run, j) > 40 for j in jobs), 60, "bob's jobs to reach queue 2")
    wait_for(lambda: all(2 * BAND - 1 <= priority(iso.squeue()[j]) < 2 * BAND - 1 + BAND // 2 for j in jobs),
             30, "the running jobs' priority to drop to queue 2's band", seen=lambda: job_states(iso, jobs))
    time.sleep(max(0.0, min_run_s - (time.monotonic() - started)))
    return jobs


def signal_times(out: str, name: str) -> list[float]:
    return [float(line.split()[2]) for line in out.splitlines() if line.startswith(f"got {name} ")]


@pytest.mark.slurm
def test_the_documented_install_makes_slurmctld_preempt_a_declared_job_for_a_higher_one(iso, run):
    qos = variables(docs_block("sacctmgr"))["QOS"]
    cluster_name = f"t{iso.name}"
    # the sacctmgr block made the rows: associations for alice and bob, with the QOS
    assoc = iso.run(["sacctmgr", "-n", "-P", "list", "assoc", f"cluster={cluster_name}", "format=user,account,qos"])
    rows = {r.split("|")[0]: r.split("|") for r in assoc.stdout.splitlines() if r.split("|")[0] not in ("", "root")}
    assert set(rows) == {"alice", "bob"}, assoc.stdout  # (root: the cluster's own row)
    assert all(r[1] == "gpu" and set(r[2].split(",")) == {"normal", qos} for r in rows.values()), assoc.stdout
    shown = iso.run(["sacctmgr", "-n", "-P", "show", "qos", qos, "format=preemptmode,gracetime,preemptexempttime"])
    assert shown.stdout.split() == [f"within,requeue|00:00:{GRACE_S}|{EXEMPT}"], shown.stdout
    config = iso.run(["scontrol", "show", "config"]).stdout
    assert re.search(r"^AccountingStorageEnforce\s*=\s*associations,qos$", config, re.M), config
    start_controller(run)  # enforce: its preflight passed
    proc = subprocess.run([sys.executable, "-m", "controller.cli.main", "preflight", "--config",
                           str(run.tmp / "tiresias.yaml")], capture_output=True, text=True, timeout=120,
                          env=iso.env, cwd=ROOT)
    assert proc.returncode == 0 and "preemption: slurm, from" in proc.stdout, proc.stdout + proc.stderr
    assert "tiresias-policy.conf" not in proc.stdout, proc.stdout  # the policy names the QOS, and its grace fits

    declared = declared_jobs_in_queue_2(iso, run, 600, 22)
    new, _ = iso.submit("alice", 4, 5, "new")
    wait_for(lambda: iso.squeue()[new]["job_state"] in ("RUNNING", "COMPLETED"), 90,
             "slurmctld to preempt a queue-2 job for alice's queue-1 job", interval_s=1,
             seen=lambda: (job_states(iso, [new] + declared), run.log_text()[-2000:]))
    jobs = iso.squeue()
    victims = [j for j in declared if int(jobs[j].get("restart_cnt") or 0) >= 1]
    assert len(victims) == 1, job_states(iso, [new] + declared)
    out = output_of(iso.show_jobs()[victims[0]]["WorkDir"], victims[0])
    usr1, term = signal_times(out, "USR1"), signal_times(out, "TERM")
    assert usr1 and term, out[-2000:]
    lag = term[0] - usr1[0] - GRACE_S  # from the grace's end to the requeue's TERM
    print(f"requeue lag after the grace: {lag:.2f} s (GraceTime {GRACE_S} s)")
    assert -1 <= lag <= 31, out[-2000:]  # the preemptor's next try, or the 30 s periodic pass
    assert not [d for d in run.decisions() if d["kind"] in ("signal", "requeue") and d["applied"]]


ENDED = ("COMPLETED", "TIMEOUT", "FAILED", "CANCELLED", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY")


def release(iso) -> tuple[int, int]:
    found = re.search(r"^SLURM_VERSION\s*=\s*([0-9]+)\.([0-9]+)", iso.run(["scontrol", "show", "config"]).stdout, re.M)
    assert found is not None
    return int(found.group(1)), int(found.group(2))


@pytest.mark.slurm
def test_what_slurmctld_records_of_a_victim_that_finishes_in_its_grace(iso, run):
    """bob's jobs have 35 s of work; alice's job comes when they have run 24 s, so the
    victim's last ~11 s fit in its 15 s grace. Before 24.05 slurmctld lets it end (the
    state it records is printed for the docs); from 24.05 it requeues it, and the rerun
    finds its checkpoint complete."""
    start_controller(run)
    declared = declared_jobs_in_queue_2(iso, run, 35, 24)
    new, _ = iso.submit("alice", 4, 5, "new")
    workdirs = {j: iso.show_jobs()[j]["WorkDir"] for j in declared}
    victims = wait_for(lambda: [j for j in declared if signal_times(output_of(workdirs[j], j), "USR1")], 60,
                       "slurmctld to signal a victim", seen=lambda: job_states(iso, [new] + declared))
    assert len(victims) == 1, victims
    victim = victims[0]
    wait_for(lambda: all(state in ENDED for state, *_ in job_states(iso, declared).values()), 150, "bob's jobs to end",
             seen=lambda: job_states(iso, [new] + declared))
    out = output_of(workdirs[victim], victim)
    starts = [line for line in out.splitlines() if line.startswith("start ")]
    ended = iso.run(["sacct", "-X", "-n", "-P", "-j", victim, "-o", "State,ExitCode"]).stdout.split()
    print(f"a victim that finished in its grace: sacct {ended}, {len(starts)} start(s), release {release(iso)}")
    assert signal_times(out, "USR1") and "done " in out, out[-2000:]
    if release(iso) < (24, 5):
        assert len(starts) == 1 and ended and ended[0].split("|")[0] in ("COMPLETED", "TIMEOUT"), (ended, out)
    else:
        assert len(starts) == 2 and ended[0].split("|")[0] == "COMPLETED", (ended, out)

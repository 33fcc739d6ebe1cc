"""``preemption: slurm`` made safe (issue 35, item 8): only whole-GPU jobs enter the
preempt QOS; the bands that must not cross keep the room preflight leaves Slurm's own
factors; the running jobs of the QOS are all banded; slurmctld's own requeues and young
runs protect a job as the controller's do; restore keeps running jobs above pending ones
while preempt/qos preempts; preflight names the default-QOS limits the swap would drop
and, before 25.05, what an undeclared job at the head of a partition does.

The cli_filter.lua cases run in a real Lua interpreter (tests/test_job_submit_lua.py's
fixture); the rest drives the real Controller against the scripted backend."""
from __future__ import annotations

from tests.test_checkpoint_grace import cli_filter_lines
from tests.test_job_submit_lua import lua  # noqa: F401  (fixture)

WHOLE_GPU_CASES = r"""
dofile(arg[1])
PREEMPTABLE_QOS = "ckpt"
PREEMPTABLE_QOS_GRACE_S = 600
local function qos(options)
  options.signal = options.signal or "B:USR1@60"
  options.requeue = options.requeue or "unset"
  return tostring(tiresias_preemptable_qos(options))
end
print(qos({}))                                   -- CPU-only
print(qos({ gres = "mps:50" }))                  -- MPS share
print(qos({ gres = "gres:mps:50" }))
print(qos({ gres = "gres/shard:2" }))            -- shards
print(qos({ gres = "gpu:0" }))
print(qos({ gpus = "0" }))
print(qos({ ["tres-per-task"] = "cpu=2" }))
print(qos({ gres = "gpu:2" }))
print(qos({ gres = "gres:gpu:a100:4" }))         -- 22.05's prefixed form
print(qos({ gres = "gres/gpu:a100:4" }))         -- 23.02+
print(qos({ gres = "gpu" }))                     -- one GPU
print(qos({ gres = "mps:50,gpu:1" }))
print(qos({ gpus = "a100:2" }))
print(qos({ ["gpus-per-node"] = "4" }))
print(qos({ ["gpus-per-task"] = "1" }))
print(qos({ ["gpus-per-socket"] = "v100:1" }))
print(qos({ ["tres-per-task"] = "cpu=2,gres/gpu=1" }))
"""


def test_cli_filter_puts_only_whole_gpu_jobs_in_the_preempt_qos(lua, tmp_path):
    """A CPU-only, MPS or shard job that declares --signal is not in the plan: in the QOS
    it could preempt a GPU job by a band that does not follow the plan (issue 35)."""
    assert cli_filter_lines(lua, tmp_path, WHOLE_GPU_CASES) == ["nil"] * 7 + ["ckpt"] * 10


# -- bands ---------------------------------------------------------------------------------
from dataclasses import replace  # noqa: E402

import pytest  # noqa: E402

from controller.core.levers.bands import (index_offset, kept_site_factor, no_cross_gap, running_site_factors,  # noqa: E402
                                   site_factors)
from tests.test_colocation_controller import mps_job  # noqa: E402
from tests.test_controller import ScriptedBackend, controller, store  # noqa: E402,F401  (fixture)
from tests.test_slurm_preemption_mechanism import QOS_ROW, sent_factors  # noqa: E402

BAND = 100000
KEPT = 4 * BAND - 1  # (K + 2) x band - 1, K = 2 queues
NODES = [(f"gpu{i}", 4) for i in range(1, 5)]


def cpu_job(backend, job_id, state="PENDING", qos="", gpus=0):
    backend.add(job_id, gpus, state, start=backend.now if state == "RUNNING" else None)
    backend.jobs[job_id] = replace(backend.jobs[job_id], qos=qos)


def test_a_pending_cpu_or_mps_job_never_outranks_a_running_gpu_job_under_slurm_preemption(store):
    """Queue 1's band for a pending CPU job was K x band, one above a running queue-2 GPU
    job's K x band - 1: slurmctld (WITHIN, same QOS) could requeue an 8-GPU job to start
    it. Now every pending CPU or MPS job that may preempt sits more than no_cross_gap
    below every running GPU band; one whose QOS preempts nobody keeps queue 1's band."""
    backend = ScriptedBackend()
    backend.add("gpu8", 8, "RUNNING", start=0.0, nodes=NODES[:2])
    backend.qos_config = lambda: QOS_ROW
    c = controller(store, backend, preemption="slurm")
    c.run_round()  # 8 GPUs x 1000 s: queue 2
    cpu_job(backend, "cpu")  # QOS not reported: may be preempt_qos
    cpu_job(backend, "cpu_ckpt", qos="tiresias_ckpt")
    cpu_job(backend, "cpu_normal", qos="normal")  # a QOS that preempts nobody
    mps_job(backend, "mps", 50)
    backend.now += 5
    c.run_round()
    sent = sent_factors(backend)
    running = sent["gpu8"]
    assert running == 2 * BAND - 1  # queue 2's running band, the lowest a running GPU job gets
    for job_id in ("cpu", "cpu_ckpt", "mps"):
        assert running - sent[job_id] >= no_cross_gap(BAND), (job_id, sent[job_id])
    assert sent["cpu_normal"] == 2 * BAND  # unchanged: it cannot preempt


def test_every_running_job_of_the_preempt_qos_is_banded(store):
    """A CPU-only or MPS job that asked for the QOS itself kept its pending band while it
    ran (or none): a pending GPU job of any queue could preempt it for nothing the plan
    wanted. Now it gets the band above every pending job; a job of another QOS none."""
    backend = ScriptedBackend()
    backend.qos_config = lambda: QOS_ROW
    cpu_job(backend, "cpu_ckpt", "RUNNING", qos="tiresias_ckpt")
    cpu_job(backend, "cpu_normal", "RUNNING", qos="normal")
    mps_job(backend, "mps_ckpt", 50, state="RUNNING", nodes=["gpu1"])
    backend.jobs["mps_ckpt"] = replace(backend.jobs["mps_ckpt"], qos="tiresias_ckpt")
    c = controller(store, backend, preemption="slurm")
    c.run_round()
    sent = sent_factors(backend)
    assert sent["cpu_ckpt"] == sent["mps_ckpt"] == KEPT == kept_site_factor(2, BAND)
    assert "cpu_normal" not in sent
    calls = len([call for call in backend.calls if call[0] == "set_site_factors"])
    backend.now += 5
    c.run_round()  # sent once: not again every round
    assert len([call for call in backend.calls if call[0] == "set_site_factors"]) == calls


@pytest.mark.parametrize("index", [1e-12, 1e-9, 1e-6, 1e-3, 0.5, 1.0, 1e3])
def test_a_dgittins_pending_job_stays_no_cross_gap_below_its_levels_running_jobs(index):
    """dgittins put a pending job at its band plus an index offset of up to band - 2: 22-44k
    below the level's running band on the issue's jobs, less than the half band Slurm's
    own factors may add. Under preemption: slurm the offset keeps to the lower half."""
    levels = {"run": 1, "new": 1, "up": 0}
    running = running_site_factors(levels, ["run"], queue_count=3, band=BAND)
    pending = site_factors(["new", "up"], levels, {"new", "up"}, set(), 3, BAND, indices={"new": index, "up": index},
                           running_banded=True)
    assert running["run"] - pending["new"] >= no_cross_gap(BAND)
    assert pending["up"] > running["run"]  # a level up still outranks it
    unbanded = site_factors(["new"], levels, {"new"}, set(), 3, BAND, indices={"new": index})
    assert unbanded["new"] == 2 * BAND + index_offset(index, BAND)  # preemption: controller: as before


def test_a_continuous_policys_pending_jobs_stay_below_the_running_band():
    running = running_site_factors({"run": 0}, ["run"], queue_count=1, band=BAND)
    pending = site_factors(["a", "b"], {}, {"a", "b"}, set(), 1, BAND, by_level=False, running_banded=True)
    assert min(running["run"] - v for v in pending.values()) >= no_cross_gap(BAND)
    assert pending["a"] > pending["b"]  # the plan's order kept


# -- slurmctld's requeues and young runs -------------------------------------------------------
def test_slurmctlds_own_requeues_and_young_runs_protect_a_job_as_the_controllers_do(store):
    """docs/admin.md promises preempt_max_per_job and preempt_min_runtime_s; slurmctld's
    requeues were not counted, so a job requeued 12 times, or 40 s old, stayed in queue
    2's running band, preemptable. Now Slurm's restart count counts, and such a job is
    banded above every pending job until the rule lets it go."""
    backend = ScriptedBackend()
    backend.qos_config = lambda: QOS_ROW
    backend.add("old", 4, "RUNNING", start=0.0, nodes=NODES[:1], restarts=12)
    backend.add("fine", 4, "RUNNING", start=0.0, nodes=NODES[1:2], restarts=2)
    backend.now = 1000.0
    backend.add("young", 4, "RUNNING", start=960.0, nodes=NODES[2:3], restarts=1)
    for job_id in ("old", "fine", "young"):
        backend.jobs[job_id] = replace(backend.jobs[job_id], qos="tiresias_ckpt")
    c = controller(store, backend, preemption="slurm", preempt_max_per_job=10, preempt_min_runtime_s=60)
    c.run_round()
    sent = sent_factors(backend)
    assert sent["old"] == sent["young"] == KEPT
    assert sent["fine"] == 2 * BAND - 1  # 4 GPUs x 1000 s: queue 2, slurmctld's to preempt
    backend.now += 30  # young has run 70 s: its band follows its queue again
    c.run_round()
    assert sent_factors(backend)["young"] < KEPT and sent_factors(backend)["old"] == KEPT


def test_the_plan_expects_slurmctld_to_preempt_no_job_it_has_requeued_preempt_max_per_job_times(store):
    """The plan's victims are what the controller expects of slurmctld (logged "left to
    slurmctld"): one whose restart count reached the cap is none of them."""
    backend = ScriptedBackend()
    backend.qos_config = lambda: QOS_ROW
    backend.add("old", 4, "RUNNING", start=0.0, nodes=NODES[:1], restarts=12)
    backend.add("other", 8, "RUNNING", start=0.0, nodes=NODES[1:3])
    backend.jobs["old"] = replace(backend.jobs["old"], qos="tiresias_ckpt")
    backend.jobs["other"] = replace(backend.jobs["other"], qos="normal")  # never slurmctld's
    c = controller(store, backend, preemption="slurm", preempt_max_per_job=10)
    backend.now = 1000.0
    c.run_round()
    backend.add("new", 8)
    report = c.run_round()
    assert not report.plan.of_kind("preempt"), report.plan.of_kind("preempt")


# -- restore ----------------------------------------------------------------------------------
PREEMPT_QOS_CONF = "PreemptType = preempt/qos\nPreemptMode = REQUEUE\n"


@pytest.mark.parametrize("conf, running_zeroed", [
    (PREEMPT_QOS_CONF, False),
    (PREEMPT_QOS_CONF.replace("REQUEUE", "OFF"), True),  # slurmctld preempts nobody: all back to 0
    ("PreemptType = preempt/none\nPreemptMode = OFF\n", True),
])
def test_restore_keeps_running_jobs_above_pending_ones_while_slurmctld_preempts_by_priority(store, conf,
                                                                                          running_zeroed):
    """restore zeroed the running jobs' bands while WITHIN stayed on: the pending jobs'
    age and fair-share then outranked them, a burst of preemptions. Now a running job
    keeps its band (and its row, for a later run) while preempt/qos preempts."""
    from controller.service.acting.restore import SITE_FACTOR, restore
    from tests.test_restore import LeverBackend

    backend = LeverBackend()
    backend.slurm_config = lambda: conf
    backend.add("run", 4, "RUNNING", start=0.0, nodes=NODES[:1])
    backend.add("wait", 4)
    backend.set_site_factors({"run": 2 * BAND - 1, "wait": 2 * BAND})
    store.record_levers("default", SITE_FACTOR, {"run": str(2 * BAND - 1), "wait": str(2 * BAND)}, 0.0)
    report = restore(backend, store, "default")
    assert backend.jobs["wait"].site_factor == 0
    if running_zeroed:
        assert backend.jobs["run"].site_factor == 0 and store.levers("default").get(SITE_FACTOR, {}) == {}
        return
    assert backend.jobs["run"].site_factor == 2 * BAND - 1
    kept = [c for c in report.changes if c.outcome == "kept"]
    assert [c.job_id for c in kept] == ["run"] and "PreemptType=preempt/none" in kept[0].detail
    assert list(store.levers("default")[SITE_FACTOR]) == ["run"]  # reset by a later run
    backend.jobs["run"] = replace(backend.jobs["run"], state="PENDING", start_time_s=None)  # requeued
    restore(backend, store, "default")
    assert backend.jobs["run"].site_factor == 0


# -- preflight: the limits the QOS swap drops; releases before 25.05 ------------------------------
from controller.service.ops.qos_limits import LIMITS  # noqa: E402


def limits_row(name, **values):
    """One line of `sacctmgr -n -P show qos format=name,<LIMITS>`."""
    return "|".join([name] + [values.get(limit, "1.000000" if limit == "UsageFactor" else "") for limit in LIMITS])


LIMITS_TEXT = "\n".join([
    limits_row("normal", MaxTRESPerUser="gres/gpu=8", MaxWall="2-00:00:00", UsageFactor="2.000000"),
    limits_row("tiresias_ckpt", MaxWall="2-00:00:00"),
    limits_row("long"),
]) + "\n"
DEFAULTS_TEXT = "normal\n\nlong\nnormal\n"  # `sacctmgr -n -P show association format=defaultqos`


def test_preflight_refuses_enforce_naming_the_default_qos_limits_the_swap_would_drop():
    """cli_filter.lua's --qos=<preempt_qos> replaces the association's default QOS: its
    MaxTRESPerUser, MaxWall and UsageFactor stopped applying to every declared job,
    and preflight passed. Now enforce refuses, naming each limit preempt_qos lacks."""
    from controller.service.ops.preflight import run_checks

    backend = ScriptedBackend()
    backend.slurm_config = lambda: PREEMPT_QOS_CONF + "PriorityType = priority/multifactor\nJobRequeue = 1\n"
    backend.qos_config = lambda: QOS_ROW
    backend.qos_limits = lambda: (LIMITS_TEXT, DEFAULTS_TEXT)
    found = {f.setting: f for f in run_checks(backend, BAND, 85, "slurm", "tiresias_ckpt")}
    lost = found["QOS normal limits"]
    assert lost.refuses and lost.value == "MaxTRESPerUser=gres/gpu=8 UsageFactor=2.000000"  # MaxWall is the same
    assert "default QOS of 3 association(s)" in lost.why  # two name it, one names none
    assert "sacctmgr -i modify qos tiresias_ckpt set MaxTRESPerUser=gres/gpu=8 UsageFactor=2.000000" in lost.needs
    assert "QOS long limits" not in found  # nothing to lose
    same = LIMITS_TEXT.replace(limits_row("tiresias_ckpt", MaxWall="2-00:00:00"),
                               limits_row("tiresias_ckpt", MaxTRESPerUser="gres/gpu=8", MaxWall="2-00:00:00",
                                          UsageFactor="2.000000"))
    backend.qos_limits = lambda: (same, DEFAULTS_TEXT)
    assert not any(f.setting.endswith(" limits") for f in run_checks(backend, BAND, 85, "slurm", "tiresias_ckpt"))


def test_tiresias_preflight_reads_the_qos_limits_from_files(tmp_path, capsys):
    """For a site whose controller host has no sacctmgr access: the saved outputs."""
    from controller.cli.main import main
    from tests.test_slurm_preemption_mechanism import QOS_ROWS, SLURM_PREEMPT_CONF

    conf, qos, limits, defaults, config = (tmp_path / n for n in ("c", "q", "l", "d", "t.yaml"))
    conf.write_text(SLURM_PREEMPT_CONF)
    qos.write_text(QOS_ROWS)
    limits.write_text(LIMITS_TEXT.replace("tiresias_ckpt", "tpreempt"))
    defaults.write_text(DEFAULTS_TEXT)
    config.write_text("preemption: slurm\npreempt_qos: tpreempt\n")
    argv = ["preflight", "--config", str(config), "--from-file", str(conf), "--qos-from-file", str(qos)]
    assert main(argv) == 0
    assert main(argv + ["--qos-limits-from-file", str(limits), "--default-qos-from-file", str(defaults)]) == 1
    assert "QOS normal limits=MaxTRESPerUser=gres/gpu=8 UsageFactor=2.000000: needs" in capsys.readouterr().out
    assert main(argv + ["--qos-limits-from-file", str(limits)]) == 1  # every association's default: normal
    assert "the default QOS of associations that name none" in capsys.readouterr().out


def test_preflight_says_what_an_undeclared_job_at_a_partitions_head_does_before_25_05():
    from tests.test_slurm_preemption_mechanism import SLURM_PREEMPT_CONF, findings

    old = findings(SLURM_PREEMPT_CONF + "SLURM_VERSION = 22.05.8\n")["SLURM_VERSION"]
    assert not old.refuses and "takes that partition's nodes out of slurmctld's main pass" in old.why
    assert "SLURM_VERSION" in findings(SLURM_PREEMPT_CONF + "SLURM_VERSION = 24.11.5\n")
    assert findings(SLURM_PREEMPT_CONF + "SLURM_VERSION = 25.05.0\n") == {}
    assert "SLURM_VERSION" not in findings(SLURM_PREEMPT_CONF + "SLURM_VERSION = 22.05.8\n", preemption="controller")


# -- on real Slurm (an isolated instance: accounting, preempt/qos, this checkout's cli_filter.lua) --
from tests.slurm_fixtures import instance_fixture, iso, run, wait_for  # noqa: E402,F401

cluster = instance_fixture("sp", extra_env={"TIRESIAS_INSTANCE_ACCOUNTING": "1", "TIRESIAS_INSTANCE_SLURM_PREEMPT": "1",
                                            "TIRESIAS_INSTANCE_CLI_FILTER": "1"})


def sbatch(iso, user: str, args: str) -> str:
    """sbatch ARGS as USER with the instance's slurm.conf (and so its cli_filter.lua)."""
    import shlex
    import subprocess

    workdir = iso.workdir(user)
    command = (f"cd {shlex.quote(workdir)} && SLURM_CONF={shlex.quote(iso.conf)} sbatch --parsable "
               f"--output=%j.out {args} --wrap='sleep 300'")
    proc = subprocess.run(["su", user, "-c", command], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";", 1)[0]


@pytest.mark.slurm
def test_cli_filter_leaves_cpu_and_mps_jobs_that_declare_a_signal_in_their_qos_on_real_slurm(iso, run):
    """sbatch's own options as the real cli_filter.lua sees them (22.05: --gres as given
    or prefixed "gres:"; --gpus as given): only the whole-GPU jobs enter tpreempt. A
    CPU job that asks for tpreempt itself runs banded above every pending job."""
    signal = "--signal=B:USR1@10 --requeue"
    ids = {
        "cpu": sbatch(iso, "bob", f"{signal} -c 1"),
        "mps": sbatch(iso, "bob", f"{signal} --gres=mps:50"),
        "gres": sbatch(iso, "bob", f"{signal} --gres=gpu:1"),
        "gpus": sbatch(iso, "bob", f"{signal} --gpus=1"),
        "cpu_own": sbatch(iso, "bob", f"{signal} -c 1 --qos=tpreempt"),
    }
    jobs = iso.squeue()
    qos = {name: jobs[job_id].get("qos") for name, job_id in ids.items()}
    assert qos == {"cpu": "normal", "mps": "normal", "gres": "tpreempt", "gpus": "tpreempt", "cpu_own": "tpreempt"}
    run.start(preemption="slurm", preempt_qos="tpreempt")
    kept = 4 * BAND - 1  # (K + 2) x band - 1 with the harness's two queues

    def priority(job_id):
        value = iso.squeue()[job_id].get("priority")
        return value.get("number", 0) if isinstance(value, dict) else int(value or 0)

    wait_for(lambda: iso.squeue()[ids["cpu_own"]]["job_state"] == "RUNNING" and priority(ids["cpu_own"]) >= kept,
             60, "the running CPU job of tpreempt to be banded above every pending job",
             seen=lambda: {name: (iso.squeue()[j]["job_state"], priority(j)) for name, j in ids.items()})
    assert priority(ids["cpu"]) < kept  # in normal: slurmctld never preempts it, no band needed


@pytest.mark.slurm
def test_the_qos_limits_are_read_from_real_sacctmgr(iso):
    """The format names sacctmgr takes (every LIMITS field comes back) and the
    associations' default QOS."""
    from controller.service.ops.qos_limits import parse_default_qos
    from slurm_plugin.commands import DEFAULT_QOS_COMMAND, QOS_LIMITS_COMMAND

    text = iso.run(QOS_LIMITS_COMMAND).stdout
    rows = [line.split("|") for line in text.splitlines() if line.strip()]
    assert rows and all(len(row) == len(LIMITS) + 1 for row in rows), text
    assert {"normal", "tpreempt"} <= {row[0] for row in rows}
    assert "normal" in parse_default_qos(iso.run(DEFAULT_QOS_COMMAND).stdout)

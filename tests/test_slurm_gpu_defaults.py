"""The GPU defaults most sites set, on real Slurm (issue 35, done-when): a site-shaped
instance (TIRESIAS_INSTANCE_SITE=1: NAMEg[1-2] gpu:v100:4, NAMEg[3-4] gpu:a100:4, 8
CPUs and 16000 MB each; partitions batch = all four, urgent = g3-g4) with
CR_Core_Memory, DefCpuPerGPU=2 and DefMemPerGPU=1000. Slurm writes the defaults into
every GPU job it tests as ``cpus_per_tres: "gpu:2"`` (no ``gres/``), which the
controller once read as "CPUs it cannot express": it never preempted again.

* a queue-1 job of urgent, whose only nodes run queue-2 jobs, makes exactly one of
  them yield within two of the controller's rounds, and starts;
* jobs that one victim cannot make room for (their CPUs by DefCpuPerGPU, or their
  memory: Slurm needs DefMemPerGPU x GPUs free even beside a smaller --mem,
  tests/fixtures/slurm/*/request_forms_memory.txt) cost nobody a preemption; a control
  that fits gets one.
"""
from __future__ import annotations

import pytest
from sqlalchemy import select

from controller.service.state.clusters import round_counters
from controller.service.state.store import Store
from tests.slurm_fixtures import attained, instance_fixture, iso, run, wait_for  # noqa: F401  (pytest fixtures)
from tests.test_slurm_resources import applied_preemptions, control_preempts_one, preempts_nobody, running

pytestmark = pytest.mark.slurm

CONF_EXTRA = "SelectTypeParameters=CR_Core_Memory; DefCpuPerGPU=2; DefMemPerGPU=1000"
cluster = instance_fixture("gd", extra_env={"TIRESIAS_INSTANCE_SITE": "1", "TIRESIAS_INSTANCE_CONF_EXTRA": CONF_EXTRA})


def last_round(run) -> int:
    """The controller's last round id (0 before its first)."""
    with Store(run.url) as store, store._tx() as conn:
        row = conn.execute(select(round_counters.c.last_round_id)
                           .where(round_counters.c.cluster == run.instance.name)).first()
    return row[0] if row else 0


def test_the_site_defaults_are_in_force(iso):
    conf = iso.run(["scontrol", "show", "config"]).stdout
    assert "DefCpuPerGPU=2,DefMemPerGPU=1000" in conf and "CR_CORE_MEMORY" in conf.upper(), conf[:3000]


@pytest.mark.parametrize("placement", ["consolidate", "count"])
def test_a_queue_1_job_whose_partition_runs_queue_2_jobs_gets_its_victim(iso, run, placement):
    """The same under `placement: count`, whose victims are chosen on the newcomer's own
    nodes too (a v100 job was once requeued for an a100-partition job that stayed pending)."""
    run.start(preempt_grace_s=3.0, placement=placement)
    # 4 GPUs: 8 CPUs (all of a node) and 4000 MB by the defaults
    victims = [iso.submit("bob", 4, 600, f"gpu{k}", extra=f"-w {iso.name}g{k}")[0] for k in range(1, 5)]
    wait_for(lambda: running(iso, victims), 30, "bob's 4-GPU jobs to start")
    assert all(iso.squeue()[j]["cpus_per_tres"] in ("gpu:2", "gres:gpu:2", "gres/gpu:2") for j in victims)
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 60, "bob's jobs to reach queue 2")
    job, _ = iso.submit("alice", 4, 5, "urgent", extra="-p urgent --time=10")
    # the round that first saw it judged by Slurm (a reason other than None: until then the
    # controller preempts for nobody, startable.py), or a later one if a round ended since;
    # Slurm takes a pass or two after the submission, longer than this test's 1 s rounds
    wait_for(lambda: iso.squeue()[job]["state_reason"] not in ("None", ""), 30, "Slurm to judge alice's job",
             interval_s=0.1)
    wait_for(lambda: run.record(job) is not None, 20, "the controller to see alice's job", interval_s=0.1)
    seen_round = last_round(run)
    on_urgent = victims[2:]  # on g3 and g4
    done = control_preempts_one(iso, run, job, on_urgent)
    (decision,) = [d for d in run.decisions() if d["kind"] == "preempt" and d["applied"]]
    assert decision["job_id"] == done[0]
    assert decision["round_id"] <= seen_round + 1, (seen_round, decision)  # that round or the next


def test_jobs_no_victim_makes_room_for_preempt_nobody(iso, run):
    run.start(preempt_grace_s=3.0)
    # g3 and g4: a 1-GPU job outside the contract with 4 CPUs and 14200 MB, and a
    # checkpointable 1-GPU job (2 CPUs, 1000 MB by the defaults). One victim leaving
    # leaves 3 GPUs, 4 CPUs and 1800 MB free there.
    kept = [iso.submit("bob", 1, 600, f"kept{k}", extra=f"--no-requeue -c 4 --mem=14200 -w {iso.name}g{k}")[0]
            for k in (3, 4)]
    wait_for(lambda: running(iso, kept), 30, "bob's kept jobs to start")
    victims = [iso.submit("bob", 1, 600, f"gpu{k}", extra=f"-w {iso.name}g{k}")[0] for k in (3, 4)]
    wait_for(lambda: running(iso, victims), 30, "bob's 1-GPU jobs to start")
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 90, "bob's jobs to reach queue 2")
    # 3 GPUs: 6 CPUs by DefCpuPerGPU, more than the 4 one victim leaves
    cpu_bound, _ = iso.submit("alice", 3, 5, "cpus", extra="-p urgent --mem-per-gpu=500")
    # 2 GPUs and --mem=1000: Slurm needs 2 x DefMemPerGPU = 2000 MB free, more than 1800
    mem_bound, _ = iso.submit("alice", 2, 5, "mem", extra="-p urgent --mem=1000")
    preempts_nobody(iso, run, victims, [cpu_bound, mem_bound])
    # Control: 1 GPU and --mem=500 needs DefMemPerGPU = 1000 MB (800 free now, 1800 once
    # one victim leaves) and 2 CPUs: exactly one yields.
    control, _ = iso.submit("alice", 1, 5, "control", extra="-p urgent --mem=500 --time=10")
    control_preempts_one(iso, run, control, victims)

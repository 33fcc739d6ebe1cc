"""Two GPU types in one request on real Slurm (issue 28, item 2): a job asking for
``--gres=gpu:a100:2,gpu:v100:2`` can run only on a node with both types. The instance is
site-shaped (TIRESIAS_INSTANCE_SITE=1: g1-g2 gpu:v100:4, g3 gpu:a100:4) with
TIRESIAS_INSTANCE_MIXED_NODE=1: g4 has gpu:a100:2,gpu:v100:2 (Slurm refuses such a
request at submit on a cluster where no node has both). A job outside the contract
keeps one of g4's v100s, so no preemption lets the two-type job start: it costs nobody
a preemption (read as four a100s it would preempt g3's job), while an a100 job does.
"""
from __future__ import annotations

import pytest

from tests.slurm_fixtures import attained, instance_fixture, iso, run, wait_for  # noqa: F401  (pytest fixtures)
from tests.test_slurm_resources import control_preempts_one, preempts_nobody, running

pytestmark = pytest.mark.slurm

cluster = instance_fixture("tt", extra_env={"TIRESIAS_INSTANCE_SITE": "1", "TIRESIAS_INSTANCE_MIXED_NODE": "1"})


def test_a_two_type_job_no_preemption_lets_start_preempts_nobody(iso, run):
    g = iso.name + "g"
    gres = iso.run(["sinfo", "-h", "-N", "-n", f"{g}4", "-o", "%G"]).stdout
    assert "a100:2" in gres and "v100:2" in gres, gres  # containers/slurm-cluster.sh site_node_gres
    run.start(preempt_grace_s=3.0)
    kept, _ = iso.submit("bob", 1, 600, "kept", gpu_type="v100", extra=f"--no-requeue -w {g}4")
    wait_for(lambda: running(iso, [kept]), 30, "bob's kept v100 job to start")
    victims = [iso.submit("bob", 4, 600, "a100", gpu_type="a100", extra=f"-w {g}3")[0],
               iso.submit("bob", 3, 600, "g4", extra=f"-w {g}4")[0],
               *(iso.submit("bob", 4, 600, f"v100{k}", gpu_type="v100", extra=f"-w {g}{k}")[0] for k in (1, 2))]
    wait_for(lambda: running(iso, victims), 30, "bob's jobs to start")
    wait_for(lambda: all(attained(run, j) > 40 for j in victims), 60, "bob's jobs to reach queue 2")
    # both types on one node: only g4, where the kept job holds one of the two v100s
    both, _ = iso.submit("alice", 4, 5, "both", extra="--gres=gpu:a100:2,gpu:v100:2")
    preempts_nobody(iso, run, victims, [both])
    # Control: two a100s fit where g3's job leaves (the mixed node's type is not one type)
    control, _ = iso.submit("alice", 2, 5, "control", gpu_type="a100", extra="--time=10")
    assert control_preempts_one(iso, run, control, victims) == [victims[0]], run.decisions()

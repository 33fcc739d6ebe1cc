"""Slurm's RPC budget in the controller's round, against the scripted slurmctld
(bench.scripted_slurm: the real backend, parser, store): a submit burst's bands go a
budget's worth a round, in commands that fit command_timeout_s, what waits is a
metric, and every band is set in the rounds the budget allows."""
from __future__ import annotations

import pytest

from bench.scripted_slurm import ScriptedSlurm, VirtualTime
from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.ops.metrics import Metrics
from controller.service.state.store import Store
from slurm_plugin.backend import SlurmBackend

T0 = 1_000_000


def burst(tmp_path, jobs: int, admin_comment: bool = False, **settings):
    slurm = ScriptedSlurm(pending=0, running=0, nodes=2, gpus_per_node=8, now=T0)
    clock = VirtualTime(float(T0))
    config = from_mapping({"mode": "enforce", "policy": "dlas", "queues_gpu_s": [3600.0],
                           "admin_comment": admin_comment, "usage_spool_dir": str(tmp_path / "none"), **settings})
    store = Store(f"sqlite:///{tmp_path}/budget.db")
    metrics = Metrics(mode="enforce")
    controller = Controller(config, SlurmBackend(runner=slurm, clock=clock), store, clock=clock, metrics=metrics)
    for job_id in range(1, jobs + 1):
        slurm.submit(job_id, 8)  # the first two fill the GPUs: the others wait
    return slurm, clock, controller, metrics, store


def waiting(metrics: Metrics, lever: str) -> float:
    return metrics.registry.get_sample_value("tiresias_slurm_updates_waiting", {"mode": "enforce", "lever": lever})


@pytest.mark.parametrize("admin_comment", [False, True])
def test_a_burst_goes_a_budget_a_round_in_commands_that_fit_the_time_out(tmp_path, admin_comment):
    # with the AdminComment lines on, they get what the bands leave, and the bands held
    # back keep every round planned (their settling once zeroed the count: rounds went
    # quiet and the bands went only with the full observation every minute)
    slurm, clock, controller, metrics, store = burst(tmp_path, 200, admin_comment)
    with store:
        sent = []
        for k in range(12):
            clock.now_s = float(T0 + 10 * k)
            slurm.advance(T0 + 10 * k)
            before = len(slurm.ids_per_update)
            controller.run_round(controller.observe(controller.backend.poll()))
            slurm.schedule()
            sent.append(sum(slurm.ids_per_update[before:]))
            if k == 0:
                assert sent[0] == 20  # slurm_rpc_burst
                assert waiting(metrics, "band") == 200 - 20  # all 200 pending (Slurm starts 2 after)
        # every command names at most command_timeout_s x RL_IDS_PER_S ids: 15
        assert max(slurm.ids_per_update) == 15
        assert sent[1:] == [10] * 11  # slurm_rpc_per_s 1 over 10 s rounds
        unbanded = sum(1 for j, r in slurm.jobs.items() if r["job_state"] == "PENDING" and j not in slurm.site_factors)
        assert waiting(metrics, "band") == unbanded > 0


def test_without_a_budget_one_round_sends_every_band_but_no_command_outlives_its_time_out(tmp_path):
    slurm, clock, controller, metrics, store = burst(tmp_path, 200, slurm_rpc_per_s=0.0)
    with store:
        controller.run_round(controller.observe(controller.backend.poll()))
        assert sum(slurm.ids_per_update) == 200  # every job pending in that round
        assert max(slurm.ids_per_update) == 15
        assert waiting(metrics, "band") == 0

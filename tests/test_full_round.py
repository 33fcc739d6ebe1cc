"""A round reuses what did not change since the last one (parsed records, jobs, plan
inputs, AdminComment checks); a full round (full_round_every_s) reads and builds
everything anew. Rounds recorded against the scripted slurmctld of
bench/scripted_slurm.py: a controller that reuses and one whose every round is full
decide the same, round after round, while jobs end, arrive, start, cross their
queue's threshold and are preempted. The real controller, Slurm backend and store."""
import logging
from dataclasses import replace

import pytest

from bench.scripted_slurm import ScriptedSlurm, VirtualTime
from controller.service.ops.config import from_mapping
from controller.service.round.daemon import Controller
from controller.service.state.store import Store
from slurm_plugin.backend import SlurmBackend

ROUNDS = 24


def record_rounds(tmp_path, name: str, full_round_every_s: float) -> tuple[list, list]:
    """(per round: its decisions and the levers it pulled, as text), and per round the
    backend's record-cache misses (jobs parsed anew)."""
    slurm = ScriptedSlurm(pending=40, running=16, nodes=8, seed=7)
    clock = VirtualTime(float(slurm.now))
    store = Store(f"sqlite:///{tmp_path}/{name}.db")
    config = from_mapping({"mode": "enforce", "policy": "dlas", "queues_gpu_s": [1800.0, 18000.0],
                           "full_round_every_s": full_round_every_s, "full_observe_s": 0.0,
                           "usage_spool_dir": f"{tmp_path}/none-{name}", "slurm_rpc_per_s": 0.0})
    backend = SlurmBackend(runner=slurm, clock=clock)
    controller = Controller(config, backend, store, clock=clock)
    rounds, parsed = [], []
    next_id = 1000
    try:
        for number in range(ROUNDS):
            clock.now_s += 45.0
            slurm.advance(int(clock.now_s))  # Slurm's clock with ours; requeues whose grace is over
            if number % 3 == 1:
                slurm.finish_one()
            if number % 4 == 2:  # arrivals: a large one that preempts, and a small one
                slurm.submit(next_id, 8)
                slurm.submit(next_id + 1, 1, requeue=False)
                next_id += 2
            slurm.schedule()
            report = controller.run_round(controller.observe(backend.poll()))
            rounds.append([repr(entry) for entry in report.applied] + [repr(lever) for lever in report.levers or ()])
            parsed.append(len(backend._squeue_records.fresh))
    finally:
        store.close()
    return rounds, parsed


def test_incremental_rounds_decide_as_full_rounds(tmp_path):
    incremental, parsed_incremental = record_rounds(tmp_path, "incremental", 0.0)  # never a full round
    full, parsed_full = record_rounds(tmp_path, "full", 1.0)  # every round full
    # the recorded rounds did something worth comparing: starts, bands, preemptions
    assert sum(len(r) for r in incremental) > ROUNDS
    assert any("Preempt" in line or "Signal" in line for r in incremental for line in r)
    for number, (a, b) in enumerate(zip(incremental, full)):
        assert a == b, f"round {number}: the incremental round decided otherwise than the full one"
    # and the two really differ in what they rebuilt: the full rounds parsed every record
    assert sum(parsed_full[2:]) > 5 * sum(parsed_incremental[2:])


def test_a_full_round_reports_a_reused_input_that_differs(tmp_path, caplog):
    """A plan input the incremental rounds reused but that differs from the one built
    again (here: spoiled by hand, as a cache keyed on too little would leave it) is
    logged and counted by the next full round, which plans from the new one."""
    slurm = ScriptedSlurm(pending=10, running=4, nodes=4, seed=2)
    clock = VirtualTime(float(slurm.now))
    store = Store(f"sqlite:///{tmp_path}/t.db")
    config = from_mapping({"mode": "enforce", "policy": "dlas", "full_round_every_s": 600.0,
                           "full_observe_s": 0.0, "usage_spool_dir": f"{tmp_path}/none"})
    backend = SlurmBackend(runner=slurm, clock=clock)
    controller = Controller(config, backend, store, clock=clock)
    try:
        controller.run_round(controller.observe(backend.poll()))
        clock.now_s += 60.0
        controller.run_round(controller.observe(backend.poll()))
        job_id, (job, key, spec) = next(iter(controller.inputs.specs.items()))
        spoiled = replace(spec, num_gpus=spec.num_gpus + 1)
        controller.inputs.specs[job_id] = (job, key, spoiled)
        clock.now_s += 60.0  # not yet a full round: the spoiled input is reused
        controller.run_round(controller.observe(backend.poll()))
        assert controller.inputs.spec_of(job_id) is spoiled
        clock.now_s += 600.0
        with caplog.at_level(logging.ERROR):
            controller.run_round(controller.observe(backend.poll()))
        assert controller.inputs.spec_of(job_id) == spec  # planned from the one built again
        assert any("full round: 1 job(s)" in r.getMessage() and job_id in r.getMessage() for r in caplog.records)
    finally:
        store.close()

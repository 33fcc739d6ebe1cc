"""The lever replay against the controller: the same workload through
controller.replay.lever_replay and through Controller on the scripted slurmctld
(bench.scripted_slurm: the real backend, parser, store), compared round by round.
tests/test_lever_parity.py uses these two runners; run as a script, this scans
seeded workloads per policy and prints how many agree in every round.

    python bench/lever_parity.py [--seeds N] [--jobs N]
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scripted_slurm import ScriptedSlurm, VirtualTime  # noqa: E402
from controller.core.levers.table import SETTINGS as TABLE_SETTINGS, action_row
from controller.core.model import JobSpec  # noqa: E402
from controller.partitions.moves import MoveSettings, plan_moves  # noqa: E402
from controller.replay.run_config import SimConfig  # noqa: E402
from controller.replay.lever_replay import LeverSettings, replay_levers  # noqa: E402
from controller.service.ops.config import from_mapping  # noqa: E402
from controller.service.round.daemon import Controller  # noqa: E402
from controller.service.state.store import Store  # noqa: E402
from slurm_plugin.backend import SlurmBackend  # noqa: E402

T0 = 1_000_020  # a multiple of the interval: the simulator's grid
INTERVAL = 60
NODES, GPUS_PER_NODE = 4, 4
# (job id, submitted at round, GPUs, rounds of work, checkpointable, skew)
WORKLOAD = [
    (1, 0, 4, 40, True, 0.0),
    (2, 0, 4, 36, True, 0.0),
    (3, 0, 4, 30, False, 0.0),  # --no-requeue: never a victim
    (4, 0, 2, 30, True, 0.0),
    (5, 0, 2, 25, True, 0.0),
    (6, 1, 2, 12, True, 0.0),  # waits for the first GPUs
    (7, 18, 4, 6, True, 0.9),  # consolidation-sensitive: pinned where the plan put it
    (8, 18, 1, 3, False, 0.0),
    (9, 19, 2, 4, True, 0.0),
    (10, 22, 1, 5, True, 0.0),
    (11, 24, 4, 8, True, 0.7),
    (12, 30, 2, 6, True, 0.0),
]
SETTINGS = {"mode": "enforce", "policy": "dlas", "queues_gpu_s": [3600.0], "interval_s": float(INTERVAL),
            "preempt_grace_s": 30.0, "preempt_min_runtime_s": 60.0, "requeue_settle_s": 0.0,
            "pin_expiry_s": 300.0, "placement": "consolidate", "pack_limit": 0.5, "admin_comment": False}


@dataclasses.dataclass(frozen=True)
class Pulls:
    """A workload and the settings (changes to SETTINGS) under which the controller pulls
    a lever kind; ``node_kinds`` as ``simulated`` takes them."""

    workload: tuple = tuple(WORKLOAD)
    settings: dict = dataclasses.field(default_factory=dict)
    node_kinds: tuple = ()
    mps_jobs: tuple = ()  # MPS-only jobs: (job id, submitted at round, shares, user, comment)


# kind -> a workload and settings that pull it (tests/test_lever_parity.py asserts, for each
# kind of controller.core.levers.table.LEVERS and SetBand, under each preemption mechanism,
# that the simulator and the controller pull the same rows of it in the same rounds); a new
# lever needs a row here
PULLS: dict[str, Pulls] = {
    "band": Pulls(),
    "pin": Pulls(),
    "unpin": Pulls(settings={"pin_expiry_s": 60.0}),
    "release": Pulls(),
    "signal": Pulls(),
    "requeue": Pulls(),
    "admin_comment": Pulls(settings={"admin_comment": True}),
    "nice": Pulls(settings={"nice_last_queue": 100}),
    # an MPS job (mps:30, not a tier: the default tier 25) submitted while every GPU is free:
    # its share set at round 1, held from round 2 (the GPU jobs took every GPU), released
    # once a GPU is free again; neither slurmctld ever starts it
    **{kind: Pulls(settings={"gpu_sharing": True}, mps_jobs=((40, 0, 30, "carol", ""),))
       for kind in ("share", "hold", "release_hold")},
    # two partitions of two nodes: left busy for long (not checkpointable), right free at
    # round 3; job 4, submitted to left,right while both are full, is narrowed to left
    # after its first round (as a job_submit plugin would) and moved to right
    "move": Pulls(workload=((1, 0, 4, 40, False, 0.0, "left"), (2, 0, 4, 40, False, 0.0, "left"),
                            (3, 0, 8, 3, False, 0.0, "right"), (4, 1, 4, 6, True, 0.0, "left,right", "left")),
                  settings={"partition_moves": True}, node_kinds=((2, ("left",), ""), (2, ("right",), ""))),
}


def partition_of(job: tuple) -> str:
    """A workload row's partition: its seventh field, if any, else "batch"."""
    return job[6] if len(job) > 6 else "batch"


def narrowed_of(workload) -> dict[str, str]:
    """job id -> the partition field a row's job is left in after its first round, if
    still pending (its eighth field: a job_submit plugin's narrowing; its allowed set
    stays the seventh)."""
    return {str(job[0]): job[7] for job in workload if len(job) > 7}


def moves_planner(config):
    """controller.partitions.moves.plan_moves with the config's settings bound, as the lever
    replay calls it (controller.core.levers.moves.planned_moves)."""
    settings = MoveSettings(config.partition_allocator, config.partition_move_min_gain_s,
                            config.partition_move_cooldown_s, config.partition_duration_estimate_s)
    return lambda now, members, nodes, pending, running, cooldowns: plan_moves(now, members, nodes, pending, running,
                                                                             settings, cooldowns)


def simulated(workload=WORKLOAD, settings=SETTINGS, node_kinds=(), mps_jobs=()) -> list[list[tuple]]:
    """``node_kinds``: SimConfig's (count, (partition,), "") rows, nodes numbered in
    their order, as ``controlled`` gives them to the scripted slurmctld (default: one
    partition, "batch"); a workload row may then name its partition (seventh field).
    ``mps_jobs``: Pulls.mps_jobs' MPS-only jobs (listed pending, never started)."""
    config = from_mapping(dict(settings, usage_spool_dir="/nonexistent"))
    # a job larger than a node is -N gpus/GPUS_PER_NODE on Slurm: min = max nodes; one of
    # at most a node is --gres=gpu:K, which Slurm places on one node (max 1)
    specs = [JobSpec(str(job[0]), job[2], float(T0 + job[1] * INTERVAL), float(job[3] * INTERVAL), skew=job[5],
                     partition=partition_of(job), user="bob", preemptable=job[4],
                     **({"partitions": tuple(partition_of(job).split(","))} if node_kinds else {}),
                     **({"min_nodes": job[2] // GPUS_PER_NODE, "max_nodes": job[2] // GPUS_PER_NODE}
                        if job[2] > GPUS_PER_NODE else {"max_nodes": 1}))
             for job in workload]
    sim = SimConfig(nodes=NODES, gpus_per_node=GPUS_PER_NODE, engine=config.engine_config(),
                    round_interval_s=float(INTERVAL), preempt_grace_s=config.preempt_grace_s, node_kinds=node_kinds)
    lever_settings = LeverSettings(config.site_factor_band, config.pin_expiry_s, config.requeue_settle_s,
                                     config.handoff_timeout_s, "USR1", True, config.slurm_rpc_per_s,
                                     config.slurm_rpc_burst, config.preemption, config.admin_comment,
                                     config.admin_comment_refresh_s, config.admin_comment_max_per_round,
                                     config.preempt_min_runtime_s, config.preempt_max_per_job,
                                     {key: getattr(config, key) for key in TABLE_SETTINGS},
                                     plan_moves=moves_planner(config) if config.partition_moves else None,
                                     partition_move_cooldown_s=config.partition_move_cooldown_s,
                                     sharing_policy=config.colocation_policy() if config.gpu_sharing else None,
                                     mps_jobs=tuple((str(job_id), float(T0 + at * INTERVAL), shares, user, comment)
                                                    for job_id, at, shares, user, comment in mps_jobs))
    out = replay_levers(sim, specs, lever_settings, start_s=float(T0), narrowed=narrowed_of(workload))
    return [[action_row(a) for a in levers] + [("", "start", j, nodes, "") for j, nodes in starts]
            for levers, starts in zip(out.levers, out.starts)]


def controlled(rounds: int, tmp_path, workload=WORKLOAD, settings=SETTINGS, through_poll: bool = False,
               quiet_rounds: Optional[list] = None, node_kinds=(), mps_jobs=()) -> list[list[tuple]]:
    """The controller's levers and Slurm's starts per round. ``through_poll``: each
    round observes as run_forever does (the light poll, then Controller.observe: the
    last full observation again while nothing changed), so the rounds that observe
    nothing new and whose plan stands are quiet (not planned again); their numbers
    are appended to ``quiet_rounds``."""
    config = from_mapping(dict(settings, usage_spool_dir=str(tmp_path / "none")))
    # its QOS table: preempt_qos with the replay's grace as GraceTime
    slurm = ScriptedSlurm(pending=0, running=0, nodes=NODES, gpus_per_node=GPUS_PER_NODE,
                          preempt_qos=config.preempt_qos, grace_s=int(config.preempt_grace_s))
    slurm.preempts = config.preemption == "slurm"  # PreemptType=preempt/qos
    names = iter(sorted(slurm.nodes))
    slurm.node_partitions = {next(names): partitions[0] for count, partitions, _ in node_kinds for _ in range(count)}
    clock = VirtualTime(float(T0))
    out = []
    with Store(f"sqlite:///{tmp_path}/parity.db") as store:
        controller = Controller(config, SlurmBackend(runner=slurm, clock=clock), store, clock=clock)
        backend = controller.backend
        for k in range(rounds):
            now = T0 + k * INTERVAL
            clock.now_s = float(now)
            slurm.advance(now)
            for job in workload:
                job_id, at, gpus, work, ckpt, skew = job[:6]
                if at == k:
                    slurm.submit(job_id, gpus, work_s=work * INTERVAL, requeue=ckpt,
                                 comment=f"tiresias:skew={skew}" if skew else "", partition=partition_of(job))
            for job_id, at, shares, user, comment in mps_jobs:
                if at == k:
                    slurm.submit_mps(job_id, shares, user=user, comment=comment)
            if through_poll:
                observation = controller.observe(backend.poll())
                observation.observed_at_s = float(now)  # the same object: observe() knows it repeated
            else:
                observation = dataclasses.replace(backend.observe(), observed_at_s=float(now))
            report = controller.run_round(observation)
            if report.skipped_reason and quiet_rounds is not None:
                quiet_rounds.append(k + 1)
            starts = slurm.schedule()
            for job in workload:  # narrowed after its first round, if still pending
                if job[1] == k and len(job) > 7 and slurm.jobs[job[0]]["job_state"] == "PENDING":
                    slurm.jobs[job[0]]["partition"] = job[7]
            out.append([action_row(a) for a in report.levers]
                       + [("", "start", str(j), nodes, "") for j, nodes in starts])
    return out


SIZES = (1, 1, 2, 2, 4)
WITH_TWO_NODES = SIZES + (8,)  # 8 GPUs: two whole 4-GPU nodes


def seeded(seed: int, jobs: int, sizes: tuple[int, ...] = SIZES) -> list[tuple]:
    """A seeded workload in WORKLOAD's shape: ``sizes`` (GPUs, drawn evenly), 70%
    checkpointable, one in five skewed (consolidation-sensitive), arrivals over the
    first 20 rounds."""
    rng = random.Random(seed)
    return [(j, rng.randint(0, 20), rng.choice(sizes), rng.randint(2, 30), rng.random() < 0.7,
             0.8 if rng.random() < 0.2 else 0.0) for j in range(1, jobs + 1)]


def first_difference(workload, settings) -> tuple[int, int]:
    """(rounds, the first round that differs or 0)."""
    sim = simulated(workload=workload, settings=settings)
    with tempfile.TemporaryDirectory() as tmp:
        real = controlled(len(sim), Path(tmp), workload=workload, settings=settings)
    return len(sim), next((i for i, (a, b) in enumerate(zip(sim, real), 1) if a != b), 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=24)
    args = parser.parse_args()
    variants = {"test settings": {},
                "K=3, grace 90 s, settle 60 s, min run 300 s": {
                    "queues_gpu_s": [1800.0, 7200.0], "preempt_grace_s": 90.0, "requeue_settle_s": 60.0,
                    "preempt_min_runtime_s": 300.0, "handoff_timeout_s": 180.0}}
    for name, changes in variants.items():
        sizes = WITH_TWO_NODES if changes else SIZES
        print(f"{name}: {args.seeds} seeded workloads of {args.jobs} jobs of {','.join(map(str, sorted(set(sizes))))}"
              f" GPUs on {NODES}x{GPUS_PER_NODE} GPUs")
        for policy in ("dlas", "las", "fifo", "dgittins"):
            started = time.perf_counter()
            results = [first_difference(seeded(seed, args.jobs, sizes), dict(SETTINGS, policy=policy, **changes))
                       for seed in range(args.seeds)]
            agree = sum(1 for _, diff in results if not diff)
            rounds = sum(n for n, _ in results)
            note = ("  (the lever replay learns no service distribution; the controller learns one "
                    "from its store)" if policy == "dgittins" and agree < len(results) else "")
            print(f"  {policy:9s} {agree}/{len(results)} agree in every round "
                  f"({rounds} rounds, {time.perf_counter() - started:.1f} s){note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

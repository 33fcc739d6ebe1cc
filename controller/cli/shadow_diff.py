"""What enforce mode would change now, against Slurm's own order: the pending GPU jobs
that would move (their rank in Slurm's priority order from ``sprio`` -> their rank in
the controller's plan), the preemptions it would make and the jobs it would start.

Reads Slurm and the store and plans one read-only round, as ``tiresias queue`` does:
nothing is written, nothing in Slurm changes, whatever mode the config names. Ranks
count only the pending jobs both orders hold (held and dependent jobs are in neither).
While a controller runs in enforce, Slurm's order already holds its SiteFactor bands:
run it against a cluster in shadow (or after ``tiresias restore``).
Exit 1 when Slurm did not answer.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

from controller.cli import argtypes
from controller.cli import queue as cmd_queue
from controller.cli.reports import emit, format_plain_table
from controller.service.acting.backend import numeric_id


def add_arguments(p: argparse.ArgumentParser) -> None:
    cmd_queue.add_source_arguments(p)
    p.add_argument("--top", type=argtypes.int_in(1, 100_000), default=20, metavar="N",
                   help="show the N jobs that would move the most (default 20)")
    p.add_argument("--json", action="store_true", help="one JSON object: every move, preemption and start")


@dataclass(frozen=True)
class Move:
    job_id: str
    user: str
    gpus: int
    slurm_rank: int  # 1 = first in Slurm's order
    controller_rank: int
    level: int | None  # the controller's queue, 1-based (None: a policy without queues)
    slurm_priority: int


@dataclass(frozen=True)
class Diff:
    compared: int  # pending jobs in both orders
    moves: list[Move]  # the jobs whose rank differs, the biggest change first
    preemptions: list[dict]  # job_id, user, gpus, reason
    starts: list[dict]


def shadow_diff(plan, observation, priorities: dict[str, int], queues: int) -> Diff:
    """The plan against Slurm's order. ``priorities``: job id -> Slurm's priority
    (higher first; ties in submit order, as Slurm breaks them); ``queues``: K, or 0
    for a policy without queues."""
    jobs = {job.job_id: job for job in observation.jobs}
    pending = [job_id for job_id in plan.order
               if job_id in jobs and jobs[job_id].state == "PENDING" and job_id in priorities]
    slurm_order = sorted(pending, key=lambda j: (-priorities[j], jobs[j].submit_time_s or 0.0, numeric_id(j)))
    slurm_rank = {job_id: i + 1 for i, job_id in enumerate(slurm_order)}
    moves = []
    for rank, job_id in enumerate(pending, start=1):
        if slurm_rank[job_id] != rank:
            job = jobs[job_id]
            level = plan.levels.get(job_id)
            moves.append(Move(job_id, job.user, job.gpus, slurm_rank[job_id], rank,
                              None if not queues or level is None else level + 1, priorities[job_id]))
    moves.sort(key=lambda m: (-abs(m.slurm_rank - m.controller_rank), m.controller_rank))

    def described(action) -> dict:
        job = jobs.get(action.job_id)
        return {"job_id": action.job_id, "user": job.user if job else "?", "gpus": job.gpus if job else 0,
                "reason": action.reason}

    return Diff(len(pending), moves, [described(a) for a in plan.of_kind("preempt")],
                [described(a) for a in plan.of_kind("start")])


def run(args) -> int:
    from controller.service.acting.backend import BackendUnavailable
    from controller.service.acting.executor import acts

    try:
        view = cmd_queue.preview(args)
        priorities = view.controller.backend.priorities()
    except BackendUnavailable as err:
        print(f"tiresias shadow-diff: Slurm did not answer: {err}", file=sys.stderr)
        return 1
    except RuntimeError as err:  # sprio refused (e.g. priority/basic: no order to compare with)
        print(f"tiresias shadow-diff: Slurm's priority order unavailable: {err}", file=sys.stderr)
        return 1
    if view.store_note:
        print(f"tiresias shadow-diff: note: {view.store_note}", file=sys.stderr)
    controller = view.controller
    config = controller.config
    queues = len(config.queues_gpu_s) + 1 if controller.engine.policy.discretized else 0
    diff = shadow_diff(view.plan, view.observation, priorities, queues)
    if args.json:
        print(json.dumps({"cluster": config.cluster, "policy": config.policy, "mode": config.mode,
                          "observed_at_s": view.observation.observed_at_s, "compared": diff.compared,
                          "moves": [asdict(m) for m in diff.moves], "preemptions": diff.preemptions,
                          "starts": diff.starts}))
        return 0
    print(f"cluster {config.cluster}, policy {config.policy}: {len(diff.moves)} of {diff.compared} pending GPU jobs "
          f"would move against Slurm's order (sprio); enforce would preempt {len(diff.preemptions)} and start "
          f"{len(diff.starts)} job(s) now")
    if diff.moves:
        shown = diff.moves[:args.top]
        print(f"\nthe {len(shown)} biggest moves (rank 1 starts first):")
        emit(format_plain_table(
            ["JOBID", "USER", "GPUS", "SLURM_RANK", "->", "TIRESIAS_RANK", "LEVEL", "SLURM_PRIORITY"],
            [[m.job_id, m.user, m.gpus, m.slurm_rank, "->", m.controller_rank, "-" if m.level is None else m.level,
              m.slurm_priority] for m in shown], right=(2, 3, 5, 7)))
    for title, items in (("preemptions enforce would make", diff.preemptions),
                         ("starts enforce would make", diff.starts)):
        if items:
            print(f"\n{title}:")
            for item in items:
                print(f"  job {item['job_id']} ({item['user']}, {item['gpus']} GPUs): {item['reason']}")
    if acts(controller.store.last_mode(config.cluster)):
        print("tiresias shadow-diff: note: this cluster's controller last started in enforce: Slurm's order holds "
              "its SiteFactor bands, so few jobs move", file=sys.stderr)
    return 0

"""Why a job waits (or runs): its queue level, the jobs ahead of it, GPUs needed
against GPUs free, consolidation, when starvation promotion would lift it, its
attained service against the next threshold, and the controller's last logged
decisions about it with their reasons and decision ids.

Reads Slurm and the store, and plans one read-only round like 'tiresias queue'.
Exit 1 when the job is known to neither; exit 2 for a malformed job id.

``--story`` reads the store only: the job's whole chain of logged decisions, oldest
first, each with its decision id and the decision that caused it (a requeue its
preemption, a pin's expiry the start that pinned it, a handoff the preemptions that
made room). Exit 1 when the store holds no decision about the job.
"""
from __future__ import annotations

import argparse
import bisect
import math
import re
import sys

from controller.cli import argtypes
from controller.cli import queue as cmd_queue
from controller.core.model import InputError
from controller.core.policies import MLFQ_POLICIES
from controller.cli.queue_table import free_gpus
from controller.cli.reports import format_timestamp
from controller.service.state.secrets import redact_url

JOB_ID_RE = re.compile(r"[0-9]{1,19}(?:_[0-9]{1,9})?", re.ASCII)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job_id", metavar="JOBID", help="Slurm job id (e.g. 1234 or 1234_5)")
    cmd_queue.add_source_arguments(p)
    p.add_argument("--decisions", type=argtypes.int_in(0, 10_000), default=5, metavar="N",
                   help="how many logged decisions to show (default 5)")
    p.add_argument("--story", action="store_true",
                   help="the job's whole chain of logged decisions, oldest first, with ids and causes "
                        "(reads the store only, not Slurm)")


def _gpu_s(value: float) -> str:
    return f"{value:.0f} GPU-s"


def _seconds(value: float) -> str:
    return f"{value:.0f} s"


def run(args) -> int:
    from controller.service.acting.backend import BackendUnavailable

    job_id = args.job_id.strip()
    if not JOB_ID_RE.fullmatch(job_id):
        raise InputError(f"job id {args.job_id!r} is malformed (expected digits, optionally _digits)")
    if args.decisions < 0:
        raise InputError(f"--decisions value {args.decisions} must be >= 0")
    if getattr(args, "story", False):
        return run_story(args, job_id)
    try:
        view = cmd_queue.preview(args)
    except BackendUnavailable as err:
        print(f"tiresias explain: Slurm did not answer: {err}", file=sys.stderr)
        return 1
    controller, plan, observation = view.controller, view.plan, view.observation
    config, store = controller.config, controller.store
    observed = next((j for j in observation.jobs if j.job_id == job_id), None)
    record = controller.records.get(job_id)
    if record is None:
        record = store.load_jobs(config.cluster).get(job_id)
    decisions = store.decisions(config.cluster, job_id=job_id, limit=args.decisions) if args.decisions else []
    if observed is None and record is None:
        print(f"tiresias explain: job {job_id} is known neither to Slurm nor to the store "
              f"({redact_url(config.database_url) if view.store_note else store.name}, cluster {config.cluster})", file=sys.stderr)
        return 1
    if view.store_note:
        print(f"tiresias explain: note: {view.store_note}", file=sys.stderr)
    preemption = preemption_text(controller, observed) if observed is not None and observed.state == "RUNNING" else ""
    handoff = (controller.handoffs.holding(job_id, format_timestamp)
               if observed is not None and observed.state == "PENDING" else "")
    unmodelled = (controller.unmodelled.jobs.get(job_id)  # the census of the read-only round just planned
                  if observed is not None and observed.state == "PENDING" else None)
    print("\n".join(explain_lines(job_id, observed, record, plan, observation, config, decisions, preemption,
                                   handoff, unmodelled)))
    return 0


STORY_MAX_DECISIONS = 10_000  # the newest this many; a job with more says so


def run_story(args, job_id: str) -> int:
    from controller.service.ops.config import load

    config = load(args.config, {"database_url": args.database_url, "cluster": args.cluster})
    store, note = cmd_queue.open_store(config)
    if store is None:
        print(f"tiresias explain: {note}", file=sys.stderr)
        return 1
    with store:
        newest = store.decisions(config.cluster, job_id=job_id, limit=STORY_MAX_DECISIONS)
        decisions = newest[::-1]
        own = {d["decision_id"] for d in decisions}
        cited = {cause for d in decisions for cause in _causes(d)} - own
        causes = {d["decision_id"]: d for d in store.decisions_by_id(config.cluster, cited)}
        effects = [d for d in store.decisions_caused_by(config.cluster, own) if d["job_id"] != job_id]
    if not decisions:
        print(f"tiresias explain: no logged decisions about job {job_id} ({store.name}, cluster {config.cluster})",
              file=sys.stderr)
        return 1
    print("\n".join(story_lines(job_id, decisions, causes, effects, truncated=len(newest) == STORY_MAX_DECISIONS)))
    return 0


def _causes(decision: dict) -> list[str]:
    return [c for c in (decision.get("cause_id") or "").split(",") if c]


def story_lines(job_id: str, decisions: list[dict], causes: dict[str, dict], effects: list[dict] = (),
                truncated: bool = False) -> list[str]:
    """The story: ``decisions`` are the job's, oldest first; ``causes`` the logged
    decisions about other jobs that they cite (decision id -> row); ``effects`` the
    decisions about other jobs that cite one of the job's (a handoff its preemption
    made room for)."""
    lines = [f"job {job_id}: {len(decisions)} decision(s), oldest first"
             + (f" (the newest {len(decisions)} only)" if truncated else "")]
    own = {d["decision_id"]: d for d in decisions}
    for d in decisions:
        detail = f" [{d['detail']}]" if d.get("detail") else ""
        lines.append(f"  {d['decision_id']:<10} {format_timestamp(d['now_s'])} {d['mode']:<7} {d['kind']:<8} "
                     f"{'applied' if d['applied'] else 'not applied'}: {d['reason']}{detail}")
        for cause_id in _causes(d):
            cause = own.get(cause_id) or causes.get(cause_id)
            if cause is None:
                lines.append(f"      caused by {cause_id} (not in the log any more)")
            else:
                whose = "" if cause["job_id"] == job_id else f" of job {cause['job_id']}"
                lines.append(f"      caused by {cause_id} ({cause['kind']}{whose}, round {cause['round_id']})")
        for effect in (e for e in effects if d["decision_id"] in _causes(e)):
            lines.append(f"      led to {effect['decision_id']} ({effect['kind']} of job {effect['job_id']}, "
                         f"round {effect['round_id']}, {'applied' if effect['applied'] else 'not applied'}: "
                         f"{effect['reason']})")
    return lines


def preemption_text(controller, observed) -> str:
    """What the preemption contract (controller.service.round.contract) says of a running job;
    under ``preemption: slurm`` slurmctld decides, by its QOS and the bands."""
    if controller.config.preemption == "slurm":
        return ("preemption: slurmctld's (preemption: slurm): a pending job of a strictly higher priority (a "
                "higher queue's band) may preempt it if its QOS is the preemptable one (declared --signal, "
                "requeueable); slurmctld sends its --signal and requeues it after the QOS GraceTime")
    controller.contract.begin_round()  # one job asked about: its batch script may be read now
    why_not = controller.contract.why_not(observed)
    if why_not:
        return f"preemption: not preemptable: {why_not}"
    signal = controller.contract.declared(observed)
    grace = controller.preemptions.grace_for(observed, controller.clock()) if signal is not None else 0.0
    if signal is None:
        return "preemption: preemptable without a signal (preempt_undeclared): requeued, no checkpoint request"
    return f"preemption: preemptable: signal {signal.describe()}, requeue after {grace:g}s"


def explain_lines(job_id, observed, record, plan, observation, config, decisions, preemption: str = "",
                  handoff: str = "", unmodelled=None) -> list[str]:
    """The explanation, one fact per line. Units: seconds, GPU-seconds. ``preemption``:
    the contract's line for a running job (preemption_text); ``handoff``: why no
    preemption is made for a pending job (its failed handoff: Handoffs.holding);
    ``unmodelled``: a pending job's (reason codes, text) when the plan cannot express
    its request (controller.service.ops.unmodelled.Census.jobs)."""
    lines: list[str] = []
    thresholds = config.queues_gpu_s
    levels = len(thresholds) + 1
    user = (observed.user if observed else record.user) or "?"
    partition = (observed.partition if observed else record.partition) or "?"
    gpus = observed.gpus if observed else record.num_gpus
    state = observed.state if observed else (record.end_state or record.state)
    level = plan.levels.get(job_id)
    if level is None and record is not None:
        level = record.level
    head = f"job {job_id} ({user}, {partition}, {gpus} GPUs): {state}"
    if level is not None and config.policy in MLFQ_POLICIES:
        head += f" in queue {level + 1} of {levels}"
    lines.append(head + f"  [policy {config.policy}, mode {config.mode}]")

    if observed is not None and observed.gpus <= 0:
        lines.append("  not a GPU job: the controller does not manage it")
    elif observed is None or observed.state not in ("PENDING", "RUNNING"):
        end = record.finished_s if record is not None else None
        lines.append(f"  finished: {record.end_state if record and record.end_state else state}"
                     f" at {format_timestamp(end)}; not planned any more")
    elif job_id not in plan.order:
        lines.append(f"  not planned this round (Slurm reason {observed.reason or '-'}): being preempted, or "
                     "running on a node that is not available")
    else:
        lines.extend(_planned_lines(job_id, observed, record, plan, observation, config))

    if preemption:
        lines.append("  " + preemption)
    if handoff:
        lines.append("  preemption for it: " + handoff)
    if unmodelled:
        codes, text = unmodelled
        lines.append(f"  not modelled: {text} (reason {', '.join(codes)}): no job is preempted for it; Slurm may "
                     "start it on what is free (docs/admin.md, 'Requests the plan does not model')")
    if record is not None:
        lines.extend(_service_lines(record, thresholds, gpus, config.policy))
    if observed is not None and observed.state == "PENDING" and job_id in plan.order and record is not None:
        lines.append("  " + promotion_text(record, level, config.promote_knob, plan, job_id))
    if observed is not None:
        lines.append(f"  Slurm: state {observed.state}, reason {observed.reason or '-'}, submitted "
                     f"{format_timestamp(observed.submit_time_s)}, restarts {observed.restart_count}")
    if record is not None and (record.preemptions or record.promotions or record.moves):
        lines.append(f"  history: {record.preemptions} preemption(s), {record.promotions} promotion(s), "
                     f"{record.moves} move(s)")
    if decisions:
        lines.append("  last decisions (newest first):")
        for d in decisions:
            detail = f" [{d['detail']}]" if d.get("detail") else ""
            lines.append(f"    {d['decision_id']:<8} {format_timestamp(d['now_s'])} {d['mode']:<7} {d['kind']:<8} "
                         f"{'applied' if d['applied'] else 'not applied'}: {d['reason']}{detail}")
    else:
        lines.append("  no logged decisions about this job")
    return lines


def _planned_lines(job_id, observed, record, plan, observation, config) -> list[str]:
    lines = []
    action = next((a for a in plan.actions if a.job_id == job_id and a.kind in ("start", "preempt")), None)
    if action is not None:
        lines.append(f"  this round: {action.kind} ({action.decision_id}): {action.reason}"
                     + ("; slurmctld chooses its victims (preemption: slurm)"
                        if config.preemption == "slurm" and (action.kind == "preempt" or "preempt" in action.reason)
                        else ""))
    elif observed.state == "RUNNING":
        lines.append("  this round: keeps running")
    else:
        lines.append(f"  this round: wait: {plan.wait_reasons.get(job_id, observed.reason or '?')}")
    index = plan.order.index(job_id)
    ahead = plan.order[:index]
    running_ids = {j.job_id for j in observation.jobs if j.state == "RUNNING"}
    ahead_running = [j for j in ahead if j in running_ids]
    shown = ", ".join(ahead[:5]) + (" ..." if len(ahead) > 5 else "")
    lines.append(f"  priority: position {index + 1} of {len(plan.order)}; {len(ahead)} job(s) ahead "
                 f"({len(ahead_running)} running, {len(ahead) - len(ahead_running)} pending)"
                 + (f": {shown}" if ahead else ""))
    source = plan.index_sources.get(job_id)
    if source is not None:
        lines.append(f"  index: {plan.keys.get(job_id, 0.0):.3g} (Gittins, from the distribution of key {source[0]}:"
                     f" {source[1]} samples)")
    # the count 'tiresias queue' prints too (queue_table.free_gpus), so the two never disagree
    lines.append(f"  GPUs: needs {observed.gpus}, {free_gpus(observation, plan).text()}")
    skew = record.skew if record is not None else 0.0
    reason = plan.wait_reasons.get(job_id, "")
    if "consolidation" in reason:
        lines.append(f"  placement: waiting for consolidation (skew {skew:.2f} > PACKLIMIT {config.pack_limit:g}): "
                     "needs its GPUs on as few nodes as possible")
    elif config.placement == "consolidate" and skew > config.pack_limit:
        lines.append(f"  placement: consolidation-sensitive (skew {skew:.2f} > PACKLIMIT {config.pack_limit:g})")
    else:
        lines.append(f"  placement: {config.placement} (skew {skew:.2f})")
    return lines


def _service_lines(record, thresholds, gpus, policy) -> list[str]:
    queue_service = record.queue_service_gpu_s
    text = (f"  service: attained {_gpu_s(record.attained_gpu_s)} over {_seconds(record.executed_s)} of running"
            f" (queue service {_gpu_s(queue_service)})")
    if policy in MLFQ_POLICIES:
        index = bisect.bisect_right(thresholds, queue_service)
        if index >= len(thresholds):
            text += f"; in the last queue (thresholds {', '.join(f'{t:g}' for t in thresholds)} GPU-s)"
        else:
            more = thresholds[index] - queue_service
            text += (f"; next threshold {thresholds[index]:g} GPU-s: moves to queue {index + 2} after "
                     f"{_gpu_s(more)} more ({more / max(gpus, 1):.0f} s running on {gpus} GPUs)")
    return [text]


def promotion_text(record, level, knob, plan, job_id) -> str:
    """When starvation promotion lifts a waiting job: it is promoted once it has
    waited knob x (time executed) since its last promotion."""
    promoted = next((a for a in plan.actions if a.kind == "promote" and a.job_id == job_id), None)
    if promoted is not None:
        return f"starvation: promoted to queue 1 this round ({promoted.decision_id}): {promoted.reason}"
    if not math.isfinite(knob):
        return "starvation: promotion disabled (promote_knob=inf)"
    if level is None or level == 0:
        return "starvation: already in queue 1, promotion does not apply"
    executed, waited = record.executed_since_promotion_s, record.waited_since_promotion_s
    needed = knob * executed
    remaining = max(needed - waited, 0.0)
    return (f"starvation: would be promoted in {remaining:.0f} s (waited {waited:.0f} s since the last promotion; "
            f"promotion at promote_knob {knob:g} x executed {executed:.0f} s = {needed:.0f} s)")

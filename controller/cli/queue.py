"""GPU jobs in the controller's priority order, like squeue.

Reads Slurm now and the controller's stored accounts, and runs one read-only
planning round (nothing is written, nothing in Slurm changes). PRIORITY(QUEUE:POS)
is the job's Tiresias queue (1 is served first) and its position in the
controller's order (1 is first): 2:3 is queue 2, third in line. ACTION is what the
controller would do this round: start, preempt, run (keeps running) or wait. A job
Slurm would not start now (held, dependent, limited: controller.service.round.startable)
only waits, with Slurm's reason. ST is squeue's state code (PD, R); --long prints
the full name. The last line counts the free GPUs as explain does.

squeue's habits: -o/--format takes column names (jobid,user,partition,gpus,st,
state,priority,level,position,key,action,reason) or squeue's specifiers %i (job
id), %u (user), %P (partition), %b (GPUs, a count), %t (state code), %T (state),
%Q (priority: queue:position), %r (reason); widths (%.18i) are accepted, columns
fit their values; %j (name), %M (time), %D (nodes) and %R (nodes, or the pending
reason) too, so squeue's default format works as it is. -h is --noheader, as in
squeue (--help is help); -p is --partition and -j --jobs, as in squeue. --parsable
prints sacct -p's form: every field followed by '|'.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from controller.service.acting.backend import BackendUnavailable
from controller.service.ops.config import DEFAULT_PATH, Config, load
from controller.core.inputs import shorten
from controller.core.model import InputError
from controller.cli import queue_table
from controller.cli.reports import emit, job_sort_key
from controller.service.state.secrets import redact_url

log = logging.getLogger("tiresias.queue")


def _slurm_backend(config: Config):
    from slurm_plugin.backend import SlurmBackend

    backend = SlurmBackend(partitions=list(config.partitions) or None, command_timeout_s=config.command_timeout_s)
    try:
        backend.slurm_config()  # as the controller's preflight reads it: does Slurm allocate memory?
    except BackendUnavailable:
        pass  # the observation that follows says slurmctld does not answer
    return backend


# config -> Backend. Tests replace it with a scripted backend; explain uses it too.
_backend_factory: Callable[[Config], Any] = _slurm_backend


def backend_for(config: Config):
    """The backend of the commands that read Slurm (queue, explain, restore, shadow-diff)."""
    return _backend_factory(config)


# squeue's -h is --noheader: main builds this command's parser without argparse's -h.
SHORT_H_IS_HELP = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--help", action="help", help="show this help message and exit")
    add_source_arguments(p)
    p.add_argument("-u", "--user", metavar="USER[,USER]", help="only these users' jobs")
    p.add_argument("-p", "--partition", metavar="PART[,PART]", help="only jobs that may run in these partitions")
    p.add_argument("-j", "--jobs", metavar="JOBID[,JOBID]",
                   help="only these jobs (an array's id lists its tasks, as squeue -j does)")
    p.add_argument("-t", "--states", metavar="STATE[,STATE]", help="only these states (PENDING or PD, RUNNING or R)")
    out = p.add_argument_group("output, as squeue's")
    out.add_argument("-o", "--format", metavar="COLUMNS",
                     help="columns: names separated by commas (" + ",".join(queue_table.QUEUE_COLUMNS_BY_NAME)
                          + ") or squeue's %%i %%u %%P %%b %%t %%T %%Q %%r (default "
                          + queue_table.QUEUE_DEFAULT_FORMAT + ")")
    out.add_argument("-l", "--long", action="store_true", help="full state names (PENDING) instead of codes (PD)")
    out.add_argument("-h", "--noheader", action="store_true", help="no header line (and no GPU count line)")
    # long form only: squeue's -p is --partition
    out.add_argument("--parsable", action="store_true", help="fields followed by '|', as sacct -p")
    out.add_argument("--json", action="store_true",
                     help="one JSON object with every row and the free GPUs (ignores -o, -l, -h, -p)")
    p.epilog = ("PRIORITY(QUEUE:POS): the job's Tiresias queue (1 is served first) and its position in the "
                "controller's order (1 is first).")


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=f"YAML settings (default {DEFAULT_PATH} if present)")
    p.add_argument("--database-url", metavar="URL", help="store URL (overrides the config)")
    p.add_argument("--cluster", metavar="NAME", help="cluster name in the store (overrides the config)")


@dataclass
class Preview:
    controller: Any
    plan: Any
    observation: Any
    store_note: str = ""  # why the stored accounts could not be used, or ''


def preview(args) -> Preview:
    """One read-only round from Slurm's state and the stored accounts.

    A missing SQLite store is not created: accounts then start from what Slurm
    reports now (and the note says so). Raises BackendUnavailable when Slurm does
    not answer.
    """
    from controller.service.round.daemon import Controller
    from controller.service.state.store import Store

    config = load(args.config, {"database_url": args.database_url, "cluster": args.cluster})
    store, note = open_store(config)
    if store is None:
        store = Store("sqlite://")
    controller = Controller(config, _backend_factory(config), store)
    plan, observation = controller.preview()
    return Preview(controller, plan, observation, note)


def open_store(config: Config):
    """(the configured store, '') or (None, why it cannot be read). A missing SQLite
    file is not created: reading must not leave an empty store behind."""
    from controller.service.state.store import Store, StoreError

    path = sqlite_path(config.database_url)
    if path is not None and not os.path.exists(path):
        return None, f"no store at {path} yet: levels count service from Slurm's current view only"
    try:
        return Store(config.store_url(), access="read"), ""
    except StoreError as err:
        return None, f"cannot read the store ({err}): levels count service from Slurm's current view only"


def sqlite_path(url: str) -> Optional[str]:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InputError(f"database url: cannot parse {redact_url(url)!r}") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        return parsed.database
    return None


def queue_rows(view: Preview) -> list[dict]:
    """One dict per GPU job Slurm reports pending or running, plan order first."""
    plan, observation = view.plan, view.observation
    position = {job_id: i + 1 for i, job_id in enumerate(plan.order)}
    planned = {}
    for action in plan.actions:
        if action.kind in ("start", "preempt"):
            planned[action.job_id] = action
    rows = []
    for job in observation.jobs:
        if job.gpus <= 0 or job.state not in ("PENDING", "RUNNING"):
            continue
        pos = position.get(job.job_id)
        if pos is None:
            action, reason = "-", f"not planned: {job.reason or job.state}"
        elif job.job_id in planned:
            action, reason = planned[job.job_id].kind, planned[job.job_id].reason
        elif job.state == "RUNNING":
            action, reason = "run", "keeps its GPUs"
        else:
            action = "wait"
            reason = plan.wait_reasons.get(job.job_id, job.reason or "")
        level = plan.levels.get(job.job_id)
        held = job.nodes or tuple(node for node, _ in job.gpus_by_node)
        rows.append({
            "job_id": job.job_id, "user": job.user, "partition": job.partition, "gpus": job.gpus,
            "state": job.state, "level": None if level is None else level + 1, "position": pos,
            "key": plan.keys.get(job.job_id), "action": action, "reason": reason,
            "slurm_reason": job.reason, "name": job.name,
            "time_s": (max(0.0, observation.observed_at_s - job.start_time_s)
                       if job.state == "RUNNING" and job.start_time_s is not None else 0.0),
            "node_count": len(held) if job.state == "RUNNING" and held else max(job.min_nodes, 1),
            "nodelist": ",".join(held),
        })
    rows.sort(key=lambda r: (r["position"] is None, r["position"] or 0, job_sort_key(r["job_id"])))
    return rows


def _listed(text: Optional[str]) -> set[str]:
    """A comma-separated option's values ('' or None: no filter)."""
    return {item.strip() for item in (text or "").split(",") if item.strip()}


def run(args) -> int:
    from controller.service.acting.backend import BackendUnavailable

    columns = queue_table.parse_queue_format(args.format or (queue_table.QUEUE_LONG_FORMAT if args.long
                                                              else queue_table.QUEUE_DEFAULT_FORMAT))
    states = {s.strip().upper() for s in (args.states or "").split(",") if s.strip()}
    states = {{"PD": "PENDING", "R": "RUNNING"}.get(s, s) for s in states}
    unknown = sorted(states - {"PENDING", "RUNNING"})
    if unknown:  # a typo would otherwise list nothing and look like an empty queue
        raise InputError(f"-t/--states value {shorten(unknown[0])!r} is not PENDING (PD) or RUNNING (R)")
    try:
        view = preview(args)
    except BackendUnavailable as err:
        print(f"tiresias queue: Slurm did not answer: {err}", file=sys.stderr)
        return 1
    rows = queue_rows(view)
    users = _listed(args.user)
    partitions = _listed(args.partition)
    jobs = _listed(args.jobs)
    rows = [r for r in rows if (not users or r["user"] in users) and (not states or r["state"] in states)
            and (not partitions or partitions & set(r["partition"].split(",")))
            and (not jobs or r["job_id"] in jobs or r["job_id"].split("_")[0].split("+")[0] in jobs)]
    if view.store_note:
        print(f"tiresias queue: note: {view.store_note}", file=sys.stderr)
    config = view.controller.config
    free = queue_table.free_gpus(view.observation, view.plan)
    if args.json:
        print(json.dumps({"cluster": config.cluster, "policy": config.policy, "mode": config.mode,
                          "observed_at_s": view.observation.observed_at_s,
                          "gpus_free": {"now": free.now, "after_round": free.after_round, "total": free.total},
                          "jobs": rows}))
        return 0
    machine_read = args.noheader or args.parsable
    if not rows:
        if not machine_read:  # a script reading -h or -p output gets nothing, as from squeue
            print(f"no pending or running GPU jobs (policy {config.policy}, cluster {config.cluster})")
        return 0
    emit(queue_table.format_queue(columns, rows, header=not args.noheader, parsable=args.parsable))
    if not machine_read:
        emit(f"GPUs: {free.text()}")
    return 0

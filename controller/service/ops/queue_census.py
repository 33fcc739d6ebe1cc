"""The queue census of a preflight: how many pending GPU jobs the plan cannot model
(controller.service.ops.unmodelled) and, for an admin, where each reason comes from."""
from __future__ import annotations

import re
from typing import Iterable, Optional

from controller.core.model import Node
from controller.service.acting.backend import ObservedJob
from controller.service.ops.slurm_conf import UNSET, Finding
from controller.service.ops.unmodelled import NOT_REORDERING_SHARE, REASONS, Census, census
from controller.service.acting.backend import slurm_wait

# Where each unmodelled reason comes from, for an admin: the job option, or the
# slurm.conf line when `scontrol show config` shows one that fills it into jobs.
_JOB_OPTIONS = {
    "cpus": "the jobs' --cpus-per-gpu / --cpus-per-task",
    "memory": "the jobs' --mem-per-gpu / --mem-per-cpu",
    "constraint": "the jobs' --constraint with OR (|), brackets ([]) or counts (*N)",
    "exclusive": "the jobs' --exclusive=user / mcs / topo",
    "oversubscribe": "a partition's OverSubscribe=FORCE",
    "mixed_gpu_types": "the jobs' --gres=gpu:TYPE:N,gpu:OTHER:M (several GPU types)",
    "het": "het jobs (sbatch ... : ...) whose components ask for different nodes",
    "per_socket": "the jobs' --gpus-per-socket",
    "per_task": "the jobs' --ntasks-per-gpu / --gpus-per-task",
    "unreported_request": "a field of the request this Slurm release does not report",
    "unreported_nodes": "the nodes: sinfo reports no CPUs, memory or features for them",
    "other": "the jobs' requests",
}
_CONF_DEFAULTS = {"cpus": ("DefCpuPerGPU",), "memory": ("DefMemPerGPU", "DefMemPerCPU", "MaxMemPerCPU")}


def unmodelled_source(code: str, settings: dict[str, str],
                      partitions: Optional[dict[str, dict[str, str]]] = None) -> str:
    """The slurm.conf line or job option behind unmodelled reason ``code``."""
    lines = []
    for key in _CONF_DEFAULTS.get(code, ()):
        value = settings.get(key, "")  # DefMemPerCPU and MaxMemPerCPU have lines of their own
        if value not in ("", UNSET, "UNLIMITED", "0"):
            lines.append(f"{key}={value}")
        term = re.search(rf"\b{key}=([^,\s]+)", settings.get("JobDefaults", ""))
        if term:
            lines.append(f"JobDefaults={key}={term.group(1)}")
    if code == "oversubscribe":
        lines += [f"PartitionName={name} OverSubscribe={values['OverSubscribe']}"
                  for name, values in (partitions or {}).items()
                  if values.get("OverSubscribe", "").upper().startswith("FORCE")]
    if lines:
        return f"slurm.conf {', '.join(lines)} (filled into every job that names none), or {_JOB_OPTIONS[code]}"
    return _JOB_OPTIONS[code]


def queue_census(jobs: Iterable[ObservedJob], nodes: Iterable[Node]) -> Census:
    """The census of the queue as the plan weighs it: the pending GPU jobs that do not
    wait on Slurm (a hold, a dependency, a limit: controller.service.round.startable)."""
    return census((j for j in jobs if j.gpus > 0 and j.state == "PENDING" and not slurm_wait(j)), nodes)


def queue_findings(queue: Census, settings: dict[str, str],
                   partitions: Optional[dict[str, dict[str, str]]] = None) -> list[Finding]:
    """Warnings on the queue: per unmodelled reason its count of pending GPU jobs, the
    slurm.conf line or job option behind it and an example; first, when more than
    NOT_REORDERING_SHARE of them cannot cause a preemption, that the controller is
    not reordering this site, and why."""
    found = []
    if queue.not_reordering:
        found.append(Finding("unmodelled pending GPU jobs", f"{len(queue.jobs)} of {queue.pending} "
                             f"({queue.share:.0%})", f"at most {NOT_REORDERING_SHARE:.0%}",
                             "the controller is not reordering this site: these jobs cannot cause a preemption, "
                             f"so Slurm's own order stands; top reasons: {queue.top_reasons()}", refuses=False))
    for code, ids in queue.by_reason().items():
        example = queue.jobs[ids[0]][1]
        found.append(Finding(f"unmodelled {code}", f"{len(ids)} of {queue.pending} pending GPU jobs",
                             f"a request the plan can express (from {unmodelled_source(code, settings, partitions)})",
                             f"{REASONS[code]}: no job is preempted for them; e.g. job {ids[0]}: {example}",
                             refuses=False))
    return found

"""What a pending job asks of each node beyond GPUs (CPUs, memory, features, whole nodes),
read from its SlurmJob record with Slurm's defaults and its partitions' OverSubscribe, and
what a running job holds per node: the ObservedJob fields slurm_plugin.observe fills.
"""
from __future__ import annotations

import json
import logging
import re
from typing import Callable, Mapping

from controller.core.model import ALL_MEMORY
from controller.service.acting.backend import unmodelled_fields
from slurm_plugin.records import SlurmJob

log = logging.getLogger(__name__)


# Pending reasons Slurm gives a job once it has tried to place it on nodes.
TESTED_REASONS = frozenset({"Resources"})


def job_defaults(text: str) -> tuple[int, int]:
    """(DefCpuPerGPU, DefMemPerGPU) of a JobDefaults value (``DefCpuPerGPU=2,DefMemPerGPU=1000``,
    ``(null)``); 0 for each it does not set or sets to something other than a count."""
    found = dict(re.findall(r"(DefCpuPerGPU|DefMemPerGPU)=([0-9]{1,12})\b", text or ""))
    return int(found.get("DefCpuPerGPU", 0)), int(found.get("DefMemPerGPU", 0))


def _partition_sharing(job: SlurmJob, modes: Mapping[str, str]) -> tuple[str | None, list[tuple[str, str]]]:
    """The pending job's sharing mode once its partitions' OverSubscribe is applied
    (``modes``: partition -> parse_partition_sharing's mode), and why it is beyond the
    plan (code, text) if it is.

    A job of an OverSubscribe=EXCLUSIVE partition gets whole nodes as --exclusive does
    (the plan models that); every release says so in its own record only for the job's
    first partition (24.11 not for a job of several), so the partition decides. FORCE:
    Slurm shares the cores it gives with other jobs, which the plan's CPU count does not
    express. YES: as NO unless the job asks --oversubscribe (its own ``shared``). A job
    of several partitions of which some give whole nodes and some do not gets whole
    nodes or not by where Slurm starts it: not modelled. A partition not in ``modes``
    (not read): the job's record stands."""
    parts = [p for p in job.partitions if p]
    known = {p: modes[p] for p in parts if p in modes}
    if not known:
        return job.shared, []
    forced = sorted(p for p, mode in known.items() if mode == "FORCE")
    if forced:
        return job.shared, [("oversubscribe", f"partition {forced[0]}'s OverSubscribe=FORCE (Slurm shares the"
                                               " cores it gives)")]
    other = sorted(p for p, mode in known.items() if mode not in ("NO", "YES", "EXCLUSIVE"))
    if other:
        return job.shared, [("exclusive", f"partition {other[0]}'s Exclusive={known[other[0]]}")]
    whole = sorted(p for p, mode in known.items() if mode == "EXCLUSIVE")
    if not whole:
        return job.shared, []
    if len(whole) == len(parts):
        return "exclusive", []
    shared = sorted(set(parts) - set(whole))
    return job.shared, [("exclusive", f"partitions {','.join(whole)} (OverSubscribe=EXCLUSIVE) and"
                                      f" {','.join(shared)} (not): whole nodes or not by where Slurm starts it")]


def asked_per_node(job: SlurmJob, memory_allocated: Callable[[], bool] = lambda: False,
                    gpu_defaults: Callable[[str], tuple[int, int]] = lambda partition: (0, 0),
                    partition_modes: Mapping[str, str] = {}) -> dict:
    """The ObservedJob fields of what a pending job asks of each node beyond GPUs.

    CPUs per node: the most of its per-node minimum, its CPUs over its nodes (rounded
    up: Slurm may spread them unevenly, so an even share is the least a node must
    hold, and asking it of every node is on the side of preempting less) and
    --cpus-per-gpu times its GPUs per node. Memory per node: the more of --mem (else
    --mem-per-cpu times those CPUs) and --mem-per-gpu times its GPUs per node: Slurm
    starts a job only where both fit (recorded on 22.05, 24.11 and 26.05:
    tests/fixtures/slurm/*/request_forms_memory.txt, a job with --mem=1000 and 3 GPUs
    under DefMemPerGPU=1000 waits on a node with 2000 MB free, though it is given
    1000); none of them set (--mem=0, or no default on the cluster) is all of the
    node's memory (``ALL_MEMORY``) where Slurm allocates memory (``memory_allocated()``:
    a SelectTypeParameters of *_Memory), nothing where it does not.

    Slurm fills DefCpuPerGPU / DefMemPerGPU into a GPU job's record only when it first
    tests the job against a partition (a job held since its submission has neither);
    a record without them takes ``gpu_defaults(partition)`` (the most over the
    partitions it lists), as Slurm will. A field the record lacks (None), a request
    whose GPU count is Slurm's choice (per socket, per task), an OR/bracket/count
    --constraint and an --exclusive mode other than the whole node are ``unmodelled``:
    the job is never a reason to preempt."""
    unmodelled = list(job.request_unmodelled)
    nodes = max(job.node_count, 1)
    gpus_per_node = -(-job.gpus // nodes)
    cpus_per_gpu, mem_per_gpu = job.cpus_per_gpu, job.mem_per_gpu_mb
    # A record Slurm has tested against its nodes (reason Resources: select_nodes ran,
    # gres_select_util_job_set_defs with it) holds the defaults Slurm applies, and none
    # where it applies none (a job that gave --cpus-per-task, even -c 1, keeps an empty
    # cpus_per_tres): it is Slurm's answer. Another record (just submitted, held,
    # dependent, or passed over for priority) may not have been tested yet: it takes
    # the partitions' defaults, more CPUs than it may get (on the side of preempting less).
    if job.gpus and job.reason not in TESTED_REASONS:
        defaults = [gpu_defaults(partition) for partition in job.partitions or [""]]
        if cpus_per_gpu == 0:
            cpus_per_gpu = max(cpu for cpu, _ in defaults)
        if mem_per_gpu == 0 and not job.mem_per_cpu_mb:
            mem_per_gpu = max(mem for _, mem in defaults)
    cpus = mem = 0
    if job.cpus is None or job.min_cpus_per_node is None or cpus_per_gpu is None:
        unmodelled.append(("cpus", "its CPUs (not reported, or --cpus-per-gpu of another kind)"))
    else:
        cpus = max(job.min_cpus_per_node, -(-job.cpus // nodes), cpus_per_gpu * gpus_per_node)
    if None in (job.mem_per_node_mb, job.mem_per_cpu_mb, mem_per_gpu):
        unmodelled.append(("memory", "its memory (not reported, or --mem-per-gpu of another kind)"))
    else:
        mem = max(job.mem_per_node_mb or job.mem_per_cpu_mb * cpus, mem_per_gpu * gpus_per_node)
        if not mem and memory_allocated():
            mem = ALL_MEMORY
    constraint = job.constraint
    if constraint is None:
        unmodelled.append(("unreported_request", "its --constraint (not reported)"))
    elif constraint.form.startswith("unreadable"):
        log.warning("job %s: --constraint %s is not Slurm's grammar: %s", job.job_id,
                    json.dumps(constraint.text), constraint.form)
        unmodelled.append(("constraint", f"--constraint={constraint.text}, {constraint.form}"))
    elif constraint.form:
        unmodelled.append(("constraint", f"--constraint={constraint.text} ({constraint.form}: which nodes"
                                          " satisfy it is Slurm's choice)"))
    shared, by_partition = _partition_sharing(job, partition_modes)
    if by_partition:
        unmodelled.extend(by_partition)
    elif shared is None:
        unmodelled.append(("unreported_request", "its --exclusive (not reported)"))
    elif shared not in ("", "exclusive", "oversubscribe"):
        unmodelled.append(("exclusive", f"--exclusive={shared}"))
    return dict(cpus_per_node=cpus, mem_per_node_mb=mem,
                features=constraint.features if constraint is not None and not constraint.form else (),
                exclusive=shared == "exclusive", **unmodelled_fields(unmodelled))


def held_by_node(job: SlurmJob) -> tuple[tuple[str, int, int], ...]:
    """A running job's (node, CPUs, MB) per allocated node; 0 where Slurm does not say."""
    names = job.allocated_nodes
    if not names:
        return ()
    cpus = job.cpus_by_node if len(job.cpus_by_node) == len(names) else (0,) * len(names)
    mem = job.mem_by_node_mb if len(job.mem_by_node_mb) == len(names) else (0,) * len(names)
    return tuple(zip(names, cpus, mem))

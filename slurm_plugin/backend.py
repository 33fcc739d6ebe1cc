"""A controller Backend that drives Slurm through its command-line tools.

Every Slurm command the controller runs, its time-out and its failure reading are in this
package, so the rest never builds an argv: the reads in slurm_plugin.observe (``SlurmObserver``),
the commands and levers in slurm_plugin.commands (``SlurmCommands``); this module puts them
together with the configuration reads into the port's implementation.

On Slurm 22.05 the CLI is the only complete interface (slurmrestd has no
SiteFactor, ReqNodeList or requeue; pyslurm does not build against 22.05), so
every read and every lever is one ``squeue``/``sinfo``/``sprio``/``scontrol``/
``scancel`` call with an argument list (never a shell string) and a time-out.

Reading: ``squeue --json --states=all`` and ``sinfo --json`` return every job/node
(22.05 ignores their filters; 24.11 honours them and without ``--states=all`` leaves
out the jobs that ended within MinJobAge), so partitions are filtered here. 22.05's squeue
JSON has no ``site_factor`` and ``scontrol show job`` does not print
``SiteFactor=`` either; ``sprio -h -o "%i %S"`` does (pending, unheld jobs
only), so it is read when some pending job lacks a site factor.

Failure policy: a command that times out or cannot reach slurmctld raises
:class:`controller.service.acting.backend.BackendUnavailable`; the observation is then
discarded whole, never returned partially. 22.05's ``squeue --json`` exits 0
with an empty job list and a non-empty ``errors`` list when slurmctld is down,
so that list is checked too. A lever that Slurm refuses (job gone, no longer
pending, ...) raises :class:`LeverFailed`.
"""
from __future__ import annotations

import os
import re
import time
from collections import Counter
from typing import Callable, Mapping, Optional

from controller.service.acting.backend import Backend, Observation
from slurm_plugin.parse_jobs import parse_squeue_record
from slurm_plugin.parse_nodes import parse_sinfo_group, parse_sinfo_record
from slurm_plugin.records import SlurmJob, SlurmNode
from slurm_plugin.arrays import SlurmObservedJob
from slurm_plugin.record_cache import RecordCache
from slurm_plugin.commands import (DEFAULT_QOS_COMMAND, QOS_LIMITS_COMMAND, Runner, SlurmCommands, check_name,
                                   subprocess_runner)
from slurm_plugin.job_request import job_defaults
from slurm_plugin.observe import SlurmObserver

__all__ = ["SlurmBackend"]


class SlurmBackend(SlurmObserver, SlurmCommands, Backend):
    """controller.service.acting.backend.Backend over Slurm's CLI.

    ``partitions``: only jobs (and nodes) in these partitions are observed; None
    means all. ``command_timeout_s``: per command, in seconds. ``runner``: how a
    command is run (tests wrap :func:`subprocess_runner` to record calls).
    ``env``: variables laid over this process's environment for every command
    (e.g. ``SLURM_CONF``).
    """

    def __init__(self, partitions: list[str] | None = None, command_timeout_s: float = 15,
                 runner: Runner | None = None, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time):
        if partitions is not None:
            partitions = [check_name(p, "partition name") for p in partitions]
        if command_timeout_s <= 0:
            raise ValueError(f"command_timeout_s must be > 0, got {command_timeout_s!r}")
        self.partitions = None if partitions is None else set(partitions)
        self.command_timeout_s = float(command_timeout_s)
        self.runner: Runner = runner or subprocess_runner
        # The controller's clock (epoch s): when an observation was taken and answered
        # (a scripted slurmctld on a virtual clock passes that clock).
        self.clock = clock
        # The controller's lease check (controller.service.acting.lease.Lease.guard), run just
        # before every lever command: a lease lost between two scontrol chunks of one
        # call stops the next chunk.
        self.fence: Optional[Callable[[], None]] = None
        self.env = None if env is None else {**os.environ, **dict(env)}
        # Commands run, by name (squeue, sinfo, sprio, scontrol, scancel): the controller
        # reports the cost of each round from it (tiresias_slurm_calls_per_round).
        self.commands_run: Counter[str] = Counter()
        # SiteFactor per job id as last observed (or last set successfully):
        # lets set_site_factors send only what differs.
        self._site_factors: dict[str, int] = {}
        # Pending job ids whose SiteFactor was read from sprio once (or set here): sprio
        # runs again only when a pending job appears that is not among them.
        self._site_factor_known: set[str] = set()
        self._memory_allocated: Optional[bool] = None  # memory_allocated(), once read
        # JobDefaults (DefCpuPerGPU, DefMemPerGPU) by partition, '' the cluster's: gpu_defaults()
        self._gpu_defaults: dict[str, tuple[int, int]] = {}
        # 26.05+: the squeue JSON says no job's --exclusive; pending job id (planned:
        # "ARRAYID_TASKID" for a task) -> (its submit time, its mode), from `scontrol show
        # job -o ID` (json_says_sharing, _read_sharing). An entry stands while the job stays
        # pending under that submit time: the fields of its record that move every round
        # (priority, last evaluation) say nothing of the mode, and the JSON that would is gone.
        self._sharing_in_json = True
        self._sharing: dict[str, tuple[Optional[float], str]] = {}
        self._sharing_tried: set[str] = set()  # asked and not answered: after the others next time
        # Partition -> node names from the last ``sinfo --json`` read by observe().
        self._partition_nodes: Optional[dict[str, list[str]]] = None
        self._new_record_caches()
        # job id -> (its SlurmJob, its site factor, its SlurmObservedJob, the 26.05
        # --exclusive entry of _sharing it was made with), of the last observe(): reused
        # only for the very same SlurmJob (a record listed twice under one id is built again)
        self._observed: dict[str, tuple[SlurmJob, Optional[int], SlurmObservedJob, object]] = {}
        # ArrayJobIds of the pending array records last observed: only a SiteFactor goes
        # to one (the tasks in the record share it: slurm_plugin.arrays); any other
        # lever would act on every task of the array. And per ArrayJobId, the ids of its
        # tasks that have records of their own ("ARRAYID_TASKID"): a lever may name
        # those, never a task still inside the pending record (Slurm would split it off).
        self._arrays: set[str] = set()
        self._task_records: dict[str, set[str]] = {}
        # node -> its active reservation, from `scontrol show reservation -o`, read when
        # the reservations jobs name change, else once every RESERVATIONS_EVERY_S
        self._reserved: dict[str, str] = {}
        self._reservations_read: Optional[tuple[float, frozenset]] = None
        # partition -> how it shares nodes (parse_partition_sharing), from `scontrol show
        # partition -o`, read when pending jobs name a partition not asked about at the
        # last read, else once every PARTITIONS_EVERY_S while jobs are pending
        self._partition_modes: dict[str, str] = {}
        self._partitions_read: Optional[tuple[float, frozenset]] = None
        # For repeat_observation(): the last observe()'s answer, the ids of its plain
        # records (no array, no het job: planned as they are), what the levers since
        # then set that squeue --json would show (job id -> field -> value), and
        # whether some other lever (or a failed one) changed a record in an unknown way.
        self._last_observation: Optional[Observation] = None
        self._plain_ids: set[str] = set()
        self._set_since: dict[str, dict[str, object]] = {}
        self._records_changed = False
        self._slurm_now: Optional[float] = None  # slurmctld's clock in the last squeue --json read (24.11+)

    def forget_reuse(self) -> None:
        """The next observe() parses every record and builds every job anew (the
        controller's periodic full round), and no observation is repeated before it."""
        self._new_record_caches()
        self._observed = {}
        self._last_observation = None

    def _new_record_caches(self) -> None:
        """The squeue and sinfo --json records parsed at the last observe(), by their text:
        only new or changed records are parsed again (slurm_plugin.record_cache). sinfo's
        are 22.05's ``nodes``, or 23.11+'s ``sinfo`` entries (one per node and partition
        with -N: 4-5 KB each, the partition's whole description in every one, which a
        whole read decoded and parsed every round)."""
        self._squeue_records: RecordCache[SlurmJob] = RecordCache("jobs", parse_squeue_record, "job_id",
                                                                  id_of=lambda job: job.job_id)
        self._sinfo_records: RecordCache[SlurmNode] = RecordCache("nodes", parse_sinfo_record, "name")
        self._sinfo_groups: RecordCache[tuple[SlurmNode, ...]] = RecordCache("sinfo", parse_sinfo_group, "nodes",
                                                                           id_marker='"nodes": [')
        self._sinfo_grouped = False  # the last sinfo answer had 23.11+'s entries

    def memory_allocated(self) -> bool:
        """Slurm allocates memory to jobs (SelectTypeParameters CR_*_Memory), as the
        last slurm_config() read said (the preflight reads it at start and until
        slurmctld answers); False before any read."""
        return bool(self._memory_allocated)

    def slurm_config(self) -> str:
        """`scontrol show config` as printed (the preflight's input); any failure is
        BackendUnavailable (the settings cannot be read). Remembers whether Slurm
        allocates memory (memory_allocated)."""
        text = self._read(["scontrol", "show", "config"])
        found = re.search(r"^SelectTypeParameters\s*=\s*(\S*)", text, re.M)
        self._memory_allocated = bool(found) and "MEMORY" in found.group(1).upper()
        found = re.search(r"^JobDefaults\s*=\s*(\S*)", text, re.M)
        self._gpu_defaults[""] = job_defaults(found.group(1) if found else "")
        return text

    def gpu_defaults(self, partition: str) -> tuple[int, int]:
        """(DefCpuPerGPU, DefMemPerGPU MB) a job of ``partition`` gets from Slurm: the
        partition's JobDefaults when partition_config() read them, else the cluster's as
        the last slurm_config() read said; (0, 0) none known."""
        return self._gpu_defaults.get(partition) or self._gpu_defaults.get("", (0, 0))

    def qos_config(self) -> str:
        """Every QOS's preemption settings from slurmdbd, one ``name|preemptmode|gracetime|
        preemptexempttime|preempt`` line each (the preflight of ``preemption: slurm``);
        any failure is BackendUnavailable."""
        return self._read(["sacctmgr", "-n", "-P", "show", "qos",
                           "format=name,preemptmode,gracetime,preemptexempttime,preempt"])

    def qos_limits(self) -> tuple[str, str]:
        """(every QOS's limits, the associations' default QOS) from slurmdbd, as
        controller.service.ops.qos_limits reads them (the limits preemption: slurm's QOS swap
        would drop); any failure is BackendUnavailable."""
        return self._read(QOS_LIMITS_COMMAND), self._read(DEFAULT_QOS_COMMAND)

    def qos_limit_table(self) -> str:
        """Every QOS's limits from slurmdbd as QOS_LIMITS_COMMAND prints them (the GPU
        limits of a pending job's QOS: controller.service.ops.qos_gate); any failure (no
        accounting, slurmdbd down) is BackendUnavailable."""
        return self._read(QOS_LIMITS_COMMAND)

    def partition_config(self) -> str:
        """`scontrol show partition -o` as printed, one line per partition (the
        preflight reads each one's own PreemptMode); any failure is BackendUnavailable."""
        text = self._read(["scontrol", "show", "partition", "-o"])
        for name, defaults in re.findall(r"^PartitionName=(\S+).*?\sJobDefaults=(\S*)", text, re.M):
            if job_defaults(defaults) != (0, 0):
                self._gpu_defaults[name] = job_defaults(defaults)
        return text

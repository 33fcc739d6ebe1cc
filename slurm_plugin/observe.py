"""Slurm's reads (``SlurmObserver``, a part of slurm_plugin.backend's SlurmBackend):
``squeue --json`` and ``sinfo --json`` through the record caches, ``sprio`` for SiteFactor,
``scontrol show job/partition/reservation`` where the JSON leaves something open, the light
polls between rounds, and the Observation they make (ObservedJob per record).
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import replace
from typing import Callable, Iterable, Optional

from controller.service.acting.backend import BackendUnavailable, Observation, ObservedJob
from controller.core.model import Node
from slurm_plugin.arrays import SlurmObservedJob, Withheld, plan_view
from slurm_plugin.grammar import SlurmParseError, gres_counts
from slurm_plugin.parse_jobs import json_says_sharing, parse_squeue_json, squeue_clock
from slurm_plugin.parse_nodes import (merge_sinfo_groups, parse_partition_sharing, parse_reservations,
                                      parse_sinfo_json)
from slurm_plugin.reasons import judged
from slurm_plugin.records import SlurmJob, SlurmNode
from slurm_plugin.commands import JOB_ID_RE, one_line
from slurm_plugin.exclusive_modes import ExclusiveModes
from slurm_plugin.job_request import asked_per_node, held_by_node

log = logging.getLogger(__name__)
RESERVATIONS_EVERY_S = 60.0  # how stale the reservations may be when no job names a new one
PARTITIONS_EVERY_S = 60.0  # how stale the partitions' OverSubscribe may be when no job names a new partition
# The fields a SlurmObservedJob takes from the SlurmJob as they are (same name, same
# value); _observed_job names the ones it renames or converts.
_AS_REPORTED = ("job_id", "user", "partition", "state", "reason", "gpus", "time_limit_s", "restart_count", "batch",
                "comment", "admin_comment", "max_nodes", "mps", "array_tasks", "array_max_tasks", "het_job_id",
                "het_offset", "gpu_type", "gpu_types", "reservation", "account", "name", "qos", "nice")


def _free(total: int | None, allocated: int | None) -> int | None:
    """What a node has free of a count Slurm reports in all and allocated (None: not both)."""
    return None if total is None or allocated is None else max(total - allocated, 0)


# One record per node (and partition): 23.11+ `sinfo --json` without -N groups nodes by
# partition and state and reports the group's first node's features for all of them
# (seen on 24.11: g1 with Features=ib grouped with g2-g4 without, all shown "ib") and its
# CPUs summed; -N makes every count and feature a node's own. 22.05 lists nodes anyway.
SINFO_ARGV = ["sinfo", "--json", "-N"]


def _held_on_nodes(jobs: list[SlurmJob]) -> dict[str, tuple[int | None, int | None]]:
    """Each node's CPUs and MB of memory held by the jobs on it (every partition's),
    summed from the jobs' own allocations: what a node reports for itself is missing
    where 23.11+ sinfo groups several nodes into one record (their allocated counts
    are summed over the group). None: some job on the node does not say its share."""
    held: dict[str, tuple[int | None, int | None]] = {}
    for job in jobs:
        names = job.allocated_nodes
        if not names or job.state == "PENDING":
            continue
        cpus = job.cpus_by_node if len(job.cpus_by_node) == len(names) else (None,) * len(names)
        mem = job.mem_by_node_mb if len(job.mem_by_node_mb) == len(names) else (None,) * len(names)
        for name, c, m in zip(names, cpus, mem):
            had_c, had_m = held.get(name, (0, 0))
            held[name] = (None if had_c is None or c is None else had_c + c,
                          None if had_m is None or m is None else had_m + m)
    return held


class SlurmObserver(ExclusiveModes):
    """SlurmBackend's reads: squeue, sinfo, sprio and scontrol show, the record caches and
    what an observation keeps for the next (state set up by SlurmBackend.__init__)."""


    def observe(self) -> Observation:
        """Every job in the configured partitions and their nodes, read now.

        Raises BackendUnavailable when any read fails; records that do not parse
        are listed in ``Observation.skipped`` (one line each).
        """
        observed_at_s = self.clock()
        squeue_text = self._read(["squeue", "--json", "--states=all"])
        answered_at_s = self.clock()
        sinfo_text = self._read(SINFO_ARGV)
        skipped: list[str] = []
        job_errors: list[SlurmParseError] = []
        node_errors: list[SlurmParseError] = []

        def load_squeue(text: str) -> dict:  # (the document a text identical to the last one's is not loaded again)
            doc = self._load(text, "squeue --json")
            self._slurm_now = squeue_clock(doc)
            self._sharing_in_json = json_says_sharing(doc)
            return doc

        def load_sinfo(text: str) -> dict:
            return self._load(text, "sinfo --json")
        try:
            jobs = self._squeue_records.read(squeue_text, load_squeue, job_errors)
            fresh = self._squeue_records.fresh
            if jobs is None:  # not cut into records: read whole
                job_errors.clear()
                jobs = fresh = parse_squeue_json(load_squeue(squeue_text), errors=job_errors)
            # 22.05's nodes, or 23.11+'s sinfo entries (node_errors: none yet where no record
            # was cut), the shape of the last read first (looking for the other scans the text)
            nodes = None
            caches = ((self._sinfo_records, False), (self._sinfo_groups, True))
            for cache, grouped in reversed(caches) if self._sinfo_grouped else caches:
                read = cache.read(sinfo_text, load_sinfo, node_errors)
                if read is not None:
                    nodes, self._sinfo_grouped = merge_sinfo_groups(read) if grouped else read, grouped
                    break
            if nodes is None:  # not cut into records: read whole
                node_errors.clear()
                nodes = parse_sinfo_json(load_sinfo(sinfo_text), errors=node_errors)
        except SlurmParseError as exc:  # not a document at all: act on nothing
            raise BackendUnavailable(f"unreadable Slurm output: {exc}") from None
        try:
            observation = self._observation(jobs, fresh, nodes, job_errors, node_errors, skipped, observed_at_s)
        except BaseException:
            self._squeue_records.forget()  # its records were not all taken in: read them all again next time
            raise
        # the clock evidence (controller.service.round.slurm_clock): slurmctld's time inside the answer
        observation.answered_at_s, observation.slurm_now_s = answered_at_s, self._slurm_now
        return observation

    def _observation(self, jobs: list[SlurmJob], fresh: list[SlurmJob], nodes: list[SlurmNode],
                     job_errors: list[SlurmParseError], node_errors: list[SlurmParseError], skipped: list[str],
                     observed_at_s: float) -> Observation:
        """observe()'s records as an Observation; ``fresh``: those of ``jobs`` parsed by
        this read (the others are the very records of the last observe())."""
        withheld = Withheld()  # a bad job record withholds "gone" from its own job only
        for exc in job_errors:
            skipped.append(f"squeue job {exc.job_id or '?'} (record {exc.record_index}): {exc}")
            if exc.job_id:
                withheld.ids.add(exc.job_id)
            else:
                withheld.everything = True  # which job it was is unknown
        for exc in node_errors:
            skipped.append(f"sinfo node {exc.node or '?'} (record {exc.record_index}): {exc}")

        every_job = jobs  # (held_on below sums every partition's jobs)
        if self.partitions is not None:
            jobs = [j for j in jobs if self._in_scope(j.partitions)]

        # A pending job's SiteFactor: its record's (24.11 JSON), else sprio's, else as
        # last observed or set here (22.05 JSON has none). sprio is read when a pending
        # job shows up whose factor is none of these: only a record parsed by this read
        # can be one (a record the last observe() saw pending was asked then), so the
        # others are not even looked at for it.
        known, known_ids = self._site_factors, self._site_factor_known
        asked = any(j.state == "PENDING" and j.site_factor is None and j.job_id not in known_ids
                    and self._in_scope(j.partitions) for j in fresh)
        sprio = self._read_sprio_site_factors(skipped) if asked else {}
        # 26.05's JSON does not say --exclusive: `scontrol show job -o` does, read when a
        # pending job shows up whose mode is not known yet (as sprio above), after the pass
        # below, which lists those jobs (_learn_sharing). A mode stands for the job's submit
        # time: a requeued job's is read again (only a record parsed by this read can be one).
        learning = not self._sharing_in_json
        sharing = self._sharing
        if learning:
            for job in fresh:
                entry = sharing.get(job.job_id)
                if entry is not None and entry[0] != job.submit_time:
                    del sharing[job.job_id]

        # the partitions' OverSubscribe (EXCLUSIVE: whole nodes, FORCE: shared cores), for the
        # pending jobs whose own record leaves it open; a change re-reads every record
        named_partitions = frozenset(p for j in fresh if j.state == "PENDING" and self._in_scope(j.partitions)
                                     and self._sharing_open(j) for p in j.partitions if p)
        # (whether any pending job leaves it open is asked only when the minute is up: a
        # pass over every record each round otherwise)
        if self._read_partition_modes(named_partitions, lambda: any(
                j.state == "PENDING" and self._sharing_open(j) for j in jobs), observed_at_s):
            self._observed = {}

        # One pass over the records for all they say (each pass over 55,000 records costs
        # its cache misses: one pass each was a third of observe()). A record that is the
        # same object as at the last observe() with the same SiteFactor keeps its ObservedJob.
        pending: set[str] = set()
        arrays: set[str] = set()
        task_records: dict[str, set[str]] = {}
        named: set[str] = set()  # the reservations jobs name
        plain: set[str] = set()  # records planned as they are (no array, no het job)
        observed_jobs: list[SlurmObservedJob] = []
        last, self._observed = self._observed, {}
        kept_now = self._observed
        self._site_factors = observed_factors = {}
        unknown: list[tuple[str, int, SlurmJob, Optional[int]]] = []  # 26.05: pending, mode not known
        for job in jobs:
            job_id = job.job_id
            site_factor = job.site_factor
            if job.state == "PENDING":
                pending.add(job_id)
                if sprio:
                    site_factor = sprio.get(job_id, site_factor)
                if site_factor is None:
                    site_factor = known.get(job_id)
            if job.array_tasks:
                arrays.add(job_id)
            elif not job.het_job_id:
                plain.add(job_id)
                if job.array_job_id and "_" in job_id:
                    task_records.setdefault(job.array_job_id, set()).add(job_id)
            if job.reservation:
                named.add(job.reservation)
            # 26.05: a pending job's --exclusive mode comes from `scontrol show job` and may
            # be learned (or forgotten) after its record was first observed: the ObservedJob
            # is kept while the mode it was made with is still the one known
            mode = None if self._sharing_in_json or job.state != "PENDING" else sharing.get(job_id)
            kept = last.get(job_id)
            if kept is not None and kept[0] is job and kept[1] == site_factor and kept[3] == mode:
                observed = kept[2]  # the same record as last time: the same ObservedJob
            else:
                try:
                    observed = self._observed_job(job, site_factor)
                except (SlurmParseError, TypeError, ValueError) as exc:
                    skipped.append(f"squeue job {job_id}: {one_line(str(exc))}")
                    withheld.ids.add(job.het_job_id or job_id)
                    continue
            kept_now[job_id] = (job, site_factor, observed, mode)
            observed_jobs.append(observed)
            if site_factor is not None:
                observed_factors[job_id] = site_factor
            if mode is None and learning and job.state == "PENDING":
                unknown.append((job_id, len(observed_jobs) - 1, job, site_factor))
        self._site_factor_known = pending if asked else known_ids & pending
        if learning:  # the modes learned now: those jobs made again with them
            self._learn_sharing(pending, {job_id: job.submit_time for job_id, _, job, _ in unknown}, skipped)
            for job_id, at, job, site_factor in unknown:
                mode = sharing.get(job_id)
                if mode is None:
                    continue
                try:
                    observed_jobs[at] = self._observed_job(job, site_factor)
                except (SlurmParseError, TypeError, ValueError) as exc:
                    skipped.append(f"squeue job {job_id}: {one_line(str(exc))}")
                    withheld.ids.add(job.het_job_id or job_id)
                    observed_jobs[at] = None
                    del kept_now[job_id]
                    continue
                kept_now[job_id] = (job, site_factor, observed_jobs[at], mode)
            if None in observed_jobs:
                observed_jobs = [job for job in observed_jobs if job is not None]

        reserved = self._reservations(named, nodes, observed_at_s)

        held: list[dict] = []  # summed from the jobs only for a node that does not report its own counts

        def held_on(name: str) -> tuple[int | None, int | None]:
            if job_errors:  # a bad record may hold CPUs on any node: then no node's share is summed from jobs
                return None, None
            if not held:
                held.append(_held_on_nodes(every_job))
            return held[0].get(name, (0, 0))
        observed_nodes = [
            Node(name=n.name, gpus_total=n.gpus_total, gpus_free=n.gpus_free, available=n.available,
                 partitions=tuple(n.partitions), gpu_type=n.gpu_type, reservation=reserved.get(n.name, ""),
                 gpus_mps=n.gpus_mps, cpus_total=n.cpus_total,
                 cpus_free=_free(n.cpus_total, n.cpus_alloc if n.cpus_alloc is not None else held_on(n.name)[0]),
                 mem_total_mb=n.mem_total_mb,
                 mem_free_mb=_free(n.mem_total_mb, n.mem_alloc_mb if n.mem_alloc_mb is not None
                                   else held_on(n.name)[1]),
                 features=n.features)
            for n in nodes if self._node_in_scope(n)
        ]
        self._arrays, self._task_records = arrays, task_records
        self._partition_nodes = self._partition_map(nodes)
        view = plan_view(observed_jobs, withheld)
        observation = Observation(observed_at_s=observed_at_s, jobs=view.jobs, nodes=observed_nodes,
                                  skipped=skipped + view.problems, withheld=view.withheld)
        self._last_observation, self._set_since, self._records_changed = observation, {}, False
        self._plain_ids = plain
        return observation

    def observe_jobs(self, job_ids: Iterable[str]) -> list[ObservedJob]:
        """The jobs ``job_ids`` (planned ids: "ARRAYID_TASKID" for an array task) as
        observe() lists them, whatever partition they are in now: `tiresias restore`
        undoes the levers it set on jobs that left the configured partitions (moved, or
        the partitions changed). One ``squeue --json --states=all`` of its own: what
        observe() keeps between rounds is left as it is. A job Slurm no longer lists,
        or whose record does not parse, is absent. An ArrayJobId is the array's pending
        record while there is one, else one of its tasks, under the array's id (restore
        resets the array's SiteFactor there). 22.05's JSON has no SiteFactor: a job's is
        None there (unknown)."""
        wanted = {str(job_id) for job_id in job_ids}
        if not wanted:
            return []
        text = self._read(["squeue", "--json", "--states=all"])
        try:
            records = parse_squeue_json(self._load(text, "squeue --json"), errors=[])
        except SlurmParseError as exc:  # not a document at all
            raise BackendUnavailable(f"unreadable Slurm output: {exc}") from None
        jobs = []
        for job in records:
            try:
                jobs.append(self._observed_job(job, job.site_factor))
            except (SlurmParseError, TypeError, ValueError):
                continue
        found = [job for job in plan_view(jobs, Withheld()).jobs if job.job_id in wanted]
        # An ArrayJobId (the SiteFactor of the tasks in its pending record went to it):
        # that record while it is there, else one of the array's tasks, under its id.
        arrays = wanted - {job.job_id for job in found}
        of_array: dict[str, SlurmObservedJob] = {}
        for job in jobs:
            head, _, task = job.job_id.partition("_")
            if head not in arrays or not (task or job.array_tasks):
                continue
            kept = of_array.get(head)
            if kept is None or job.job_id == head or (kept.job_id != head and job.state in ("PENDING", "RUNNING")):
                of_array[head] = job  # the pending record first, else a task still there
        return found + [replace(job, job_id=head, array_tasks="", array_max_tasks=0)
                        for head, job in of_array.items()]

    def repeat_observation(self) -> Optional[Observation]:
        """The last observe()'s records again, read at the current time, with what the
        levers since then set (SiteFactor, AdminComment) laid over them: what observe()
        would return now were nothing else changed in Slurm, without reading squeue
        --json or sinfo --json. Its caller knows that nothing else changed (the light
        poll's answer is the one of before that observe(), controller.service.round.daemon).
        None: no observe() yet, or a lever since then changed a record in a way not
        known here (a pin, a move, a requeue, a hold, a failed lever)."""
        last = self._last_observation
        if last is None or self._records_changed:
            return None
        if self._set_since:  # folded in once: a job unchanged since stays the same object
            changes = self._set_since
            last.jobs = [replace(job, **changes[job.job_id]) if job.job_id in changes and any(
                getattr(job, name) != value for name, value in changes[job.job_id].items()) else job
                for job in last.jobs]
            self._set_since = {}
        return replace(last, observed_at_s=self.clock(), jobs=list(last.jobs), answered_at_s=None, slurm_now_s=None)

    def _sharing_open(self, job: SlurmJob) -> bool:
        """The pending job's record does not settle how its partitions share nodes. Each
        release writes the first partition's EXCLUSIVE into the job's own mode (22.05
        'none', 24.11 ['none'], 26.05's `scontrol show job` Exclusive=NODE), but FORCE
        only as --oversubscribe would read (26.05: not at all), and a job of several
        partitions by the first one (24.11: by none). Only such jobs need the partitions
        read: a cluster whose jobs ask one partition each and no --oversubscribe never
        runs the command (22.05, 24.11)."""
        return (not self._sharing_in_json or job.shared == "oversubscribe"
                or sum(1 for p in job.partitions if p) > 1)

    def _read_partition_modes(self, named: frozenset, pending: Callable[[], bool], now: float) -> bool:
        """Read the partitions' OverSubscribe (``scontrol show partition -o``) when the
        pending jobs parsed by this read (``named``: their partitions) name one not
        asked about at the last read, or PARTITIONS_EVERY_S passed while some job is
        pending whose record leaves it open (``pending()``): one command a minute at most
        while nothing new comes.
        Unreadable: the last answer stays (logged). Returns whether the answer changed."""
        last = self._partitions_read
        asked = frozenset() if last is None else last[1]
        if not (named - asked) and not (last is not None and now - last[0] >= PARTITIONS_EVERY_S and pending()):
            return False
        self._partitions_read = (now, asked | named)
        try:
            modes = parse_partition_sharing(self._read(["scontrol", "show", "partition", "-o"]))
        except (BackendUnavailable, SlurmParseError) as exc:
            log.warning("scontrol show partition unreadable, the last answer kept: %s", one_line(str(exc)))
            return False
        changed, self._partition_modes = modes != self._partition_modes, modes
        return changed

    def _reservations(self, by_jobs: set[str], nodes: list[SlurmNode], now: float) -> dict[str, str]:
        """Node -> active reservation. Slurm flags a node in an active reservation
        RESERVED; with no such node and no job naming one there is nothing to read.
        Else read again only when the reserved nodes or the reservations jobs name
        change, or RESERVATIONS_EVERY_S passed: one command a minute at most while
        nothing changes. Unreadable: the last answer stays (logged, not a
        skipped record: no job's record is in doubt)."""
        named = frozenset(by_jobs) | frozenset(
            "node " + n.name for n in nodes if "RESERVED" in n.flags)
        if not named:
            self._reserved, self._reservations_read = {}, None
            return self._reserved
        last = self._reservations_read
        if last is not None and last[1] == named and now - last[0] < RESERVATIONS_EVERY_S:
            return self._reserved
        self._reservations_read = (now, named)
        try:
            self._reserved = parse_reservations(self._read(["scontrol", "show", "reservation", "-o"]))
        except (BackendUnavailable, SlurmParseError) as exc:
            log.warning("scontrol show reservation unreadable, the last answer kept: %s", one_line(str(exc)))
        return self._reserved

    def poll(self) -> frozenset:
        """The cheap change check between rounds: the lines ``JOBID STATE REASON``
        (compact state, pending reason) of every job, from one ``squeue -h -o "%i %t
        %r"`` (no JSON, no nodes, no sprio), as a set (split in C: a tuple per line was
        80% of it at 55,000 jobs). The reason is in it because it decides whether a
        pending job may cause a preemption (slurm_plugin.reasons): a fresh
        job's ``None`` turns into ``Resources`` with no change of state."""
        argv = ["squeue", "-h", "-o", "%i %t %r"]
        if self.partitions is not None:
            argv += ["-p", ",".join(sorted(self.partitions))]
        out = self._read(argv)
        return frozenset(map(str.strip, out.splitlines())) - {""}

    def poll_nodes(self) -> frozenset:
        """The nodes' half of the change check, taken only when a round would reuse the
        last observation (controller.service.round.daemon.Controller.observe): the lines
        ``STATE NODES`` of one ``sinfo -h -o "%T %N"`` (nodes grouped by state: a few
        lines, however many nodes), so a drained or downed node is never planned on
        from a reused observation."""
        argv = ["sinfo", "-h", "-o", "%T %N"]
        if self.partitions is not None:
            argv += ["-p", ",".join(sorted(self.partitions))]
        return frozenset(map(str.strip, self._read(argv).splitlines())) - {""}

    def partition_nodes(self) -> dict[str, list[str]]:
        """Partition name -> its node names (in ``sinfo`` order), for the partitions in
        scope. From the ``sinfo --json`` of the last observe(); read now if none yet."""
        if self._partition_nodes is None:
            doc = self._load(self._read(SINFO_ARGV), "sinfo --json")
            try:
                nodes = parse_sinfo_json(doc, errors=[])
            except SlurmParseError as exc:
                raise BackendUnavailable(f"unreadable Slurm output: {exc}") from None
            self._partition_nodes = self._partition_map(nodes)
        return {name: list(members) for name, members in self._partition_nodes.items()}

    def _partition_map(self, nodes: Iterable[SlurmNode]) -> dict[str, list[str]]:
        members: dict[str, dict[str, None]] = {}  # an ordered set per partition: linear, not quadratic
        for node in nodes:
            for name in node.partitions:
                if self.partitions is None or name in self.partitions:
                    members.setdefault(name, {})[node.name] = None
        return {name: list(names) for name, names in members.items()}

    @staticmethod
    def _load(text: str, what: str) -> dict:
        """The decoded document; an ``errors`` entry (slurmctld down) is an outage.
        Its shape is checked by the parser, whose errors also end as BackendUnavailable."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise BackendUnavailable(f"{what}: not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise BackendUnavailable(f"{what}: expected a JSON object")
        errors = doc.get("errors") or []
        if errors:
            # 22.05 exits 0 with an empty list and an error entry when slurmctld is down.
            first = errors[0] if isinstance(errors[0], dict) else {"error": errors[0]}
            detail = first.get("description") or first.get("error") or first
            source = first.get("source", "")
            raise BackendUnavailable(f"{what} reported an error: {detail}{f' ({source})' if source else ''}")
        return doc

    def _in_scope(self, partitions: list[str]) -> bool:
        return self.partitions is None or any(p in self.partitions for p in partitions)

    def _node_in_scope(self, node: SlurmNode) -> bool:
        # A node without a partition list (older/other shapes) is kept.
        return self.partitions is None or not node.partitions or self._in_scope(node.partitions)

    def _read_sprio_site_factors(self, skipped: list[str]) -> dict[str, int]:
        """SiteFactor of pending, unheld jobs (``sprio`` lists no others)."""
        argv = ["sprio", "-h", "-o", "%.30i %.30S"]
        result = self._run(argv)
        if result.returncode != 0:
            if self._unreachable(result):
                raise BackendUnavailable(f"sprio: slurmctld unreachable: {one_line(result.stderr)}")
            # e.g. priority/basic: no factors to read; levers then send every value.
            skipped.append(f"sprio exited {result.returncode}: {one_line(result.stderr)}; site factors unknown")
            return {}
        factors: dict[str, int] = {}
        for line in result.stdout.splitlines():
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or not re.fullmatch(r"-?[0-9]{1,19}", parts[1]):
                skipped.append(f"sprio line {line.strip()[:80]!r}: expected 'JOBID SITE'")
                continue
            factors[parts[0]] = int(parts[1])
        return factors

    def priorities(self) -> dict[str, int]:
        """Slurm's own priority of each pending, unheld job (``sprio``'s PRIORITY, the
        highest when the job waits in several partitions), for ``tiresias shadow-diff``.
        LeverFailed when sprio cannot say (e.g. priority/basic)."""
        argv = ["sprio", "-h", "-o", "%.30i %.30Y"]
        out = self._query(argv, "Slurm's job priorities")
        found: dict[str, int] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and JOB_ID_RE.fullmatch(parts[0]) and re.fullmatch(r"-?[0-9]{1,19}", parts[1]):
                found[parts[0]] = max(int(parts[1]), found.get(parts[0], int(parts[1])))
        return found

    @staticmethod
    def _gpus_by_node(job: SlurmJob) -> tuple[tuple[str, int], ...]:
        """Per-node GPU counts of a job holding nodes: from gres_detail (aligned with
        the allocated node list) when present, else the total split evenly."""
        if not job.nodes or job.state == "PENDING":
            return ()
        names = job.allocated_nodes or list(job.nodes)
        detail = job.gres_detail
        if len(detail) == len(names):
            counts = [gres_counts(d, field_name="gres_detail").get("gpu", 0) for d in detail]
            if sum(counts) > 0 or job.gpus == 0:
                return tuple(zip(names, counts))
        if job.gpus <= 0:
            return tuple((n, 0) for n in names)
        share, extra = divmod(job.gpus, len(names))
        return tuple((n, share + (1 if i < extra else 0)) for i, n in enumerate(names))

    def _observed_job(self, job: SlurmJob, site_factor: int | None) -> SlurmObservedJob:
        if job.state == "PENDING" and not self._sharing_in_json:
            known = self._sharing.get(job.job_id)
            job = replace(job, shared=None if known is None else known[1])  # None: unknown, never preempted for
        if job.state == "PENDING" and job.gpus_per_node and not job.max_nodes:
            # --gres=gpu:K: Slurm needs K GPUs on each node and counts them at its node
            # count; a gang spread over more nodes (3 GPUs here, 1 there) is one Slurm never
            # starts, so no victim is chosen for such a layout
            job = replace(job, max_nodes=max(job.node_count, 1))
        return judged(SlurmObservedJob(
            **{name: getattr(job, name) for name in _AS_REPORTED},
            nodes=tuple(job.nodes),
            gpus_by_node=self._gpus_by_node(job),
            submit_time_s=job.submit_time,
            start_time_s=job.start_time,
            end_time_s=job.end_time,
            eligible_time_s=job.eligible_time,
            requeueable=bool(job.requeue),
            site_factor=site_factor,
            required_nodes=tuple(job.required_nodes),
            excluded_nodes=tuple(job.excluded_nodes),
            min_nodes=job.node_count,
            **(asked_per_node(job, self.memory_allocated, self.gpu_defaults, self._partition_modes)
               if job.state == "PENDING" else {}),
            held_by_node=held_by_node(job) if job.state == "RUNNING" else (),
        ))

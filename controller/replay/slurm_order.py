"""Slurm starting the jobs of a replayed controller: the plan decides bands,
preemptions and BeginTime releases, slurmctld's scheduler decides the starts (priority
order, backfill's reservations). ``SimConfig.slurm_starts``; `tiresias simulate
--like-controller CONFIG --slurm-starts`; bench/ab_slurm.py's prediction."""
from __future__ import annotations

import bisect

from controller.core.placement import node_fits
from controller.core.plan import Start
from controller.core.ids import decision_id
from controller.replay.slurmctld import available_at, by_band, gang, pick_nodes, start_walk


class SlurmOrder:
    """The controller's round with Slurm starting the jobs (the Simulation's engine, wrapped:
    ``SimConfig.slurm_starts``).

    The controller starts nothing itself: it sets SiteFactor bands (queue level, half a
    band more for a job that ran before), releases a requeued job's BeginTime when its
    plan starts it, and signals and requeues its victims. Slurm's scheduler then starts
    pending jobs by priority (the band; inside it the older job first), not the plan's
    picks: a job that cannot start does not let the jobs below it pass as the engine's
    skipping walk does: backfill reserves nodes for it (those where it could start
    soonest, by the running jobs' time limits), and with every job asking for the same
    long limit no later job can end before that reservation, so a later job may start
    only on nodes no waiting job above it reserved. A requeued job is held (its
    BeginTime) until the plan starts it. Each job takes the node with the fewest free
    GPUs it fits on among the nodes it may use (partitions, GPU type: node_fits), a gang
    of N nodes N whole ones: the start rule of controller.replay.slurmctld, which SimSlurm
    follows too. Measured on the 60-job A/B (controller run):
    small queue-1 jobs waited 15-60 s behind a waiting 8- or 4-GPU job with 3-8 GPUs
    free, where the skipping walk started them within a round.

    ``limit_s``: every job's time limit (None: no limits; backfill then sees no end to
    reserve from and starts any later job that fits, still in Slurm's order).

    What keeps a round cheap (the same starts as trying every node for every pending
    job): the nodes a job may use are computed once per node class (the job's
    partitions, GPU type, reservation, features: all node_fits reads); the walk stops
    when no node outside the reservations has a free GPU; a job like one that could
    not start this round (same class, same gang) is not
    tried again (free GPUs only fall and reservations only grow during the walk), and
    backfill's reservation sorts a class's nodes by when they free up once between
    starts, not once per waiting job."""

    def __init__(self, engine, limit_s: float | None):
        self.inner = engine
        self.policy = engine.policy
        self.limit_s = limit_s
        self.released: dict[str, int] = {}  # requeued job -> its preemptions when the plan started it
        self._nodes: tuple = ()  # the node table the class memo below is for
        self._class_nodes: dict[tuple, tuple[str, ...]] = {}  # node class -> the nodes it fits, in table order
        # job id -> its queue service before this round's starvation promotion: the
        # incremental loop (controller.replay.mlfq_replay) promotes before the step, the
        # generic loop after it, and the band Slurm starts by is the one before
        self.service_before: dict[str, float] = {}

    def usable(self, spec) -> tuple[str, ...]:
        """The nodes ``spec`` may use (node_fits), in the node table's order, once per class
        (``step`` forgets them when the node table changes)."""
        key = (spec.partitions, spec.gpu_type, spec.reservation, spec.features)
        names = self._class_nodes.get(key)
        if names is None:
            names = self._class_nodes[key] = tuple(node.name for node in self._nodes if node_fits(node, spec))
        return names

    def step(self, snapshot):
        plan = self.inner.step(snapshot)
        nodes = tuple(snapshot.nodes)
        if nodes != self._nodes:
            self._nodes, self._class_nodes = nodes, {}
        planned = [a for a in plan.actions if a.kind == "start"]
        if planned:
            by_id = {job.job_id: job for job in snapshot.jobs}
            for action in planned:
                self.released[action.job_id] = by_id[action.job_id].preemptions
        thresholds = self.inner.config.thresholds_gpu_s
        released = self.released
        pending = [j for j in snapshot.jobs if not j.running and (j.preemptions == 0 or
                                                                  released.get(j.job_id) == j.preemptions)]
        levels = plan.levels

        before = self.service_before

        def level(job):
            # the thresholds it reached (they are strictly increasing: check_thresholds)
            known = levels.get(job.job_id) if levels else None
            if known is not None:
                return known
            return bisect.bisect_right(thresholds, before.get(job.job_id, job.queue_service_gpu_s) if before
                                       else job.queue_service_gpu_s)

        backfill = self.limit_s is not None
        on_node: dict[str, list[tuple[float, int]]] = {node.name: [] for node in snapshot.nodes}
        if backfill:  # only backfill reads when the running jobs end
            for job in snapshot.jobs:
                if job.running:
                    for node, gpus in job.placement:
                        on_node[node].append((job.run_start_s + self.limit_s, gpus))
        free = snapshot.free_gpus_by_node()
        room = {node for node in on_node if free.get(node, 0) > 0}  # free GPUs, not reserved
        per_node = max(node.gpus_total for node in snapshot.nodes)
        failed: set[tuple] = set()  # (class nodes, GPUs per node, nodes) that did not fit
        # (class nodes, GPUs per node) -> [its nodes by backfill's available_at, how many lead it reserved]
        soonest: dict[tuple, list] = {}
        starts = []

        def place(job, reserved):
            gpus, count = gang(job.num_gpus, per_node)
            names = self.usable(job.spec)
            if (names, gpus, count) in failed:  # free GPUs only fall and reservations only grow in a walk
                return None
            where = pick_nodes(free, (node for node in names if node not in reserved) if reserved else names,
                               gpus, count)
            if where is None:
                failed.add((names, gpus, count))
            return where

        def start(job, nodes):
            gpus, _ = gang(job.num_gpus, per_node)
            for node in nodes:
                free[node] -= gpus
                if free[node] <= 0:
                    room.discard(node)
                on_node[node].append((snapshot.now_s + (self.limit_s or 0.0), gpus))
            soonest.clear()  # those nodes' free GPUs and ends changed
            starts.append(Start(decision_id(snapshot.round_id, "slurm_start", len(starts)), job.job_id,
                                tuple((node, gpus) for node in nodes), "Slurm: priority order"))

        def reserve(job, reserved):
            # slurmctld.reservation over the class's nodes not yet reserved, from one sort per
            # (class, GPUs) between starts
            gpus, count = gang(job.num_gpus, per_node)
            names = self.usable(job.spec)
            memo = soonest.get((names, gpus))
            if memo is None:
                memo = soonest[(names, gpus)] = [sorted(
                    (available_at(free.get(node, 0), on_node[node], snapshot.now_s, gpus), node) for node in names), 0]
            order, at = memo
            while at < len(order) and order[at][1] in reserved:  # reservations only grow: a prefix stays reserved
                at += 1
            memo[1] = at
            nodes = []
            while at < len(order) and len(nodes) < count:
                node = order[at][1]
                if node not in reserved:
                    nodes.append(node)
                at += 1
            room.difference_update(nodes)
            return nodes

        start_walk(pending, by_band(level), place, start, reserve if backfill else None, full=lambda: not room)
        plan.actions = [a for a in plan.actions if a.kind != "start"] + starts
        return plan

"""Slurm starting the jobs of a replayed controller: the plan decides bands,
preemptions and BeginTime releases, slurmctld's scheduler decides the starts (priority
order, backfill's reservations). ``SimConfig.slurm_starts``; `tiresias simulate
--like-controller CONFIG --slurm-starts`; bench/ab_slurm.py's prediction."""
from __future__ import annotations

import bisect
import heapq
from itertools import chain

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
    starts, not once per waiting job. On the incremental loop (``track``) the pending jobs
    are kept between rounds, grouped by class and gang in Slurm's order, and the walk
    merges the groups, passing a group whole once its later jobs could neither start nor
    reserve; a group whose gang the round's free GPUs per node could not hold at the walk's
    start is not looked for (without backfill not walked at all: issue 37's plan picks that
    Slurm's order does not start leave many such rounds); a job is placed among the nodes
    with room only; a node's availability for
    backfill is kept while its free GPUs and running jobs stand."""

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

    # -- the incremental loop's pending jobs, kept between rounds ------------------
    def track(self, job_of, nodes) -> None:
        """Keep the pending jobs (and, with time limits, the running jobs' ends per node)
        from the replay loop's events instead of reading every job each round
        (controller.replay.mlfq_replay): ``arrived``, ``started``, ``ended`` (stopped,
        signalled or finished), ``promoted``; ``job_of(job id)``: the job; ``nodes``: the
        replay's node table."""
        self._job_of = job_of
        self._nodes, self._class_nodes = tuple(nodes), {}
        # (class nodes, GPUs per node, nodes) -> its pending jobs as (Slurm's order key, index, job), sorted
        self._groups: dict[tuple, list] = {}
        self._group_of: dict[int, tuple] = {}  # pending job.index -> (its group, its item)
        self._ends: dict[str, dict[int, tuple[float, int]]] = {}  # node -> running job.index -> (end, GPUs)
        self._ends_on: dict[int, tuple[str, ...]] = {}  # running job.index -> the nodes it is listed on
        # node -> GPUs asked -> (its free GPUs, available_at): with fewer free than asked,
        # available_at reads only the free GPUs and the ends, so it stands until they change
        self._available: dict[str, dict[int, tuple[int, float]]] = {}
        self._as_set: dict[tuple, frozenset | None] = {}  # class nodes -> the same as a set (None: every node)
        self._per_node = max(node.gpus_total for node in nodes)
        self.tracked = True

    tracked = False  # track() sets up the kept pending jobs

    def arrived(self, job) -> None:
        """Submitted: pending (never preempted)."""
        self._pend(job)

    def _pend(self, job) -> None:
        service = self.service_before.get(job.job_id, job.queue_service_gpu_s)
        key = (bisect.bisect_right(self.inner.config.thresholds_gpu_s, service), job.first_start_s is None,
               job.spec.submit_time_s, job.index)
        gpus, count = gang(job.num_gpus, self._per_node)
        group = (self.usable(job.spec), gpus, count)
        item = (key, job.index, job)
        bisect.insort(self._groups.setdefault(group, []), item)
        self._group_of[job.index] = (group, item)

    def _unpend(self, job) -> bool:
        found = self._group_of.pop(job.index, None)
        if found is None:
            return False
        group, item = found
        members = self._groups[group]
        del members[bisect.bisect_left(members, item)]
        if not members:
            del self._groups[group]
        return True

    def started(self, job) -> None:
        """Started on ``job.placement``: no longer pending; with time limits, its end on its nodes."""
        self._unpend(job)
        if self.limit_s is not None:
            end = job.run_start_s + self.limit_s
            for node, gpus in job.placement:
                self._ends.setdefault(node, {})[job.index] = (end, gpus)
                self._available.pop(node, None)
            self._ends_on[job.index] = tuple(node for node, _ in job.placement)

    def ended(self, job) -> None:
        """Stopped, signalled or finished: its GPUs' end is no longer backfill's."""
        for node in self._ends_on.pop(job.index, ()):
            del self._ends[node][job.index]
            self._available.pop(node, None)

    def promoted(self) -> None:
        """After every round: the jobs promoted at it are pending in their new band from
        the next one (this round's walk took the band before, as the generic loop's)."""
        before, self.service_before = self.service_before, {}
        for job_id in before:
            job = self._job_of(job_id)
            if self._unpend(job):
                self._pend(job)

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
            self._nodes, self._class_nodes, self._as_set = nodes, {}, {}
        if self.tracked:
            return self._tracked_step(snapshot, plan)
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

    def _tracked_step(self, snapshot, plan):
        """``step`` over the kept pending jobs (``track``): the same starts as sorting every
        pending job, walked group by group (jobs of one class and gang, in Slurm's order)
        merged by Slurm's order; a group whose job could not start is left whole where
        its later jobs could not start either and would reserve nothing more (no
        backfill; or backfill's reservation already holds all its nodes)."""
        assert not plan.levels, "a detailed round's levels: the generic loop's step"
        released, job_of = self.released, self._job_of
        for action in plan.actions:
            if action.kind == "start":
                job = job_of(action.job_id)
                released[action.job_id] = job.preemptions
                if job.preemptions and job.index not in self._group_of and not job.running:
                    self._pend(job)  # its BeginTime released: pending from now
        backfill = self.limit_s is not None
        now, limit = snapshot.now_s, self.limit_s or 0.0
        ends, fresh = self._ends, {}  # running jobs' ends per node; this walk's starts'
        free = snapshot.free_gpus_by_node()
        # the nodes' free GPUs, most first, as the walk begins: starts only take GPUs and
        # reservations only take nodes, so a gang whose count-th node here is short of its
        # GPUs per node fits nowhere for the whole walk (no nodes looked at; the full nodes
        # listed last fail every gang as the nodes without room would)
        most = sorted(free.values(), reverse=True)
        per_node = self._per_node
        failed: set[tuple] = set()
        soonest: dict[tuple, list] = {}
        starts = []
        reserved: set[str] = set()
        groups = self._groups
        known = self._available
        as_set = self._as_set

        def soonest_first(names: tuple, gpus: int) -> list:
            """The class's nodes by backfill's available_at, then name."""
            order = []
            for node in names:
                have = free.get(node, 0)
                if have >= gpus:
                    order.append((now, node))
                elif node in fresh:  # this walk started a job there
                    order.append((available_at(have, chain(ends.get(node, {}).values(), fresh[node]), now, gpus),
                                  node))
                else:
                    of_node = known.get(node)
                    if of_node is None:
                        of_node = known[node] = {}
                    hit = of_node.get(gpus)
                    if hit is None or hit[0] != have:
                        hit = of_node[gpus] = (have, available_at(have, ends.get(node, {}).values(), now, gpus))
                    order.append((hit[1], node))
            order.sort()
            return order

        if backfill:
            heads = [(members[0][0], group) for group, members in groups.items()]
        else:  # a job that cannot start reserves nothing: only the groups that may fit are walked
            heads = [(members[0][0], group) for group, members in groups.items()
                     if group[2] <= len(most) and most[group[2] - 1] >= group[1]]
        heapq.heapify(heads)
        # the nodes with room (most rounds of a busy cluster walk no group: none listed)
        room = {node for node, gpus in free.items() if gpus > 0} if heads else set()
        at: dict[tuple, int] = {}  # group -> its next member, where the walk passed its head
        while heads and room:
            group = heads[0][1]
            members, k = groups[group], at.get(group, 0)
            job = members[k][2]
            names, gpus, count = group
            where = None
            if group not in failed and count <= len(most) and most[count - 1] >= gpus:
                # the nodes with room are those with free GPUs not reserved: the few to look at
                inside = as_set.get(names, False)
                if inside is False:  # None: the class may use every node (no filter)
                    inside = as_set[names] = None if len(names) == len(self._nodes) else frozenset(names)
                where = pick_nodes(free, room if inside is None else (node for node in room if node in inside),
                                   gpus, count)
            if where is not None:
                for node in where:
                    free[node] -= gpus
                    if free[node] <= 0:
                        room.discard(node)
                    fresh.setdefault(node, []).append((now + limit, gpus))
                soonest.clear()
                starts.append(Start(decision_id(snapshot.round_id, "slurm_start", len(starts)), job.job_id,
                                    tuple((node, gpus) for node in where), "Slurm: priority order"))
                done = False
            else:
                failed.add(group)
                done = True
                if backfill:
                    memo = soonest.get((names, gpus))
                    if memo is None:
                        memo = soonest[(names, gpus)] = [soonest_first(names, gpus), 0]
                    order, i = memo
                    # this job and the next ones of its group before any other group's head
                    # cannot start either (nothing starts meanwhile): each reserves the next
                    # ``count`` nodes not yet reserved, in the same order
                    other = (heads[1][0] if len(heads) == 2 else min(heads[1][0], heads[2][0])
                             if len(heads) > 2 else None)
                    last = len(members) if other is None else bisect.bisect_left(members, (other,), k + 1)
                    size = len(order)
                    while True:
                        taken = []
                        while i < size and len(taken) < count:
                            node = order[i][1]
                            if node not in reserved:
                                taken.append(node)
                            i += 1
                        if not taken:  # every node of its class reserved: its later jobs reserve nothing
                            break
                        room.difference_update(taken)
                        reserved.update(taken)
                        k += 1
                        if k == last or not room:
                            break
                    memo[1] = i  # every node before it is reserved
                    done = not taken
                    k -= 1  # the last one handled
            if done or k + 1 == len(members):
                heapq.heappop(heads)
            else:
                at[group] = k + 1
                heapq.heapreplace(heads, (members[k + 1][0], group))
        plan.actions = [a for a in plan.actions if a.kind != "start"] + starts
        return plan

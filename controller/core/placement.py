"""Where a job's GPUs go: skew-based consolidation, fragmentation-aware spreading.

Modes
- ``consolidate`` (default): a job whose skew exceeds PACKLIMIT gets the fewest
  nodes possible or waits; other jobs go where they cut fragmentation most.
- ``spread``: topology-aware but skew-blind (every job as an insensitive one), the
  baseline for measuring what consolidation buys.
- ``count``: topology ignored, only the number of free GPUs matters, to compare with
  simulators that model no nodes. On real nodes the count decides which pending jobs
  start and in what order, but who yields to a newcomer is still chosen on the nodes
  it may use (controller.core.victims): placement never changes who may be preempted.
"""
from __future__ import annotations

import bisect
import math
from itertools import compress
from typing import Iterable, Optional

from controller.core.model import ALL_MEMORY, MIXED_TYPES, InputError, JobSpec, Node

PLACEMENT_MODES = ("consolidate", "spread", "count")
COUNT_NODE = "*"  # the single pseudo-node of count mode


def nodes_are_real(nodes) -> bool:
    """The round's nodes are a cluster's, not count mode's one pseudo-node (the
    replay's count, where no job has a node): victims are then chosen per node in
    every mode (controller.core.victims)."""
    return any(node.name != COUNT_NODE for node in nodes)


def check_mode(mode: str) -> str:
    if mode not in PLACEMENT_MODES:
        raise InputError(f"placement '{mode}' is unknown; choose from {', '.join(PLACEMENT_MODES)}")
    return mode


def minimum_nodes(num_gpus: int, max_gpus_per_node: int) -> int:
    """Fewest nodes a job can span on this cluster."""
    return max(1, math.ceil(num_gpus / max(max_gpus_per_node, 1)))


def place(num_gpus: int, free_by_node: dict[str, int], *, consolidate: bool,
          max_gpus_per_node: int) -> Optional[tuple[tuple[str, int], ...]]:
    """Choose (node, gpus) slots for a gang, or None if it cannot go now.

    One node that fits the whole gang: the fullest such node (best fit, keeps big
    holes for big jobs). Otherwise a consolidated gang takes the emptiest nodes
    until satisfied and must need no more than the cluster minimum; an
    insensitive gang fills the fullest nodes first, soaking up fragments.
    Ties are broken by node name so that placement is deterministic.
    """
    if num_gpus <= 0:
        return ()
    # One pass: best-fitting single node (ties: lowest name) and the total free.
    best_name, best_free, total_free = None, 0, 0
    for name, free in free_by_node.items():
        total_free += free
        if free >= num_gpus and (best_name is None or free < best_free or (free == best_free and name < best_name)):
            best_name, best_free = name, free
    if best_name is not None:
        return ((best_name, num_gpus),)
    if total_free < num_gpus:
        return None
    candidates = [(free, name) for name, free in free_by_node.items() if free > 0]
    if consolidate:
        order = sorted(candidates, key=lambda fn: (-fn[0], fn[1]))
    else:
        order = sorted(candidates)
    slots: list[tuple[str, int]] = []
    needed = num_gpus
    for free, name in order:
        take = min(free, needed)
        slots.append((name, take))
        needed -= take
        if needed == 0:
            break
    if consolidate and len(slots) > minimum_nodes(num_gpus, max_gpus_per_node):
        return None
    return tuple(sorted(slots))


_POSITIVE = (0).__lt__  # count -> count > 0, without a Python call a node


class FreeGpus:
    """Free GPUs per node for the many placements of one round.

    ``place`` answers exactly as :func:`place` does on the equivalent dict, but
    finds nodes through an index by free count (names sorted inside each count),
    so a placement costs O(distinct free counts + nodes taken), not O(nodes):
    thousands of placements on a thousand nodes stay in the millisecond range.
    """

    def __init__(self, free_by_node: dict[str, int], released: Iterable[tuple[tuple[str, int], ...]] = ()):
        """``released``: placements whose GPUs count as free too (a round's victims: on
        the nodes of ``free_by_node`` only)."""
        free = self.free = dict(free_by_node)
        for slots in released:
            for name, gpus in slots:
                if name in free:
                    free[name] += gpus
        self.total = sum(free.values())
        # the index, built at the first ``place`` (jobs with their own node sets never ask:
        # a round of them only reads ``free``)
        self._by_count: Optional[dict[int, list[str]]] = None
        self._counts: list[int] = []  # distinct positive free counts, ascending

    def _index(self) -> dict[int, list[str]]:
        if self._by_count is None:
            by_count: dict[int, list[str]] = {}
            free = self.free
            # only the nodes with GPUs free are sorted: on a busy cluster (every round
            # that preempts) they are few of its nodes
            for name in sorted(compress(free, map(_POSITIVE, free.values()))):
                names = by_count.get(free[name])
                if names is None:
                    by_count[free[name]] = [name]
                else:
                    names.append(name)
            self._by_count = by_count
            self._counts = sorted(by_count)
        return self._by_count

    def take(self, name: str, gpus: int) -> None:
        """``gpus`` of node ``name`` are no longer free."""
        free = self.free
        before = free[name]
        after = before - gpus
        free[name] = after
        self.total -= gpus
        by_count = self._by_count
        if by_count is None:
            return  # no index yet: it is built from ``free`` when asked
        if before > 0:
            names = by_count[before]
            if len(names) == 1:
                del by_count[before]
                del self._counts[bisect.bisect_left(self._counts, before)]
            else:
                del names[bisect.bisect_left(names, name)]
        if after > 0:
            names = by_count.get(after)
            if names is None:
                by_count[after] = [name]
                bisect.insort(self._counts, after)
            else:
                bisect.insort(names, name)

    def give(self, name: str, gpus: int) -> None:
        """``gpus`` of node ``name`` are free again (a victim leaves)."""
        self.take(name, -gpus)

    def place(self, num_gpus: int, *, consolidate: bool,
              max_gpus_per_node: int) -> Optional[tuple[tuple[str, int], ...]]:
        """Same contract as :func:`place`; does not take the GPUs (call ``take``)."""
        if num_gpus <= 0:
            return ()
        by_count = self._by_count if self._by_count is not None else self._index()
        counts = self._counts
        fit = bisect.bisect_left(counts, num_gpus)
        if fit < len(counts):  # best fit: the fullest node that holds the gang, lowest name
            return ((by_count[counts[fit]][0], num_gpus),)
        if self.total < num_gpus:
            return None
        slots: list[tuple[str, int]] = []
        needed = num_gpus
        if not consolidate:
            # fill the fullest nodes first; every node holds fewer than the gang and the
            # free total holds it, so the fill ends with the gang whole (a replay with
            # Slurm's start order places many such gangs a round: its loop kept lean)
            for count in counts:
                for name in by_count[count]:
                    if count >= needed:
                        slots.append((name, needed))
                        return tuple(sorted(slots))
                    slots.append((name, count))
                    needed -= count
            return tuple(sorted(slots))
        # consolidated: the emptiest nodes first, on no more nodes than the gang needs
        limit = minimum_nodes(num_gpus, max_gpus_per_node)
        for count in reversed(counts):
            for name in by_count[count]:
                take = min(count, needed)
                slots.append((name, take))
                needed -= take
                if needed == 0:
                    break
                if len(slots) >= limit:
                    return None  # would span more nodes than it needs
            if needed == 0:
                break
        if len(slots) > limit:
            return None
        return tuple(sorted(slots))

    def free_on(self, names) -> int:
        """The free GPUs on the nodes of ``names`` (those not in this round count none)."""
        free = self.free
        return sum(free[name] for name in names if free.get(name, 0) > 0)

    def place_constrained(self, spec: JobSpec, *, consolidate: bool, max_gpus_per_node: int,
                          allowed: Optional[frozenset] = None) -> Optional[tuple[tuple[str, int], ...]]:
        """:func:`place_constrained` on these free GPUs (O(nodes): constrained jobs are few)."""
        return place_constrained(spec.num_gpus, self.free, spec, consolidate=consolidate,
                                 max_gpus_per_node=max_gpus_per_node, allowed=allowed)


def node_fits(node: Node, spec: JobSpec) -> bool:
    """Slurm may run ``spec`` on ``node``: a partition in common (either side () =
    unknown: yes), its GPU type (the job's '' = any), the same reservation (a reserved
    node only for jobs naming it, a job naming one only on its nodes). A job of
    several GPU types (``MIXED_TYPES``: --gres=gpu:a100:4,gpu:v100:4) fits no node:
    the model gives a job one type, so it is never placed nor preempted for. Its
    --constraint features: the node has them all (a node that reports none: no)."""
    if spec.partitions and node.partitions and not set(spec.partitions).intersection(node.partitions):
        return False
    if spec.gpu_type and (node.gpu_type != spec.gpu_type or spec.gpu_type == MIXED_TYPES):
        return False
    if spec.features and (node.features is None or not set(spec.features).issubset(node.features)):
        return False
    return node.reservation == spec.reservation


class Eligibility:
    """The nodes each job may use, for one round (partitions, GPU types, reservations,
    features).

    ``allowed(spec)`` is None when every available node fits (the usual case: the
    placement then needs no filter), else the names of the nodes that do. Jobs share
    a handful of (partitions, type, reservation, features) keys, so each key is
    computed once. ``room()``: the round's NodeRoom (None when no node reports CPUs or
    memory: the simulator's nodes), read with the nodes at the first question.

    ``last``: the previous round's Eligibility; when the nodes are the same (Node is
    frozen: equal nodes, equal answers) its answers are kept, so a replay, whose node
    table never changes, computes each key once, not once a round."""

    def __init__(self, nodes, last: Optional["Eligibility"] = None):
        self._all = nodes
        self._key = tuple(nodes)
        self._nodes: Optional[list] = None  # read at the first question (most rounds ask none)
        self._plain = True
        self._reports_room = False
        self._memo: dict[tuple, Optional[frozenset]] = {}
        self._room: Optional[NodeRoom] = None
        if last is not None and last._key == self._key:
            self._memo = last._memo
            if last._nodes is not None:
                self._nodes, self._plain, self._reports_room = last._nodes, last._plain, last._reports_room
                # the room is this round's own (its placements change it)
                self._room = NodeRoom(self._nodes) if self._reports_room else None

    def _load(self) -> None:
        self._nodes = [n for n in self._all if n.available]
        self._plain = not any(n.partitions or n.gpu_type or n.reservation for n in self._nodes)
        self._reports_room = any(n.cpus_free is not None or n.mem_free_mb is not None for n in self._nodes)
        if self._reports_room:
            self._room = NodeRoom(self._nodes)

    def room(self) -> Optional["NodeRoom"]:
        if self._nodes is None:
            self._load()
        return self._room

    def allowed(self, spec: JobSpec) -> Optional[frozenset]:
        if self._nodes is None:
            self._load()
        if self._plain and not (spec.gpu_type or spec.reservation or spec.features):
            return None  # one partition, one type, no reservation, no features asked: every node fits
        key = (spec.partitions, spec.gpu_type, spec.reservation, spec.features)
        if key not in self._memo:
            names = frozenset(n.name for n in self._nodes if node_fits(n, spec))
            self._memo[key] = None if len(names) == len(self._nodes) else names
        return self._memo[key]


class NodeRoom:
    """The CPUs and memory free on each available node in one round, as Slurm counts
    them before it starts a job there (its own allocated counts: CPU-only jobs the
    plan never sees included), changed as the round's newcomers are placed
    (``take``) and its victims leave (``give``).

    A job fits a node when its CPUs and memory per node are free there and, for
    --exclusive, every CPU is (no job of any kind left on the node). ``checks(spec)``
    is the cheap first question: False when the job's request is within what every
    node has free now (``least_*``, lowered by each take and never raised: a bound),
    so the usual job costs one comparison and places as before."""

    def __init__(self, nodes):
        self.cpus_free = {n.name: n.cpus_free for n in nodes}
        self.cpus_total = {n.name: n.cpus_total for n in nodes}
        self.mem_free = {n.name: n.mem_free_mb for n in nodes}
        self.mem_total = {n.name: n.mem_total_mb for n in nodes}
        # a node that reports no count bounds the least at 0: every request is checked
        self.least_cpus = min((0 if v is None else v for v in self.cpus_free.values()), default=0)
        self.least_mem = min((0 if v is None else v for v in self.mem_free.values()), default=0)

    def checks(self, spec: JobSpec) -> bool:
        """Some node may lack room for ``spec`` (placement must ask ``fits``)."""
        return (spec.exclusive or spec.cpus_per_node > self.least_cpus or spec.mem_per_node_mb > self.least_mem
                or spec.mem_per_node_mb == ALL_MEMORY)

    def fits(self, spec: JobSpec, node: str, cpus_freed: int = 0, mem_freed_mb: int = 0) -> bool:
        """``spec`` has room on ``node`` once ``cpus_freed`` CPUs and ``mem_freed_mb`` MB
        more are free there (what its victims hold). A count the node does not report
        fits no job that asks for it."""
        if spec.cpus_per_node or spec.exclusive:
            free = self.cpus_free.get(node)
            if free is None or free + cpus_freed < spec.cpus_per_node:
                return False
            if spec.exclusive and (self.cpus_total.get(node) is None or free + cpus_freed < self.cpus_total[node]):
                return False
        if spec.mem_per_node_mb:
            free = self.mem_free.get(node)
            need = self.mem_total.get(node) if spec.mem_per_node_mb == ALL_MEMORY else spec.mem_per_node_mb
            if free is None or need is None or free + mem_freed_mb < need:
                return False
        return True

    def nodes_fitting(self, spec: JobSpec, names) -> frozenset:
        """The nodes of ``names`` with room for ``spec`` now."""
        return frozenset(name for name in names if self.fits(spec, name))

    def take(self, spec: JobSpec, slots) -> None:
        """A newcomer placed on ``slots``: its CPUs and memory there are no longer free
        (an --exclusive one takes the whole node)."""
        for node, _ in slots:
            cpus, mem = self.cpus_free.get(node), self.mem_free.get(node)
            if cpus is not None:
                cpus = 0 if spec.exclusive else cpus - spec.cpus_per_node
                self.cpus_free[node] = cpus
                self.least_cpus = min(self.least_cpus, cpus)
            if mem is not None:
                mem = 0 if spec.exclusive or spec.mem_per_node_mb == ALL_MEMORY else mem - spec.mem_per_node_mb
                self.mem_free[node] = mem
                self.least_mem = min(self.least_mem, mem)

    def give(self, spec: JobSpec) -> None:
        """A victim leaves: what it holds is free (the ``least_*`` bounds stay)."""
        for node, cpus, mem in spec.held_by_node:
            if self.cpus_free.get(node) is not None:
                self.cpus_free[node] += cpus
            if self.mem_free.get(node) is not None:
                self.mem_free[node] += mem


def describe_resources(spec: JobSpec) -> str:
    """What a job asks of each node beyond GPUs, as sbatch options ('' nothing)."""
    parts = []
    if spec.cpus_per_node:
        parts.append(f"{spec.cpus_per_node} CPU{'' if spec.cpus_per_node == 1 else 's'}")
    if spec.mem_per_node_mb == ALL_MEMORY:
        parts.append("all of its memory (--mem=0, or no default memory)")
    elif spec.mem_per_node_mb:
        parts.append(f"{spec.mem_per_node_mb} MB of memory")
    if spec.exclusive:
        parts.append("the whole node (--exclusive)")
    return ", ".join(parts)


def place_constrained(num_gpus: int, free_by_node: dict[str, int], spec: JobSpec, *, consolidate: bool,
                      max_gpus_per_node: int, allowed: Optional[frozenset] = None
                      ) -> Optional[tuple[tuple[str, int], ...]]:
    """Choose (node, gpus) slots for a gang with the job's own node constraints, or None.

    As Slurm allocates: every node of ``spec.required_nodes`` (--nodelist) is in the
    set, no node of ``spec.excluded_nodes`` (--exclude) is, and the set has
    ``min_nodes``..``max_nodes`` nodes. A job that asks for two nodes or more (-N, or
    a --nodelist of several nodes: Slurm raises its minimum to match) gets exactly
    its minimum, its GPUs split evenly (the first nodes one more when that count does
    not divide them): Slurm counts a --gres=gpu:K job's GPUs at its minimum and needs
    K on every node, and accepts the even split for --gpus=G, so the plan never asks
    for a layout Slurm cannot make. A one-node minimum: as :func:`place`, within
    max_nodes and with its required node (if any) first. Deterministic: ties by name.
    """
    if num_gpus <= 0:
        return ()
    if allowed is not None:  # only the nodes of its partitions, GPU type, reservation
        # (walk the smaller side: a partition's few nodes of a large cluster, or a trial's
        # few nodes of a large partition; what follows sorts, so the order is no matter)
        if len(allowed) < len(free_by_node):
            free_by_node = {name: free_by_node[name] for name in allowed if name in free_by_node}
        else:
            free_by_node = {name: free for name, free in free_by_node.items() if name in allowed}
    required = sorted(set(spec.required_nodes))
    if any(free_by_node.get(name, 0) <= 0 for name in required):
        return None  # a required node is full, down or not in this cluster
    skip = set(required) | set(spec.excluded_nodes)
    others = [(free, name) for name, free in free_by_node.items() if free > 0 and name not in skip]
    chosen = [(free_by_node[name], name) for name in required]
    if sum(free for free, _ in others) + sum(free for free, _ in chosen) < num_gpus:
        return None  # every layout below takes its GPUs from these: too few, none fits
    low = max(spec.min_nodes or 1, len(required))
    if low > 1 or spec.max_nodes == 1:
        return _even_split(num_gpus, low, chosen, others)
    # one node that holds the whole gang: the required one, else the best fit
    fits = chosen if chosen else [(free, name) for free, name in others if free >= num_gpus]
    if fits and min(fits)[0] >= num_gpus:
        return ((min(fits)[1], num_gpus),)
    high = min(spec.max_nodes or num_gpus, num_gpus)
    if consolidate:
        high = min(high, minimum_nodes(num_gpus, max_gpus_per_node))
    fewest_first = sorted(others, key=lambda fn: (-fn[0], fn[1]))
    for order in ((fewest_first,) if consolidate else (sorted(others), fewest_first)):
        picked, total = list(chosen), sum(free for free, _ in chosen)
        for free, name in order:
            if total >= num_gpus:
                break
            picked.append((free, name))
            total += free
        if total >= num_gpus and len(picked) <= high:
            slots, left = [], num_gpus
            for free, name in picked:  # the required node first, then in the order picked
                slots.append((name, min(free, left)))
                left -= min(free, left)
            return tuple(sorted(slots))
    return None


def _even_split(num_gpus: int, nodes: int, chosen: list[tuple[int, str]],
                others: list[tuple[int, str]]) -> Optional[tuple[tuple[str, int], ...]]:
    """Exactly ``nodes`` nodes (``chosen`` among them), GPUs split evenly, or None."""
    base, extra = divmod(num_gpus, nodes)
    if base == 0 or len(chosen) > nodes:
        return None
    candidates = [(free, name) for free, name in others if free >= base]
    # Even shares: any node with a share free will do; best fit keeps big holes. Uneven:
    # the emptiest nodes, bigger shares to the emptiest (if that fails, every choice does).
    candidates.sort(key=(lambda fn: fn) if extra == 0 else (lambda fn: (-fn[0], fn[1])))
    picked = chosen + candidates[:nodes - len(chosen)]
    if len(picked) < nodes:
        return None
    picked.sort(key=lambda fn: (-fn[0], fn[1]))
    slots = []
    for rank, (free, name) in enumerate(picked):
        share = base + (1 if rank < extra else 0)
        if free < share:
            return None
        slots.append((name, share))
    return tuple(sorted(slots))


class NodeTotals:
    """Count mode's view of a constrained job: could it fit at all, on its allowed
    nodes with every GPU free? (Count mode ignores node names but must not plan a
    job Slurm can never start.) The totals are read the first time one asks."""

    def __init__(self, nodes):
        self._nodes = nodes
        self._totals: Optional[dict[str, int]] = None

    def fits(self, spec: JobSpec, allowed: Optional[frozenset] = None) -> bool:
        if self._totals is None:
            self._totals = {n.name: n.gpus_total for n in self._nodes if n.available}
        return place_constrained(spec.num_gpus, self._totals, spec, consolidate=False,
                                 max_gpus_per_node=0, allowed=allowed) is not None


def describe_constraints(spec: JobSpec, kinds: bool = False) -> str:
    """The job's node constraints as sbatch options, for wait reasons; ``kinds``: its
    partitions, GPU type and reservation too (when they leave nodes out)."""
    parts = []
    if spec.required_nodes:
        parts.append("--nodelist=" + ",".join(spec.required_nodes))
    if spec.excluded_nodes:
        parts.append("--exclude=" + ",".join(spec.excluded_nodes))
    if spec.min_nodes is not None or spec.max_nodes is not None:
        low, high = spec.min_nodes or 1, spec.max_nodes
        parts.append(f"-N {low}" if low == high else f"-N {low}-{'' if high is None else high}")
    if kinds and spec.partitions:
        parts.append("--partition=" + ",".join(spec.partitions))
    if kinds and spec.gpu_type:
        parts.append(f"--gres=gpu:{spec.gpu_type}:{spec.num_gpus}")
    if kinds and spec.reservation:
        parts.append("--reservation=" + spec.reservation)
    if kinds and spec.features:
        parts.append("--constraint=" + "&".join(spec.features))
    return " ".join(parts)


def hand_over(free_by_node: dict[str, int], victims, slots, taken: set[int]) -> None:
    """A job takes ``slots`` once its ``victims`` leave, on a plain per-node dict (the
    replay's wait audit, Slurm's preemption in the replay): the victims' GPUs free again,
    the slots taken, the victims' indices added to ``taken``."""
    for victim in victims:
        taken.add(victim.index)
        for node, gpus in victim.placement:
            free_by_node[node] += gpus
    for node, gpus in slots:
        free_by_node[node] -= gpus


def is_spread(placement: tuple[tuple[str, int], ...], num_gpus: int, max_gpus_per_node: int) -> bool:
    """True when a gang spans more nodes than it needs (a sensitive job then runs slower)."""
    if not placement or placement[0][0] == COUNT_NODE:
        return False
    return len(placement) > minimum_nodes(num_gpus, max_gpus_per_node)


def beyond_reach(jobs, nodes, free_by_node: dict[str, int], eligible: Optional["Eligibility"] = None) -> list:
    """The pending jobs no preemption can start: on the nodes they may use (their
    partitions, GPU type, reservation, features: Eligibility) fewer GPUs are free or held by
    preemptable running jobs than they need.

    The walk counts GPUs cluster-wide; such a job would take its share of the count
    and be left unplaced, so the GPUs it was counted on went to nobody and a job
    below it that could have used a victim's GPUs was skipped (seen on the
    site-shaped test cluster: an a100 job whose a100 nodes ran jobs outside the
    contract held back a plain job that a v100 job would have yielded to).

    ``free_by_node``: GPUs free as the plan sees them (a signalled victim's count as
    free); ``eligible``: the caller's Eligibility of ``nodes`` (a replay keeps one).
    The controller (via ``set_aside``) and every replay loop call this one function,
    so a replay sets aside the jobs the controller does."""
    if eligible is None:
        eligible = Eligibility(nodes)
    freeable = dict(free_by_node)
    for job in jobs:
        if job.running and job.spec.preemptable:
            for node, gpus in job.placement:
                if node in freeable:
                    freeable[node] += gpus
    out = []
    within: dict[frozenset, int] = {}  # the GPUs within reach of each node set (jobs share a few)
    for job in jobs:
        if job.running:
            continue
        allowed = eligible.allowed(job.spec)
        if allowed is None:
            continue
        reach = within.get(allowed)
        if reach is None:
            reach = within[allowed] = sum(freeable.get(name, 0) for name in allowed)
        if reach < job.num_gpus:
            out.append(job)
    return out


def set_aside(snapshot, also=frozenset(), eligible: Optional[Eligibility] = None) -> tuple[list, set]:
    """Take out of ``snapshot`` (its jobs, its waiting list and demand hint where set)
    the pending jobs the round's walk must not count: those whose ids are in ``also``
    (what the executor cannot model) and those ``beyond_reach``. Returns (the jobs
    taken out, in the snapshot's order; the ids of those beyond reach). The
    controller's round and the replay loops that hand the engine a job list call it
    before ``Engine.step``; the caller lists the jobs after the plan's own
    (controller.core.round_writer.list_after)."""
    rest = [job for job in snapshot.jobs if job.job_id not in also] if also else snapshot.jobs
    unreachable = {job.job_id for job in beyond_reach(rest, snapshot.nodes, snapshot.free_by_node or {}, eligible)}
    out = set(also) | unreachable
    if not out:
        return [], unreachable
    taken = [job for job in snapshot.jobs if job.job_id in out]
    snapshot.jobs = [job for job in snapshot.jobs if job.job_id not in out]
    if snapshot.waiting is not None:
        snapshot.waiting = [job for job in snapshot.waiting if job.job_id not in out]
    if snapshot.demand_gpus is not None:
        snapshot.demand_gpus -= sum(job.num_gpus for job in taken)
    return taken, unreachable

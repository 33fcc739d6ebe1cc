"""The handoff rule: did the preemption pay off, and may a plan preempt again for a job?

When a round signals victims, the jobs the same plan starts are the beneficiaries;
the cluster manager's scheduler, not the controller, then starts them. Each is
watched until it runs ("landed"), leaves ("gone") or ``timeout_s`` passes ("failed").
While a beneficiary's victims have all left and it still has not started, a plan that
starts it keeps all of its victims running.

A failed handoff brakes the job: Slurm did not start it on what the preemption freed
(a request the plan does not fully model: --constraint, --mem, --exclusive, CPUs, or
another job that took the GPUs first), so preempting for it again, the same victim
most likely, would free the same things to the same refusal. No plan preempts for a
braked job until something it depends on changes (``Needs``, taken when the handoff
failed): a job running then on a node it may use (not one of the victims: what they
freed was there already) leaves and what it freed could make the job fit, a node it
may use comes up (or gains GPUs), or its own request changes. "Could make it fit":
on the nodes it may use, what is free now plus what its victims hold (the preemption
that would be repeated) and what jobs that came since took of the freed reaches its GPUs, each node counted only where its CPUs and
memory per node are free too (--exclusive: no other job left there); issue 35: a
job of an EXCLUSIVE partition whose nodes each kept another job had one victim
preempted 6 times in an hour, the brake lifted whenever any job there left. A
departure that does not make it fit moves the brake's reference to now, so a job
that came later and leaves later is still seen. Where the caller gives no holdings
(``ClusterView`` without ``held``), any departure lifts it, as before. A job starting
there only takes resources away, so it lifts nothing. The brake has no clock: a job Slurm will never start on these nodes never
costs another preemption. It ends when the job starts or leaves.

Pure state and rule: controller.service.round.handoff persists each transition and logs
it; the lever replay (controller.replay.lever_replay) keeps the same book with its
own view of the cluster, so the simulator holds back the same preemptions.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, NamedTuple, Optional

from controller.core.model import JobSpec, Node
from controller.core.placement import COUNT_NODE, node_fits
from controller.core.ids import decision_id

_STARTED = re.compile(r"started (\d+)s after the victims' signal")


def started_detail(delay_s: float) -> str:
    """The detail of a landed handoff decision (``started_delay_s`` reads it back)."""
    return f"started {delay_s:.0f}s after the victims' signal"


def started_delay_s(detail: str) -> Optional[float]:
    """The delay (s) a landed handoff's logged detail records, or None for any other text."""
    match = _STARTED.fullmatch(detail or "")
    return float(match.group(1)) if match else None


@dataclass
class Watch:
    signalled_s: float
    victims: tuple[str, ...]
    causes: tuple[str, ...] = ()  # the preemption decisions that made room (the handoff cites them)


@dataclass(frozen=True)
class Needs:
    """What a pending job's start depends on, as one round sees it.

    ``request``: its own request (``request_key``); ``nodes``: (name, GPUs) of the
    available nodes it may use; ``residents``: (job id, its nodes) of the jobs
    running (or in their grace period) on those nodes. Seen now only, never stored:
    ``ask`` (GPUs, CPUs per node, MB per node, --exclusive), ``room`` (node, free GPUs,
    free CPUs, all CPUs, free MB; None where not reported) of those nodes and
    ``holding`` (job id -> ((node, GPUs, CPUs, MB), ...)) of their residents, empty
    when the caller does not know them (``fits`` then says yes)."""

    request: str
    nodes: frozenset
    residents: frozenset
    ask: tuple = field(default=(), compare=False)
    room: tuple = field(default=(), compare=False)
    holding: dict = field(default_factory=dict, compare=False)

    def fits(self, victims: Iterable[str], before: Iterable[str] = ()) -> bool:
        """The job could start on its nodes with what is free now, what ``victims`` hold
        there and what the jobs that came since ``before`` (the residents' ids then) took
        of what was freed (True when the holdings are not known): what the departed jobs
        freed plus what was free, without counting twice what is still free."""
        if not self.ask or not self.holding and self.residents:
            return True
        gpus_needed, cpus_needed, mem_needed, exclusive = self.ask
        victims, before = set(victims), set(before)
        came = {job_id for job_id, _ in self.residents if job_id not in before}
        freed: dict[str, list[int]] = {}
        for holder in victims | came:
            for node, gpus, cpus, mem in self.holding.get(holder, ()):
                got = freed.setdefault(node, [0, 0, 0])
                got[0] += gpus
                got[1] += cpus
                got[2] += mem
        others = {node for job_id, nodes in self.residents if job_id not in victims | came for node in nodes}
        total = 0
        for node, gpus, cpus, cpus_all, mem in self.room:
            more = freed.get(node, (0, 0, 0))
            if exclusive and node in others:
                continue  # another job stays: never a whole node
            if (cpus_needed or exclusive) and cpus is not None and cpus + more[1] < max(
                    cpus_needed, cpus_all if exclusive and cpus_all is not None else 0):
                continue
            if mem_needed and mem is not None and mem + more[2] < mem_needed:
                continue
            total += gpus + more[0]
        return total >= gpus_needed


def request_key(spec: JobSpec, extra: tuple = ()) -> str:
    """The job's own request as one comparable text: size, partitions, GPU type,
    reservation, node list, exclusions, node count, time limit, CPUs, memory,
    --exclusive and features per node, and ``extra`` (what
    the caller sees of the request beyond the JobSpec: the controller adds the
    comment). The controller's own pins are not in a JobSpec, so a pin never counts."""
    key = [spec.num_gpus, spec.partition, list(spec.partitions), spec.gpu_type, spec.reservation,
           list(spec.required_nodes), list(spec.excluded_nodes), spec.min_nodes, spec.max_nodes,
           spec.time_limit_s, [str(x) for x in extra]]
    if spec.cpus_per_node or spec.mem_per_node_mb or spec.exclusive or spec.features:
        # what it asks of each node (only when it asks: a GPU-only job's key is as before)
        key.append([spec.cpus_per_node, spec.mem_per_node_mb, spec.exclusive, list(spec.features)])
    return json.dumps(key)


class ClusterView:
    """One round's nodes and GPU holders (``running``: (job id, its nodes) of every job
    holding GPUs: running, or signalled and not yet requeued), asked for the Needs of
    a few jobs: jobs with the same node rule (partitions, GPU type, reservation,
    exclusions) share one pass over the nodes and the holders."""

    def __init__(self, nodes: Iterable[Node], running: Iterable[tuple[str, tuple[str, ...]]],
                 held: Optional[dict] = None, free_gpus: Optional[dict[str, int]] = None):
        """``held``: job id -> ((node, GPUs, CPUs, MB), ...) of the running jobs (None:
        not known; a departure then always lifts a brake); ``free_gpus``: node -> its
        free GPUs now (None: the nodes' own ``gpus_free``)."""
        self.nodes = [node for node in nodes if node.available]
        self.running = running if isinstance(running, list) else list(running)
        self.held = held
        self.free_gpus = free_gpus
        self._memo: dict[tuple, tuple[frozenset, frozenset]] = {}

    def needs(self, spec: JobSpec, extra: tuple = ()) -> Needs:
        """``Needs`` of the job ``spec`` (``extra``: see request_key)."""
        key = (spec.partitions, spec.gpu_type, spec.reservation, spec.excluded_nodes)
        if key not in self._memo:
            excluded = frozenset(spec.excluded_nodes)
            usable = {node.name: node.gpus_total for node in self.nodes
                      if node.name not in excluded and node_fits(node, spec)}
            residents = frozenset((job_id, tuple(job_nodes)) for job_id, job_nodes in self.running
                                  if any(n in usable for n in job_nodes))
            self._memo[key] = (frozenset(usable.items()), residents)
        nodes, residents = self._memo[key]
        if self.held is None:
            return Needs(request_key(spec, extra), nodes, residents)
        names = {name for name, _ in nodes}
        free = self.free_gpus
        room = tuple((n.name, n.gpus_free if free is None else free.get(n.name, 0), n.cpus_free, n.cpus_total,
                      n.mem_free_mb) for n in self.nodes if n.name in names)
        mem = 0 if spec.mem_per_node_mb < 0 else spec.mem_per_node_mb  # all of it: counted by --exclusive's rule
        ask = (spec.num_gpus, spec.cpus_per_node, mem, spec.exclusive or spec.mem_per_node_mb < 0)
        holding = {job_id: self.held.get(job_id, ()) for job_id, _ in residents}
        return Needs(request_key(spec, extra), nodes, residents, ask, room, holding)


def needs_of(spec: JobSpec, nodes: Iterable[Node], running: Iterable[tuple[str, tuple[str, ...]]],
             extra: tuple = ()) -> Needs:
    """``Needs`` of the job ``spec`` on ``nodes`` (ClusterView, for one job)."""
    return ClusterView(nodes, running).needs(spec, extra)


@dataclass(frozen=True)
class Brake:
    """A failed handoff: no preemption for the job until ``what_changed`` names
    something. ``needs``: taken when it failed (None: not yet, as for a brake read
    back from a store that did not record it: taken at the next check)."""

    signalled_s: float  # when the preemption made for it was signalled
    failed_s: float  # when its handoff timed out
    victims: tuple[str, ...]
    causes: tuple[str, ...] = ()
    needs: Optional[Needs] = None

    def what_changed(self, now: Needs) -> str:
        """'' while nothing the job depends on changed, else what did (one phrase)."""
        then = self.needs
        if then is None:
            return ""
        if now.request != then.request:
            return "its request changed"
        came = sorted(name for name, gpus in now.nodes - then.nodes)
        if came:
            return f"node {came[0]} it may use came up or gained GPUs"
        left = self.departed(now)
        if left and now.fits(self.victims, (job_id for job_id, _ in then.residents)):
            return f"job {left[0]} left the nodes it may use"
        return ""

    def departed(self, now: Needs) -> list[str]:
        """The jobs, not its victims, that ran on its nodes then and are gone now (sorted)."""
        then = self.needs
        if then is None:
            return []
        return sorted(job_id for job_id, _ in then.residents - now.residents if job_id not in self.victims)

    def holding(self, at: str) -> str:
        """Why no preemption is made for the job (``at``: when the preemption was, as
        the caller writes a time)."""
        return (f"a preemption for it at {at} freed GPUs Slurm did not start it on (handoff failed): "
                f"no further preemption for it until {UNTIL}")

    def to_json(self) -> str:
        """The brake as the store keeps it (``from_json`` reads it back)."""
        needs = self.needs
        return json.dumps({
            "failed_s": self.failed_s, "causes": list(self.causes),
            "needs": None if needs is None else {
                "request": needs.request, "nodes": sorted([name, gpus] for name, gpus in needs.nodes),
                "residents": sorted([job_id, list(nodes)] for job_id, nodes in needs.residents)}})

    @classmethod
    def from_json(cls, text: str, signalled_s: float, victims: tuple[str, ...]) -> "Brake":
        """A stored brake; '{}' (an older store's failed handoff): needs not taken yet."""
        data = json.loads(text or "{}")
        needs = data.get("needs")
        return cls(signalled_s, float(data.get("failed_s", signalled_s)), victims, tuple(data.get("causes", ())),
                   None if needs is None else Needs(
                       needs["request"], frozenset((name, int(gpus)) for name, gpus in needs["nodes"]),
                       frozenset((job_id, tuple(nodes)) for job_id, nodes in needs["residents"])))


UNTIL = ("a job running on a node it may use ends and frees what it needs, such a node comes up, or its request"
         " changes")


class HandoffEvent(NamedTuple):
    """One change of the book. ``kind``: "gone", "landed", "failed" (``watch`` ended;
    for "failed", ``brake`` is the brake it set), "released" (``brake`` lifted:
    ``detail`` says why: what changed, or that the job started or left)."""

    kind: str
    job_id: str
    watch: Optional[Watch] = None
    brake: Optional[Brake] = None
    detail: str = ""


class HandoffBook:
    """``watching``: beneficiary job id -> its Watch; ``braked``: job id -> the Brake
    of its failed handoff."""

    def __init__(self):
        self.watching: dict[str, Watch] = {}
        self.braked: dict[str, Brake] = {}

    def load(self, rows: Iterable[tuple]) -> "HandoffBook":
        """Fill the book from stored rows (job id, signalled at, victims, brake's JSON or
        None: watched), as the service's store keeps them."""
        for job_id, signalled_s, victims, brake in rows:
            if brake is None:
                self.watching[job_id] = Watch(signalled_s, victims)
            else:
                self.braked[job_id] = Brake.from_json(brake, signalled_s, victims)
        return self

    def check(self, state_of: Callable[[str], Optional[str]], now: float, timeout_s: float,
              needs: Callable[[str], Needs],
              extra_s: Callable[[Watch], float] = lambda watch: 0.0) -> list[HandoffEvent]:
        """Advance every watch and brake by the jobs' states now (``state_of``:
        "PENDING", "RUNNING", anything else or None: gone) and what a braked job
        depends on now (``needs``: its Needs this round); returns the changes in
        order. ``extra_s``: how much longer than the configured grace the watch's
        victims may take to leave (their own --signal lead time), added to the
        time-out so a victim's own grace never fails a handoff."""
        events: list[HandoffEvent] = []
        for job_id, brake in list(self.braked.items()):
            state = state_of(job_id)
            if state != "PENDING":
                del self.braked[job_id]
                events.append(HandoffEvent("released", job_id, brake=brake,
                                           detail="it started" if state == "RUNNING" else "it left the queue"))
                continue
            seen = needs(job_id)
            if brake.needs is None:  # read back without them: from now on
                self.braked[job_id] = Brake(brake.signalled_s, brake.failed_s, brake.victims, brake.causes, seen)
                continue
            changed = brake.what_changed(seen)
            if changed:
                del self.braked[job_id]
                events.append(HandoffEvent("released", job_id, brake=brake, detail=changed))
            elif brake.departed(seen):
                # a job left and what it freed does not make it fit: judge the next departure
                # from now (a job that came since and leaves later is seen)
                self.braked[job_id] = replace(brake, needs=seen)
        for job_id, watch in list(self.watching.items()):
            state = state_of(job_id)
            if state not in ("PENDING", "RUNNING"):
                del self.watching[job_id]
                events.append(HandoffEvent("gone", job_id, watch))
            elif state == "RUNNING":
                del self.watching[job_id]
                events.append(HandoffEvent("landed", job_id, watch))
            elif now - watch.signalled_s > timeout_s + extra_s(watch):
                del self.watching[job_id]
                brake = Brake(watch.signalled_s, now, watch.victims, watch.causes, needs(job_id))
                self.braked[job_id] = brake
                events.append(HandoffEvent("failed", job_id, watch, brake))
        return events

    def kept(self, plan, nodes_of: Callable[[str], Iterable[str]], leaving: set[str]) -> dict[str, str]:
        """The plan's victims (``plan``: a controller.core.plan.Plan) whose preemption
        must wait, each with why; ``nodes_of``: a running job's nodes. A job the plan
        starts whose handoff is pending (every victim of the preemption made for it
        gone and the job still not started) holds every victim. A braked job (its
        handoff failed, nothing it depends on changed since) holds the victims on the
        nodes the plan places it on; the plan's other preemptions go on. While some
        victim is still leaving, its GPUs are the job's, so the plan's preemptions
        are for others."""
        victims = [action.job_id for action in plan.of_kind("preempt")]
        if not victims or not (self.watching or self.braked):
            return {}
        pending, braked = [], []
        for action in plan.of_kind("start"):
            job_id = action.job_id
            brake = self.braked.get(job_id)
            if brake is not None:
                cause = f" ({','.join(brake.causes)})" if brake.causes else ""
                braked.append(({node for node, _ in action.placement},
                               f"{job_id} did not start after the preemption of {','.join(brake.victims)}{cause} "
                               f"made for it (handoff failed): no further preemption for it until {UNTIL}"))
                continue
            watch = self.watching.get(job_id)
            if watch is not None and not leaving.intersection(watch.victims):
                pending.append(f"{job_id} has not started yet after the preemption of {','.join(watch.victims)} "
                               "made for it (handoff pending)")
        if pending:
            why = "; ".join(pending + [line for _, line in braked])
            return {victim: why for victim in victims}
        held = {}
        for victim in victims:
            nodes = set(nodes_of(victim))
            lines = [line for placed, line in braked if nodes & placed or COUNT_NODE in placed]
            if lines:
                held[victim] = "; ".join(lines)
        return held

    def expect(self, start_ids: Iterable[str], now: float, victims: tuple[str, ...], causes: tuple[str, ...]
               ) -> list[str]:
        """After a round's preemptions (``victims``, signalled by decisions ``causes``):
        watch the jobs its plan starts that are not watched yet (nor braked: none of
        the preemptions was for them); returns them."""
        if not victims:
            return []
        added = []
        for job_id in start_ids:
            if job_id not in self.watching and job_id not in self.braked:
                self.watching[job_id] = Watch(now, victims, causes)
                added.append(job_id)
        return added


def handoff_decision(event: HandoffEvent, number: int, round_id: int, now: float, timeout_s: float,
                     start_time_s: Optional[float], reason: str) -> tuple[dict, Optional[float]]:
    """The decision entry of a landed or failed handoff (the ``number``-th checked this
    round), citing the preemptions that made room, and for a landed one its delay (s)
    from the victims' signal to the job's start (``start_time_s``; unknown: ``now``).
    ``reason``: Slurm's pending reason of a failed one."""
    watch = event.watch
    decision = {"decision_id": decision_id(round_id, "handoff", number), "job_id": event.job_id, "kind": "handoff",
                "cause_id": ",".join(watch.causes), "reason": f"made room for by preempting {','.join(watch.victims)}"}
    if event.kind == "landed":
        delay = max(0.0, (start_time_s or now) - watch.signalled_s)
        return dict(decision, applied=True, detail=started_detail(delay)), delay
    return dict(decision, applied=False, detail=f"not started {timeout_s:g}s after the victims' signal (reason "
                                                f"{reason or '-'}): no further preemption for it until {UNTIL}"), None

"""Did the preemption pay off? The handoff from the victims to the job they made room for.

When a round signals victims, the jobs the same plan starts are the beneficiaries.
Slurm's scheduler, not the controller, then starts them: another job (backfill,
another partition) may take the freed GPUs first, or Slurm may not start the job on
them at all (a request the plan does not model: --constraint, --mem, --exclusive).
Each beneficiary is watched until it runs (a "handoff" decision, applied, with the
delay from the victims' signal to its start) or ``handoff_timeout_s`` passes (a
"handoff" decision, not applied).

No second preemption for a job whose handoff is pending: once its victims have left
(requeued) and it still has not started, a round whose plan starts it keeps its
victims running until the watch ends. A job whose handoff failed is braked: no
preemption is made for it until something it depends on changes (a job on the nodes
it may use leaves and what it frees could make it fit, such a node comes up, its
request changes: the rule is controller.core.levers.handoffs'), while the plan's preemptions for other jobs go on. Both
are kept in the store (written before the round's preemptions could repeat them), so
a restarted or standby controller does not signal again for such a job.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable, Optional

# The rule, shared with the simulator; Watch is re-exported for the callers that build one.
from controller.core.levers.handoffs import UNTIL, Brake, ClusterView, HandoffBook, Needs, Watch  # noqa: F401
from controller.core.levers.handoffs import started_delay_s, started_detail  # noqa: F401
from controller.core.model import JobSpec, Node
from controller.core.plan import Plan
from controller.service.acting.backend import ObservedJob
from controller.service.ops.config import Config
from controller.service.ops.report import RoundReport
from controller.service.round import levers
from controller.service.state.store import Store

log = logging.getLogger(__name__)
MAX_DELAYS_KEPT = 1000  # handoff delays kept for reports (the latest)


class Handoffs:
    """The watched handoffs (``watching``: beneficiary job id -> its watch) and the
    failed ones (``braked``: job id -> its Brake), loaded from the store; the rule is
    controller.core.levers.handoffs.HandoffBook's, this class persists and logs it."""

    def __init__(self, config: Config, store: Store, book: Optional[HandoffBook] = None):
        """``book``: the LeverBook's (controller.core.levers.book), loaded from the store
        by the round's lever module; by default a new one loaded here."""
        self.config = config
        self.store = store
        self.book = book if book is not None else HandoffBook().load(store.load_handoffs(config.cluster))
        self.watching = self.book.watching
        self.braked = self.book.braked
        self.landed = 0
        self.failed = 0
        self.delays_s: list[float] = []

    def check(self, observed: dict[str, ObservedJob], now: float, report: RoundReport,
              grace_of: Callable[[ObservedJob, float], float] = lambda job, at: 0.0,
              nodes: Iterable[Node] = (), spec_of: Optional[Callable[[str], Optional[JobSpec]]] = None) -> None:
        """Log each watched job that started, or that did not within handoff_timeout_s
        (plus its victims' grace beyond preempt_grace_s; ``grace_of``: a job's grace),
        and lift the brakes whose jobs' needs changed (``nodes``: the observed nodes;
        ``spec_of``: a job's JobSpec this round; None, or no spec: one built from what
        Slurm reports of it)."""
        levers.check_handoffs(levers.planner_for(self.config), self, observed, now, report, grace_of, nodes, spec_of)

    def extra_s(self, observed: dict[str, ObservedJob], grace_of: Callable[[ObservedJob, float], float]
                ) -> Callable[[Watch], float]:
        """A watch's time beyond handoff_timeout_s: its victims' grace beyond preempt_grace_s."""
        def extra_s(watch) -> float:
            graces = [grace_of(observed[v], watch.signalled_s) for v in watch.victims if v in observed]
            return max([0.0] + [g - self.config.preempt_grace_s for g in graces])
        return extra_s

    def needs(self, observed: dict[str, ObservedJob], nodes: Iterable[Node],
              spec_of: Optional[Callable[[str], Optional[JobSpec]]]) -> Callable[[str], Needs]:
        """job id -> what its start depends on now (``spec_of``: a job's JobSpec this round;
        None, or no spec: one built from what Slurm reports of it)."""
        reported = _spec_of(observed)
        return self._needs(observed, list(nodes), lambda j: (spec_of and spec_of(j)) or reported(j))

    def settle(self, event, delay: Optional[float]) -> None:
        """Persist one checked handoff (HandoffBook.check's event): a job gone or a brake
        lifted and a landed handoff clear its row, a failed one keeps it with its brake."""
        job_id, watch = event.job_id, event.watch
        if event.kind in ("gone", "released"):
            self.store.clear_handoff(self.config.cluster, job_id)
            if event.kind == "released":
                log.info("job %s: preemptions for it allowed again (%s) after its failed handoff", job_id,
                         event.detail)
        elif event.kind == "landed":
            self.landed += 1
            self.delays_s.append(delay)
            del self.delays_s[:-MAX_DELAYS_KEPT]  # a controller runs for months: keep it bounded
            self.store.clear_handoff(self.config.cluster, job_id)
        else:  # failed
            self.failed += 1
            self.store.save_handoff(self.config.cluster, job_id, watch.signalled_s, watch.victims,
                                    brake=event.brake.to_json())

    @staticmethod
    def _needs(observed: dict[str, ObservedJob], nodes: list[Node], spec_of: Callable[[str], JobSpec]
               ) -> Callable[[str], Needs]:
        """job id -> what its start depends on now: its JobSpec and comment (a user may
        change either), the observed nodes, the GPU jobs holding GPUs (listed once per
        round, when asked)."""
        view: list[ClusterView] = []

        def needs(job_id: str) -> Needs:
            if not view:
                running = [job for job in observed.values() if job.state == "RUNNING"]
                view.append(ClusterView(nodes, [(job.job_id, tuple(node for node, _ in job.gpus_by_node))
                                                for job in running], held={job.job_id: _held(job) for job in running}))
            return view[0].needs(spec_of(job_id), extra=(observed[job_id].comment,))
        return needs

    def kept(self, plan: Plan, observed: dict[str, ObservedJob], leaving: set[str]) -> dict[str, str]:
        """The plan's victims whose preemption must wait, with why (HandoffBook.kept)."""
        return self.book.kept(plan, self.nodes_of(observed), leaving)

    @staticmethod
    def nodes_of(observed: dict[str, ObservedJob]) -> Callable[[str], list[str]]:
        """job id -> the nodes it holds GPUs on (none: not observed)."""
        return lambda job_id: [node for node, _ in observed[job_id].gpus_by_node] if job_id in observed else []

    def holding(self, job_id: str, at: Callable[[float], str]) -> str:
        """Why no preemption is made for ``job_id`` now ('' when one may be): its brake,
        with the preemption's time written by ``at``."""
        brake = self.braked.get(job_id)
        return "" if brake is None else brake.holding(at(brake.signalled_s))

    def expect(self, plan: Plan, report: RoundReport, now: float) -> None:
        """After this round's preemptions: watch the jobs the plan starts, if any victim was signalled."""
        preempted = [e for e in report.applied if e["kind"] == "preempt" and e["applied"]]
        victims = tuple(e["job_id"] for e in preempted)
        causes = tuple(e["decision_id"] for e in preempted)
        for job_id in self.book.expect((a.job_id for a in plan.of_kind("start")), now, victims, causes):
            self.store.save_handoff(self.config.cluster, job_id, now, victims)


def _held(job: ObservedJob) -> tuple[tuple[str, int, int, int], ...]:
    """(node, GPUs, CPUs, MB) the running job holds on each of its nodes (0 where Slurm
    does not say): what its leaving frees for a braked job (controller.core.levers.handoffs)."""
    other = {node: (cpus, mem) for node, cpus, mem in job.held_by_node}
    nodes = dict(job.gpus_by_node)
    return tuple((node, nodes.get(node, 0), *other.get(node, (0, 0))) for node in sorted(set(nodes) | set(other)))


def _spec_of(observed: dict[str, ObservedJob]) -> Callable[[str], JobSpec]:
    """A job's request as a JobSpec from what Slurm reports (for a caller without the
    round's specs); the controller passes the ones its plan used."""
    def spec(job_id: str) -> JobSpec:
        job = observed[job_id]
        return JobSpec(job.job_id, job.gpus, job.submit_time_s or 0.0, partition=job.partition,
                       partitions=tuple(p for p in job.partition.split(",") if p), gpu_type=job.gpu_type,
                       reservation=job.reservation, time_limit_s=job.time_limit_s)
    return spec

"""slurmctld choosing its own preemption victims, for a replayed controller with
``preemption: slurm`` and Slurm starting the jobs (``SimConfig.slurm_starts``;
``Simulation(..., slurm_preemption=SlurmQos(...))``). The rules (who is a candidate,
in which order, how many are taken, which pending jobs try) are preempt/qos's, in the
one simulated slurmctld (controller.replay.slurmctld); this wraps them round the
replayed plan."""
from __future__ import annotations

from controller.core.model import JobState, Node
from controller.core.plan import Preempt, Start
from controller.core.ids import caused_id, decision_id
from controller.replay.slurmctld import SlurmQos, preempt_walk


class SlurmPreempts:
    """The replayed controller's round with slurmctld choosing the victims: wraps the
    controller.replay.slurm_order.SlurmOrder engine. The plan's own victims are dropped
    (the controller signals nobody under ``preemption: slurm``); walking the pending
    jobs in Slurm's order, each that Slurm did not start and can start by preempting
    gets preempt/qos's victims (controller.replay.slurmctld), and a start on them that
    the replay loop makes once their GPUs are free (at once without a grace period)."""

    def __init__(self, order, qos: SlurmQos):
        self.inner = order
        self.policy = order.policy
        self.qos = qos

    def step(self, snapshot):
        plan = self.inner.step(snapshot)
        order, engine = self.inner, self.inner.inner
        thresholds = engine.config.thresholds_gpu_s
        exempt_s = engine.config.preempt_min_runtime_s  # PreemptExemptTime (controller_costs)

        def level(job: JobState) -> int:
            return plan.levels.get(job.job_id, sum(1 for t in thresholds if job.queue_service_gpu_s >= t))

        starts = [a for a in plan.actions if a.kind == "start"]
        started = {a.job_id for a in starts}
        free = snapshot.free_gpus_by_node()  # a victim's GPUs in its grace count: they are on their way
        for action in starts:
            for node, gpus in action.placement:
                free[node] -= gpus
        # slurm_order's pending jobs: a requeued job waits for its BeginTime release
        pending = [j for j in snapshot.jobs if not j.running and j.job_id not in started
                   and (j.preemptions == 0 or order.released.get(j.job_id) == j.preemptions)]
        running = [j for j in snapshot.jobs if j.running]
        nodes: dict[str, Node] = {node.name: node for node in snapshot.nodes}
        per_node = max(node.gpus_total for node in snapshot.nodes)
        preempts, gains = [], []
        for job, victims, slots in preempt_walk(pending, level, running, free, nodes, self.qos, snapshot.now_s,
                                                exempt_s, per_node, order.limit_s):
            for victim in victims:
                preempts.append(Preempt(decision_id(snapshot.round_id, "slurm_preempt", len(preempts)), victim.job_id,
                                        f"Slurm preempt/qos: for {job.job_id}"))
            gains.append(Start(caused_id(decision_id(snapshot.round_id, "slurm_preempt", len(preempts)), "slurm_gain"),
                               job.job_id, slots, "Slurm: on its preemption's GPUs"))
        kept = [a for a in plan.actions if a.kind not in ("start", "preempt")]
        plan.actions = kept + preempts + starts + gains
        return plan

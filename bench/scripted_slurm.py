"""A scripted slurmctld for the benches: an in-memory cluster answering the command
lines the Slurm backend (slurm_plugin.backend) runs, in the 22.05 JSON shapes of
tests/fixtures/slurm/22.05, counting every command.

Shared by bench/bench_slurm_traffic.py (what the controller asks) and
bench/bench_round.py (what a round costs). Only slurmctld is scripted: the real
backend, parser, controller and store run. The time spent answering (building the
``squeue --json`` text, which a real slurmctld does in its own process) is summed
in ``answer_cpu_s`` / ``answer_wall_s`` so that a bench can leave it out of the
controller's cost; the JSON text is rendered once per change of the cluster.
``VirtualTime`` lets a bench (or a test) run Controller.run_forever itself, the
loop that runs in production, on a clock that moves only while the loop waits.

Job arrays (``submit_array``) are kept as slurmctld keeps them: one pending record
under the ArrayJobId for the tasks that never ran (``array_task_string`` "0-49%4"),
and a record of its own, under a new job id, for each task that starts (the %N
throttle counts the running ones). An update, hold or release naming a task still
in that record ("ARRAYID_TASKID") splits it off into a pending record of its own, as
slurmctld's update_job_str does (``splits`` counts them); an update naming the bare
ArrayJobId changes the pending record whole and every other record of the array.

Its QOS table (``sacctmgr``): a --requeue job runs in ``preempt_qos`` (requeue,within,
GraceTime ``grace_s``), any other in "normal"; with ``preempts`` set (PreemptType=
preempt/qos: ``preemption: slurm``) each scheduling pass preempts by the simulated
slurmctld's preempt/qos model (controller.replay.slurmctld.slurm_preemptions).
"""
from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from pathlib import Path

from controller.core.model import JobSpec, JobState, Node
from controller.replay.slurmctld import SlurmQos, by_site_factor, pick_nodes, slurm_preemptions, start_walk
from slurm_plugin.commands import CommandResult

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "slurm" / "22.05"
GPU_SIZES = (1, 1, 2, 2, 4, 8)
SCRIPT = "#!/bin/bash\n#SBATCH --signal=B:USR1@30\n#SBATCH --requeue\nsrun python3 train.py\n"



def _copied(value):
    """A deep copy of a JSON value, made here (not by copy.deepcopy) so that the memory
    bench, which leaves out what this file allocates, does not count the scripted
    slurmctld's own records as the controller's."""
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copied(item) for item in value]
    return value

class ScriptedSlurm:
    """``pending`` + ``running`` GPU jobs on ``nodes`` x ``gpus_per_node`` GPUs; call it
    as the backend's runner (argv, timeout_s, env) -> CommandResult."""

    def __init__(self, pending: int, running: int, nodes: int = 1000, gpus_per_node: int = 8, seed: int = 1,
                 now: int = 1_000_000, preempt_qos: str = "tiresias_ckpt", grace_s: int = 30,
                 release: str = "22.05"):
        squeue = json.loads((FIXTURES / "squeue.json").read_text())
        sinfo = json.loads((FIXTURES / "sinfo.json").read_text())
        self.meta = {k: v for k, v in squeue.items() if k != "jobs"}
        self.running_template = next(j for j in squeue["jobs"] if str(j["job_id"]) == "5")
        self.pending_template = next(j for j in squeue["jobs"] if str(j["job_id"]) == "10")
        self.node_template = sinfo["nodes"][0]
        self.sinfo_meta = {k: v for k, v in sinfo.items() if k != "nodes"}
        # The jobs are kept in 22.05's spelling whatever the release; "26.05" renders
        # squeue --json in 26.05's (tests/fixtures/slurm/26.05: numbers as {set, infinite,
        # number}, job_state a list, job_resources.nodes.allocation, data_parser v0.0.45
        # whose records say no --exclusive: the backend asks `scontrol show job -o ID`,
        # answered here); sinfo --json -N one "sinfo" entry per node (_sinfo26_text).
        if release not in ("22.05", "26.05"):
            raise ValueError(f"release {release!r}: 22.05 or 26.05")
        self.release = release
        if release == "26.05":
            squeue26 = json.loads((FIXTURES.parent / "26.05" / "squeue.json").read_text())
            self.meta26 = {k: v for k, v in squeue26.items() if k != "jobs"}
            sinfo26 = json.loads((FIXTURES.parent / "26.05" / "sinfo.json").read_text())
            self.sinfo26_template = next(e for e in sinfo26["sinfo"] if e["nodes"]["nodes"] == ["gpu1"])
            self.sinfo26_meta = {k: v for k, v in sinfo26.items() if k != "sinfo"}
            self.templates26 = {state: next(j for j in squeue26["jobs"] if str(j["job_id"]) == job_id)
                                for state, job_id in (("RUNNING", "5"), ("PENDING", "10"))}
        # job id -> (the record's compact 22.05 JSON, its text as rendered in the document):
        # a record unchanged since the last answer is not rendered again
        self._pieces: dict[int, tuple[str, str]] = {}
        self._node_pieces: dict[str, tuple[tuple, str]] = {}  # (26.05's sinfo, as _pieces)
        self.gpus_per_node = gpus_per_node
        # slurmdbd's QOS table under preemption: slurm (docs/slurm-preemption.md): the
        # declared (--requeue) jobs run in ``preempt_qos`` (cli_filter.lua gives them
        # --qos), PreemptMode requeue, within, GraceTime ``grace_s``; the others keep
        # "normal", which preempts nobody
        self.preempt_qos = preempt_qos
        self.grace_s = grace_s
        # preempt/qos (PreemptType=preempt/qos, PreemptMode=REQUEUE: preemption: slurm; set
        # by a test) and its victims in their GraceTime: job id -> when it is requeued
        self.preempts = False
        self.preempted: dict[int, int] = {}
        self.nodes = {f"n{i:04d}": 0 for i in range(nodes)}  # node -> GPUs used
        self.node_flags: dict[str, list[str]] = {}  # node -> state flags set by a test (["DRAIN"])
        self.mps_nodes = False  # nodes with MPS gres (submit_mps)
        self.node_partitions: dict[str, str] = {}  # node -> its partition, set by a test (default "batch")
        self.jobs: dict[int, dict] = {}
        self.site_factors: dict[int, int] = {}
        self.work_left_s: dict[int, float] = {}  # job id -> seconds of work left (submit(work_s=...))
        self.first_submit: dict[int, float] = {}  # job id -> its first submit time (the age order)
        self.signalled_at: dict[int, int] = {}  # running job id -> when its checkpoint signal came
        self.calls: Counter = Counter()
        self.ids_per_update: list[int] = []  # job ids each SiteFactor update named (one RPC each)
        # job arrays: ArrayJobId -> the task ids still in its pending record, its %N
        # throttle (0: none), the work each task runs for; and the records split off by
        # an update that named a task still in the pending record
        self.array_tasks: dict[int, list[int]] = {}
        # every array job id ever submitted: a SiteFactor update names an array by it, and
        # looking for its records in every job for every id named made a 220k warm-up quadratic
        self.array_ids: set[int] = set()
        self.array_throttle: dict[int, int] = {}
        self.array_work_s: dict[int, float | None] = {}
        self.splits = 0
        self._next_id = running + pending + 1  # the job id a new record (a started array task) gets
        self.now = now  # its clock (epoch s): the jobs' submit and start times count back from it
        self.answer_cpu_s = self.answer_wall_s = 0.0
        self._texts: dict[str, str] = {}  # "squeue"/"sinfo" -> the JSON text of the current state
        rng = random.Random(seed)
        names = list(self.nodes)
        cursor = 0
        for k in range(1, running + 1):
            gpus = min(rng.choice(GPU_SIZES), gpus_per_node)
            while self.nodes[names[cursor]] + gpus > gpus_per_node:
                cursor += 1
                if cursor == len(names):
                    raise ValueError(f"{running} running jobs do not fit on {nodes} nodes x {gpus_per_node} GPUs")
            node = names[cursor]
            self.nodes[node] += gpus
            self.jobs[k] = self._running(k, node, gpus, self.now - rng.randint(100, 90000))
        for k in range(running + 1, running + pending + 1):
            self.jobs[k] = self._pending(k, rng.choice(GPU_SIZES), self.now - rng.randint(0, 90000))

    def _running(self, job_id, node, gpus, start):
        record = _copied(self.running_template)
        record.update(job_id=job_id, nodes=node, tres_per_node=f"gres:gpu:{gpus}", node_count=1, tasks=1,
                      gres_detail=[f"gpu:{gpus}(IDX:0-{gpus - 1})"], submit_time=start - 10,
                      eligible_time=start - 10, start_time=start,
                      end_time=start + 86400, partition="batch", user_name="alice", comment="", restart_cnt=0,
                      job_state="RUNNING", state_reason="None", requeue=True, batch_flag=True, required_nodes="",
                      excluded_nodes="")
        record["job_resources"]["allocated_nodes"] = [{"nodename": node}]
        return record

    def _pending(self, job_id, gpus, submit):
        record = _copied(self.pending_template)
        self.first_submit.setdefault(job_id, submit)  # a requeue moves submit_time, not the age order here
        # An ordinary one-node job (max_nodes 0, as fixture jobs 4 and 11); one in 20 keeps
        # the template's (job 10) max_nodes 4, a -N 1-4 job the placement must bound.
        # one CPU a node, as the template's (job 10: 4 nodes, 4 CPUs) has: its 4 CPUs on one node would be more
        # than the nodes' CPUs left free (sinfo's counts stay the template's) hold for every job
        record.update(job_id=job_id, tres_per_node=f"gres:gpu:{gpus}", node_count=1, tasks=1, cpus=1,
                      submit_time=submit,
                      eligible_time=submit, max_nodes=record["max_nodes"] if job_id % 20 == 0 else 0,
                      partition="batch", user_name="bob", comment="", restart_cnt=0, job_state="PENDING",
                      state_reason="Priority", requeue=True, batch_flag=True, required_nodes="", excluded_nodes="")
        return record

    def submit(self, job_id: int, gpus: int, work_s: float | None = None, requeue: bool = True,
               comment: str = "", partition: str = "batch") -> None:
        """A new pending job; ``work_s``: the seconds of work it runs for (None: until
        finish_one); ``requeue``: --requeue (False: not preemptable for the controller).
        More GPUs than a node has: whole nodes (``--gres=gpu:G -N N``, N = gpus / G)."""
        per_node = min(gpus, self.gpus_per_node)
        if gpus % per_node:
            raise ValueError(f"gpus value {gpus} is not a whole number of {self.gpus_per_node}-GPU nodes")
        self.jobs[job_id] = self._pending(job_id, per_node, self.now)
        count = gpus // per_node
        self.jobs[job_id].update(requeue=requeue, comment=comment, node_count=count, cpus=count, partition=partition,
                                 max_nodes=count if count > 1 else 0, qos=self.preempt_qos if requeue else "normal")
        if work_s is not None:
            self.work_left_s[job_id] = float(work_s)
        self._next_id = max(self._next_id, job_id + 1)
        self._texts.clear()

    def submit_mps(self, job_id: int, shares: int, user: str = "bob", comment: str = "") -> None:
        """A new pending MPS job (``--gres=mps:N``: N shares of one GPU, 100 a GPU), as
        22.05 lists one (tests/fixtures/slurm/22.05/squeue.json job 6: ``tres_per_node``
        ``gres:mps:N``, ``gres/mps=N`` in ``tres_req_str``). This slurmctld never starts
        one (its nodes count whole GPUs): it waits, its share set or held by the levers."""
        self.jobs[job_id] = self._pending(job_id, 0, self.now)
        self.jobs[job_id].update(tres_per_node=f"gres:mps:{shares}", tres_req_str=f"cpu=1,node=1,billing=1,gres/mps={shares}",
                                 user_name=user, comment=comment)
        self._next_id = max(self._next_id, job_id + 1)
        self.mps_nodes = True

    def _gres(self, used: int) -> dict:
        """A node's gres and gres_used: with MPS (``gpu:4,mps:400``, none of it in use as
        22.05 writes it, ``mps:(null):0(IDX:N/A)``) once an MPS job was submitted."""
        if not self.mps_nodes:
            return {"gres": f"gpu:{self.gpus_per_node}", "gres_used": f"gpu:{used}"}
        return {"gres": f"gpu:{self.gpus_per_node},mps:{100 * self.gpus_per_node}",
                "gres_used": f"gpu:{used},mps:(null):0(IDX:N/A)"}

    @staticmethod
    def _mps(record: dict) -> bool:
        return record["tres_per_node"].startswith("gres:mps:")

    def submit_array(self, array_id: int, tasks: int, gpus: int, throttle: int = 0,
                     work_s: float | None = None, comment: str = "") -> None:
        """``sbatch --array=0-(tasks-1)%throttle --gres=gpu:gpus`` as job ``array_id``:
        one pending record for all its tasks (``throttle`` 0: no %N); ``work_s``: the
        seconds each task runs for (None: until finish_one)."""
        self.jobs[array_id] = self._pending(array_id, gpus, self.now)
        self.jobs[array_id].update(array_job_id=array_id, array_task_id=None, array_max_tasks=throttle,
                                   comment=comment)
        self.array_tasks[array_id] = list(range(tasks))
        self.array_ids.add(array_id)
        self.array_throttle[array_id] = throttle
        self.array_work_s[array_id] = work_s
        self._next_id = max(self._next_id, array_id + 1)
        self._texts.clear()

    def records_of(self, array_id: int) -> dict[int, dict]:
        """The records of the array ``array_id`` by job id (its pending record included)."""
        return {j: r for j, r in self.jobs.items() if r.get("array_job_id") == array_id}

    def _split(self, array_id: int, task: int) -> int:
        """The task ``task`` out of the array's pending record into a pending record of its
        own (slurmctld's job_array_split), which keeps the record's SiteFactor; returns its
        job id. The last task takes the pending record itself (job_array_post_sched)."""
        tasks = self.array_tasks[array_id]
        tasks.remove(task)
        record = self.jobs[array_id]
        if not tasks:
            del self.array_tasks[array_id]
            record.update(array_task_id=task, array_task_string="")
            return array_id
        job_id, self._next_id = self._next_id, self._next_id + 1
        self.jobs[job_id] = dict(_copied(record), job_id=job_id, array_task_id=task, array_task_string="")
        if array_id in self.site_factors:
            self.site_factors[job_id] = self.site_factors[array_id]
        self.first_submit[job_id] = self.first_submit[array_id]
        if self.array_work_s.get(array_id) is not None:
            self.work_left_s[job_id] = float(self.array_work_s[array_id])
        self._texts.clear()
        return job_id

    def _record(self, text: str, split: bool = True) -> int | None:
        """The job id of the record a command's job id names: "ARRAYID_TASKID" is that
        task's record, split off the pending record if it is still in it (``split``)."""
        head, _, task = text.partition("_")
        if not task:
            return int(head) if int(head) in self.jobs else None
        array_id, task_id = int(head), int(task)
        for job_id, record in self.jobs.items():
            if record.get("array_job_id") == array_id and record.get("array_task_id") == task_id:
                return job_id
        if split and task_id in self.array_tasks.get(array_id, ()):
            self.splits += 1
            return self._split(array_id, task_id)
        return None

    def _array_running(self, array_id: int) -> int:
        return sum(1 for r in self.jobs.values() if r.get("array_job_id") == array_id and r["job_state"] == "RUNNING")

    def _throttled(self, record: dict) -> bool:
        """Whether the record is a task (or the pending record) of an array whose %N
        tasks run already (slurmctld's job_array_start_test)."""
        array_id = record.get("array_job_id") or 0
        throttle = self.array_throttle.get(array_id, 0)
        return bool(throttle) and self._array_running(array_id) >= throttle

    # -- slurmctld's scheduler and the jobs' own progress (tests/test_lever_parity.py) --
    def advance(self, now: int) -> list[int]:
        """The clock moves to ``now``: every running job whose work is done by then
        completes and leaves the list; returns their ids."""
        self.now = now
        done = [j for j, r in self.jobs.items() if r["job_state"] == "RUNNING" and j in self.work_left_s
                and r["start_time"] + self.work_left_s[j] <= now]
        for job_id in done:
            self._free(self.jobs.pop(job_id))
            self.work_left_s.pop(job_id)
        if done:
            self._texts.clear()
        return done

    def schedule(self) -> list[tuple[int, str]]:
        """What slurmctld's multifactor priority and scheduler do: the start rule of the
        simulated slurmctld (controller.replay.slurmctld.start_walk): pending jobs not held
        (a requeued job waits on its BeginTime until released) by priority, here the
        SiteFactor, then age (the older first), then job id; each starts on the node with
        the fewest free GPUs it fits on (a job of N nodes: the N such nodes, listed by
        name), within its ReqNodeList if set; one that fits nowhere waits and the next
        is tried. Returns (job id, nodes) per start."""
        self._requeue_preempted()
        pending = [j for j, r in self.jobs.items() if r["job_state"] == "PENDING"
                   and r["state_reason"] not in ("BeginTime", "JobHeldAdmin") and not self._mps(r)]
        started = []

        # partition list -> (its nodes' free GPUs, those counts largest first), until a start:
        # a job that fits nowhere is turned away by the count-th largest, not a look at every
        # node (at 220,000 jobs on 10,000 nodes, every pending job looked at every node)
        by_partitions: dict[str, tuple[dict[str, int], list[int]]] = {}

        def place(job_id: int, reserved: set[str]):
            record = self.jobs[job_id]
            if self._throttled(record):
                return None
            partitions = record["partition"].split(",")
            gpus, count = self._gpus(record), record["node_count"]
            if not record["required_nodes"]:
                kept = by_partitions.get(record["partition"])
                if kept is None:
                    free = {n: self.gpus_per_node - used for n, used in self.nodes.items()
                            if self.node_partitions.get(n, "batch") in partitions}
                    kept = by_partitions[record["partition"]] = (free, sorted(free.values(), reverse=True))
                free, largest = kept
                if len(largest) < count or largest[count - 1] < gpus:
                    return None
                return pick_nodes(free, free, gpus, count)
            free = {n: self.gpus_per_node - self.nodes[n] for n in record["required_nodes"].split(",")
                    if n in self.nodes and self.node_partitions.get(n, "batch") in partitions}
            return pick_nodes(free, free, gpus, count)

        def start(job_id: int, chosen: tuple[str, ...]) -> None:
            record = self.jobs[job_id]
            gpus, count = self._gpus(record), record["node_count"]
            task_id = job_id
            if job_id in self.array_tasks and record.get("array_task_id") is None:
                task_id = self._split(job_id, self.array_tasks[job_id][0])
                record = self.jobs[task_id]
            for node in chosen:
                self.nodes[node] += gpus
            by_partitions.clear()
            running = self._running(task_id, chosen[0], gpus, self.now)
            running.update(nodes=",".join(chosen), node_count=count,
                           gres_detail=running["gres_detail"] * count)
            running["job_resources"]["allocated_nodes"] = [{"nodename": node} for node in chosen]
            for key in ("submit_time", "comment", "requeue", "user_name", "restart_cnt", "required_nodes",
                        "partition", "max_nodes", "array_job_id", "array_task_id", "array_max_tasks", "qos"):
                running[key] = record[key]
            self.jobs[task_id] = running
            started.append((task_id, chosen))

        # an array's pending record starts its tasks one by one, each as a record of its own
        start_walk(pending, by_site_factor(lambda j: self.site_factors.get(j, 0),
                                           lambda j: self.first_submit.get(j, self.jobs[j]["submit_time"])),
                   place, start, again=lambda j: self.jobs.get(j, {}).get("job_state") == "PENDING")
        if self.preempts:
            self._preempt()
        if started:
            self._texts.clear()
        return started

    def _preempt(self) -> None:
        """preempt/qos after the starts: the simulated slurmctld's rules
        (controller.replay.slurmctld.slurm_preemptions) on these records, priority the
        SiteFactor; each victim gets its --signal now and is requeued one GraceTime later
        (``_requeue_preempted``). Array records are not modelled."""
        order = sorted((j for j, r in self.jobs.items() if r["job_state"] in ("PENDING", "RUNNING")
                        and not r.get("array_job_id")), key=lambda j: (self.first_submit.get(j, 0), j))
        states = {j: self._state(j, index) for index, j in enumerate(order)}
        pending = [job for j, job in states.items() if self.jobs[j]["job_state"] == "PENDING"
                   and self.jobs[j]["state_reason"] != "BeginTime"]
        running = [job for j, job in states.items() if self.jobs[j]["job_state"] == "RUNNING"]
        nodes = {name: Node(name, self.gpus_per_node, self.gpus_per_node - used,
                            partitions=(self.node_partitions.get(name, "batch"),))
                 for name, used in self.nodes.items()}
        free = {name: self.gpus_per_node - used for name, used in self.nodes.items()}
        pins = {str(j): self.jobs[j]["required_nodes"].split(",") for j in states if self.jobs[j]["required_nodes"]}
        for victim in slurm_preemptions(pending, running, lambda job: -self.site_factors.get(int(job.job_id), 0),
                                        free, nodes, SlurmQos(), self.now, self.gpus_per_node,
                                        {str(j) for j in self.preempted}, lambda job: pins.get(job.job_id)):
            job_id = int(victim.job_id)
            self.signalled_at.setdefault(job_id, self.now)
            self.preempted[job_id] = self.now + self.grace_s

    def _state(self, job_id: int, index: int) -> JobState:
        """A record as the simulated slurmctld's model reads it."""
        record = self.jobs[job_id]
        gpus, count = self._gpus(record), record["node_count"]
        spec = JobSpec(str(job_id), gpus * count, float(self.first_submit.get(job_id, record["submit_time"])), None,
                       preemptable=record.get("qos") == self.preempt_qos and record["requeue"],
                       partitions=tuple(record["partition"].split(",")))
        state = JobState(spec=spec, index=index, first_start_s=0.0 if record["restart_cnt"] else None)
        if record["job_state"] == "RUNNING":
            state.running, state.run_start_s = True, float(record["start_time"])
            state.placement = tuple((item["nodename"], gpus) for item in record["job_resources"]["allocated_nodes"])
        return state

    def _requeue_preempted(self) -> None:
        """slurmctld's next pass after a victim's GraceTime: requeued (``_requeue``);
        one that ended meanwhile is forgotten."""
        for job_id, due in list(self.preempted.items()):
            if self.jobs.get(job_id, {}).get("job_state") != "RUNNING":
                del self.preempted[job_id]
            elif due <= self.now:
                del self.preempted[job_id]
                self._requeue(job_id)
                self._texts.clear()

    @staticmethod
    def _gpus(record: dict) -> int:
        """GPUs per node."""
        return int(record["tres_per_node"].rsplit(":", 1)[1])

    def _free(self, record: dict) -> None:
        """The GPUs a running record holds on each of its nodes go back."""
        for item in record["job_resources"]["allocated_nodes"]:
            self.nodes[item["nodename"]] -= self._gpus(record)

    def _requeue(self, job_id: int) -> None:
        """scontrol requeue: back to PENDING with restart_cnt + 1, held by a BeginTime
        (22.05) until released; the work since the checkpoint its signal asked for is
        lost (none kept without a signal)."""
        record = self.jobs[job_id]
        if record["job_state"] != "RUNNING":
            raise ValueError(f"job {job_id} is {record['job_state']}")
        kept_until = self.signalled_at.pop(job_id, record["start_time"])
        if job_id in self.work_left_s:
            self.work_left_s[job_id] -= kept_until - record["start_time"]
        self._free(record)
        pending = self._pending(job_id, self._gpus(record), record["submit_time"])
        for key in ("comment", "requeue", "user_name", "required_nodes", "node_count", "max_nodes", "array_job_id",
                    "array_task_id", "array_max_tasks", "partition", "qos"):
            pending[key] = record[key]
        # Slurm's requeue sets the submit time to its own and the BeginTime cred_expire + 1 s
        # later (121 s by default)
        pending.update(restart_cnt=record["restart_cnt"] + 1, state_reason="BeginTime",
                       submit_time=int(self.now), eligible_time=int(self.now) + 121)
        self.jobs[job_id] = pending

    def start_one(self) -> int:
        """The pending job with the highest SiteFactor starts on a node with room."""
        pending = [j for j, r in self.jobs.items() if r["job_state"] == "PENDING"]
        job_id = min(pending, key=by_site_factor(lambda j: self.site_factors.get(j, 0), age=lambda j: j))
        gpus = int(self.jobs[job_id]["tres_per_node"].rsplit(":", 1)[1])
        node = next(n for n, used in self.nodes.items() if used + gpus <= self.gpus_per_node)
        self.nodes[node] += gpus
        self.jobs[job_id] = self._running(job_id, node, gpus, self.now)
        self._texts.clear()
        return job_id

    def finish_one(self) -> int:
        """The running job with the lowest id completes and leaves Slurm's list."""
        job_id = min(j for j, r in self.jobs.items() if r["job_state"] == "RUNNING")
        self._free(self.jobs.pop(job_id))
        self._texts.clear()
        return job_id

    def finish_lowest(self, count: int) -> list[int]:
        """The ``count`` running jobs with the lowest ids complete and leave Slurm's list."""
        ended = sorted(j for j, r in self.jobs.items() if r["job_state"] == "RUNNING")[:count]
        for job_id in ended:
            self._free(self.jobs.pop(job_id))
        self._texts.clear()
        return ended

    def scontrol(self) -> int:
        """scontrol calls counted so far."""
        return sum(n for name, n in self.calls.items() if name.startswith("scontrol"))

    def __call__(self, argv, timeout_s, env):
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        try:
            return self._answer(list(argv))
        finally:
            self.answer_cpu_s += time.process_time() - started_cpu
            self.answer_wall_s += time.perf_counter() - started_wall

    def _answer(self, argv: list[str]) -> CommandResult:
        if argv[:2] == ["squeue", "--json"]:
            self.calls["squeue --json"] += 1
            return CommandResult(0, self._text("squeue"), "")
        if argv[:2] == ["sinfo", "--json"]:  # (-N: one record per node, as this one writes anyway)
            self.calls["sinfo --json"] += 1
            return CommandResult(0, self._text("sinfo"), "")
        if argv[0] == "sprio":
            self.calls["sprio"] += 1
            return CommandResult(0, "".join(f"{j} {self.site_factors.get(j, 0)}\n" for j, r in self.jobs.items()
                                            if r["job_state"] == "PENDING"), "")
        if argv[0] == "squeue" and "-j" in argv:  # the signal lever's state check
            self.calls["squeue -h -j"] += 1
            job_id = self._record(argv[argv.index("-j") + 1], split=False)
            record = self.jobs.get(job_id) if job_id is not None else None
            return CommandResult(0, f"{record['job_state']}\n" if record else "", "")
        if argv[0] == "squeue":
            form = argv[argv.index("-o") + 1]
            self.calls[f'squeue -h -o "{form}" (poll)'] += 1
            fields = {"%i": self._poll_id, "%t": lambda j, r: "R" if r["job_state"] == "RUNNING" else "PD",
                      "%r": lambda j, r: r["state_reason"]}
            return CommandResult(0, "".join(" ".join(fields[f](j, r) for f in form.split()) + "\n"
                                            for j, r in self.jobs.items()), "")
        if argv[0] == "sinfo":  # the light node poll: nodes grouped by state
            self.calls['sinfo -h -o "%T %N" (poll)'] += 1
            by_state: dict[str, list[str]] = {}
            for name in self.nodes:
                by_state.setdefault(self._light_node_state(name), []).append(name)
            return CommandResult(0, "".join(f"{state} {','.join(names)}\n" for state, names in by_state.items()), "")
        if argv[:3] == ["scontrol", "show", "job"]:
            self.calls["scontrol show job"] += 1
            if argv[-1] == "-o":  # every job, one line each
                lines = [self._show_job(str(job_id)).stdout for job_id in self.jobs]
                return CommandResult(0, "".join(lines), "")
            return self._show_job(argv[-1])
        if argv[:3] == ["scontrol", "show", "partition"] and self.release == "26.05":
            self.calls["scontrol show partition"] += 1
            return CommandResult(0, "".join(f"PartitionName={name} Default=NO OverSubscribe=NO Exclusive=NO "
                                            f"PreemptMode=OFF State=UP\n" for name in sorted(
                                                {"batch", *self.node_partitions.values()})), "")
        if argv[:3] == ["scontrol", "write", "batch_script"]:
            self.calls["scontrol write batch_script"] += 1
            return CommandResult(0, SCRIPT, "")
        if argv[:2] == ["scontrol", "update"] and argv[-1].startswith("SiteFactor="):
            self.calls["scontrol update SiteFactor"] += 1
            value = int(argv[-1].split("=", 1)[1])
            self.ids_per_update.append(len(argv[2].split("=", 1)[1].split(",")))
            for text in argv[2].split("=", 1)[1].split(","):
                # a whole array: every record of it
                if "_" not in text and int(text) in self.array_ids and self.records_of(int(text)):
                    targets = list(self.records_of(int(text)))
                else:
                    job_id = self._record(text)
                    targets = [] if job_id is None else [job_id]
                for job_id in targets:
                    self.site_factors[job_id] = value
            self._texts.clear()
            return CommandResult(0, "", "")
        if argv[:2] == ["scontrol", "update"] and argv[-1].startswith("AdminComment="):
            # kept, as slurmctld keeps it: the next squeue --json shows it (and that
            # record's text changed)
            self.calls["scontrol update AdminComment"] += 1
            job_id = self._record(argv[2].split("=", 1)[1])
            record = self.jobs.get(job_id) if job_id is not None else None
            if record is not None:
                record["admin_comment"] = argv[-1].split("=", 1)[1]
                self._texts.clear()
            return CommandResult(0, "", "")
        self.calls[" ".join(argv[:2])] += 1
        if argv[0] == "sacctmgr" and argv[-1] == "format=name,preemptmode,gracetime,preemptexempttime,preempt":
            # the QOS's preemption settings (Contract.read_qos_grace): preempt_qos requeues
            # its own jobs by priority (within) after its GraceTime; "normal" preempts nobody
            grace = f"{self.grace_s // 3600:02d}:{self.grace_s // 60 % 60:02d}:{self.grace_s % 60:02d}"
            return CommandResult(0, f"normal|cluster|||\n{self.preempt_qos}|requeue,within|{grace}||\n", "")
        if argv[0] == "sacctmgr" and argv[-1].startswith("format=name,"):
            # slurmdbd's QOS table: the QOS it always has (jobs' "normal") and preempt_qos, no limit set
            return CommandResult(0, "".join(name + "|" * argv[-1].count(",") + "\n"
                                            for name in ("normal", self.preempt_qos)), "")
        return self._lever(argv)

    def _lever(self, argv: list[str]) -> CommandResult:
        """The other levers change the job as slurmctld would: a pin (ReqNodeList), the
        BeginTime release (StartTime=now), a requeue, a checkpoint signal's time."""
        named = argv[-1].replace("_", "", 1).isdigit() and argv[0] in ("scancel", "scontrol")
        job_id = self._record(argv[-1]) if named else None
        if argv[:2] == ["scontrol", "update"]:
            job_id, (key, _, value) = self._record(argv[2].split("=", 1)[1]), argv[3].partition("=")
            record = self.jobs.get(job_id) if job_id is not None else None
            if record is None:
                return CommandResult(1, "", f"slurm_update error: Invalid job id specified ({job_id})")
            if key == "ReqNodeList":
                record["required_nodes"] = value
            elif key == "StartTime" and record["state_reason"] == "BeginTime":
                record["state_reason"] = "Priority"
            elif key == "Partition":
                record["partition"] = value
            elif key == "TresPerNode" and value.startswith("gres:mps:") and record["job_state"] == "PENDING":
                shares = value.rsplit(":", 1)[1]  # the 22.05 form rewrites the string and the TRES
                record.update(tres_per_node=value, tres_req_str=f"cpu=1,node=1,billing=1,gres/mps={shares}")
            else:
                return CommandResult(0, "", "")  # nothing squeue --json shows changed
        elif argv[:2] == ["scontrol", "hold"] and job_id in self.jobs:
            self.jobs[job_id].update(state_reason="JobHeldAdmin", priority=0)  # Priority=0, Reason=JobHeldAdmin
        elif argv[:2] == ["scontrol", "release"] and job_id in self.jobs:
            if self.jobs[job_id]["state_reason"] == "JobHeldAdmin":
                self.jobs[job_id].update(state_reason="Priority", priority=100)
        elif argv[:2] == ["scontrol", "requeue"] and job_id in self.jobs:
            self._requeue(job_id)
        elif argv[0] == "scancel" and job_id in self.jobs and any(a.startswith("--signal=") for a in argv):
            self.signalled_at.setdefault(job_id, self.now)
            return CommandResult(0, "", "")
        else:
            return CommandResult(0, "", "")
        self._texts.clear()
        return CommandResult(0, "", "")

    def _poll_id(self, job_id: int, record: dict) -> str:
        """squeue's %i: "ARRAYID_TASKID" for an array task, "ARRAYID_[TASKS]" for the pending record."""
        array_id = record.get("array_job_id") or 0
        if not array_id:
            return str(job_id)
        if record.get("array_task_id") is None:
            return f"{array_id}_[{record['array_task_string']}]"
        return f"{array_id}_{record['array_task_id']}"

    def _node_state(self, name: str) -> str:
        return "mixed" if self.nodes[name] else "idle"

    def _light_node_state(self, name: str) -> str:
        """As sinfo's %T prints it: "drained", "draining" for a node with DRAIN set."""
        if "DRAIN" in self.node_flags.get(name, ()):
            return "draining" if self.nodes[name] else "drained"
        return self._node_state(name)

    def _text(self, which: str) -> str:
        if which not in self._texts:
            if which == "squeue":
                for array_id, tasks in self.array_tasks.items():  # the pending records' task lists
                    throttle = self.array_throttle[array_id]
                    self.jobs[array_id].update(
                        array_task_string=_task_string(tasks) + (f"%{throttle}" if throttle else ""),
                        state_reason="JobArrayTaskLimit" if self._throttled(self.jobs[array_id]) else "Priority")
                self._texts[which] = self._squeue_text()
                return self._texts[which]
            elif self.release == "26.05":
                self._texts[which] = self._sinfo26_text()
                return self._texts[which]
            else:
                doc = {**self.sinfo_meta, "nodes": [
                    dict(self.node_template, name=name, **self._gres(used),
                         state=self._node_state(name), state_flags=self.node_flags.get(name, []),
                         partitions=[self.node_partitions.get(name, "batch")])
                    for name, used in self.nodes.items()]}
            self._texts[which] = json.dumps(doc, indent=2)  # laid out as slurmctld prints it
        return self._texts[which]


    def _sinfo26_text(self) -> str:
        """``sinfo --json -N`` as 26.05 writes it: one ``sinfo`` entry per node (each node is
        in one partition here), the recorded entry (tests/fixtures/slurm/26.05, its
        partition's whole description in each) with this node's name, state, partition and
        gres laid over, and the 22.05 template's CPUs and memory. Each entry rendered once
        per change of it, as squeue's records are."""
        template, base = self.sinfo26_template, self.node_template
        pieces, last, now = [], self._node_pieces, {}
        for name, used in self.nodes.items():
            gres = self._gres(used)
            key = (used, gres["gres"], self._node_state(name), tuple(self.node_flags.get(name, ())),
                   self.node_partitions.get(name, "batch"))
            kept = last.get(name)
            if kept is None or kept[0] != key:
                cpus = base["cpus"]
                entry = dict(template, node={"state": [key[2].upper(), *key[3]]},
                             nodes=dict(template["nodes"], nodes=[name]),
                             cpus=dict(template["cpus"], allocated=base["alloc_cpus"], idle=cpus - base["alloc_cpus"],
                                       total=cpus, minimum=cpus, maximum=cpus),
                             memory=dict(template["memory"], minimum=base["real_memory"],
                                         maximum=base["real_memory"], allocated=base["alloc_memory"]),
                             gres={"total": gres["gres"], "used": gres["gres_used"]},
                             partition=dict(template["partition"], name=key[4]))
                kept = (key, "    " + json.dumps(entry, indent=2).replace("\n", "\n    "))
            now[name] = kept
            pieces.append(kept[1])
        self._node_pieces = now
        marker = '"@@NODES@@"'
        return json.dumps({"sinfo": ["@@NODES@@"], **self.sinfo26_meta}, indent=2).replace(
            "    " + marker, ",\n".join(pieces), 1)

    def _squeue_text(self) -> str:
        """``squeue --json`` of the current jobs, laid out as ``json.dumps(doc, indent=2)``
        would (the layout slurm_plugin.record_cache cuts), each record rendered once
        per change of it (json's indenting encoder is pure Python: a whole document of
        110,000 jobs took most of a minute)."""
        if self.release == "26.05":
            meta = dict(self.meta26, last_update={"set": True, "infinite": False, "number": int(self.now)})
        else:
            meta = self.meta
        if not self.jobs:
            return json.dumps({**meta, "jobs": []}, indent=2) if self.release == "22.05" else \
                json.dumps({"jobs": [], **meta}, indent=2)
        marker = '"@@JOBS@@"'
        doc = {**meta, "jobs": ["@@JOBS@@"]} if self.release == "22.05" else {"jobs": ["@@JOBS@@"], **meta}
        pieces, last, now = [], self._pieces, {}
        for job_id, record in self.jobs.items():
            key = json.dumps(record, separators=(",", ":"))  # C-encoded: cheap next to rendering
            kept = last.get(job_id)
            if kept is None or kept[0] != key:
                shaped = self._shape26(record) if self.release == "26.05" else record
                kept = (key, "    " + json.dumps(shaped, indent=2).replace("\n", "\n    "))
            now[job_id] = kept
            pieces.append(kept[1])
        self._pieces = now
        return json.dumps(doc, indent=2).replace("    " + marker, ",\n".join(pieces), 1)

    def _shape26(self, record: dict) -> dict:
        """A job kept in 22.05's spelling as 26.05's squeue --json writes it: the 26.05
        recording of a job in its state with the fields this slurmctld sets laid over."""
        template = self.templates26["RUNNING" if record["job_state"] == "RUNNING" else "PENDING"]
        out = dict(template)
        for key in _SET_FIELDS:
            if key not in record:
                continue
            value, was = record[key], template.get(key)
            if key == "job_state":
                out[key] = [value]
            elif isinstance(was, dict) and "number" in was:
                out[key] = {"set": value is not None, "infinite": False, "number": value or 0}
            elif key in ("tres_per_node", "tres_per_job"):
                out[key] = value.replace("gres:", "gres/")
            else:
                out[key] = value
        out["shared"] = []  # data_parser v0.0.45 says no job's --exclusive
        if record["job_state"] == "RUNNING":
            resources = template["job_resources"]
            names = [item["nodename"] for item in record["job_resources"]["allocated_nodes"]]
            first = resources["nodes"]["allocation"][0]
            out["job_resources"] = dict(resources, nodes=dict(
                resources["nodes"], count=len(names), list=record["nodes"],
                allocation=[dict(first, index=i, name=name) for i, name in enumerate(names)]))
        return out

    def _show_job(self, text: str) -> CommandResult:
        """``scontrol show job -o ID``: the line's ids and sharing mode (the --exclusive
        26.05's JSON leaves out: a record whose 22.05 ``shared`` is "none" asked for it),
        as 26.05 prints them."""
        job_id = self._record(text, split=False)
        record = self.jobs.get(job_id) if job_id is not None else None
        if record is None:
            return CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
        array = ""
        if record.get("array_job_id"):
            task = record.get("array_task_id")
            array = (f" ArrayJobId={record['array_job_id']} ArrayTaskId="
                     f"{task if task is not None else record.get('array_task_string', '')}")
        state = record["job_state"]
        return CommandResult(0, f"JobId={job_id}{array} JobName={record.get('name', '')} JobState={state} "
                                f"Partition={record['partition']} OverSubscribe=NO Exclusive="
                                f"{'NODE' if record.get('shared') == 'none' else 'NO'} Contiguous=0\n", "")


# the fields of a job's record this slurmctld sets (_running, _pending, submit, the levers)
_SET_FIELDS = ("job_id", "tres_per_node", "tres_req_str", "node_count", "tasks", "cpus", "gres_detail", "submit_time",
               "eligible_time", "start_time", "end_time", "partition", "user_name", "comment", "admin_comment",
               "restart_cnt", "job_state", "state_reason", "requeue", "batch_flag", "required_nodes",
               "excluded_nodes", "max_nodes", "nodes", "qos", "priority", "array_job_id", "array_task_id",
               "array_max_tasks", "array_task_string")


def _task_string(tasks: list[int]) -> str:
    """Slurm's task list: "0-3,7" for [0, 1, 2, 3, 7] (sorted)."""
    parts: list[str] = []
    for task in tasks:
        if parts and task == last + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{task}"
        else:
            parts.append(str(task))
        last = task
    return ",".join(parts)


class VirtualTime:
    """Seconds that pass only while the loop waits: the controller's clock, and (from
    ``stop_after``) the stop event whose wait() advances it instead of sleeping."""

    def __init__(self, now_s: float):
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

    def stop_after(self, seconds: float, every_s: float = 0.0, change=None) -> threading.Event:
        """An event set once ``seconds`` passed; ``change()`` is called each time the
        clock crosses a multiple of ``every_s`` (0: never)."""
        clock, until_s = self, self.now_s + seconds

        class Stop(threading.Event):
            def wait(self, timeout=None):
                before, clock.now_s = clock.now_s, clock.now_s + (timeout or 0.0)
                if every_s and change is not None and clock.now_s // every_s > before // every_s:
                    change()
                if clock.now_s >= until_s:
                    self.set()
                return self.is_set()

        return Stop()

"""The GPU limits of a pending job's QOS (issue 35, item 1, the conformance case
``partition_qos``): a job a limit keeps from starting even after every preemption the
plan could make waits on Slurm, with a reason naming the QOS and the limit; a QOS the
controller cannot judge makes its jobs unmodelled (``qos_limits``). Through the real
Controller with a scripted backend; on the old controller the QOS-limited jobs below
were each a reason to preempt."""
import dataclasses
import itertools
import subprocess

import pytest

from controller.service.acting.backend import BackendUnavailable
from controller.service.ops.qos_gate import READ_EVERY_S, RETRY_S, QosGate, gpu_limits, partition_qos
from controller.service.ops.qos_limits import LIMITS
from slurm_plugin.commands import QOS_LIMITS_COMMAND
from slurm_plugin.backend import SlurmBackend
from tests.test_controller import ScriptedBackend, controller, store  # noqa: F401  (fixture)

# as scontrol show partition -o prints them (22.05: the key is spelled QoS)
PARTITIONS = ("PartitionName=batch AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Default=YES QoS=N/A Nodes=gpu[1-4]"
              " State=UP\n"
              "PartitionName=qlim AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Default=NO QoS=gpu4user Nodes=gpu[1-4]"
              " State=UP\n")


def qos_row(name, **limits):
    """One line of QOS_LIMITS_COMMAND's answer (sacctmgr -n -P)."""
    return "|".join([name] + [limits.get(limit, "1.000000" if limit == "UsageFactor" else "") for limit in LIMITS])


class QosBackend(ScriptedBackend):
    """The scripted backend with slurmdbd's QOS table and the partitions' QOS."""

    def __init__(self, qos_text=None, partitions=PARTITIONS):
        super().__init__()
        self.qos_text = qos_text if qos_text is not None else "\n".join(
            [qos_row("normal"), qos_row("gpu4user", MaxTRESPerUser="gres/gpu=4")]) + "\n"
        self.partitions = partitions
        self.qos_reads = 0
        self.qos_down = False

    def qos_limit_table(self):
        self.qos_reads += 1
        if self.qos_down:
            raise BackendUnavailable("sacctmgr -n -P show qos exited 1: Problem talking to the database")
        return self.qos_text

    def partition_config(self):
        return self.partitions


def job(backend, job_id, **fields):
    backend.jobs[job_id] = dataclasses.replace(backend.jobs[job_id], **fields)


def victims(backend, *nodes, user="bob", partition="batch", gpus=4):
    """A preemptable job of ``user`` on each node, long past queue 1."""
    for k, node in enumerate(nodes):
        backend.add(f"v{k}", gpus, state="RUNNING", start=backend.now - 5000, nodes=((node, gpus),))
        job(backend, f"v{k}", user=user, partition=partition)


def preempted(backend):
    return sorted(call[1] for call in backend.calls if call[0] == "signal")


def settle(c, backend):
    c.run_round()
    backend.now += 600
    c.run_round()


def test_a_job_beyond_its_partition_qos_per_user_limit_preempts_nobody(store):
    # the conformance case: -p qlim -N 2 --gres=gpu:3 (6 GPUs) under MaxTRESPerUser=gres/gpu=4
    backend = QosBackend()
    victims(backend, "gpu1", "gpu2", "gpu3", "gpu4")
    c = controller(store, backend)
    settle(c, backend)
    backend.add("10", 6)
    job(backend, "10", partition="qlim", min_nodes=2)
    backend.now += 10
    report = c.run_round()
    c.run_round()
    assert preempted(backend) == []
    reason = report.plan.wait_reasons["10"]
    assert "QOS gpu4user MaxTRESPerUser gres/gpu=4" in reason and "user alice would hold 6 GPUs" in reason
    assert "(partition qlim)" in reason
    # it waits on Slurm, so the census of the jobs the plan weighs leaves it out
    assert c.inputs.unmodelled.pending == 0 and not c.inputs.unmodelled.jobs
    # control: a 1-GPU job of the same partition is within the limit and gets one victim
    backend.add("11", 1)
    job(backend, "11", partition="qlim")
    backend.now += 10
    c.run_round()
    assert len(preempted(backend)) == 1


def test_the_users_running_gpus_under_the_qos_count_unless_preemptable(store):
    backend = QosBackend()
    victims(backend, "gpu2", "gpu3", "gpu4")
    backend.add("r", 3, state="RUNNING", start=backend.now - 5000, nodes=(("gpu1", 3),), requeueable=False)
    job(backend, "r", partition="qlim")  # alice's, kept: 3 of her 4 GPUs under gpu4user
    c = controller(store, backend)
    settle(c, backend)
    backend.add("10", 2)
    job(backend, "10", partition="qlim")
    backend.now += 10
    report = c.run_round()
    assert preempted(backend) == []
    assert "user alice would hold 5 GPUs (3 running under it, 0 of them preemptable, + 2 asked)" in \
        report.plan.wait_reasons["10"]
    # the same job in a partition without the QOS is a reason to preempt
    job(backend, "10", partition="batch")
    backend.now += 10
    c.run_round()
    assert len(preempted(backend)) == 1


def test_another_users_running_job_under_the_qos_counts_only_for_grp_tres(store):
    text = "\n".join([qos_row("normal"), qos_row("gpu4user", GrpTRES="gres/gpu=4")]) + "\n"
    backend = QosBackend(text)
    victims(backend, "gpu2", "gpu3", "gpu4")
    backend.add("k", 3, state="RUNNING", start=backend.now - 5000, nodes=(("gpu1", 3),), requeueable=False)
    job(backend, "k", user="carol", partition="qlim")
    c = controller(store, backend)
    settle(c, backend)
    backend.add("10", 2)
    job(backend, "10", partition="qlim")
    backend.now += 10
    report = c.run_round()
    assert preempted(backend) == []
    assert "QOS gpu4user GrpTRES gres/gpu=4: the QOS would hold 5 GPUs" in report.plan.wait_reasons["10"]


def test_the_jobs_own_qos_per_job_and_per_node_limits(store):
    text = "\n".join([qos_row("normal"), qos_row("small", MaxTRES="cpu=64,gres/gpu=4", MaxTRESPerNode="gres/gpu=2")])
    backend = QosBackend(text + "\n")
    victims(backend, "gpu1", "gpu2", "gpu3", "gpu4")
    c = controller(store, backend)
    settle(c, backend)
    backend.add("10", 6)
    job(backend, "10", qos="small", min_nodes=3)  # 2 a node, 6 > MaxTRES 4
    backend.add("11", 3)
    job(backend, "11", qos="small")  # 3 on one node > MaxTRESPerNode 2
    backend.now += 10
    report = c.run_round()
    assert preempted(backend) == []
    assert "QOS small MaxTRES gres/gpu=4: the job asks for 6 GPUs" in report.plan.wait_reasons["10"]
    assert "QOS small MaxTRESPerNode gres/gpu=2: the job asks for 3 GPUs on a node" in report.plan.wait_reasons["11"]


def test_a_job_that_may_run_in_a_partition_without_the_limit_is_planned(store):
    backend = QosBackend()
    victims(backend, "gpu1", "gpu2", "gpu3", "gpu4")
    c = controller(store, backend)
    settle(c, backend)
    backend.add("10", 6)
    job(backend, "10", partition="qlim,batch", min_nodes=2)
    backend.now += 10
    report = c.run_round()
    assert "10" not in report.plan.wait_reasons
    assert len(preempted(backend)) == 2


def test_a_typed_gpu_limit_makes_the_qos_jobs_unmodelled(store):
    text = "\n".join([qos_row("normal"), qos_row("gpu4user", MaxTRESPerUser="gres/gpu:a100=2")]) + "\n"
    backend = QosBackend(text)
    victims(backend, "gpu1", "gpu2", "gpu3", "gpu4")
    c = controller(store, backend)
    settle(c, backend)
    backend.add("10", 1)
    job(backend, "10", partition="qlim")
    backend.add("11", 1)  # batch, no QOS: planned
    backend.now += 10
    report = c.run_round()
    assert c.unmodelled.jobs["10"][0] == ("qos_limits",)
    assert "MaxTRESPerUser=gres/gpu:a100=2" in c.unmodelled.jobs["10"][1]
    assert "11" not in c.unmodelled.jobs
    assert "QOS gpu4user" in report.plan.wait_reasons["10"]
    assert len(preempted(backend)) == 1  # for job 11 only


def test_unread_limits_leave_the_jobs_under_a_qos_unmodelled_and_are_read_rarely(store):
    backend = QosBackend()
    backend.qos_down = True
    victims(backend, "gpu1", "gpu2", "gpu3", "gpu4")
    c = controller(store, backend)
    settle(c, backend)
    backend.add("10", 1)
    job(backend, "10", partition="qlim")
    backend.add("11", 1)
    job(backend, "11", qos="normal")
    backend.now += 10
    c.run_round()
    assert preempted(backend) == []
    assert {j: codes for j, (codes, _) in c.unmodelled.jobs.items()} == {"10": ("qos_limits",),
                                                                            "11": ("qos_limits",)}
    assert "could not be read" in c.unmodelled.jobs["10"][1]
    reads = backend.qos_reads
    backend.qos_down = False
    backend.now += 1
    c.run_round()
    assert backend.qos_reads == reads  # retried only after RETRY_S
    backend.now += RETRY_S
    report = c.run_round()
    assert backend.qos_reads == reads + 1 and not c.unmodelled.jobs
    # both within gpu4user's limit and normal's none: one victim frees a node for both
    assert "10" not in report.plan.wait_reasons and "11" not in report.plan.wait_reasons
    assert len(preempted(backend)) == 1
    backend.now += 10
    c.run_round()
    assert backend.qos_reads == reads + 1  # then every READ_EVERY_S
    backend.now += READ_EVERY_S
    c.run_round()
    assert backend.qos_reads == reads + 2


def test_a_victim_being_preempted_under_the_qos_frees_its_gpus_from_the_total():
    gate = QosGate(lambda: qos_row("gpu4user", MaxTRESPerUser="gres/gpu=4") + "\n", lambda: PARTITIONS)
    gate.refresh(0.0)
    backend = ScriptedBackend()
    backend.add("r", 3, state="RUNNING", nodes=(("gpu1", 3),))
    backend.add("10", 2)
    for j in ("r", "10"):
        job(backend, j, partition="qlim")
    running, pending = backend.jobs["r"], backend.jobs["10"]
    assert gate.judge([pending], [running], lambda job_id: False)["10"].wait
    assert gate.judge([pending], [running], lambda job_id: True) == {}  # the plan may preempt it
    assert gate.judge([pending], [], lambda job_id: False) == {}  # being preempted: not counted
    # a job of the user's outside the QOS frees nothing of its total, and counts for none
    other = dataclasses.replace(running, partition="batch")
    assert gate.judge([dataclasses.replace(pending, gpus=5)], [other], lambda job_id: True)["10"].wait


def test_parsers():
    assert gpu_limits({"MaxTRESPerUser": "cpu=8,gres/gpu=4", "GrpTRES": "mem=10G"}).limits == {"MaxTRESPerUser": 4}
    typed = gpu_limits({"MaxTRES": "gres/gpu:a100=2,gres/gpu=8"})
    assert typed.limits == {"MaxTRES": 8} and typed.unmodelled == ("MaxTRES=gres/gpu:a100=2",)
    assert partition_qos(PARTITIONS) == {"qlim": "gpu4user"}
    assert partition_qos("PartitionName=p Nodes=n1 QOS=q1\n") == {"p": "q1"}  # slurm.conf's spelling


def test_slurm_backend_reads_the_qos_table_and_a_failure_is_unavailable():
    calls = []

    def runner(argv, timeout_s, env):
        calls.append(list(argv))
        ok = not (len(calls) > 1)
        return subprocess.CompletedProcess(argv, 0 if ok else 1, qos_row("gpu4user", MaxTRESPerUser="gres/gpu=4")
                                           if ok else "", "" if ok else "sacctmgr: error: Problem talking to the db")

    backend = SlurmBackend(runner=runner)
    assert backend.qos_limit_table().startswith("gpu4user|gres/gpu=4|")
    assert calls == [QOS_LIMITS_COMMAND]
    with pytest.raises(BackendUnavailable, match="Problem talking"):
        backend.qos_limit_table()


def test_many_jobs_judged_together_get_the_verdicts_each_gets_alone():
    """judge() works each distinct request's verdict out once a round (jobs of one user,
    account, size, partition and QOS share it): judging many together gives each the
    verdict it gets alone, across users, accounts, sizes, partitions and QOSes."""
    limits = "\n".join([qos_row("normal", MaxTRES="gres/gpu=3"),
                        qos_row("gpu4user", MaxTRESPerUser="gres/gpu=4", GrpTRES="gres/gpu=9"),
                        qos_row("acct", MaxTRESPerAccount="gres/gpu=3", MaxTRESPerNode="gres/gpu=2"),
                        qos_row("free"), qos_row("typed", MaxTRES="gres/gpu:a100=2")]) + "\n"
    gate = QosGate(lambda: limits, lambda: PARTITIONS)
    gate.refresh(0.0)
    backend = ScriptedBackend()
    for k, (user, account, gpus) in enumerate([("bob", "a", 2), ("eve", "b", 3), ("bob", "b", 1)]):
        backend.add(f"r{k}", gpus, state="RUNNING", nodes=((f"gpu{k + 1}", gpus),))
        job(backend, f"r{k}", user=user, account=account, partition="qlim", qos="acct" if k == 2 else "normal")
    pending = []
    combinations = itertools.product(("bob", "eve", "ann"), ("a", "b"), (1, 2, 3, 4), (1, 2),
                                     ("qlim", "batch", "batch,qlim"), ("normal", "acct", "free", "typed", "nosuch"))
    for k, (user, account, gpus, min_nodes, partition, qos) in enumerate(combinations):
        job_id = str(100 + k)
        backend.add(job_id, gpus)
        job(backend, job_id, user=user, account=account, partition=partition, qos=qos, min_nodes=min_nodes)
        pending.append(backend.jobs[job_id])
    running = [backend.jobs[f"r{k}"] for k in range(3)]
    together = gate.judge(pending, running, lambda job_id: job_id == "r1")
    alone = {}
    for one in pending:
        alone.update(gate.judge([one], running, lambda job_id: job_id == "r1"))
    assert together == alone
    assert sum(1 for v in together.values() if v.wait) >= 5  # the limits do bite here


def test_silent_for_the_jobs_pairs_exactly_when_judge_has_nothing_to_say():
    """The round skips judge() when silent_for says every GPU job's (partition, QOS)
    pair has no GPU limit: for each pair alone, a silent pair's requests all get an
    empty verdict, and every pair a limit or an unknown QOS bites in each of its
    partitions is not silent; an unread or failed read is never silent."""
    limits = "\n".join([qos_row("normal"), qos_row("gpu4user", MaxTRESPerUser="gres/gpu=1"),
                        qos_row("free"), qos_row("typed", MaxTRES="gres/gpu:a100=2")]) + "\n"
    gate = QosGate(lambda: limits, lambda: PARTITIONS)
    assert not gate.silent_for({("batch", "normal")})  # not read yet: unknown, not silent
    gate.refresh(0.0)
    backend = ScriptedBackend()
    backend.add("r", 1, state="RUNNING", nodes=(("gpu1", 1),))
    job(backend, "r", partition="qlim", qos="normal")
    pairs = list(itertools.product(("batch", "qlim", "batch,qlim"), ("normal", "free", "gpu4user", "typed", "nosuch")))
    silent = {pair for pair in pairs if gate.silent_for({pair})}
    assert ("batch", "normal") in silent and ("batch", "free") in silent
    assert ("qlim", "normal") not in silent  # the partition's QOS limits it
    for k, (partition, qos) in enumerate(pairs):
        requests = []
        for gpus in (1, 2, 3):
            backend.add(f"{k}-{gpus}", gpus)
            job(backend, f"{k}-{gpus}", partition=partition, qos=qos, user="bob")
            requests.append(backend.jobs[f"{k}-{gpus}"])
        verdicts = gate.judge(requests, [backend.jobs["r"]], lambda job_id: False)
        if (partition, qos) in silent:
            assert verdicts == {}, (partition, qos, verdicts)
        elif partition != "batch,qlim" or qos in ("gpu4user", "typed", "nosuch"):
            assert verdicts, (partition, qos)  # (in batch, only the job's own QOS applies)
    assert not gate.silent_for(set(pairs)) and gate.silent_for(silent)
    down = QosGate(lambda: (_ for _ in ()).throw(BackendUnavailable("sacctmgr down")), lambda: PARTITIONS)
    down.refresh(0.0)
    assert not down.silent_for({("batch", "normal")})

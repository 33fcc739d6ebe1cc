"""The simulator with partitions and GPU types (issue 18, item 1): a trace's
partition and gpu_type columns and --node-kinds decide where a job may run, as the
controller's plan does; without them, one partition, one type (every old result)."""
import pytest

from controller.core.engine import EngineConfig
from controller.core.model import InputError
from controller.replay.run_config import parse_node_kinds
from controller.replay.simulator import SimConfig, Simulation
from controller.replay.traces import load_trace

TRACE = """job_id,num_gpus,submit_time_s,duration_s,partition,gpu_type
long,4,0,10000,batch,v100
a100job,4,1000,100,"batch,urgent",a100
anyjob,4,1010,100,urgent,
"""


def run(tmp_path, kinds, text=TRACE):
    path = tmp_path / "t.csv"
    path.write_text(text)
    specs = load_trace(path)
    nodes = sum(count for count, _, _ in kinds) if kinds else 1
    config = SimConfig(nodes=nodes, gpus_per_node=4, node_kinds=kinds,
                       engine=EngineConfig(policy="dlas", thresholds_gpu_s=(3600.0,)))
    return specs, Simulation(config).run(specs)


def test_trace_columns_are_read():
    assert parse_node_kinds("1:batch:v100,1:batch+urgent:a100") == ((1, ("batch",), "v100"),
                                                                    (1, ("batch", "urgent"), "a100"))
    with pytest.raises(InputError, match="node-kinds value 'x:batch'"):
        parse_node_kinds("x:batch")


def test_jobs_run_only_on_their_partitions_and_types(tmp_path):
    specs, result = run(tmp_path, parse_node_kinds("1:batch:v100,1:batch+urgent:a100"))
    assert {s.job_id: (s.partition, s.gpu_type) for s in specs} == {
        "long": ("batch", "v100"), "a100job": ("batch,urgent", "a100"), "anyjob": ("urgent", "")}
    outcome = {o.job_id: o for o in result.outcomes}
    # long (past queue 1 at 900 s) runs on the v100 node all along: no later job may
    # use that node, so it is never preempted
    assert outcome["long"].preemptions == 0
    # the a100 job and the urgent job share the one a100 node, one after the other
    assert outcome["anyjob"].start_s >= outcome["a100job"].end_s


def test_without_node_kinds_every_node_is_every_jobs(tmp_path):
    _, result = run(tmp_path, ())
    outcome = {o.job_id: o for o in result.outcomes}
    assert outcome["long"].preemptions >= 1  # one node for all: long yields to the short jobs


def test_a_job_no_node_can_hold_is_named(tmp_path):
    with pytest.raises(InputError, match="job a100job: no node of partitions batch,urgent with GPU type a100"):
        run(tmp_path, parse_node_kinds("2:batch:v100"))

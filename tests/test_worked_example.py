"""The spec's worked example (the scheduling spec, reference result 1).

2 GPUs on one machine, rounds every time unit, all jobs arrive at t=0, ties by
job index: J1=(2 GPUs, 2 units), J2=(1, 8), J3=(2, 6).
"""
import pytest

from controller.core.engine import EngineConfig
from controller.core.gittins import ServiceDistribution
from controller.core.model import JobSpec
from controller.replay.simulator import SimConfig, Simulation

JOBS = [JobSpec("J1", 2, 0, 2), JobSpec("J2", 1, 0, 8), JobSpec("J3", 2, 0, 6)]


def jcts(policy, service=None, placement="count"):
    config = SimConfig(nodes=1, gpus_per_node=2, round_interval_s=1, service=service,
                       engine=EngineConfig(policy=policy, placement=placement))
    result = Simulation(config).run(JOBS)
    return {o.job_id: o.jct_s for o in result.outcomes}


@pytest.mark.parametrize("placement", ["count", "consolidate"])
def test_srsf_matches_published_9_33(placement):
    assert jcts("srsf", placement=placement) == {"J1": 2, "J2": 10, "J3": 16}
    assert round(sum(jcts("srsf").values()) / 3, 2) == 9.33


@pytest.mark.parametrize("placement", ["count", "consolidate"])
def test_2d_las_matches_published_11_67(placement):
    assert jcts("las", placement=placement) == {"J1": 5, "J2": 14, "J3": 16}
    assert round(sum(jcts("las").values()) / 3, 2) == 11.67


def test_2d_gittins_falls_between_srsf_and_las():
    average = sum(jcts("gittins", ServiceDistribution([4, 8, 12])).values()) / 3
    assert 9.33 - 1e-9 <= round(average, 2) <= 11.67


def test_gittins_without_history_is_las():
    assert jcts("gittins") == jcts("las")

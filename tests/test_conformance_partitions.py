"""Site conformance (issue 35, item 1): DefMemPerCPU and MaxMemPerCPU under CR_Core_Memory, and partitions over the same nodes: OverSubscribe=EXCLUSIVE and FORCE, PriorityTier, a partition QOS (accounting in the default instance's slurmdbd)
(tests/conformance.py, group partitions): for each, no preemption for a job Slurm would not
start, exactly one for a job it would start on what one victim frees (or, where the product
does not model it, the job reported with its reason code and no preemption). Runner: tests/conformance_stage.py."""
from __future__ import annotations

import pytest

from tests.conformance import cases_of
from tests.conformance_stage import check_no, check_yes, instance_of, run_group

pytestmark = pytest.mark.slurm
GROUP = "partitions"
cluster = instance_of(GROUP)


@pytest.fixture(scope="module")
def outcomes(cluster, tmp_path_factory):
    return run_group(cluster, tmp_path_factory.mktemp(GROUP), GROUP)


@pytest.mark.parametrize("case", cases_of(GROUP), ids=lambda c: c.key)
def test_a_job_slurm_would_not_start_preempts_nobody(case, outcomes):
    check_no(case, outcomes[case.key])


@pytest.mark.parametrize("case", cases_of(GROUP), ids=lambda c: c.key)
def test_a_job_slurm_would_start_on_one_victim_gets_exactly_one(case, outcomes):
    check_yes(case, outcomes[case.key])

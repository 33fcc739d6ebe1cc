"""Site conformance (issue 35, item 1): DefMemPerCPU and MaxMemPerCPU under CR_Core_Memory, and partitions over the same nodes: OverSubscribe=EXCLUSIVE and FORCE, PriorityTier, a partition QOS (accounting in the default instance's slurmdbd)
(tests/conformance.py, group partitions): for each, no preemption for a job Slurm would not
start, exactly one for a job it would start on what one victim frees (or, where the product
does not model it, the job reported with its reason code and no preemption). Runner: tests/conformance_stage.py."""
from __future__ import annotations

import pytest

from tests.conformance_stage import group_module

pytestmark = pytest.mark.slurm
(cluster, outcomes, test_a_job_slurm_would_not_start_preempts_nobody,
 test_a_job_slurm_would_start_on_one_victim_gets_exactly_one) = group_module("partitions")

"""Site conformance (issue 35, item 1), the GPU defaults and per-GPU/per-task options
under CR_Core_Memory, DefCpuPerGPU=2 and DefMemPerGPU=1000 (tests/conformance.py, group
gpu_defaults): for each, no preemption for a job Slurm would not start, exactly one for a
job it would start on what one victim frees. Runner: tests/conformance_stage.py."""
from __future__ import annotations

import pytest

from tests.conformance_stage import group_module

pytestmark = pytest.mark.slurm
(cluster, outcomes, test_a_job_slurm_would_not_start_preempts_nobody,
 test_a_job_slurm_would_start_on_one_victim_gets_exactly_one) = group_module("gpu_defaults")

"""Site conformance (issue 35, item 1): the site-shaped instance (two GPU types, overlapping partitions, shards): features, reservations, node Weight, het jobs, split array tasks, shards
(tests/conformance.py, group site): for each, no preemption for a job Slurm would not
start, exactly one for a job it would start on what one victim frees (or, where the product
does not model it, the job reported with its reason code and no preemption). Runner: tests/conformance_stage.py."""
from __future__ import annotations

import pytest

from tests.conformance_stage import group_module

pytestmark = pytest.mark.slurm


def reservations(stage):
    """cf_free over node 2 (a victim there: what it frees is the reservation's), cf_full over
    node 1 (a kept job holds all of it), both for alice and bob (a victim that replaces
    one that yielded on node 2 runs inside cf_free), made over the running jobs."""
    for name, node in (("cf_free", 2), ("cf_full", 1)):
        stage.instance.run(["scontrol", "delete", f"ReservationName={name}"], check=False)
        stage.instance.run(["scontrol", "create", "reservation", f"ReservationName={name}", "Users=alice,bob",
                            f"Nodes={stage.instance.name}g{node}", "StartTime=now", "Duration=60",
                            "Flags=IGNORE_JOBS"])
        stage.reservations[node] = name


(cluster, outcomes, test_a_job_slurm_would_not_start_preempts_nobody,
 test_a_job_slurm_would_start_on_one_victim_gets_exactly_one) = group_module("site", prepare=reservations)

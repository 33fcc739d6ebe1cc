"""Site conformance (issue 35, item 1): the site-shaped instance (two GPU types, overlapping partitions, shards): features, reservations, node Weight, het jobs, split array tasks, shards
(tests/conformance.py, group site): for each, no preemption for a job Slurm would not
start, exactly one for a job it would start on what one victim frees (or, where the product
does not model it, the job reported with its reason code and no preemption). Runner: tests/conformance_stage.py."""
from __future__ import annotations

import pytest

from tests.conformance import cases_of
from tests.conformance_stage import check_no, check_yes, instance_of, run_group

pytestmark = pytest.mark.slurm
GROUP = "site"
cluster = instance_of(GROUP)


@pytest.fixture(scope="module")
def outcomes(cluster, tmp_path_factory):
    return run_group(cluster, tmp_path_factory.mktemp(GROUP), GROUP, prepare=reservations)


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


@pytest.mark.parametrize("case", cases_of(GROUP), ids=lambda c: c.key)
def test_a_job_slurm_would_not_start_preempts_nobody(case, outcomes):
    check_no(case, outcomes[case.key])


@pytest.mark.parametrize("case", cases_of(GROUP), ids=lambda c: c.key)
def test_a_job_slurm_would_start_on_one_victim_gets_exactly_one(case, outcomes):
    check_yes(case, outcomes[case.key])

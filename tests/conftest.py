"""Suite-wide settings: tests import the package from the checkout."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Tests never read the full public traces (a fresh clone has none); a
# benchmark in bench/ checks those.
# Small excerpts of the same traces that ship with the repository (see its README).
FIXTURE_TRACES = ROOT / "tests" / "fixtures" / "traces"
TRACE60 = FIXTURE_TRACES / "tiresias_60_job.csv"


import time  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture
def utc(monkeypatch):
    """Local time = UTC: the Slurm fixtures and expected outputs were recorded on a UTC
    host, and scontrol/sacct text prints local time. Restores the zone afterwards."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# The test modules that use the default test cluster (the ``slurm_cluster`` fixture: one
# slurmctld, its queue and GPUs shared): under pytest-xdist they all run on one worker,
# one after the other. Every other module runs on any one worker (its own isolated
# instance, if any, starts once). pytest_collection_modifyitems keeps this list true.
DEFAULT_CLUSTER_MODULES = frozenset({
    "tests/test_accounting_slurm.py", "tests/test_acct_slurm.py", "tests/test_node_side_slurm.py",
    "tests/test_packaging.py", "tests/test_preflight.py", "tests/test_queue_explain.py",
    "tests/test_slurm_backend.py", "tests/test_slurm_cluster.py", "tests/test_slurm_colocation.py",
    "tests/test_slurm_qos.py", "tests/test_slurm_tune_array.py", "tests/test_slurm_partition_moves.py",
    "tests/test_slurm_preemption_by_slurm.py", "tests/test_slurm_preemption_install.py",
    "tests/test_slurm_native_preemption.py",
})


def pytest_collection_modifyitems(config, items):
    """A test on the default cluster in a module the list above lacks is a usage error,
    not a test that may meet another module's jobs on a shared cluster."""
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            module = item.nodeid.split("::", 1)[0]
            if module not in DEFAULT_CLUSTER_MODULES:
                raise pytest.UsageError(f"{module} uses the default test cluster: add it to "
                                        "tests/conftest.py DEFAULT_CLUSTER_MODULES")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: none without it
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope``: a module is one unit of work, and the modules on the default
    cluster are one unit together. (xdist's loadgroup marks are not seen under pytest 9:
    measured, its groups were split over workers.)"""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByCluster(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "default-cluster" if module in DEFAULT_CLUSTER_MODULES else module

    return ByCluster(config, log)

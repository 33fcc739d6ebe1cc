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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Groups for pytest-xdist's ``--dist loadgroup``: the real-Slurm tests of one module
    on one worker (its module-scoped isolated instance starts once), and every test on
    the default test cluster (one slurmctld, its queue and GPUs shared) on one worker
    together. Other tests go to any worker. Without xdist the marker does nothing."""
    for item in items:
        if item.get_closest_marker("slurm") is None:
            continue
        shared = "slurm_cluster" in getattr(item, "fixturenames", ())
        item.add_marker(pytest.mark.xdist_group("default-cluster" if shared else item.module.__name__))

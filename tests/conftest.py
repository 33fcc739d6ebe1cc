"""Suite-wide settings: tests import the package from the checkout."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TRACES = ROOT.parent / "shared" / "traces"


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

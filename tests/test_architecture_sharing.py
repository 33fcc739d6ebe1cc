"""Issue 36 item 5 (GPU sharing in the lever parity): the lever replay plans GPU sharing
through the same planner phases as the service, from the same core input builder, and
the parity test lists no sharing kind as not simulated. Read-only source analysis.
Before (main at c09b8c8): 3 kinds not simulated (share, hold, release_hold), the replay
called neither phase; after: 0, both."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARING_KINDS = ("share", "hold", "release_hold")


def _source(path: str) -> str:
    return (ROOT / path).read_text()


def test_no_sharing_kind_is_left_unsimulated():
    tree = ast.parse(_source("tests/test_lever_parity.py"))
    table = next(node.value for node in ast.walk(tree) if isinstance(node, ast.AnnAssign)
                 and getattr(node.target, "id", "") == "NOT_SIMULATED")
    left = [key.value for key in table.keys if isinstance(key, ast.Constant) and key.value in SHARING_KINDS]
    print(f"sharing kinds not simulated: {len(left)}")
    assert left == []


def test_the_replay_plans_sharing_with_the_planner_phases_and_the_core_view():
    replay = _source("controller/replay/lever_replay.py")
    calls = {name for name in ("self.planner.sharing(", "self.planner.holds(", "sharing_view(") if name in replay}
    print(f"sharing calls in the lever replay: {len(calls)} of 3")
    assert len(calls) == 3
    service = _source("controller/service/round/sharing.py")
    assert "rule.sharing_view(" in service and "SharingView(" not in service.replace("-> SharingView:", "")

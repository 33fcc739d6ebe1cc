"""Issue 36, the lever planner (items 1 and 5): the figures of the design's "Done when"
table this step covers, read from the source with ``ast`` (nothing is executed), so
that none drifts back.

Measured on main before the step -> after it:
- files that call the LeverPlanner: 0 -> 2 (the service's round, the replay);
- lever actions (the classes of controller/core/actions.py) built outside controller/core:
  6 -> 5 (the bands, pins, releases, pin expiries and AdminComment lines moved into the
  core) -> 0 (the other families too: tests/test_architecture_compose.py);
- controller/service/round/daemon.py: 902 -> 572 lines (target <= 600).
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "controller"

PLANNER_CALLERS = {"controller/service/round/levers.py", "controller/replay/lever_replay.py"}
ACTIONS_BUILT_OUTSIDE_CORE_MAX = 0
DAEMON_MAX_LINES = 600


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), filename=str(path))


def _action_classes() -> set[str]:
    tree = ast.parse((PACKAGE / "core" / "actions.py").read_text())
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef) and node.name != "LeverActionBase"}


def _called_name(node: ast.Call):
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def test_exactly_two_files_call_the_lever_planner():
    """The service's round and the replay plan their levers with the same LeverPlanner
    (controller/core/levers/planner.py); no third caller re-creates a round's levers."""
    callers = set()
    for rel, tree in _modules():
        if rel.startswith("controller/core/levers/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "LeverPlanner" or \
                    isinstance(node, ast.alias) and node.name.split(".")[-1] == "LeverPlanner":
                callers.add(rel)
    print(f"files that call LeverPlanner: {len(callers)} {sorted(callers)}")
    assert callers == PLANNER_CALLERS


def test_lever_actions_built_outside_the_core():
    """Every lever action is built by the core's planner and families; the count of those
    still built elsewhere (the families the service still plans) may only fall."""
    names = _action_classes()
    built = {}
    for rel, tree in _modules():
        if rel.startswith("controller/core/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called_name(node) in names:
                built.setdefault(rel, []).append(_called_name(node))
    count = sum(len(found) for found in built.values())
    print(f"lever actions built outside controller/core: {count} {built}")
    assert count <= ACTIONS_BUILT_OUTSIDE_CORE_MAX, built
    for family in ("SetBand", "PinNodes", "UnpinNodes", "ReleaseBeginTime", "SetAdminComment"):
        assert not [rel for rel, found in built.items() if family in found], family


def test_the_daemon_stays_small():
    lines = len((PACKAGE / "service" / "round" / "daemon.py").read_text().splitlines())
    print(f"daemon.py: {lines} lines")
    assert lines <= DAEMON_MAX_LINES

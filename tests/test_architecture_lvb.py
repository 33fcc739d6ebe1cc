"""Issue 36 (one lever planner), the preemption, handoff, partition-move and GPU-sharing
families: figures of the design's "Done when" table that must not drift back
(shared/design/one-lever-planner.md). Read-only analysis of the source with ``ast``.

(a) branches on the ``preemption`` setting outside the CLI: at most 2 (the strategy
    choice, controller.core.levers.preemption.strategy_for, and preflight); the rest
    ask the strategy.
(b) lever actions (and decision-log entries, and decision ids) built by the four service
    modules of these families: 0; they forward what the core built.
(c) the families' core modules import no store, backend or clock, and their functions
    that depend on the time take it as ``now``.
"""
import ast
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICE_MODULES = ["controller/service/round/preemption.py", "controller/service/round/handoff.py",
                   "controller/service/round/partition_moves.py", "controller/service/round/sharing.py",
                   "controller/service/round/levers.py"]  # (the round module that carries them out, too)
CORE_MODULES = ["controller/core/levers/preemption.py", "controller/core/levers/handoffs.py",
                "controller/core/levers/moves.py", "controller/core/levers/sharing.py"]
ACTION_NAMES = {"SetBand", "PinNodes", "UnpinNodes", "ReleaseBeginTime", "MovePartition", "SetMpsShare", "HoldJob",
                "ReleaseHold", "Signal", "Requeue", "SetAdminComment"}
MINTING = {"decision_id", "caused_id", "mint"}


def _is_preemption(node) -> bool:
    return (isinstance(node, ast.Name) and node.id == "preemption") or \
        (isinstance(node, ast.Attribute) and node.attr == "preemption")


def preemption_branches(sources: dict[str, str]) -> list[str]:
    """Every comparison of the ``preemption`` setting (``preemption == ...``,
    ``config.preemption != ...``) outside controller/cli: path:line."""
    found = []
    for path, text in sources.items():
        if path.startswith("controller/cli/"):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Compare) and any(_is_preemption(n) for n in [node.left, *node.comparators]):
                found.append(f"{path}:{node.lineno}")
    return found


def built_outside_core(path: str, text: str) -> list[str]:
    """Lever actions constructed, decision ids minted, and decision entries written as
    dict literals (a "decision_id" key) in one module: path:line what."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else \
                node.func.attr if isinstance(node.func, ast.Attribute) else ""
            if name in ACTION_NAMES or name in MINTING:
                found.append(f"{path}:{node.lineno} {name}(...)")
        elif isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "decision_id"
                                                for k in node.keys):
            found.append(f"{path}:{node.lineno} a decision entry")
    return found


def _sources(roots=("controller", "slurm_plugin")) -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for root in roots for p in sorted((ROOT / root).rglob("*.py"))}


def test_preemption_is_branched_on_at_most_twice_outside_the_cli():
    found = preemption_branches(_sources())
    print(f"branches on `preemption` outside controller/cli: {len(found)} ({', '.join(found)}); "
          "on main before issue 36's lvB step: 11")
    assert len(found) <= 2, found


def test_the_four_service_modules_build_no_lever_action():
    found = [hit for path in SERVICE_MODULES for hit in built_outside_core(path, (ROOT / path).read_text())]
    print(f"lever actions, decision ids, decision entries built by the four service modules: {len(found)}; "
          "on main before: 14")
    assert found == []


def test_the_families_core_modules_read_no_store_backend_or_clock():
    for path in CORE_MODULES:
        tree = ast.parse((ROOT / path).read_text())
        names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        names += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not [n for n in names if n.split(".")[0] in ("time", "datetime") or ".service" in n
                    or "store" in n or "backend" in n], (path, names)


def test_the_families_functions_take_the_time_as_now():
    from controller.core.levers import handoffs, moves, preemption

    timed = [preemption.plan_preemptions, preemption.resolve_preemptions, handoffs.HandoffBook.check,
             handoffs.HandoffBook.expect, handoffs.handoff_decision, moves.MoveBook.frozen,
             moves.MoveBook.refused_text, moves.MoveBook.settle]
    for function in timed:
        assert "now" in inspect.signature(function).parameters, function.__qualname__

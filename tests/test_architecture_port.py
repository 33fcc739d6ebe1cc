"""The port (controller.service.acting.backend) is a declared ABC and the executor alone knows the mode
(issue 36, "One lever planner": the design's "Done when" rows on the mode, the backend probes and the
read-only/recording backends). Read-only analysis of the source with ast, like tests/test_architecture.py.

Each check prints what it found, so a drift names its places."""
import ast
from pathlib import Path

from controller.core.levers.table import LEVERS
from controller.service.acting.backend import Backend
from controller.service.acting.executor import MODES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "controller"
EXECUTOR = PACKAGE / "service" / "acting" / "executor.py"
# Choosing the mode from the config and validating the configured value is not deciding what a mode does.
NOT_DECIDING = {PACKAGE / "service" / "ops" / "config.py"}
# Left for now, each with why (none left: the store's default ``applied`` by mode went; the
# executor's entries say what was applied).
KNOWN: set[str] = set()
# The executor's own mode flags: read outside it, they decide by the mode
MODE_ATTRIBUTES = {"acting", "logs_decisions"}


def _is_mode_value(node: ast.AST) -> bool:
    """A mode constant, or a run's mode: ``config.mode``, ``executor.mode``, a logged
    decision's ``["mode"]``. (A bare ``mode`` variable is not one: progress and placement
    have modes of their own.)"""
    if isinstance(node, ast.Attribute) and node.attr == "mode":
        return any(name in ast.unparse(node.value) for name in ("config", "executor"))
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "mode"
    return _is_mode_constant(node)


def _trees(under: Path):
    for path in sorted(under.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{node.lineno}"


def _is_mode_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in MODES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_mode_constant(item) for item in node.elts)
    return False


def mode_decisions(known: bool = False) -> list[str]:
    """Places outside the executor that compare a run mode, or read the executor's mode flags
    (``known``: those in the KNOWN files only)."""
    found = []
    for path, tree in _trees(PACKAGE):
        if path == EXECUTOR or path in NOT_DECIDING or (str(path.relative_to(ROOT)) in KNOWN) != known:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(map(_is_mode_value, [node.left, *node.comparators])):
                found.append(_where(path, node))
            elif isinstance(node, ast.Attribute) and node.attr in MODE_ATTRIBUTES and isinstance(node.ctx, ast.Load):
                found.append(_where(path, node))
    return found


def _names_backend(node: ast.AST) -> bool:
    return "backend" in ast.unparse(node).lower()


def backend_probes() -> list[str]:
    """getattr/hasattr on anything named *backend*, in controller/."""
    found = []
    for path, tree in _trees(PACKAGE):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args and _names_backend(node.args[0])):
                found.append(_where(path, node))
    return found


def _is_backend_value(node: ast.AST) -> bool:
    """``backend``, ``self.backend``, ``self._backend``, ``x.backend``: a backend held under that name."""
    if isinstance(node, ast.Name):
        return node.id in ("backend", "_backend")
    return isinstance(node, ast.Attribute) and node.attr in ("backend", "_backend")


def port_members_used() -> dict[str, list[str]]:
    """Every member the service uses on a backend: attributes of ``backend``/``self.backend``, and the
    names probed with getattr/hasattr."""
    used: dict[str, list[str]] = {}
    for path, tree in _trees(PACKAGE):
        imports_module = any(isinstance(node, ast.ImportFrom) and node.module == "controller.service.acting"
                             for node in ast.walk(tree))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_backend_value(node.value) and not imports_module:
                used.setdefault(node.attr, []).append(_where(path, node))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                  and _names_backend(node.args[0]) and isinstance(node.args[1], ast.Constant)):
                used.setdefault(node.args[1].value, []).append(_where(path, node))
    return used


def undeclared_port_members() -> dict[str, list[str]]:
    return {name: places for name, places in port_members_used().items() if not hasattr(Backend, name)}


def getattr_forwarding() -> list[str]:
    return [_where(path, node) for path, tree in _trees(PACKAGE / "service")
            for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]


LEVER_NAMES = {lever.name for lever in LEVERS.values()} | {"set_site_factors"}


def hand_written_lever_methods() -> list[str]:
    found = []
    for path, tree in _trees(PACKAGE / "service" / "acting"):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in ("ReadOnlyBackend", "RecordingBackend"):
                found += [f"{_where(path, item)} {node.name}.{item.name}" for item in node.body
                          if isinstance(item, ast.FunctionDef) and item.name in LEVER_NAMES]
    return found


def test_the_mode_is_decided_in_the_executor_only():
    found = mode_decisions()
    print(f"mode decided outside the executor: {len(found)}", *found, sep="\n  ")
    assert found == []
    known = {place.rsplit(":", 1)[0] for place in mode_decisions(known=True)}
    print(f"left, with a reason (KNOWN): {sorted(known)}")
    assert known == KNOWN, "a KNOWN file decides by the mode no more: remove its entry"


def test_no_backend_is_probed_with_getattr():
    found = backend_probes()
    print(f"getattr/hasattr probes on a backend: {len(found)}", *found, sep="\n  ")
    assert found == []


def test_every_port_member_used_is_declared():
    found = undeclared_port_members()
    print(f"port members used, not declared: {len(found)}", *(f"{k}: {v}" for k, v in found.items()), sep="\n  ")
    assert found == {}


def test_no_getattr_forwarding_in_the_service():
    found = getattr_forwarding()
    print(f"__getattr__ in controller/service: {len(found)}", *found, sep="\n  ")
    assert found == []


def test_read_only_and_recording_backends_write_no_lever_method_by_hand():
    found = hand_written_lever_methods()
    print(f"hand-written lever methods: {len(found)}", *found, sep="\n  ")
    assert found == []

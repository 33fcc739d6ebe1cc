"""The rooms of controller/ and the one import rule of each (ARCHITECTURE.md).

Reads every module's imports with ``ast`` (nothing is executed), so a rule broken
anywhere, even inside a function, fails here."""
import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "controller"

# room -> the project packages it may import (besides itself). The core may import
# only the standard library, numpy and scipy.
ALLOWED = {
    "core": set(),
    "replay": {"core"},
    "partitions": {"core"},
    "service": {"core", "partitions"},
    "cli": {"core", "replay", "partitions", "service", "slurm_plugin", "checkpoint"},
}
CORE_THIRD_PARTY = {"numpy", "scipy"}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: relative import; use controller.<room>.<module>")
            if node.module == "controller":
                for alias in node.names:
                    yield node.lineno, f"controller.{alias.name}"
            else:
                yield node.lineno, node.module


def _target_room(name: str):
    parts = name.split(".")
    if parts[0] == "slurm_plugin":
        return "slurm_plugin"
    if parts[0] == "controller":
        return parts[1] if len(parts) > 1 else "controller"
    return None


def _modules(room: str):
    return sorted((PACKAGE / room).rglob("*.py"))


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_room_imports_follow_its_rule(room):
    broken = []
    for path in _modules(room):
        for line, name in _imports(path):
            target = _target_room(name)
            if target is None:
                if room == "core":
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in CORE_THIRD_PARTY:
                        broken.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
                continue
            if target != room and target not in ALLOWED[room]:
                broken.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
    assert not broken, "\n".join(broken)


def test_core_rule_is_enforced_by_this_test(tmp_path):
    """The checker itself catches a core module that reaches outside the core."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom controller.replay.traces import load_trace\nimport sqlalchemy\n")
    found = [(line, name) for line, name in _imports(bad)]
    assert (2, "controller.replay.traces") in found and _target_room("controller.replay.traces") == "replay"
    assert "sqlalchemy" not in sys.stdlib_module_names and "sqlalchemy" not in CORE_THIRD_PARTY


def test_every_module_lives_in_a_room():
    """Only the package marker and the user-side checkpoint helper sit at the top."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "checkpoint.py"], top


# -- no import circle, no private name across modules ----------------------------
# The project's own packages: every module of them is a node of the import graph.
PROJECT_PACKAGES = ("controller", "slurm_plugin")
# Private-looking names that are public API of the standard library (namedtuple).
STDLIB_UNDERSCORE_API = {"_replace", "_asdict", "_fields", "_make"}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_modules(root: Path = ROOT) -> dict[str, Path]:
    return {_module_name(p, root): p for package in PROJECT_PACKAGES for p in sorted((root / package).rglob("*.py"))}


def _project_imports(path: Path, modules: dict[str, Path]):
    """(line, imported project module) for every import in ``path``, even inside a
    function or under ``if TYPE_CHECKING`` (a circle only for the type checker is still
    one concept split in two). ``from a.b import c`` names module ``a.b.c`` when there
    is one, else ``a.b``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in modules:
                    yield node.lineno, full
                elif node.module in modules:
                    yield node.lineno, node.module


def import_circles(root: Path = ROOT) -> list[list[str]]:
    """The project's import circles: strongly connected groups of two or more modules,
    each given as the edges that close it (``a:LINE -> b``)."""
    modules = _project_modules(root)
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, path in modules.items():
        for line, target in _project_imports(path, modules):
            if target != name:
                graph[name].setdefault(target, line)
    # Tarjan's strongly connected components, iteratively (no recursion limit)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        members = set(group)
                        circles.append(sorted(f"{a}:{graph[a][b]} -> {b}" for a in group for b in graph[a]
                                              if b in members))
    return circles


def private_uses(root: Path = ROOT) -> list[str]:
    """Every use of another module's private name: ``from x import _name``, and
    ``thing._name`` where ``_name`` is defined nowhere in this module (not a function,
    class, ``self._name`` attribute, argument or assigned name of its own): a private
    attribute or method of another module's class or of a module."""
    found = []
    for name, path in _project_modules(root).items():
        tree = ast.parse(path.read_text(), filename=str(path))
        own = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in (
                    "self", "cls"):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
        where = path.relative_to(root)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PROJECT_PACKAGES:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                if node.attr in own or node.attr in STDLIB_UNDERSCORE_API:
                    continue
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_import_circle():
    circles = import_circles()
    assert not circles, "\n".join("circle: " + "; ".join(edges) for edges in circles)


def test_no_private_name_used_across_modules():
    uses = private_uses()
    assert not uses, "\n".join(uses)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PROJECT_PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
    return tmp_path


def test_circle_checker_catches_a_circle_inside_a_function(tmp_path):
    root = _tree(tmp_path, {
        "controller/__init__.py": "",
        "controller/core/__init__.py": "",
        "controller/core/a.py": "from controller.core.b import thing\n",
        "controller/core/b.py": "def thing():\n    from controller.core import a\n    return a\n",
        "controller/core/c.py": "from controller.core.a import thing\n",
    })
    circles = import_circles(root)
    assert circles == [["controller.core.a:1 -> controller.core.b", "controller.core.b:2 -> controller.core.a"]]


def test_private_checker_catches_imports_and_attributes(tmp_path):
    root = _tree(tmp_path, {
        "controller/__init__.py": "",
        "controller/core/__init__.py": "",
        "controller/core/a.py": ("class Engine:\n    def _place(self):\n        return self._free\n"
                                 "def _helper():\n    return Engine()._place()\n"),
        "controller/core/b.py": ("from controller.core.a import _helper\nfrom controller.core import a\n"
                                 "def go(engine):\n    return engine._place(), a._helper(), (1, 2)._replace()\n"),
    })
    assert private_uses(root) == [
        "controller/core/b.py:1: from controller.core.a import _helper",
        "controller/core/b.py:4: engine._place",
        "controller/core/b.py:4: a._helper",
    ]


# -- the rooms as a graph: folders, files, arrows; none upward, no circle ------------
# The service's sub-rooms are layered: each may import those before it, never one after
# (the round drives everything; ops reads through the port; the port and its executor
# keep rows in the state). The core's sub-packages (policies, levers) are the core's.
SERVICE_LAYERS = ("state", "acting", "ops", "round")
# room -> the rooms it may import (besides itself); slurm_plugin is the adapter: the core's
# model and the service's port only.
ROOM_RULES = {
    "core": set(),
    "replay": {"core"},
    "partitions": {"core"},
    **{f"service/{layer}": {"core", "partitions"} | {f"service/{below}" for below in SERVICE_LAYERS[:i]}
       for i, layer in enumerate(SERVICE_LAYERS)},
    "slurm_plugin": {"core", "service/acting"},
    "cli": {"core", "replay", "partitions", "slurm_plugin", "checkpoint"} | {f"service/{x}" for x in SERVICE_LAYERS},
}


def room_of(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).parts
    if parts[0] == "slurm_plugin":
        return "slurm_plugin"
    if len(parts) < 3:
        return parts[1].removesuffix(".py")  # controller/checkpoint.py
    if parts[1] == "service" and len(parts) > 3:
        return f"service/{parts[2]}"
    return parts[1]


def room_graph(root: Path = ROOT) -> tuple[dict[str, int], dict[str, int], dict[tuple[str, str], int]]:
    """(folders -> files, rooms -> files, (room, room) -> imports) of controller/ and slurm_plugin/."""
    modules = _project_modules(root)
    folders: dict[str, int] = {}
    rooms: dict[str, int] = {}
    arrows: dict[tuple[str, str], int] = {}
    for name, path in modules.items():
        folder = str(path.parent.relative_to(root))
        folders[folder] = folders.get(folder, 0) + 1
        room = room_of(path, root)
        rooms[room] = rooms.get(room, 0) + 1
        for _, target in _project_imports(path, modules):
            other = room_of(modules[target], root)
            if other != room:
                arrows[(room, other)] = arrows.get((room, other), 0) + 1
    return folders, rooms, arrows


def test_rooms_import_downward_only_and_in_no_circle():
    folders, rooms, arrows = room_graph()
    upward = sorted(f"{a} -> {b} ({n})" for (a, b), n in arrows.items()
                    if a in ROOM_RULES and b not in ROOM_RULES[a])
    circles = sorted(f"{a} <-> {b}" for (a, b) in arrows if (b, a) in arrows and a < b)
    print(f"\n{len(folders)} folders, {sum(folders.values())} files, {len(rooms)} rooms, "
          f"{len(arrows)} arrows between rooms, {len(upward)} upward, {len(circles)} circles")
    for (a, b), n in sorted(arrows.items()):
        print(f"  {a} -> {b}: {n}")
    assert set(rooms) <= set(ROOM_RULES) | {"__init__", "checkpoint", "service"}, sorted(rooms)  # package markers
    assert not upward, upward
    assert not circles, circles


def test_room_graph_sees_an_upward_arrow(tmp_path):
    root = _tree(tmp_path, {
        "controller/__init__.py": "",
        "controller/service/__init__.py": "",
        "controller/service/acting/__init__.py": "",
        "controller/service/acting/port.py": "from controller.service.round.daemon import Controller\n",
        "controller/service/round/__init__.py": "",
        "controller/service/round/daemon.py": "from controller.service.acting.port import x\n",
    })
    _, rooms, arrows = room_graph(root)
    assert arrows == {("service/acting", "service/round"): 1, ("service/round", "service/acting"): 1}
    assert "service/round" not in ROOM_RULES["service/acting"]

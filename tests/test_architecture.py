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

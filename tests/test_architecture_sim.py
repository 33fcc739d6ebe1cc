"""The simulator's figures of issue 36 (shared/design/one-lever-planner.md, "Done when"),
each a check that fails if it drifts back. Read-only analysis of the source with ``ast``.

- Slurm's start rule implemented once: only controller/replay/slurmctld.py chooses a
  starting job's nodes (the fewest-free-GPUs pick: a sort over (free GPUs, node) pairs
  of the nodes it fits on), orders pending jobs by Slurm's priority (a sort key reading
  the SiteFactor or the band with the age), walks them (``start_walk``) and answers
  backfill's "when is a node free" (a walk over the sorted ends of the jobs on a node);
  bench/scripted_slurm.py and every replay that starts jobs the Slurm way call it.
- No policy name list written by hand outside controller/core/policies/.
- No file of controller/replay/ over 600 lines.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLURMCTLD = "controller/replay/slurmctld.py"
MAX_LINES = 600


def _sources(*folders: str):
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), filename=str(path))


def _names(node: ast.AST) -> set[str]:
    """Every name and attribute name read in ``node``."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return found


def _is_sort(node: ast.AST) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (isinstance(func, ast.Name) and func.id in ("sorted", "min", "max")) or (
        isinstance(func, ast.Attribute) and func.attr == "sort")


def node_choices(tree: ast.AST) -> list[int]:
    """Lines that pick a job's nodes the Slurm way: ``sorted(((free, node) for node in
    ... if <fits: compares with the job's GPUs>))``."""
    lines = []
    for node in ast.walk(tree):
        if not (_is_sort(node) and node.args and isinstance(node.args[0], (ast.GeneratorExp, ast.ListComp))):
            continue
        comp = node.args[0]
        if not (isinstance(comp.elt, ast.Tuple) and len(comp.elt.elts) == 2):
            continue
        tests = [test for generator in comp.generators for test in generator.ifs]
        if any(isinstance(sub, ast.Compare) and any("gpus" in name for name in _names(sub))
               for test in tests for sub in ast.walk(test)):
            lines.append(node.lineno)
    return lines


def priority_orders(tree: ast.AST) -> list[int]:
    """Lines that define Slurm's priority order: a sort key (a lambda giving a tuple)
    reading the SiteFactor, or the band (a level) with the age (submit time)."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Lambda) and isinstance(node.body, ast.Tuple)):
            continue
        names = _names(node.body)
        if any("site_factor" in name for name in names) or ("level" in names and any("submit" in name
                                                                                     for name in names)):
            lines.append(node.lineno)
    return lines


def node_free_walks(tree: ast.AST) -> list[int]:
    """Lines of backfill's "when is a node free": a loop over the sorted (end, GPUs
    held) of the jobs on a node."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and _is_sort(node.iter)
                and isinstance(node.target, ast.Tuple)
                and any(isinstance(elt, ast.Name) and "end" in elt.id for elt in node.target.elts)):
            lines.append(node.lineno)
    return lines


def start_rule_places(folders=("controller", "bench")) -> dict[str, dict[str, list[int]]]:
    """signature -> module -> lines, over ``folders``."""
    found: dict[str, dict[str, list[int]]] = {"node choice": {}, "priority order": {}, "when a node is free": {}}
    for path, tree in _sources(*folders):
        for signature, finder in (("node choice", node_choices), ("priority order", priority_orders),
                                  ("when a node is free", node_free_walks)):
            lines = finder(tree)
            if lines:
                found[signature][path] = lines
    return found


def test_slurms_start_rule_is_implemented_once():
    found = start_rule_places()
    for signature, modules in found.items():
        print(f"{signature}: {len(modules)} module(s) {modules}")
    assert {signature: set(modules) for signature, modules in found.items()} == {
        "node choice": {SLURMCTLD}, "priority order": {SLURMCTLD}, "when a node is free": {SLURMCTLD}}, found


def test_one_start_walk_and_every_slurm_start_calls_it():
    defined = [path for path, tree in _sources("controller", "bench") for node in ast.walk(tree)
               if isinstance(node, ast.FunctionDef) and node.name == "start_walk"]
    assert defined == [SLURMCTLD]
    callers = {path for path, tree in _sources("controller", "bench") for node in ast.walk(tree)
               if isinstance(node, ast.Call) and "start_walk" in _names(node.func)}
    print(f"start_walk called in {sorted(callers)}")
    assert {SLURMCTLD, "controller/replay/slurm_order.py", "bench/scripted_slurm.py"} <= callers


def test_bench_imports_the_simulated_slurmctld():
    tree = ast.parse((ROOT / "bench" / "scripted_slurm.py").read_text())
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "controller.replay.slurmctld" in modules


def _policy_names() -> set[str]:
    """The registry's names, read from the policy modules' ``name = "..."``."""
    names = set()
    for _, tree in _sources("controller/core/policies"):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if (isinstance(item, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "name"
                                                             for t in item.targets)
                            and isinstance(item.value, ast.Constant) and item.value.value != "base"):
                        names.add(item.value.value)
    return names


def policy_lists(folders=("controller",), choices_only=("bench",)) -> list[str]:
    """Tuple, list and set literals of two or more distinct policy names outside
    controller/core/policies/ (in ``choices_only`` folders: those given as an argparse
    ``choices``, a list of allowed policies; a bench's own pick of policies to compare is
    an experiment, not a list of what is allowed)."""
    names = _policy_names()
    assert len(names) >= 8, names

    def listed(node) -> bool:
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(
            {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}) >= 2

    found = []
    for path, tree in _sources(*folders):
        if path.startswith("controller/core/policies/"):
            continue
        found += [f"{path}:{node.lineno}" for node in ast.walk(tree) if listed(node)]
    for path, tree in _sources(*choices_only):
        found += [f"{path}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.keyword)
                  and node.arg == "choices" and listed(node.value)]
    return found


def test_no_policy_name_list_outside_the_registry():
    found = policy_lists()
    print(f"policy name lists outside controller/core/policies/: {len(found)} {found}")
    assert found == []


def test_replay_files_at_most_600_lines():
    sizes = {path.name: len(path.read_text().splitlines()) for path in (ROOT / "controller" / "replay").glob("*.py")}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    print(f"replay files over {MAX_LINES} lines: {over}; largest {max(sizes.values())}")
    assert over == {}

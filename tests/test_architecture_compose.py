"""Issue 36 (one lever planner), items 1 and 5, the composition: every lever family
planned by the one LeverPlanner, called by the service's round (controller/service/
round/levers.py) and the replay (controller/replay/lever_replay.py) only. Read-only
analysis of the source with ``ast`` (nothing is executed), so that none drifts back.

Measured on main before the step -> after it:
- lever producers (the core families' functions that build lever actions or decision
  entries) called outside controller/core and outside the planner's two callers: 11 -> 0
  (daemon 2, handoff 1, partition_moves 1, preemption 4, sharing 3);
- the same producers called by the planner's two callers directly, not through the
  planner: 2 -> 0 (the replay's hand-built Signal and Requeue);
- the lever planner's phases called outside its two callers: 0 -> 0;
- lever actions built outside controller/core: 0 -> 0;
- files that call LeverPlanner: 2 -> 2 (tests/test_architecture_levers.py);
- lever calls in the daemon's ``_round`` (family modules and the preemption strategy
  driven one by one): 14 -> 1 (``Levers.run``).
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANNER_CALLERS = {"controller/service/round/levers.py", "controller/replay/lever_replay.py"}
# the core families' producers: each returns lever actions or decision entries
PRODUCERS = {
    "bands": {"plan_bands", "band_actions"},
    "starts": {"plan_starts", "plan_unpins", "pin_for_start", "release_for_start", "unpin_expired"},
    "preemption": {"signal_for", "requeue_after_grace", "preemption_step", "plan_preemptions",
                   "resolve_preemptions", "victims_to_signal", "left_to_slurm", "requeues_seen"},
    "handoffs": {"handoff_decision"},
    "moves": {"move_actions"},
    "sharing": {"plan_sharing", "share_levers", "hold_levers"},
}
PLANNER_PHASES = {"step", "comments", "handoff_checks", "left_to_slurm", "kept_victims", "victims", "victim_step",
                  "requeues", "moves", "sharing", "holds"}
LEVER_CALLS = {"apply", "run", "begin", "advance", "check", "expect", "kept", "note_bands", "requeues_seen",
               "left_to_slurm", "own_victims", "kept_running", "move", "share", "preempt", "check_handoffs",
               "comment", "write_comments", "_write_admin_comments"}

# who pulls levers: the round module, the families' modules, the strategy, the daemon itself
LEVER_OWNERS = {"levers", "starts", "handoffs", "preemptions", "mover", "sharing", "slurm_book", "strategy", "self"}


def _sources(root: Path = ROOT) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted((root / "controller").rglob("*.py"))}


def _name(func) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def producer_calls(sources: dict[str, str], within_callers: bool = False) -> list[str]:
    """Calls of a core family's producer outside controller/core and the planner's callers
    (``within_callers``: in the planner's callers, not through the planner)."""
    names = set().union(*PRODUCERS.values())
    found = []
    for path, text in sources.items():
        if path.startswith("controller/core/") or (path in PLANNER_CALLERS) != within_callers:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and _name(node.func) in names and not (
                    isinstance(node.func, ast.Attribute) and _name(node.func.value) == "planner"):  # a phase
                found.append(f"{path}:{node.lineno} {_name(node.func)}")
    return found


def planner_phase_calls(sources: dict[str, str]) -> list[str]:
    """Calls of the planner's phases (``planner.<phase>(...)``, ``self.planner.<phase>``)
    outside controller/core and the planner's callers."""
    found = []
    for path, text in sources.items():
        if path.startswith("controller/core/") or path in PLANNER_CALLERS:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in PLANNER_PHASES and _name(node.func.value) == "planner":
                found.append(f"{path}:{node.lineno} planner.{node.func.attr}")
    return found


def round_lever_calls(daemon_source: str) -> list[str]:
    """The lever calls in the daemon's ``Controller._round``: the families' modules and the
    preemption strategy driven one by one (before), the one round module (after)."""
    tree = ast.parse(daemon_source)
    body = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "_round")
    return [f"{node.lineno} {_name(node.func)}" for node in ast.walk(body)
            if isinstance(node, ast.Call) and _name(node.func) in LEVER_CALLS
            and isinstance(node.func, ast.Attribute) and _name(node.func.value) in LEVER_OWNERS]


def test_no_lever_producer_is_called_outside_the_core_and_the_planners_callers():
    core = ROOT / "controller" / "core" / "levers"
    for module, names in PRODUCERS.items():  # the list names what the core defines
        defined = {node.name for node in ast.walk(ast.parse((core / f"{module}.py").read_text()))
                   if isinstance(node, ast.FunctionDef)}
        assert names <= defined, (module, names - defined)
    found = producer_calls(_sources())
    print(f"lever producers called outside controller/core and the planner's two callers: {len(found)} {found}; "
          "on main before: 11")
    assert found == []


def test_the_planners_callers_call_no_producer_but_through_the_planner():
    found = producer_calls(_sources(), within_callers=True)
    print(f"lever producers called by the planner's callers directly: {len(found)} {found}; on main before: 2")
    assert found == []


def test_the_planners_phases_are_called_by_its_two_callers_only():
    found = planner_phase_calls(_sources())
    print(f"planner phases called outside its two callers: {len(found)} {found}")
    assert found == []


def test_the_daemon_round_pulls_every_lever_in_one_call():
    calls = round_lever_calls((ROOT / "controller" / "service" / "round" / "daemon.py").read_text())
    print(f"lever calls in the daemon's _round: {len(calls)} {calls}; on main before: 14")
    assert len(calls) == 1 and calls[0].endswith(" run"), calls

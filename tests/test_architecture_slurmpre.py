"""Issue 36 item 5, figure: one simulated slurmctld holds preempt/qos. The scripted
slurmctld (bench/scripted_slurm.py) and the lever replay's SimSlurm both call the one
model (controller.replay.slurmctld.slurm_preemptions over preempt_walk), neither has
a victim rule of its own, and the lever-parity test names no gap under
``preemption: slurm`` (before: 6 kinds strict-xfailed, 0 of the 2 targets preempting)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"SimSlurm": ROOT / "controller" / "replay" / "slurmctld.py",
           "ScriptedSlurm": ROOT / "bench" / "scripted_slurm.py"}


def _calls_in_class(path: Path, name: str) -> set[str]:
    tree = ast.parse(path.read_text())
    cls = next(node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == name)
    return {node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            for node in ast.walk(cls) if isinstance(node, ast.Call)}


def test_both_simulated_slurmctlds_preempt_by_the_one_model():
    calling = [name for name, path in TARGETS.items() if "slurm_preemptions" in _calls_in_class(path, name)]
    print(f"targets preempting through slurm_preemptions: {len(calling)} of {len(TARGETS)} (before: 0)")
    assert calling == list(TARGETS)
    # the model's rules are defined once, in controller/replay/slurmctld.py
    for rule in ("def preempt_walk", "def slurm_preemptions", "def slurm_fit"):
        defined = [p for p in [*ROOT.joinpath("controller").rglob("*.py"), *ROOT.joinpath("bench").rglob("*.py")]
                   if rule + "(" in p.read_text()]
        assert defined == [TARGETS["SimSlurm"]], (rule, defined)


def test_the_lever_parity_test_names_no_gap_under_slurm():
    from tests.test_lever_parity import NOT_SIMULATED_UNDER_SLURM
    print(f"kinds xfailed under preemption: slurm alone: {len(NOT_SIMULATED_UNDER_SLURM)} (before: 6)")
    assert NOT_SIMULATED_UNDER_SLURM == {}

"""The job-comment hint grammar, held identical in Python (controller/core/hints.py)
and Lua (slurm_plugin/job_submit.lua) by one shared table of cases."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from controller.core.hints import parse_hints, parse_skew_hint
from tests.test_job_submit_lua import PLUGIN, REPO_ROOT, lua  # noqa: F401 - the interpreter fixture

TABLE = REPO_ROOT / "tests" / "fixtures" / "hint_cases.tsv"
LUA_RUNNER = REPO_ROOT / "tests" / "lua" / "hint_cases.lua"
_ESC = {"t": "\t", "n": "\n", "r": "\r", "v": "\v", "f": "\f", "\\": "\\"}


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in _ESC:
            out.append(_ESC[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _cases() -> list[tuple[int, str, str, str, str, str]]:
    """(line number, comment, skew, class, bad, preemptable) per case; split on "\\n" only, since
    some comments hold characters str.splitlines() would break at (\\x1c, \\x85)."""
    rows = []
    for number, line in enumerate(TABLE.read_text(encoding="utf-8").split("\n"), start=1):
        if not line or line.startswith("#"):
            continue
        comment, skew, klass, bad, preempt = line.split("\t")
        rows.append((number, _unescape(comment), skew, klass, bad, preempt))
    return rows


CASES = _cases()


def preempt_column(hints) -> str:
    """The table's preemptable column for parsed Hints: "-", "yes" (bare opt-in) or the signal."""
    if not hints.preemptable:
        return "-"
    return hints.preempt_signal.spec if hints.preempt_signal else "yes"


def _same(skew: str, klass: str, bad: str, preempt: str, got_skew, got_class, got_bad, got_preempt: str) -> bool:
    want_skew = None if skew == "-" else float(skew)
    return (want_skew == got_skew and (None if klass == "-" else klass) == got_class
            and (None if bad == "-" else _unescape(bad)) == got_bad and preempt == got_preempt)


def test_table_covers_the_reported_disagreements():
    comments = {c for _, c, *_ in CASES}
    for needed in ("tiresias:skew=0.0_5", "tiresias:skew=０.５", "tiresias:skew=0.1 tiresias:skew=0.2",
                   "tiresias:skew", "tiresias:skew=٠.٥", "tiresias:class=fast"):
        assert needed in comments
    assert len(CASES) >= 60
    assert sum(1 for *_, bad, _ in CASES if bad != "-") >= 30  # bad and good cases both
    for needed in ("tiresias:preemptable", "x tiresias:preemptable=USR2 y", "tiresias:preemptable=KILL",
                   "tiresias:preemptable=", "tiresias:preemptable tiresias:preemptable", "tiresias:preemptable=uſr1"):
        assert needed in comments
    preempt = [row for row in CASES if "preemptable" in row[1]]
    assert sum(1 for *_, bad, _ in preempt if bad != "-") >= 20 and sum(1 for *_, p in preempt if p != "-") >= 10


@pytest.mark.parametrize("number, comment, skew, klass, bad, preempt", CASES, ids=[str(c[0]) for c in CASES])
def test_python_answers_the_table(number, comment, skew, klass, bad, preempt):
    hints = parse_hints(comment)
    assert _same(skew, klass, bad, preempt, hints.skew, hints.job_class, hints.bad, preempt_column(hints)), \
        (number, hints)
    assert (hints.problem is None) == (hints.bad is None)
    if hints.problem:
        assert "\n" not in hints.problem
        assert repr(hints.bad if len(hints.bad) <= 40 else hints.bad[:40] + "...") in hints.problem


def test_lua_answers_the_table(lua):  # noqa: F811 - pytest fixture
    proc = subprocess.run([lua, str(LUA_RUNNER), str(PLUGIN), str(TABLE)], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    lines = proc.stdout.decode("utf-8").split("\n")[:-1]
    assert len(lines) == len(CASES)
    wrong = []
    for (number, comment, skew, klass, bad, preempt), line in zip(CASES, lines):
        got_number, got_skew, got_class, got_bad, got_preempt = line.split("\t")
        assert int(got_number) == number
        ok = _same(skew, klass, bad, preempt, None if got_skew == "-" else float(got_skew),
                   None if got_class == "-" else got_class, None if got_bad == "-" else _unescape(got_bad),
                   got_preempt)
        if not ok:
            wrong.append(f"line {number} {comment!r}: lua says {line!r}")
    assert not wrong, "\n".join(wrong)


def test_skew_hint_compat_wrapper():
    assert parse_skew_hint("tiresias:skew=0.7") == (0.7, None)
    assert parse_skew_hint("") == (None, None)
    value, why = parse_skew_hint("tiresias:skew=2")
    assert value is None and "outside 0..1" in why


def test_preemptable_hint_errors_name_the_field_and_value():
    why = parse_hints("a tiresias:preemptable=KILL").problem
    assert why == ("hint 'tiresias:preemptable=KILL' has a bad checkpoint signal: "
                   "signal 'KILL' in 'KILL' cannot be caught")
    assert "second preemptable hint" in parse_hints("tiresias:preemptable tiresias:preemptable=USR1").problem
    assert "not tiresias:preemptable or" in parse_hints("tiresias:preemptables").problem
    long_spec = parse_hints("tiresias:preemptable=" + "A" * 5000).problem
    assert len(long_spec) < 300 and "..." in long_spec
    opted = parse_hints("tiresias:preemptable=b:sigusr2@60")
    assert opted.preempt_signal.describe() == "B:USR2@60 (--comment=tiresias:preemptable=)"

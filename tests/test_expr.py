"""The priority-expression parser: grammar, protected division, round trip, safety."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from controller.partitions.priority_file import load_expression_file
from controller.core.expr import (PUBLISHED_EXAMPLE, BinOp, Neg, Num, Pow, Var,
                             parse_expression)
from controller.partitions.learner import random_tree
from controller.core.model import InputError


def ev(text, d=1.0, q=2.0, u=3.0, g=4.0):
    return parse_expression(text).evaluate(d, q, u, g)


def test_precedence_and_associativity():
    assert ev("d + q * u") == 1 + 2 * 3
    assert ev("(d + q) * u") == 9
    assert ev("g - q - d") == 1  # left-associative
    assert ev("g / q / q") == 1
    assert ev("-q^2") == -4  # ^ binds tighter than unary minus
    assert ev("(-q)^2") == 4
    assert ev("2 * q^3") == 16
    assert ev("q^0") == 1
    assert ev("- - d") == 1
    assert parse_expression("d - q - u") == BinOp("-", BinOp("-", Var("d"), Var("q")), Var("u"))
    assert parse_expression("1.5e1 + .5") == BinOp("+", Num(15.0), Num(0.5))


def test_protected_division_scalar_and_vector():
    assert ev("g / 0") == 4
    assert ev("g / (q - q)") == 4
    out = parse_expression("g / q").evaluate(np.array([1.0, 1.0]), np.array([0.0, 2.0]), 1.0, np.array([4.0, 4.0]))
    assert out.tolist() == [4.0, 2.0]


def test_published_example_values():
    e = parse_expression(PUBLISHED_EXAMPLE)
    d, q, u, g = 100.0, 10.0, 2.0, 8.0
    expected = ((q + g) / q - u) * (2 * q / d) * (q + (d + g - u) / q ** 2)
    assert e.evaluate(d, q, u, g) == pytest.approx(expected)
    # With x / 0 = x, the factor 2 q / d is 0 when q = 0, so f is 0 (not the
    # (g - u) d / (d + g - u) the spec quotes).
    assert e.evaluate(d, 0.0, u, g) == 0.0
    vec = e.evaluate(np.array([d, d]), np.array([q, 0.0]), np.array([u, u]), np.array([g, g]))
    assert vec == pytest.approx([expected, 0.0])


def test_round_trip_examples():
    for text in [PUBLISHED_EXAMPLE, "d - (q - u)", "d / (q / u)", "(d + q) * (u - g)", "-(d + q)", "(-d)^2",
                 "d + (q + u)", "2.5 * d", "1e-07 + q", "-d^3", "d * -q"]:
        tree = parse_expression(text)
        assert parse_expression(tree.to_text()) == tree, text


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 7), full=st.booleans())
def test_round_trip_random_trees(seed, depth, full):
    tree = random_tree(np.random.default_rng(seed), depth, full)
    text = tree.to_text()
    again = parse_expression(text)
    assert again == tree and again.to_text() == text
    assert tree.depth() <= depth and tree.size() >= 1


def test_depth_and_size():
    e = parse_expression("(d + q) * u")
    assert (e.depth(), e.size()) == (3, 5)
    assert parse_expression("d").depth() == 1
    assert parse_expression("-q^2").size() == 3


@pytest.mark.parametrize("text, message", [
    ("1 + os", "unknown name 'os' at column 5"),
    ("open(1)", "calls are not allowed: 'open(' at column 1"),
    ("__import__('os')", "calls are not allowed: '__import__(' at column 1"),
    ("d.__class__", "attributes are not allowed: '.' at column 2"),
    ("(d).real", "attributes are not allowed: '.' at column 4"),
    ("lambda: d", "unknown name 'lambda' at column 1"),
    ("(d + q))", "unexpected ')' at column 8"),
    ("d +", "unexpected end of expression at column 4"),
    ("(d + q", "missing ')' for '(' at column 1"),
    ("d ** 2", "unexpected '**' at column 3"),
    ("q^2.5", "exponent '2.5' at column 3"),
    ("q^-1", "exponent '-' at column 3"),
    ("q^99", "exponent '99' at column 3"),
    ("(d)(q)", "calls are not allowed: '(' at column 4"),
    ("d q", "unexpected 'q' at column 3"),
    ("'d'", "strings are not allowed"),
    ("d[0]", "subscripts and literals are not allowed: '[' at column 2"),
    ("d, q", "unexpected ',' at column 2"),
    ("d $ q", "unexpected character '$' at column 3"),
    ("", "empty expression"),
    ("+d", "unary plus is not allowed"),
    ("1e999", "not finite"),
    ("(" * 300 + "d" + ")" * 300, "nested too deeply"),
])
def test_errors_name_token_and_column(text, message):
    with pytest.raises(InputError) as info:
        parse_expression(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_no_code_execution(tmp_path, monkeypatch):
    import builtins

    calls = []
    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda *a, **k: calls.append(a[0]) or real_import(*a, **k))
    marker = tmp_path / "pwned"
    for text in [f"__import__('os').system('touch {marker}')", f"open('{marker}', 'w')", "d.__class__.__mro__",
                 "lambda: 0", "exec('1')", "eval('d')", "[x for x in ()]", "globals()", "d if q else u"]:
        with pytest.raises(InputError):
            parse_expression(text)
    assert not marker.exists()
    assert "os" not in calls


def test_load_expression_file(tmp_path):
    f = tmp_path / "prio.txt"
    f.write_text("# learned by tiresias learn\n\n  q * g  # trailing comment\n")
    assert load_expression_file(f) == BinOp("*", Var("q"), Var("g"))
    f.write_text("# header\nd + \n")
    with pytest.raises(InputError, match=r"prio.txt:2: unexpected end of expression at column 5"):
        load_expression_file(f)
    f.write_text("d\nq\n")
    with pytest.raises(InputError, match=r"prio.txt:2: a second expression"):
        load_expression_file(f)
    f.write_text("# only comments\n")
    with pytest.raises(InputError, match="no expression found"):
        load_expression_file(f)
    with pytest.raises(InputError, match="cannot read"):
        load_expression_file(tmp_path / "missing.txt")


def test_nodes_are_immutable():
    e = parse_expression("d + q")
    with pytest.raises(Exception):
        e.op = "*"
    assert hash(e) == hash(parse_expression("d+q"))
    assert isinstance(parse_expression("-d"), Neg) and isinstance(parse_expression("d^2"), Pow)


def test_long_chains_are_bounded():
    assert parse_expression("+".join(["d"] * 150)).size() == 299
    with pytest.raises(InputError, match="levels deep"):
        parse_expression("+".join(["d"] * 5000))

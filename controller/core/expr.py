"""Learned priority expressions: a tiny, safe parser and an immutable expression tree.

The grammar (spec/multi-partition.md, "Learned priority function")::

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '/') unary)*
    unary   := '-' unary | power
    power   := atom ('^' INTEGER)?          # 0 <= INTEGER <= MAX_EXPONENT
    atom    := 'd' | 'q' | 'u' | 'g' | NUMBER | '(' expr ')'

Terminals: ``d`` remaining duration (s), ``q`` queued time (s), ``u`` user priority,
``g`` GPUs. Division is protected: ``x / 0 = x``. ``-q^2`` is ``-(q^2)``.

The text is never handed to Python (no eval/exec/ast): a hand-written tokenizer
accepts only the characters above, so names, calls, attributes, strings and
keywords are rejected with a one-line InputError naming the token and its
1-based column. Smaller values mean "served earlier".
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Union

import numpy as np

from controller.core.inputs import is_ascii_int, shorten
from controller.core.model import InputError

__all__ = [
    "PUBLISHED_EXAMPLE", "TERMINALS", "Node", "Var", "Num", "Neg", "BinOp", "Pow",
    "parse_expression", "parse_expression_document", "protected_div",
]

PUBLISHED_EXAMPLE = "((q + g) / q - u) * (2 * q / d) * (q + (d + g - u) / q^2)"
TERMINALS = ("d", "q", "u", "g")
MAX_EXPONENT = 16
MAX_TEXT_CHARS = 20_000
MAX_TREE_DEPTH = 200  # evaluate/to_text recurse once per level
MAX_NESTING = 64  # parentheses / unary minus chain: keeps the recursion far below Python's limit

Value = Union[float, np.ndarray]

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_NEG_PREC = 3
_POW_PREC = 4
_ATOM_PREC = 5


def protected_div(x: Value, y: Value) -> Value:
    """``x / y`` elementwise, with ``x / 0 = x`` (spec's protected division)."""
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        x_arr, y_arr = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
        out = x_arr.copy()
        np.divide(x_arr, y_arr, out=out, where=y_arr != 0)
        return out
    return x / y if y != 0 else x


class Node:
    """An immutable expression tree node. ``evaluate`` accepts floats or numpy arrays."""

    __slots__ = ()

    def evaluate(self, d: Value, q: Value, u: Value, g: Value) -> Value:
        with np.errstate(all="ignore"):
            return self._eval({"d": d, "q": q, "u": u, "g": g})

    def _eval(self, env: dict) -> Value:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_text(self) -> str:
        """Text that ``parse_expression`` turns back into an equal tree."""
        return self._text()

    def _text(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def depth(self) -> int:
        """Nodes on the longest root-to-leaf path (a single terminal has depth 1)."""
        return 1 + max((child.depth() for child in self.children()), default=0)

    def size(self) -> int:
        """Number of nodes."""
        return 1 + sum(child.size() for child in self.children())

    def children(self) -> tuple["Node", ...]:
        return ()

    def __str__(self) -> str:
        return self.to_text()


def _wrap(node: Node, need_parens: bool) -> str:
    text = node._text()
    return f"({text})" if need_parens else text


def _prec(node: Node) -> int:
    if isinstance(node, BinOp):
        return _PRECEDENCE[node.op]
    if isinstance(node, Neg):
        return _NEG_PREC
    if isinstance(node, Pow):
        return _POW_PREC
    if isinstance(node, Num) and node.value < 0:
        return _NEG_PREC
    return _ATOM_PREC


@dataclass(frozen=True, slots=True)
class Var(Node):
    name: str

    def __post_init__(self):
        if self.name not in TERMINALS:
            raise InputError(f"unknown name '{self.name}'; use one of d, q, u, g")

    def _eval(self, env):
        return env[self.name]

    def _text(self):
        return self.name


@dataclass(frozen=True, slots=True)
class Num(Node):
    value: float

    def __post_init__(self):
        if not math.isfinite(self.value):
            raise InputError(f"number '{self.value}' is not finite")

    def _eval(self, env):
        return self.value

    def _text(self):
        v = float(self.value)
        if v.is_integer() and abs(v) < 1e15:
            text = str(int(v))
        else:
            text = repr(v)
        return f"(-{text[1:]})" if v < 0 else text


@dataclass(frozen=True, slots=True)
class Neg(Node):
    operand: Node

    def _eval(self, env):
        return -self.operand._eval(env)

    def _text(self):
        return "-" + _wrap(self.operand, _prec(self.operand) < _NEG_PREC)

    def children(self):
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class BinOp(Node):
    op: str
    left: Node
    right: Node

    def __post_init__(self):
        if self.op not in _PRECEDENCE:
            raise InputError(f"operator '{self.op}' is not one of + - * /")

    def _eval(self, env):
        a = self.left._eval(env)
        b = self.right._eval(env)
        if self.op == "+":
            return a + b
        if self.op == "-":
            return a - b
        if self.op == "*":
            return a * b
        return protected_div(a, b)

    def _text(self):
        p = _PRECEDENCE[self.op]
        # Left-associative grammar: a right operand of equal precedence needs parentheses.
        left = _wrap(self.left, _prec(self.left) < p)
        right = _wrap(self.right, _prec(self.right) <= p)
        return f"{left} {self.op} {right}"

    def children(self):
        return (self.left, self.right)


@dataclass(frozen=True, slots=True)
class Pow(Node):
    base: Node
    exponent: int

    def __post_init__(self):
        if isinstance(self.exponent, bool) or not isinstance(self.exponent, int) \
                or not 0 <= self.exponent <= MAX_EXPONENT:
            raise InputError(f"exponent '{self.exponent}' is not an integer in 0..{MAX_EXPONENT}")

    def _eval(self, env):
        b = self.base._eval(env)
        result = b * 0 + 1.0  # keeps the array shape (0^0 = 1)
        for _ in range(self.exponent):
            result = result * b
        return result

    def _text(self):
        return _wrap(self.base, _prec(self.base) < _ATOM_PREC) + f"^{self.exponent}"

    def children(self):
        return (self.base,)


# --------------------------------------------------------------------------- tokenizer
# ASCII only (issue 12): str.isdigit/isalpha and regex \d also take "²", "٣" and "é".
_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*", re.ASCII)
_DIGITS = frozenset("0123456789")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_OPERATORS = set("+-*/^()")


@dataclass(frozen=True)
class _Token:
    kind: str  # "num", "name", "op", "end"
    text: str
    column: int  # 1-based


def _tokenize(text: str) -> list[_Token]:
    """Tokens up to the first bad character; that one becomes an "error" token so the
    parser reports what comes first in the text (``open('x')`` is a call, not a string)."""
    tokens: list[_Token] = []
    try:
        _scan(text, tokens)
    except InputError as err:
        tokens.append(_Token("error", str(err), 0))
        return tokens
    tokens.append(_Token("end", "", len(text) + 1))
    return tokens


def _scan(text: str, tokens: list[_Token]) -> None:
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
            continue
        col = i + 1
        if ch in _DIGITS or (ch == "." and i + 1 < n and text[i + 1] in _DIGITS):
            m = _NUMBER.match(text, i)
            tokens.append(_Token("num", m.group(0), col))
            i = m.end()
            continue
        if ch in _NAME_START:
            m = _NAME.match(text, i)
            tokens.append(_Token("name", m.group(0), col))
            i = m.end()
            continue
        if ch == "*" and text.startswith("**", i):
            raise InputError(f"unexpected '**' at column {col}; write powers as x^2")
        if ch in _OPERATORS:
            tokens.append(_Token("op", ch, col))
            i += 1
            continue
        if ch == ".":
            raise InputError(f"attributes are not allowed: '.' at column {col}")
        if ch in "'\"":
            raise InputError(f"strings are not allowed: {ch} at column {col}")
        if ch in "[]{}":
            raise InputError(f"subscripts and literals are not allowed: '{ch}' at column {col}")
        if ch == ",":
            raise InputError(f"unexpected ',' at column {col}; calls and tuples are not allowed")
        raise InputError(f"unexpected character {ascii(ch)} at column {col}"
                         + ("; only ASCII letters and digits are allowed" if not ch.isascii() else ""))


class _Parser:
    def __init__(self, text: str):
        self.tokens = _tokenize(text)
        self.pos = 0
        self.nesting = 0

    def peek(self) -> _Token:
        tok = self.tokens[self.pos]
        if tok.kind == "error":
            raise InputError(tok.text)
        return tok

    def take(self) -> _Token:
        tok = self.peek()
        self.pos += 1
        return tok

    def unexpected(self, tok: _Token) -> InputError:
        if tok.kind == "end":
            return InputError(f"unexpected end of expression at column {tok.column}")
        return InputError(f"unexpected '{shorten(tok.text)}' at column {tok.column}")

    def parse(self) -> Node:
        if self.peek().kind == "end":
            raise InputError("empty expression")
        node = self.expr()
        tok = self.peek()
        if tok.kind != "end":
            if tok.text == "(":
                raise InputError(f"calls are not allowed: '(' at column {tok.column} follows a value")
            raise self.unexpected(tok)
        return node

    def expr(self) -> Node:
        return self._left_assoc("+-", self.term)

    def term(self) -> Node:
        return self._left_assoc("*/", self.unary)

    def _left_assoc(self, ops: str, operand) -> Node:
        """``operand (op operand)*`` with an op of ``ops``, grouped to the left."""
        node = operand()
        while self.peek().kind == "op" and self.peek().text in ops:
            op = self.take().text
            node = BinOp(op, node, operand())
        return node

    def _enter(self, tok: _Token) -> None:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise InputError(f"expression nested too deeply at column {tok.column} (limit {MAX_NESTING})")

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind == "op" and tok.text == "-":
            self.take()
            self._enter(tok)
            node = Neg(self.unary())
            self.nesting -= 1
            return node
        if tok.kind == "op" and tok.text == "+":
            raise InputError(f"unexpected '+' at column {tok.column}; unary plus is not allowed")
        return self.power()

    def power(self) -> Node:
        node = self.atom()
        tok = self.peek()
        if tok.kind == "op" and tok.text == "^":
            self.take()
            exp_tok = self.take()
            if (exp_tok.kind != "num" or not is_ascii_int(exp_tok.text) or exp_tok.text[0] in "+-"
                    or int(exp_tok.text) > MAX_EXPONENT):
                shown = shorten(exp_tok.text) or "end of expression"
                raise InputError(f"exponent '{shown}' at column {exp_tok.column} is not an integer "
                                 f"in 0..{MAX_EXPONENT}")
            node = Pow(node, int(exp_tok.text))
        return node

    def atom(self) -> Node:
        tok = self.take()
        if tok.kind == "num":
            value = float(tok.text)
            if not math.isfinite(value):
                raise InputError(f"number '{shorten(tok.text)}' at column {tok.column} is not finite")
            return Num(value)
        if tok.kind == "name":
            nxt = self.tokens[self.pos]  # raw look-ahead: a bad character after the name comes second
            if nxt.kind == "op" and nxt.text == "(":
                raise InputError(f"calls are not allowed: '{shorten(tok.text)}(' at column {tok.column}")
            if tok.text not in TERMINALS:
                raise InputError(f"unknown name '{shorten(tok.text)}' at column {tok.column}; use d, q, u or g")
            return Var(tok.text)
        if tok.kind == "op" and tok.text == "(":
            self._enter(tok)
            node = self.expr()
            close = self.take()
            if close.kind != "op" or close.text != ")":
                if close.kind == "end":
                    raise InputError(f"missing ')' for '(' at column {tok.column}")
                raise self.unexpected(close)
            self.nesting -= 1
            return node
        raise self.unexpected(tok)


def parse_expression(text: str) -> Node:
    """Parse a priority expression; bad text is a one-line InputError with a column."""
    if not isinstance(text, str):
        raise InputError(f"expression must be text, not {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"expression is {len(text)} characters long (limit {MAX_TEXT_CHARS})")
    tree = _Parser(text).parse()
    depth = _depth_iterative(tree)
    if depth > MAX_TREE_DEPTH:
        raise InputError(f"expression is {depth} levels deep (limit {MAX_TREE_DEPTH})")
    return tree


def _depth_iterative(tree: Node) -> int:
    """Depth without recursion: a long chain like d+d+...+d must not overflow the stack."""
    best, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        best = max(best, level)
        stack.extend((child, level + 1) for child in node.children())
    return best


def parse_expression_document(text: str, source: str) -> Node:
    """The one expression in a priority document (``#`` starts a comment); errors are
    ``source:line: ...``. Reading the file is the caller's job: the core does no I/O."""
    found = None
    for number, line in enumerate(text.splitlines(), start=1):
        body = line.split("#", 1)[0]
        if not body.strip():
            continue
        if found is not None:
            raise InputError(f"{source}:{number}: a second expression (line {found[0]} already holds one)")
        found = (number, body)
    if found is None:
        raise InputError(f"{source}: no expression found (only blank lines and comments)")
    number, body = found
    try:
        return parse_expression(body)
    except InputError as err:
        raise InputError(f"{source}:{number}: {err}") from None

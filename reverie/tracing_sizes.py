"""Sizes in `rv.trace` (docs/api.md §8–9): `x.shape[0]`, `len(x)`, `x.size` as symbolic numbers.

Each axis of a traced value has a dimension expression of the Reverie language (`X0`,
`X0 - 1`, `X0 * X1`). Reading a size gives a `Size`: that expression, with its value in
the example. Arithmetic on sizes stays symbolic: `n - 1`, `2 * n` and `n // 2` are
dimension expressions again (usable as a shape, a slice bound or a subscript), while
`n % 3`, `n ** 2`, `1.0 / n` and `np.sqrt(n)` are numbers that the statement using them
computes from the dimensions at run time. So a kernel traced at one size computes what
NumPy computes at every size.

Python itself sometimes needs a plain number: `range(n)`, `if n > 3:`, `int(n)`, a
comparison. A `Size` then hands over its example value and asks its owner (the
recording) to *fix* every dimension it reads at its example size (`SizeOwner.fix`): the
traced kernel takes only that size on those axes, and a call with another raises
`rv.ShapeMismatchError` naming the argument and the axis, never a number computed for the
wrong size.

The module also holds the small algebra of dimension expressions as text: `combine` joins
two with an operator (parenthesising by precedence), `product_factors` splits a product.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

Number = int | float

# Binding strength of each binary operator of the language (Python's); an atom (a name, a
# number, a call, a parenthesised expression) binds tightest, a leading minus like `*`.
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "**": 3}
ATOM = 4
_OPERATOR = re.compile(r" (\*\*|//|[-+*/%]) ")

ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow}
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne}
# NumPy ufuncs that are these Python operators (`np.add(n, 1)` is `n + 1`).
UFUNC_OPERATORS = {
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
    "true_divide": operator.truediv, "divide": operator.truediv,
    "floor_divide": operator.floordiv, "remainder": operator.mod, "power": operator.pow,
    "less": operator.lt, "less_equal": operator.le, "greater": operator.gt,
    "greater_equal": operator.ge, "equal": operator.eq, "not_equal": operator.ne,
    "negative": operator.neg, "positive": operator.pos, "absolute": operator.abs}


# ---------------------------------------------------------------- expressions as text

def _top_level(expr: str) -> tuple[list[str], list[str]]:
    """The operands and the binary operators of `expr` outside parentheses."""
    operands, operators, depth, start, i = [], [], 0, 0, 0
    while i < len(expr):
        if expr[i] in "([":
            depth += 1
        elif expr[i] in ")]":
            depth -= 1
        elif depth == 0 and (match := _OPERATOR.match(expr, i)):
            operands.append(expr[start:i])
            operators.append(match.group(1))
            start = i = match.end()
            continue
        i += 1
    operands.append(expr[start:])
    return operands, operators


def precedence(expr: str) -> float:
    """How tightly `expr` binds as an operand: its loosest top-level operator's strength."""
    operators = _top_level(expr)[1]
    if operators:
        return min(PRECEDENCE[op] for op in operators)
    return PRECEDENCE["*"] if expr.startswith("-") else ATOM


def atom(expr: str) -> str:
    """`expr` as an operand of any operator: parenthesised unless it is an atom."""
    return expr if precedence(expr) == ATOM else f"({expr})"


def combine(left: str, op: str, right: str) -> str:
    """`left op right` as text, with the parentheses the precedence of `op` needs."""
    if op in ("+", "-") and right.startswith("-") and right[1:].isdigit():
        op, right = "-" if op == "+" else "+", right[1:]  # `n + -1` reads `n - 1`
    strength = PRECEDENCE[op]
    if precedence(left) < strength or (op == "**" and precedence(left) <= strength):
        left = f"({left})"
    right_ops = set(_top_level(right)[1])
    associative = op == "+" or (op == "*" and right_ops <= {"*"})
    if precedence(right) < strength or (precedence(right) == strength and not associative):
        right = f"({right})"
    return f"{left} {op} {right}"


def offset(expr: str, by: int) -> str:
    """`expr + by` as text: `X0 - 2`, `X0`, or a number when `expr` is one."""
    if expr.isdigit():
        return str(int(expr) + by)
    operands, operators = _top_level(expr)
    if operators and operators[-1] in ("+", "-") and operands[-1].isdigit():
        # `X0 - 1` offset by 1 is `X0`: the constant term folded
        base = expr[:len(expr) - len(operands[-1]) - len(operators[-1]) - 2]
        by += int(operands[-1]) * (1 if operators[-1] == "+" else -1)
        expr = base
    return expr if by == 0 else combine(expr, "+", str(by))


def product_factors(expr: str) -> list[str]:
    """The factors of a product (`X0 * (X1 - 1) * 3` gives `X0`, `(X1 - 1)`, `3`; a
    parenthesised product is opened); any other expression is one factor."""
    operands, operators = _top_level(expr)
    if operators and set(operators) == {"*"}:
        return [f for operand in operands for f in product_factors(operand)]
    if not operators and expr.startswith("(") and expr.endswith(")"):
        if set(_top_level(expr[1:-1])[1]) == {"*"}:
            return product_factors(expr[1:-1])
    return [expr]


def product_text(coefficient: int, factors: list[str]) -> str:
    """`coefficient * f1 * f2 ...` as text (the coefficient left out when it is 1)."""
    terms = ([str(coefficient)] if coefficient != 1 or not factors else []) + factors
    text = terms[0]
    for term in terms[1:]:
        text = combine(text, "*", term)
    return text


# ---------------------------------------------------------------- sizes

class SizeOwner(Protocol):
    """What a `Size` needs from the recording that made it."""

    def fix(self, expr: str) -> None:
        """Keep every dimension `expr` reads at its example size."""

    def size_ufunc(self, ufunc: np.ufunc, size: Size) -> Size:
        """`np.sqrt(n)` and the like: a NumPy ufunc of one size."""


class Size:
    """A number computed from the sizes of traced values (see the module docstring)."""

    def __init__(self, owner: SizeOwner, expr: str, value: Number, is_dim: bool) -> None:
        self.owner = owner
        self.expr = expr  # Reverie source text
        self.value = value  # in the example
        self.is_dim = is_dim  # a dimension expression: integer, of + - * and // constant

    def __repr__(self) -> str:
        return self.expr

    def concrete(self) -> Number:
        """The example value, for a decision Python makes with it: the dimensions this
        size reads are fixed at their example sizes from now on."""
        self.owner.fix(self.expr)
        return self.value

    # ------------------------------------------------------------ Python numbers
    def __index__(self) -> int:
        if isinstance(self.value, float):
            raise TypeError(f"the float {self.expr} cannot be used as an integer")
        return int(self.concrete())

    def __int__(self) -> int:
        return int(self.concrete())

    def __float__(self) -> float:
        return float(self.concrete())

    def __bool__(self) -> bool:
        return bool(self.concrete())

    def __hash__(self) -> int:
        return hash(self.value)

    def __abs__(self) -> Number:
        return abs(self.concrete())

    def __pos__(self) -> Size:
        return self

    def __neg__(self) -> Size:
        return Size(self.owner, f"-{atom(self.expr)}", -self.value, False)

    # ------------------------------------------------------------ arithmetic, comparisons
    def _operand(self, other: Any) -> Size | None:
        """`other` as a size: a size of the same recording, or a Python or NumPy number."""
        if isinstance(other, Size):
            return other if other.owner is self.owner else None
        if isinstance(other, bool | np.bool_):
            return None
        if isinstance(other, int | np.integer):
            return Size(self.owner, str(int(other)), int(other), int(other) >= 0)
        if isinstance(other, float | np.floating) and np.isfinite(other):
            return Size(self.owner, repr(float(other)), float(other), False)
        return None

    def _arithmetic(self, op: str, other: Any, reverse: bool = False) -> Any:
        second = self._operand(other)
        if second is None:
            return NotImplemented
        a, b = (second, self) if reverse else (self, second)
        floats = isinstance(a.value, float) or isinstance(b.value, float)
        if op in ("//", "%") and floats:  # no such float operator in the language
            return ARITHMETIC[op](a.concrete(), b.concrete())
        value = ARITHMETIC[op](a.value, b.value)
        is_dim = a.is_dim and b.is_dim and (
            op in ("+", "-", "*") or (op == "//" and b.expr.isdigit() and b.value > 0))
        if is_dim and op in ("+", "-") and b.expr.isdigit():  # `n + 1 - 1` is `n`
            return Size(self.owner, offset(a.expr, int(b.expr) * (1 if op == "+" else -1)),
                        value, is_dim)
        return Size(self.owner, combine(a.expr, op, b.expr), value, is_dim)

    def __add__(self, o): return self._arithmetic("+", o)
    def __radd__(self, o): return self._arithmetic("+", o, True)
    def __sub__(self, o): return self._arithmetic("-", o)
    def __rsub__(self, o): return self._arithmetic("-", o, True)
    def __mul__(self, o): return self._arithmetic("*", o)
    def __rmul__(self, o): return self._arithmetic("*", o, True)
    def __truediv__(self, o): return self._arithmetic("/", o)
    def __rtruediv__(self, o): return self._arithmetic("/", o, True)
    def __floordiv__(self, o): return self._arithmetic("//", o)
    def __rfloordiv__(self, o): return self._arithmetic("//", o, True)
    def __mod__(self, o): return self._arithmetic("%", o)
    def __rmod__(self, o): return self._arithmetic("%", o, True)
    def __pow__(self, o): return self._arithmetic("**", o)
    def __rpow__(self, o): return self._arithmetic("**", o, True)

    def _compare(self, op: str, other: Any) -> Any:
        """A Python bool: decided by the expressions when they are the same, otherwise by
        the example values, which fixes the dimensions both sides read."""
        second = self._operand(other)
        if second is None:
            return NotImplemented
        if second.expr == self.expr:
            return op in ("==", "<=", ">=")
        return COMPARE[op](self.concrete(), second.concrete())

    def __lt__(self, o): return self._compare("<", o)
    def __le__(self, o): return self._compare("<=", o)
    def __gt__(self, o): return self._compare(">", o)
    def __ge__(self, o): return self._compare(">=", o)
    def __eq__(self, o): return self._compare("==", o)  # type: ignore[override]
    def __ne__(self, o): return self._compare("!=", o)  # type: ignore[override]

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any):
        """NumPy ufuncs of sizes and numbers: the Python operator of the same meaning, or
        the owner's built-in (`np.sqrt(n)`); with an array among the inputs, NumPy asks
        the array's type (a traced value records the size as an operand)."""
        if method != "__call__" or kwargs:
            return NotImplemented
        plain = [x.item() if isinstance(x, np.generic) else x for x in inputs]
        if not all(isinstance(x, Size) or self._operand(x) is not None for x in plain):
            return NotImplemented
        python_operator = UFUNC_OPERATORS.get(ufunc.__name__)
        if python_operator is not None:
            return python_operator(*plain)
        if len(plain) == 1:
            return self.owner.size_ufunc(ufunc, self)
        return NotImplemented

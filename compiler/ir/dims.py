"""Symbolic dimensions: `N`, `N + 1`, `2 * K`, `K // 2`, `max(n - 5, 0)`, `ceil_sqrt(T)`.

A `Dim` is a polynomial with integer coefficients over atoms; an atom is a dimension name,
a `FloorDiv` that could not be simplified, a `NonNegative` clamp (`nonnegative(d)`, a
loop's trip count, which also sizes the states a gradient stores) or a `CeilSqrt`
(`ceil_sqrt(d)` = ⌈√max(d, 0)⌉, the segment length and checkpoint count of a
checkpointed loop whose trip count is a dimension). The canonical form makes
equality structural: `Dim.sym("N") + 1 == 1 + Dim.sym("N")`, `(2 * K) // 2 == K` and
`(2 * L + 1) // 2 == L` (a floor division keeps only the terms its divisor does not divide).
Shapes are tuples of Dims.

    >>> n = Dim.sym("N")
    >>> str((n + 1) * 2 - n)
    'N + 2'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

Atom = "str | FloorDiv | NonNegative | CeilSqrt"
Monomial = tuple  # sorted tuple of atoms; () is the constant term


def _atom_key(atom: str | FloorDiv | NonNegative | CeilSqrt) -> str:
    """Sort key that orders plain names before floor divisions and clamps."""
    return atom if isinstance(atom, str) else "~" + str(atom)


@dataclass(frozen=True)
class FloorDiv:
    """An irreducible `numerator // denominator` (denominator a positive constant)."""

    numerator: Dim
    denominator: int

    def __str__(self) -> str:
        numerator = str(self.numerator)
        if len(self.numerator.terms) > 1:
            numerator = f"({numerator})"
        return f"{numerator} // {self.denominator}"


@dataclass(frozen=True)
class NonNegative:
    """An irreducible `max(operand, 0)`: the operand may be negative at run time."""

    operand: Dim

    def __str__(self) -> str:
        return f"max({self.operand}, 0)"


@dataclass(frozen=True)
class CeilSqrt:
    """An irreducible `ceil_sqrt(operand)` = ⌈√max(operand, 0)⌉ (0 for operand ≤ 0)."""

    operand: Dim

    def __str__(self) -> str:
        return f"ceil_sqrt({self.operand})"


def _inner(atom: FloorDiv | NonNegative | CeilSqrt) -> Dim:
    """The Dim a compound atom is computed from."""
    return atom.numerator if isinstance(atom, FloorDiv) else atom.operand


@dataclass(frozen=True)
class Dim:
    """A canonical polynomial: `terms` maps sorted monomials to non-zero coefficients."""

    terms: tuple[tuple[Monomial, int], ...]

    @staticmethod
    def const(value: int) -> Dim:
        return Dim((((), int(value)),) if value else ())

    @staticmethod
    def sym(name: str) -> Dim:
        return Dim((((name,), 1),))

    @staticmethod
    def _from(coeffs: Mapping[Monomial, int]) -> Dim:
        items = [(m, c) for m, c in coeffs.items() if c]
        items.sort(key=lambda mc: (not mc[0], len(mc[0]), [_atom_key(a) for a in mc[0]]))
        return Dim(tuple(items))

    @property
    def is_const(self) -> bool:
        return all(not m for m, _ in self.terms)

    @property
    def value(self) -> int:
        """The integer value of a constant Dim."""
        assert self.is_const, f"{self} is not a constant"
        return self.terms[0][1] if self.terms else 0

    @property
    def symbol(self) -> str | None:
        """The name when this Dim is exactly one dimension name (`N`, not `N + 1`)."""
        if len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1:
            atom = self.terms[0][0][0]
            return atom if isinstance(atom, str) else None
        return None

    def symbols(self) -> set[str]:
        """Every dimension name this expression mentions."""
        names: set[str] = set()
        for monomial, _ in self.terms:
            for atom in monomial:
                names |= {atom} if isinstance(atom, str) else _inner(atom).symbols()
        return names

    def is_linear_in(self, symbol: str) -> bool:
        """Whether `symbol` appears only to the first power (possibly times other names),
        never inside a floor division or a clamp: `2 * N * M + 1` is linear in N."""
        for monomial, _ in self.terms:
            compound = [a for a in monomial if not isinstance(a, str)]
            if monomial.count(symbol) > 1 or any(symbol in _inner(a).symbols() for a in compound):
                return False
        return True

    def __add__(self, other: Dim | int) -> Dim:
        coeffs = dict(self.terms)
        for m, c in as_dim(other).terms:
            coeffs[m] = coeffs.get(m, 0) + c
        return Dim._from(coeffs)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return Dim(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: Dim | int) -> Dim:
        return self + (-as_dim(other))

    def __rsub__(self, other: Dim | int) -> Dim:
        return as_dim(other) - self

    def __mul__(self, other: Dim | int) -> Dim:
        coeffs: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in as_dim(other).terms:
                m = tuple(sorted(m1 + m2, key=_atom_key))
                coeffs[m] = coeffs.get(m, 0) + c1 * c2
        return Dim._from(coeffs)

    __rmul__ = __mul__

    def __floordiv__(self, other: Dim | int) -> Dim:
        """Floor division by a positive constant; exact when every coefficient divides."""
        other = as_dim(other)
        if not other.is_const or other.value <= 0:
            raise ValueError(f"a dimension can only be divided by a positive constant, not {other}")
        d = other.value
        if self.is_const:
            return Dim.const(self.value // d)
        # (d·Q + R) // d == Q + R // d for integers: the terms d divides leave the division
        multiples = {m: c // d for m, c in self.terms if m and c % d == 0}
        rest = Dim._from({m: c for m, c in self.terms if m not in multiples})
        quotient = Dim._from(multiples)
        if rest.is_const:
            return quotient + rest.value // d
        return quotient + Dim._from({(FloorDiv(rest, d),): 1})

    def evaluate(self, bindings: Mapping[str, Any]) -> Any:
        """The value under `bindings` (ints, or Dims to substitute); every symbol bound."""
        total = 0
        for monomial, coeff in self.terms:
            product = coeff
            for atom in monomial:
                if isinstance(atom, str):
                    product *= bindings[atom]
                elif isinstance(atom, FloorDiv):
                    product *= atom.numerator.evaluate(bindings) // atom.denominator
                elif isinstance(atom, CeilSqrt):
                    product *= ceil_sqrt(atom.operand.evaluate(bindings))
                else:
                    product *= nonnegative(atom.operand.evaluate(bindings))
            total += product
        return total

    def substitute(self, bindings: Mapping[str, Dim]) -> Dim:
        """This expression with each symbol replaced by a Dim (unbound symbols stay)."""
        full = {name: bindings.get(name, Dim.sym(name)) for name in self.symbols()}
        return as_dim(self.evaluate(full))

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for i, (monomial, coeff) in enumerate(self.terms):
            atoms = " * ".join(str(a) for a in monomial)
            magnitude = abs(coeff)
            if not atoms:
                text = str(magnitude)
            elif magnitude == 1:
                text = atoms
            else:
                text = f"{magnitude} * {atoms}"
            if i == 0:
                parts.append(f"-{text}" if coeff < 0 else text)
            else:
                parts.append(f"- {text}" if coeff < 0 else f"+ {text}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Dim({self})"


def as_dim(value: Dim | int) -> Dim:
    """Wrap a Python int as a constant Dim; Dims pass through."""
    return value if isinstance(value, Dim) else Dim.const(value)


def nonnegative(value: Dim | int, known: Collection[str] = ()) -> Dim | int:
    """`max(value, 0)` of an int, or of a Dim (itself when it cannot be negative: every
    coefficient positive, every atom a clamp, a symbol in `known` or a floor division of
    such a Dim)."""
    if not isinstance(value, Dim):
        return max(value, 0)
    if value.is_const:
        return Dim.const(max(value.value, 0))
    if is_nonnegative(value, known):
        return value
    return Dim._from({(NonNegative(value),): 1})


def ceil_sqrt(value: Dim | int) -> Dim | int:
    """⌈√max(value, 0)⌉ of an int (exact: the least s with s² ≥ value), or of a Dim."""
    if not isinstance(value, Dim):
        return math.isqrt(value - 1) + 1 if value > 0 else 0
    if value.is_const:
        return Dim.const(ceil_sqrt(value.value))
    if len(value.terms) == 1 and value.terms[0][1] == 1 and len(value.terms[0][0]) == 1:
        (atom,) = value.terms[0][0]
        if isinstance(atom, NonNegative):  # ceil_sqrt clamps at 0 itself
            value = atom.operand
    return Dim._from({(CeilSqrt(value),): 1})


def is_nonnegative(dim: Dim, known: Collection[str]) -> bool:
    """Whether `dim` is ≥ 0 for every value ≥ 0 of the symbols in `known`."""
    def atom_nonnegative(atom: str | FloorDiv | NonNegative | CeilSqrt) -> bool:
        if isinstance(atom, str):
            return atom in known
        return isinstance(atom, NonNegative | CeilSqrt) or is_nonnegative(atom.numerator, known)

    return all(coeff > 0 and all(map(atom_nonnegative, monomial))
               for monomial, coeff in dim.terms)


Shape = tuple[Dim, ...]


def shape_str(shape: Shape) -> str:
    """`[N, D]`-style text for a shape."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def num_elements(shape: Shape) -> Dim:
    """The product of a shape's dimensions."""
    total = Dim.const(1)
    for d in shape:
        total = total * d
    return total


def python_expr(dim: Dim, name_of: Callable[[str], str]) -> str:
    """Python source computing `dim`, each symbol spelled by `name_of` (floor divisions
    parenthesised), for the call boundary's generated size checks."""
    terms = []
    for monomial, coefficient in dim.terms:
        factors = [str(coefficient)]
        for atom in monomial:
            if isinstance(atom, FloorDiv):
                numerator = python_expr(atom.numerator, name_of)
                factors.append(f"(({numerator}) // {atom.denominator})")
            elif isinstance(atom, NonNegative):
                factors.append(f"max({python_expr(atom.operand, name_of)}, 0)")
            elif isinstance(atom, CeilSqrt):
                operand = python_expr(atom.operand, name_of)
                factors.append(f"(lambda v: __import__('math').isqrt(v - 1) + 1 if v > 0 else 0)"
                               f"({operand})")
            else:
                factors.append(name_of(atom))
        terms.append(" * ".join(factors))
    return " + ".join(terms) or "0"


def evaluate_shape(shape: Shape, bindings: Mapping[str, int]) -> tuple[int, ...]:
    """Concrete sizes of a symbolic shape."""
    return tuple(d.evaluate(bindings) for d in shape)

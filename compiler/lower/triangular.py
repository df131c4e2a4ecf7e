"""Triangular ranges in index notation: a reduction index bounded by another index.

    let c[i] = sum[j in 0..i + 1](x[j]);        # a cumulative sum

The bounds of `j` are affine in the indices declared before it (`i`). A `generic` ranges
over a rectangle, so `j` ranges over the bounding box of its bounds as `i` runs over its
own range (here 0..N), and the body yields the reduction's identity at the points outside
`lo(i) <= j < hi(i)`: 0 for `sum`, 1 for `prod`, the smallest or largest value for
`max`/`min`. Only reduction indices may be bounded this way; the output of `let` stays
rectangular.

A bound may also mention the variable of an enclosing `for` over a dimension range
(`for j in 0..N { let s = sum[k in 0..j](x[k]); }`): it counts as an outer index whose
range is the loop's (`index_notation.py` `_loop_ranges`), and the mask reads its value.

`bounding_range` is the static part (the box, from the declaration); `TriangularMasks`
adds the mask to a generic body.
"""

from __future__ import annotations

from reverie.compiler.ir.dims import Dim, nonnegative
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS
from reverie.compiler.lower.base import Range
from reverie.compiler.lower.dim_expressions import static_dim
from reverie.compiler.lower.typing_rules import DtypeRules
from reverie.compiler.lower.values import ExprValue
from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at


def _extreme(bound: Dim, outer: dict[str, Range], largest: bool, node: ast.Expr) -> Dim:
    """The smallest (or largest) value of `bound`, affine in the `outer` indices, as each
    runs over its range lo..hi - 1."""
    at = {}
    for name, (lo, hi) in outer.items():
        if name not in bound.symbols():
            continue
        slope = bound.substitute({name: Dim.const(1)}) - bound.substitute({name: Dim.const(0)})
        linear = bound.substitute({name: Dim.const(0)}) + slope * Dim.sym(name) == bound
        if not (slope.is_const and linear):
            raise error_at(node.span, f"a range bound must be affine in index '{name}', "
                                      f"got {bound}")
        at[name] = hi - 1 if (slope.value >= 0) == largest else lo
    return bound.substitute(at)


def bounding_range(decl: ast.IndexVar, outer: dict[str, Range], dims: dict[str, Dim],
                   known: set[str]) -> Range:
    """The box of index `decl`, whose bounds mention the indices of `outer` (declared
    before it): from the smallest lower bound to the largest upper bound (an empty box,
    never a negative one, when the outer ranges are empty; `known`: the dimension names
    that cannot be negative)."""
    scope = {**dims, **{name: Dim.sym(name) for name in outer}}
    lo = Dim.const(0)
    if decl.lo is not None:
        lo = _extreme(static_dim(decl.lo, scope), outer, False, decl.lo)
    hi = _extreme(static_dim(decl.hi, scope), outer, True, decl.hi)
    return lo, lo + nonnegative(hi - lo, known)


class TriangularMasks(DtypeRules):
    """The mask of a generic body over triangular reduction indices."""

    def mask_triangular(self, bounded: list[ast.IndexVar], reduce: str,
                        value: ExprValue, span: ast.Span) -> ExprValue:
        """`value` where every index of `bounded` lies within its written bounds, else the
        identity of `reduce` (lowered inside the body, whose indices are bound)."""
        if not bounded:
            return value
        inside = None
        for decl in bounded:
            index = ExprValue(self.builder.use(self.index_vars[decl.name].value), weak=True)
            tests = [self.elementwise("lt", [index, self.int_scalar(decl.hi, "a bound")], span)]
            if decl.lo is not None:
                low = self.int_scalar(decl.lo, "a bound")
                tests.append(self.elementwise("ge", [index, low], span))
            for test in tests:
                inside = test if inside is None else self.elementwise("and", [inside, test], span)
        dtype = value.type.dtype
        identity = self.constant(span, REDUCE_KINDS[reduce].identity(dtype), dtype, weak=False)
        return ExprValue(self.builder.op_at(span, "select",
                                            [inside.value, value.value, identity.value]))

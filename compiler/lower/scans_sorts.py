"""Lowering of the scans and orderings of docs/language.md §8: cumsum, cumprod, argsort, sort, topk.

`cumsum(x, axis=a)` and `cumprod(x, axis=a)` become one `scan` op (`ir/ops_scan.py`),
which every later stage runs in O(N) along the axis (a loop carrying the running value).
The orderings rest on one `argsort` op (`ir/ops_sort.py`), the stable sorting permutation
along the axis, which every later stage runs in O(N log N) (a merge sort in native code);
the values are gathers, index notation (`generic` ops) that every later stage already
handles. Along the chosen axis (written `a`; the other axes are carried along unchanged):

    argsort(x)[r] = argsort %x {axis = a}               (x's index that lands at r)
    sort(x)[r]    = x[argsort(x)[r]]                    (a gather)
    topk(x, k)    = x[argsort(x, descending)[:k]]

The order is that of `torch.sort(stable=True)`: by value, NaN after every number (before,
when descending), equal values in their original order. The permutation is an integer and
carries no derivative, so the gradients are those of the gathers: a scatter of ȳ to the
elements the gather read, so each cotangent goes to the element it came from (the scan's
rules are `transforms/scan_rules.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from reverie.compiler.ir.core import Block, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.types import scalar
from reverie.compiler.lower.arguments import axis, flag, signature
from reverie.compiler.lower.typing_rules import DtypeRules
from reverie.compiler.lower.values import ExprValue
from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at

I64 = scalar("i64")
Body = Callable[[Scope, list[Value]], Value]


def _read(s: Scope, tensor: Value, indices: Sequence[Value], modes: Sequence[str],
          label: str) -> Value:
    """`tensor[indices]` inside a generic body."""
    return s.op("read", [tensor, *indices], {"modes": tuple(modes), "label": label})


class ScanLowering(DtypeRules):
    """`cumsum` and `cumprod` (a scan), `argsort` (one op), `sort` and `topk` (its gathers)."""

    def generic_nest(self, span: ast.Span, shape: Sequence[Dim], body: Body) -> Value:
        """A generic over `shape` (indices i0, i1, ...) yielding `body(scope, indices)`;
        its operands are what the body uses."""
        names = [f"i{a}" for a in range(len(shape))]
        params = [Value(I64, name=name) for name in names]
        block = Block(params=list(params))
        inner = self.builder.child(block)
        block.results = [body(inner, params)]
        zero = Dim.const(0)
        indices = tuple((n, zero, d) for n, d in zip(names, shape, strict=True))
        return self.builder.op_at(span, "generic", inner.outer_operands(),
                                  {"indices": indices}, [block])

    def _ordered_operand(self, call: ast.Call, keywords: set[str],
                         positional: int = 1) -> tuple[ExprValue, int, dict[str, ast.Expr]]:
        """The tensor argument (numeric, rank >= 1), its axis, and the keywords."""
        kws = signature(call, positional, keywords)
        x = self.convert_weak(self.tensor(call.args[0]), None, call.span)
        if x.type.dtype == "bool" or x.type.rank == 0:
            raise error_at(call.args[0].span, f"'{call.func}' needs a numeric tensor with at "
                                              f"least one axis, got {x.type}")
        if "axis" in kws:
            return x, axis(kws["axis"], x.type.rank), kws
        if call.func in ("cumsum", "cumprod") and x.type.rank > 1:
            raise error_at(call.span, f"'{call.func}' of {x.type} needs an axis, "
                                      f"e.g. {call.func}(x, axis=0)")
        return x, x.type.rank - 1, kws

    # ------------------------------------------------------------ scans

    def _cumulative(self, call: ast.Call) -> ExprValue:
        """`cumsum(x, axis=a)` and `cumprod(x, axis=a)`: one `scan` op (O(n) along a)."""
        x, along, _ = self._ordered_operand(call, {"axis"})
        kind = "sum" if call.func == "cumsum" else "prod"
        return ExprValue(self.builder.op_at(call.span, "scan", [x.value],
                                            {"axis": along, "kind": kind, "reverse": False}))

    # ------------------------------------------------------------ orderings

    def argsort_along(self, x: ExprValue, along: int, descending: bool,
                      span: ast.Span) -> Value:
        """The stable sorting permutation of `x` along axis `along` (i64, x's shape)."""
        return self.builder.op_at(span, "argsort", [x.value],
                                  {"axis": along, "descending": descending})

    def gather_along(self, x: ExprValue, order: Value, along: int, span: ast.Span) -> Value:
        """y[..., r, ...] = x[..., order[..., r, ...], ...] (order: i64, y's shape)."""
        modes = ["direct"] * x.type.rank
        gathered = list(modes)
        gathered[along] = "checked"

        def body(s: Scope, p: list[Value]) -> Value:
            source = list(p)
            source[along] = _read(s, order, p, modes, "order")
            return _read(s, x.value, source, gathered, "x")

        return self.generic_nest(span, order.type.shape, body)

    def _descending(self, kws: dict[str, ast.Expr]) -> bool:
        return flag(kws.get("descending"), "descending")

    def _argsort(self, call: ast.Call) -> ExprValue:
        """`argsort(x, axis=-1, descending=false)`: the indices that sort x (i64)."""
        x, along, kws = self._ordered_operand(call, {"axis", "descending"})
        return ExprValue(self.argsort_along(x, along, self._descending(kws), call.span))

    def _sort(self, call: ast.Call) -> ExprValue:
        """`sort(x, axis=-1, descending=false)`: x's values in order along the axis."""
        x, along, kws = self._ordered_operand(call, {"axis", "descending"})
        order = self.argsort_along(x, along, self._descending(kws), call.span)
        return ExprValue(self.gather_along(x, order, along, call.span))

    def _topk(self, call: ast.Call) -> ExprValue:
        """`topk(x, k, axis=-1)`: the k largest values along the axis, largest first."""
        x, along, _ = self._ordered_operand(call, {"axis"}, positional=2)
        k = self.try_static_dim(call.args[1])
        if k is None:
            raise error_at(call.args[1].span, "k of 'topk' must be an integer literal, a "
                                              "dimension or an i64 argument")
        size = x.type.shape[along]
        self.require_nonnegative(k, call.args[1].span, f"topk needs k >= 0, got k = {k}")
        self.require_nonnegative(size - k, call.args[1].span,
                                 f"topk needs k <= {size} (the length of axis {along})")
        order = self.argsort_along(x, along, True, call.span)
        rank = x.type.rank
        stops = [k if a == along else d for a, d in enumerate(x.type.shape)]
        best = self.builder.op_at(call.span, "slice", [order],
                                  {"starts": (Dim.const(0),) * rank, "stops": tuple(stops),
                                   "steps": (1,) * rank})
        return ExprValue(self.gather_along(x, best, along, call.span))


SCAN_BUILTINS: dict[str, Callable[[ScanLowering, ast.Call], ExprValue]] = {
    "cumsum": ScanLowering._cumulative, "cumprod": ScanLowering._cumulative,
    "argsort": ScanLowering._argsort, "sort": ScanLowering._sort, "topk": ScanLowering._topk,
}


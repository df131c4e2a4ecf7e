"""Lowering of the scans and orderings of SPEC §2.3: cumsum, cumprod, argsort, sort, topk.

`cumsum(x, axis=a)` and `cumprod(x, axis=a)` become one `scan` op (`ir/ops_scan.py`),
which every later stage runs in O(N) along the axis (a loop carrying the running value).
The orderings are spelled out as index notation (`generic` ops), so every stage after
lowering (reverse and forward mode, batching, loops, native code, MLIR) handles them with
the rules it already has for `generic`. Along the chosen axis (written `a`, of length N;
the other axes are carried along unchanged):

    rank[i]       = sum[j](j comes before i ? 1 : 0)    (the position of x[i] once sorted)
    argsort(x)[r] = sum[i](rank[i] == r ? i : 0)        (the inverse permutation)
    sort(x)[r]    = x[argsort(x)[r]]                    (a gather)
    topk(x, k)    = x[argsort(x, descending)[:k]]

"j comes before i" is the order of `torch.sort(stable=True)`: by value, NaN after every
number (before, when descending), equal values in their original order. The ranking is
all pairs, so the orderings cost O(N²) per line along the axis. Their gradients are those
of the generics: a scatter of ȳ to the elements the gather read for sort and topk, so each
cotangent goes to the element it came from (the scan's rules are `transforms/scan_rules.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at

from ..ir.core import Block, Value
from ..ir.dims import Dim
from ..ir.scope import Scope
from ..ir.types import scalar
from .arguments import axis, flag, signature
from .dtypes import DtypeRules
from .values import ExprValue

I64 = scalar("i64")
Body = Callable[[Scope, list[Value]], Value]


def _read(s: Scope, tensor: Value, indices: Sequence[Value], modes: Sequence[str],
          label: str) -> Value:
    """`tensor[indices]` inside a generic body."""
    return s.op("read", [tensor, *indices], {"modes": tuple(modes), "label": label})


def _is_nan(s: Scope, v: Value) -> Value:
    return s.op("ne", [v, v])


def _key_less(s: Scope, p: Value, q: Value) -> Value:
    """p < q in the sort order: by value, NaN after every number (floats only have NaN)."""
    less = s.op("lt", [p, q])
    if not p.type.is_float:
        return less
    return s.op("or", [less, s.op("and", [_is_nan(s, q), s.op("not", [_is_nan(s, p)])])])


def _key_equal(s: Scope, p: Value, q: Value) -> Value:
    """p and q tie in the sort order (NaN ties with NaN)."""
    equal = s.eq(p, q)
    if not p.type.is_float:
        return equal
    return s.op("or", [equal, s.op("and", [_is_nan(s, p), _is_nan(s, q)])])


class ScanLowering(DtypeRules):
    """`cumsum` and `cumprod` (a scan), `argsort`, `sort` and `topk` (generics)."""

    def generic_nest(self, span: ast.Span, shape: Sequence[Dim], body: Body,
                     reduce: tuple[str, Dim] | None = None) -> Value:
        """A generic over `shape` (indices i0, i1, ...; then j in 0..n when `reduce` is
        (kind, n)) yielding `body(scope, indices)`; its operands are what the body uses."""
        out = [f"i{a}" for a in range(len(shape))]
        names = out + (["j"] if reduce else [])
        params = [Value(I64, name=name) for name in names]
        block = Block(params=list(params))
        inner = self.builder.child(block)
        block.results = [body(inner, params)]
        zero = Dim.const(0)
        attrs: dict = {"indices": tuple((n, zero, d) for n, d in zip(out, shape, strict=True))}
        if reduce is not None:
            attrs.update(reduce=reduce[0], over=(("j", zero, reduce[1]),))
        return self.builder.op_at(span, "generic", inner.outer_operands(), attrs, [block])

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
        shape, direct = x.type.shape, ["direct"] * x.type.rank

        def rank_body(s: Scope, p: list[Value]) -> Value:
            out, j = p[:-1], p[-1]
            other = list(out)
            other[along] = j
            mine, theirs = (_read(s, x.value, at, direct, "x") for at in (out, other))
            first, second = (mine, theirs) if descending else (theirs, mine)
            tie_first = s.op("and", [_key_equal(s, mine, theirs), s.op("lt", [j, out[along]])])
            before = s.op("or", [_key_less(s, first, second), tie_first])
            return s.select(before, s.const(1, I64), s.const(0, I64))

        rank = self.generic_nest(span, shape, rank_body, ("sum", shape[along]))

        def inverse_body(s: Scope, p: list[Value]) -> Value:
            out, j = p[:-1], p[-1]
            source = list(out)
            source[along] = j
            lands_here = s.eq(_read(s, rank, source, direct, "rank"), out[along])
            return s.select(lands_here, j, s.const(0, I64))

        return self.generic_nest(span, shape, inverse_body, ("sum", shape[along]))

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


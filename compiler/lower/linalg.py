"""Lowering of the linear-algebra built-ins (docs/language.md §8), NumPy's names and
argument conventions, batched over leading axes.

The factorisations are ops of `ir/ops_linalg.py`; the rest are spelled out here once
(leading axes of two operands broadcast like NumPy's):

    cholesky(a, upper=false)    L (Lᵀ when upper)
    triangular_solve(a, b, lower=true, transpose=false, unit_diagonal=false, left=true)
                                op(T) X = B (X op(T) = B when not left: op(T)ᵀ Xᵀ = Bᵀ)
    solve(a, b)                 A X = B; b of one axis is a vector (NumPy 2)
    inv(a)                      solve(a, I)
    slogdet(a)                  (sign, log|det|), a tuple: `let (s, l) = slogdet(a);`
    det(a)                      sign · exp(log|det|) (an op: its gradient is the cofactor
                                matrix, at singular matrices too)
    eigh(a)                     (w, V) from A's lower triangle; eigvalsh(a): w alone
    svd(a, full_matrices=true, compute_uv=true)
                                (U, s, Vh) reduced; `full_matrices=true` needs square
                                matrices (the full and reduced SVD then agree)
    svdvals(a)                  s alone (NumPy 2's `np.linalg.svdvals`)
    qr(a)                       (Q, R) reduced
    pinv(a, rtol=max(M, N)·eps) Vhᵀ diag(s⁺) Uᵀ, s⁺ = 1/s where s > rtol · max(s), else 0
                                (torch's composition: gradients flow through svd)
    norm(x, ord=, axis=, keepdims=false)
                                vector orders (None = 2, p, inf, -inf, 0) along one axis;
                                matrix orders (None/fro, nuc, 2, -2, 1, -1, inf, -inf) over
                                two; without an axis, the 2-norm of a vector and the
                                Frobenius norm of a matrix. The 2-norm and the Frobenius
                                norm have gradient 0 at 0 (torch's). `inf`, `fro` and `nuc` are
                                written as names: `norm(a, ord=nuc, axis=(0, 1))`.

Non-square operands, or a right-hand side whose rows differ from the matrix's size, are
a CompileError naming the dimensions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from reverie.compiler.ir.core import Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.op_defs import broadcast_shapes, dtype_class
from reverie.compiler.ir.ops_linalg import smaller
from reverie.compiler.ir.types import NUMPY_DTYPES, ShapeError, TensorType
from reverie.compiler.lower.arguments import axes, flag, signature
from reverie.compiler.lower.scans_sorts import ScanLowering
from reverie.compiler.lower.values import ExprTuple, ExprValue
from reverie.compiler.transforms import matrices as mx
from reverie.dsl import ast
from reverie.dsl.diagnostics import error_at

ORD_NAMES = ("inf", "fro", "nuc")


def _ord(node: ast.Expr | None) -> float | str | None:
    """`ord=`: a number, `inf`, `-inf`, `fro` or `nuc` (None when absent)."""
    if node is None:
        return None
    negate = isinstance(node, ast.UnaryOp) and node.op == "-"
    inner = node.operand if negate else node
    if isinstance(inner, ast.IntLit | ast.FloatLit):
        return -float(inner.value) if negate else float(inner.value)
    if isinstance(inner, ast.Name) and inner.id in ORD_NAMES and (not negate or inner.id == "inf"):
        return -np.inf if negate else np.inf if inner.id == "inf" else inner.id
    raise error_at(node.span, "ord must be a number, inf, -inf, fro or nuc")


class LinalgLowering(ScanLowering):
    """The linear-algebra built-ins; `LINALG_BUILTINS` maps each name to its method."""

    def matrix(self, node: ast.Expr, name: str, square: bool = True) -> ExprValue:
        """A float operand with at least two axes (square ones when `square`)."""
        x = self.tensor(node)
        if x.weak:
            x = self.convert_weak(x, self.default_float, node.span)
        if dtype_class(x.type.dtype) != "float":
            raise error_at(node.span, f"'{name}' needs float matrices, got {x.type}; "
                                      "convert with f32(...) or f64(...)")
        if x.type.rank < 2:
            raise error_at(node.span, f"'{name}' needs a matrix (at least 2 axes), got {x.type}")
        *_, m, n = x.type.shape
        if square and m != n:
            raise error_at(node.span, f"'{name}' needs square matrices, got {x.type}: its last "
                                      f"two dimensions {m} and {n} differ")
        return ExprValue(x.value)

    def _batched(self, a: Value, b: Value, span: ast.Span) -> tuple[Value, Value]:
        """a and b with their leading axes broadcast to a common batch."""
        try:
            batch = broadcast_shapes(a.type.shape[:-2], b.type.shape[:-2])
        except ShapeError as e:
            raise error_at(span, f"the batch axes of {a.type} and {b.type} do not "
                                 f"broadcast: {e}") from None

        def grow(x: Value) -> Value:
            shape = (*batch, *x.type.shape[-2:])
            if x.type.shape == shape:
                return x
            ones = (Dim.const(1),) * (len(batch) + 2 - x.type.rank)
            x = mx.reshape(self.builder, x, (*ones, *x.type.shape))
            return self.builder.op_at(span, "broadcast", [x], {"shape": shape})

        return grow(a), grow(b)

    def _right_side(self, a: ExprValue, b: ExprValue, node: ast.Expr,
                    name: str) -> tuple[Value, Value, bool]:
        """A right-hand side `b` (lowered from `node`) for `a`, as matrices with a's batch;
        whether it was a vector (one axis: a column, dropped again from the result)."""
        b = self.convert_weak(b, a.type.dtype, node.span)
        if b.type.dtype != a.type.dtype:
            raise error_at(node.span, f"'{name}' needs a right-hand side of {a.type.dtype}, "
                                      f"got {b.type}")
        rhs = b.value
        vector = b.type.rank == 1
        if vector:
            rhs = mx.reshape(self.builder, rhs, (b.type.shape[0], Dim.const(1)))
        elif b.type.rank == 0:
            raise error_at(node.span, f"'{name}' needs a vector or matrices on the right, "
                                      f"got {b.type}")
        size = a.type.shape[-1]
        if rhs.type.shape[-2] != size:
            raise error_at(node.span, f"'{name}': the right-hand side {b.type} has "
                                      f"{rhs.type.shape[-2]} rows, the matrix {size}")
        matrix, rhs = self._batched(a.value, rhs, node.span)
        return matrix, rhs, vector

    def _unvector(self, x: Value, was_vector: bool) -> ExprValue:
        return ExprValue(mx.reshape(self.builder, x, x.type.shape[:-1]) if was_vector else x)

    # ------------------------------------------------------------ factorisations, solves

    def _cholesky(self, call: ast.Call) -> ExprValue:
        kws = signature(call, 1, {"upper"})
        a = self.matrix(call.args[0], "cholesky")
        low = self.builder.op_at(call.span, "cholesky", [a.value])
        return ExprValue(mx.t(self.builder, low) if flag(kws.get("upper"), "upper") else low)

    def _triangular_solve(self, call: ast.Call) -> ExprValue:
        kws = signature(call, 2, {"lower", "transpose", "unit_diagonal", "left"})
        a = self.matrix(call.args[0], "triangular_solve")
        lower = "lower" not in kws or flag(kws["lower"], "lower")
        left = "left" not in kws or flag(kws["left"], "left")
        transpose = flag(kws.get("transpose"), "transpose")
        b = self.tensor(call.args[1])
        if not left:   # X op(T) = B  ⇔  op(T)ᵀ Xᵀ = Bᵀ
            transpose = not transpose
            if b.type.rank >= 2:
                b = ExprValue(mx.t(self.builder, b.value), b.weak)
        s = self.builder
        matrix, rhs, vector = self._right_side(a, b, call.args[1], "triangular_solve")
        x = s.op_at(call.span, "triangular_solve", [matrix, rhs],
                    {"lower": lower, "transpose": transpose,
                     "unit_diagonal": flag(kws.get("unit_diagonal"), "unit_diagonal")})
        if not left and not vector:
            x = mx.t(s, x)
        return self._unvector(x, vector)

    def _solve(self, call: ast.Call) -> ExprValue:
        signature(call, 2, set())
        a = self.matrix(call.args[0], "solve")
        b = self.tensor(call.args[1])
        matrix, rhs, vector = self._right_side(a, b, call.args[1], "solve")
        return self._unvector(self.builder.op_at(call.span, "solve", [matrix, rhs]), vector)

    def _inv(self, call: ast.Call) -> ExprValue:
        signature(call, 1, set())
        a = self.matrix(call.args[0], "inv").value
        return ExprValue(self.builder.op_at(call.span, "solve",
                                            [a, mx.eye_like(self.builder, a.type)]))

    def _slogdet(self, call: ast.Call) -> ExprTuple:
        signature(call, 1, set())
        a = self.matrix(call.args[0], call.func).value
        return ExprTuple([ExprValue(v) for v in self.builder.emit_at(call.span, "slogdet", [a])])

    def _det(self, call: ast.Call) -> ExprValue:
        signature(call, 1, set())
        a = self.matrix(call.args[0], "det").value
        return ExprValue(self.builder.op_at(call.span, "det", [a]))

    def _eigh(self, call: ast.Call) -> ExprTuple:
        signature(call, 1, set())
        a = self.matrix(call.args[0], "eigh").value
        return ExprTuple([ExprValue(v) for v in self.builder.emit_at(call.span, "eigh", [a])])

    def _eigvalsh(self, call: ast.Call) -> ExprValue:
        return self._eigh(call).elements[0]

    def _svdvals(self, call: ast.Call) -> ExprValue:
        signature(call, 1, set())
        a = self.matrix(call.args[0], "svdvals", square=False).value
        return ExprValue(self.singular_values(a, call.span))

    def singular_values(self, x: Value, span: ast.Span) -> Value:
        """The singular values of matrices x [..., M, N] (the svd op's middle result)."""
        return self.builder.emit_at(span, "svd", [x])[1]

    def _svd(self, call: ast.Call) -> ExprValue | ExprTuple:
        kws = signature(call, 1, {"full_matrices", "compute_uv"})
        a = self.matrix(call.args[0], "svd", square=False).value
        full = "full_matrices" not in kws or flag(kws["full_matrices"], "full_matrices")
        uv = "compute_uv" not in kws or flag(kws["compute_uv"], "compute_uv")
        m, n = a.type.shape[-2:]
        if full and uv and m != n:
            raise error_at(call.span, f"'svd' of {a.type} computes the reduced SVD only: write "
                                      "svd(a, full_matrices=false) (NumPy's default is the full "
                                      "one, which differs for matrices that are not square)")
        results = self.builder.emit_at(call.span, "svd", [a])
        if not uv:
            return ExprValue(results[1])
        return ExprTuple([ExprValue(v) for v in results])

    def _qr(self, call: ast.Call) -> ExprTuple:
        signature(call, 1, set())
        a = self.matrix(call.args[0], "qr", square=False).value
        return ExprTuple([ExprValue(v) for v in self.builder.emit_at(call.span, "qr", [a])])

    def _pinv(self, call: ast.Call) -> ExprValue:
        kws = signature(call, 1, {"rtol"})
        a = self.matrix(call.args[0], "pinv", square=False).value
        s, dtype = self.builder, a.type.dtype
        u, sv, vh = s.emit_at(call.span, "svd", [a])
        m, n = a.type.shape[-2:]
        if "rtol" in kws:
            rtol = self.convert_weak(self.tensor(kws["rtol"]), dtype, kws["rtol"].span).value
        else:
            size = s.op("cast", [s.op("dim", [], {"dim": m + n - smaller(m, n)})],
                        {"dtype": dtype})
            rtol = s.mul(size, s.const(float(np.finfo(NUMPY_DTYPES[dtype]).eps),
                                       TensorType(dtype, ())))
        largest = s.op("reduce_max", [sv], {"axes": (sv.type.rank - 1,)})
        cutoff = s.mul(self._broadcast_to(largest, sv.type), self._broadcast_to(rtol, sv.type))
        kept = s.op("gt", [sv, cutoff])
        one, zero = s.const(1, sv.type), s.zeros(sv.type)
        inverse = s.select(kept, s.div(one, s.select(kept, sv, one)), zero)
        return ExprValue(mx.mm(s, mx.scale_columns(s, mx.t(s, vh), inverse), mx.t(s, u)))

    def _broadcast_to(self, x: Value, type: TensorType) -> Value:
        """x [...] (the leading axes of `type`, or a scalar) broadcast to `type`."""
        if x.type.shape == type.shape:
            return x
        if x.type.rank:
            x = mx.reshape(self.builder, x, (*x.type.shape, Dim.const(1)))
        return self.builder.op("broadcast", [x], {"shape": type.shape})

    # ------------------------------------------------------------ norms

    def _norm(self, call: ast.Call) -> ExprValue:
        kws = signature(call, 1, {"ord", "axis", "keepdims"})
        x = self.tensor(call.args[0])
        x = self.convert_weak(x, self.default_float, call.span) if x.weak else x
        if dtype_class(x.type.dtype) != "float":
            raise error_at(call.args[0].span, f"'norm' needs a float tensor, got {x.type}")
        order = _ord(kws.get("ord"))
        if "axis" in kws:
            over = axes(kws["axis"], x.type.rank)
            if isinstance(kws["axis"], ast.TupleExpr) and len(kws["axis"].elements) == 2:
                over = tuple(axes(e, x.type.rank)[0] for e in kws["axis"].elements)
        elif order is None:
            over = tuple(range(x.type.rank))
            return self._finish(self._vector_norm(x.value, over, 2.0, call.span), x, over, kws)
        else:
            over = tuple(range(x.type.rank))
        if len(over) == 1:
            value = self._vector_norm(x.value, over, 2.0 if order is None else order, call.span)
        elif len(over) == 2:
            value = self._matrix_norm(x.value, over, order, call)
        else:
            raise error_at(call.span, f"'norm' with ord= takes one axis (a vector norm) or two "
                                      f"(a matrix norm), got {x.type} and axes {over}")
        return self._finish(value, x, tuple(sorted(over)), kws)

    def _finish(self, value: Value, x: ExprValue, over: tuple[int, ...],
                kws: dict[str, ast.Expr]) -> ExprValue:
        if flag(kws.get("keepdims"), "keepdims"):
            shape = tuple(Dim.const(1) if a in over else d for a, d in enumerate(x.type.shape))
            value = mx.reshape(self.builder, value, shape)
        return ExprValue(value)

    def _vector_norm(self, x: Value, over: tuple[int, ...], order: float | str,
                     span: ast.Span) -> Value:
        s = self.builder
        if isinstance(order, str):
            raise error_at(span, f"ord={order} is a matrix norm: give two axes, e.g. axis=(0, 1)")
        magnitude = s.op("abs", [x])
        if order == np.inf:
            return s.op("reduce_max", [magnitude], {"axes": over})
        if order == -np.inf:
            return s.op("reduce_min", [magnitude], {"axes": over})
        if order == 0:
            nonzero = s.op("ne", [x, s.zeros(x.type)])
            return s.op("reduce_sum", [s.op("cast", [nonzero], {"dtype": x.type.dtype})],
                        {"axes": over})
        if order == 1:
            return s.op("reduce_sum", [magnitude], {"axes": over})
        if order == 2:   # √(Σx²), 0 with gradient 0 at x = 0 (torch's subgradient)
            total = s.op("reduce_sum", [s.mul(x, x)], {"axes": over})
            zero = s.eq(total, s.zeros(total.type))
            root = s.op("sqrt", [s.select(zero, s.const(1, total.type), total)])
            return s.select(zero, s.zeros(total.type), root)
        p = s.const(order, x.type)
        total = s.op("reduce_sum", [s.op("pow", [magnitude, p])], {"axes": over})
        return s.op("pow", [total, s.const(1.0 / order, total.type)])

    def _matrix_norm(self, x: Value, over: tuple[int, int], order: float | str | None,
                     call: ast.Call) -> Value:
        s = self.builder
        rows, cols = over
        if order in (None, "fro"):
            return self._vector_norm(x, tuple(sorted(over)), 2.0, call.span)
        if order in (1, -1, np.inf, -np.inf):
            summed, across = (rows, cols) if order in (1, -1) else (cols, rows)
            sums = s.op("reduce_sum", [s.op("abs", [x])], {"axes": (summed,)})
            left = across - (across > summed)
            return s.op("reduce_max" if order > 0 else "reduce_min", [sums], {"axes": (left,)})
        if order not in ("nuc", 2, -2):
            raise error_at(call.span, f"ord={order} is not a matrix norm (use fro, nuc, 2, -2, "
                                      "1, -1, inf or -inf)")
        rest = [a for a in range(x.type.rank) if a not in over]
        matrices = s.op("transpose", [x], {"perm": [*rest, rows, cols]})
        sv = self.singular_values(matrices, call.span)
        last = (sv.type.rank - 1,)
        kind = {"nuc": "reduce_sum", 2: "reduce_max", -2: "reduce_min"}[order]
        return s.op(kind, [sv], {"axes": last})


LINALG_BUILTINS: dict[str, Callable[[LinalgLowering, ast.Call], ExprValue | ExprTuple]] = {
    "cholesky": LinalgLowering._cholesky, "triangular_solve": LinalgLowering._triangular_solve,
    "solve": LinalgLowering._solve, "inv": LinalgLowering._inv, "det": LinalgLowering._det,
    "slogdet": LinalgLowering._slogdet, "eigh": LinalgLowering._eigh,
    "eigvalsh": LinalgLowering._eigvalsh, "svd": LinalgLowering._svd,
    "svdvals": LinalgLowering._svdvals, "qr": LinalgLowering._qr, "pinv": LinalgLowering._pinv,
    "norm": LinalgLowering._norm,
}

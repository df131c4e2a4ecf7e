"""Reverse mode, forward mode and batching of the linear-algebra ops (`ir/ops_linalg.py`).

Every rule is matrix algebra over the stacks of `matrices.py`, written with the
factorisation ops themselves (a Cholesky adjoint solves with `triangular_solve`, a solve's
adjoint solves again), so derivatives of any order are the same rules applied again. The
rules are those of Giles 2008 ("An extended collection of matrix derivative results"),
Murray 2016 (Cholesky), and of PyTorch and JAX for eigh, svd and qr, with their
conventions:

- cholesky and eigh read one triangle of a symmetric matrix; their tangents are taken
  as sym(Ȧ) = (Ȧ + Ȧᵀ)/2 and their gradients are symmetric (torch's and JAX's gradients);
- triangular_solve's gradient is masked to the triangle it reads (not the unit diagonal);
- eigh with repeated eigenvalues and svd with repeated (or, for a non-square matrix whose
  U or Vh carries a cotangent, zero) singular values give inf or NaN, as in torch and JAX,
  unless only the eigenvalues or singular values carry a cotangent;
- slogdet's sign carries no derivative; at a singular matrix log|det| has an infinite
  gradient (NaN); det's gradient is the cofactor matrix det(A) A⁻ᵀ, and at a singular matrix
  (det = 0) torch's adjugate from the SVD, det(U) det(Vh) U diag(∏_{j≠i} s_j) Vh (exact
  there; its own derivative is not taken: second derivatives at exactly singular matrices
  are NaN; the SVD is computed only when some matrix of the batch has det = 0);
- qr: torch's rule; for M < N (A = [X | Y], R = [U | V], X = Q U square) the square rule
  on X with Q̄ + Y V̄ᵀ, and Ȳ = Q V̄; a shape whose M and N cannot be compared at compile
  time is a CompileError.

Φ(X) below is the lower triangle of X with its diagonal halved; F∘X the elementwise
product; E the matrix of differences of eigenvalues (squares of singular values),
E_ij = λ_j - λ_i, with F = 1 / E off the diagonal and 0 on it.
"""

from __future__ import annotations

from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.dims import Dim, is_nonnegative
from reverie.compiler.ir.ops_linalg import LINALG_OPS
from reverie.compiler.ir.scope import Scope, share_captures
from reverie.compiler.ir.types import TensorType
from reverie.compiler.transforms import matrices as mx
from reverie.compiler.transforms.batch_rules import BATCH_RULES, BatchContext, Flags
from reverie.compiler.transforms.forward_rules import JVP_RULES, Dots, JvpContext
from reverie.compiler.transforms.reverse_rules import VJP_RULES, Bars, RuleContext, prod_partials
from reverie.dsl.diagnostics import error_at


def _phi(s: Scope, x: Value) -> Value:
    """Φ(X): the lower triangle, diagonal halved."""
    return s.mul(s.add(mx.tril(s, x), mx.tril(s, x, -1)), s.const(0.5, x.type))


def _add(s: Scope, a: Value | None, b: Value | None) -> Value | None:
    return b if a is None else a if b is None else s.add(a, b)


def _expand(s: Scope, v: Value, type_: object) -> Value:
    """v [...] broadcast over the matrices of `type_` [..., M, N]."""
    ones = (Dim.const(1), Dim.const(1))
    return s.op("broadcast", [mx.reshape(s, v, (*v.type.shape, *ones))],
                {"shape": type_.shape})


def _reciprocal_gaps(s: Scope, values: Value) -> Value:
    """F: F_ij = 1 / (v_j - v_i) off the diagonal, 0 on it, for v [..., K]."""
    *batch, k = values.type.shape
    shape = (*batch, k, k)
    rows = s.op("broadcast", [mx.reshape(s, values, (*batch, Dim.const(1), k))], {"shape": shape})
    cols = s.op("broadcast", [mx.reshape(s, values, (*batch, k, Dim.const(1)))], {"shape": shape})
    eye = mx.eye_like(s, rows.type)
    return s.sub(s.div(s.const(1, rows.type), s.add(s.sub(rows, cols), eye)), eye)


# ---------------------------------------------------------------- cholesky


@VJP_RULES.register("cholesky")
def _cholesky_vjp(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """Ā = sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹)  (Murray 2016, symmetrised as torch)"""
    s, low = ctx.scope, op.result
    inner = _phi(s, mx.mm(s, mx.t(s, low), bars[0]))
    left = mx.solve_tri(s, low, inner, lower=True, transpose=True)
    return [mx.sym(s, mx.solve_right(s, low, left, lower=True))]


@JVP_RULES.register("cholesky")
def _cholesky_jvp(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """L̇ = L Φ(L⁻¹ sym(Ȧ) L⁻ᵀ)"""
    s, low = ctx.scope, op.result
    half = mx.solve_tri(s, low, mx.sym(s, dots[0]), lower=True)
    return [mx.mm(s, low, _phi(s, mx.solve_tri(s, low, mx.t(s, half), lower=True)))]


# ---------------------------------------------------------------- triangular_solve


def _triangle(s: Scope, op: Op, x: Value) -> Value:
    """The part of x the op reads: its triangle, without the diagonal when unit."""
    lower, unit = op.attrs["lower"], op.attrs["unit_diagonal"]
    if lower:
        return mx.tril(s, x, -1 if unit else 0)
    return mx.triu(s, x, 1 if unit else 0)


def _op_t(s: Scope, op: Op, x: Value) -> Value:
    """op(X): X, or Xᵀ when the op solves with the transpose."""
    return mx.t(s, x) if op.attrs["transpose"] else x


def _solve_like(s: Scope, op: Op, a: Value, b: Value, transpose: bool) -> Value:
    """The op's solve (its triangle or its general matrix), transposed or not."""
    if op.name == "solve":
        return s.op("solve", [mx.t(s, a) if transpose else a, b])
    return s.op("triangular_solve", [a, b], {**op.attrs, "transpose": transpose})


@VJP_RULES.register("triangular_solve", "solve")
def _solve_vjp(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """X = op(T)⁻¹ B: B̄ = op(T)⁻ᵀ X̄, T̄ = mask(−op(B̄ Xᵀ)) (mask: the triangle read;
    `solve`: A's transpose, no mask)"""
    s, (a, _), x = ctx.scope, op.operands, op.result
    transpose = op.attrs.get("transpose", False)
    bbar = _solve_like(s, op, a, bars[0], not transpose)
    abar = None
    if ctx.wants[0]:
        abar = s.neg(mx.mm(s, bbar, mx.t(s, x)))
        if op.name == "triangular_solve":
            abar = _triangle(s, op, _op_t(s, op, abar))
    return [abar, bbar if ctx.wants[1] else None]


@JVP_RULES.register("triangular_solve", "solve")
def _solve_jvp(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """Ẋ = op(T)⁻¹ (Ḃ − op(Ṫ) X), Ṫ the read part of Ȧ"""
    s, (a, _), x = ctx.scope, op.operands, op.result
    transpose = op.attrs.get("transpose", False)
    rhs = dots[1]
    if dots[0] is not None:
        da = dots[0] if op.name == "solve" else _triangle(s, op, dots[0])
        moved = s.neg(mx.mm(s, _op_t(s, op, da) if op.name != "solve" else da, x))
        rhs = _add(s, rhs, moved)
    return [_solve_like(s, op, a, rhs, transpose)]


# ---------------------------------------------------------------- slogdet


def _inverse_transpose(s: Scope, a: Value) -> Value:
    """A⁻ᵀ, as solve(Aᵀ, I)."""
    return s.op("solve", [mx.t(s, a), mx.eye_like(s, a.type)])


@VJP_RULES.register("slogdet")
def _slogdet_vjp(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d log|det A| = tr(A⁻¹ dA): Ā = l̄ · A⁻ᵀ (the sign carries no derivative)"""
    s, a = ctx.scope, op.operands[0]
    if bars[1] is None:
        return [None]
    return [s.mul(_expand(s, bars[1], a.type), _inverse_transpose(s, a))]


@JVP_RULES.register("slogdet")
def _slogdet_jvp(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """l̇ = Σ A⁻ᵀ ∘ Ȧ, ṡ = 0"""
    s, a = ctx.scope, op.operands[0]
    rank = a.type.rank
    product = s.mul(_inverse_transpose(s, a), dots[0])
    return [s.zeros(op.results[0].type),
            s.op("reduce_sum", [product], {"axes": (rank - 2, rank - 1)})]


def _adjugate(s: Scope, a: Value) -> Value:
    """adj(A)ᵀ = det(U) det(Vh) U diag(∏_{j≠i} s_j) Vh from the SVD, exact at singular A."""
    u, sv, vh = s.emit("svd", [a]).results
    signs = s.mul(s.emit("slogdet", [u]).results[0], s.emit("slogdet", [vh]).results[0])
    others = prod_partials(s, sv, (sv.type.rank - 1,))
    return s.mul(mx.mm(s, mx.scale_columns(s, u, others), vh), _expand(s, signs, a.type))


def _cofactors(s: Scope, a: Value, d: Value) -> Value:
    """C = det(A) A⁻ᵀ, or where det(A) = 0 the adjugate from the SVD (torch's), computed
    only when some determinant of the batch is 0 (an `if`; its own derivative not taken)."""
    regular = s.mul(_expand(s, d, a.type), _inverse_transpose(s, a))
    singular = s.eq(_expand(s, d, a.type), s.zeros(a.type))
    flags = s.op("cast", [s.eq(d, s.zeros(d.type))], {"dtype": a.type.dtype})
    any_zero = s.op("gt", [s.op("reduce_max", [flags], {"axes": tuple(range(d.type.rank))}),
                           s.const(0, TensorType(a.type.dtype, ()))])
    regions = []
    for compute in (True, False):
        block = Block(params=[])
        inner = s.child(block)
        block.results = [_adjugate(inner, inner.use(a)) if compute else inner.zeros(a.type)]
        regions.append((block, inner))
    outers = share_captures(regions, 0)
    adjugate = s.op("if", [any_zero, *outers], {}, [block for block, _ in regions])
    return s.select(singular, s.op("stop_gradient", [adjugate]), regular)


@VJP_RULES.register("det")
def _det_vjp(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """Ā = d̄ · C, C the cofactor matrix (`_cofactors`)"""
    s, a = ctx.scope, op.operands[0]
    return [s.mul(_expand(s, bars[0], a.type), _cofactors(s, a, op.result))]


@JVP_RULES.register("det")
def _det_jvp(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """ḋ = Σ C ∘ Ȧ"""
    s, a = ctx.scope, op.operands[0]
    rank = a.type.rank
    return [s.op("reduce_sum", [s.mul(_cofactors(s, a, op.result), dots[0])],
                 {"axes": (rank - 2, rank - 1)})]


# ---------------------------------------------------------------- eigh


@VJP_RULES.register("eigh")
def _eigh_vjp(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """Ā = V (diag(w̄) + F ∘ ½(VᵀV̄ − V̄ᵀV)) Vᵀ  (torch's rule)"""
    s, (w, v) = ctx.scope, op.results
    inner = mx.diag(s, bars[0]) if bars[0] is not None else None
    if bars[1] is not None:
        g = mx.mm(s, mx.t(s, v), bars[1])
        skew = s.mul(s.sub(g, mx.t(s, g)), s.const(0.5, g.type))
        inner = _add(s, inner, s.mul(_reciprocal_gaps(s, w), skew))
    return [mx.mm(s, mx.mm(s, v, inner), mx.t(s, v))]


@JVP_RULES.register("eigh")
def _eigh_jvp(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """P = Vᵀ sym(Ȧ) V: ẇ = diag(P), V̇ = V (F ∘ P)  (JAX's rule)"""
    s, (w, v) = ctx.scope, op.results
    p = mx.mm(s, mx.mm(s, mx.t(s, v), mx.sym(s, dots[0])), v)
    return [mx.diagonal(s, p), mx.mm(s, v, s.mul(_reciprocal_gaps(s, w), p))]


# ---------------------------------------------------------------- svd


def _provably(difference: Dim) -> bool:
    """Whether a dimension difference is known to be >= 0 at compile time."""
    return difference.is_const and difference.value >= 0 or is_nonnegative(difference, ())


@VJP_RULES.register("svd")
def _svd_vjp(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """Ā = U [(skew(UᵀŪ) S + S skew(VᵀV̄)) / E + diag(s̄)] Vh
          + (I − UUᵀ) Ū S⁻¹ Vh + U S⁻¹ V̄ᵀ (I − VVᵀ)
    with skew(X) = X − Xᵀ, E_jk = s_k² − s_j² (1 on the diagonal), V̄ = Vh̄ᵀ (torch's rule;
    a projection term is left out where the shape makes it zero: U or V square)"""
    s, (u, sv, vh) = ctx.scope, op.results
    ubar, sbar, vhbar = bars
    inner = mx.diag(s, sbar) if sbar is not None else None
    gaps = _reciprocal_gaps(s, s.mul(sv, sv))
    m, n = op.operands[0].type.shape[-2:]
    rest = None
    if ubar is not None:
        uhu = mx.mm(s, mx.t(s, u), ubar)
        inner = _add(s, inner, mx.scale_columns(s, s.mul(s.sub(uhu, mx.t(s, uhu)), gaps), sv))
        if not _provably(n - m):   # M > K possible: the part of Ū outside U's span
            outside = s.sub(ubar, mx.mm(s, u, uhu))
            rest = mx.mm(s, mx.scale_columns(s, outside, s.div(s.const(1, sv.type), sv)), vh)
    if vhbar is not None:
        vbar, v = mx.t(s, vhbar), mx.t(s, vh)
        vhv = mx.mm(s, vh, vbar)
        inner = _add(s, inner, mx.scale_rows(s, s.mul(s.sub(vhv, mx.t(s, vhv)), gaps), sv))
        if not _provably(m - n):
            outside = mx.t(s, s.sub(vbar, mx.mm(s, v, vhv)))
            part = mx.mm(s, u, mx.scale_rows(s, outside, s.div(s.const(1, sv.type), sv)))
            rest = _add(s, rest, part)
    return [_add(s, mx.mm(s, mx.mm(s, u, inner), vh), rest)]


@JVP_RULES.register("svd")
def _svd_jvp(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """P = Uᵀ Ȧ V: ṡ = diag(P), U̇ = U (F ∘ (P S + S Pᵀ)) + (I − UUᵀ) Ȧ V S⁻¹,
    V̇ = V (F ∘ (S P + Pᵀ S)) + (I − VVᵀ) Ȧᵀ U S⁻¹  (JAX's rule), Vḣ = V̇ᵀ"""
    s, (u, sv, vh) = ctx.scope, op.results
    da, v = dots[0], mx.t(s, vh)
    m, n = da.type.shape[-2:]
    p = mx.mm(s, mx.mm(s, mx.t(s, u), da), v)
    gaps = _reciprocal_gaps(s, s.mul(sv, sv))
    ps = mx.scale_columns(s, p, sv)
    sp = mx.scale_rows(s, p, sv)
    du = mx.mm(s, u, s.mul(gaps, s.add(ps, mx.t(s, ps))))
    dv = mx.mm(s, v, s.mul(gaps, s.add(sp, mx.t(s, sp))))
    inverse = s.div(s.const(1, sv.type), sv)
    if not _provably(n - m):
        dav = mx.mm(s, da, v)
        du = s.add(du, mx.scale_columns(s, s.sub(dav, mx.mm(s, u, mx.mm(s, mx.t(s, u), dav))),
                                        inverse))
    if not _provably(m - n):
        dau = mx.mm(s, mx.t(s, da), u)
        dv = s.add(dv, mx.scale_columns(s, s.sub(dau, mx.mm(s, v, mx.mm(s, vh, dau))),
                                        inverse))
    return [du, mx.diagonal(s, p), mx.t(s, dv)]


# ---------------------------------------------------------------- qr


def _qr_shape(op: Op) -> str:
    """"tall" (M >= N) or "wide" (M < N), as far as the compiler can tell."""
    m, n = op.operands[0].type.shape[-2:]
    if _provably(m - n):
        return "tall"
    if _provably(n - m):
        return "wide"
    raise error_at(op.span, f"the derivative of 'qr' needs M and N that compare at compile "
                            f"time (M >= N or M <= N), got {op.operands[0].type}")


def _qr_tall_vjp(s: Scope, q: Value, r: Value, qbar: Value | None,
                 rbar: Value | None) -> Value:
    """M = triu(R̄ Rᵀ − Qᵀ Q̄): Ā = (Q̄ + Q (M + Mᵀ − diag M)) R⁻ᵀ  (torch's rule, M >= N)"""
    m = None
    if rbar is not None:
        m = mx.mm(s, rbar, mx.t(s, r))
    if qbar is not None:
        m = _add(s, m, s.neg(mx.mm(s, mx.t(s, q), qbar)))
    m = mx.triu(s, m)
    total = _add(s, mx.mm(s, q, s.sub(s.add(m, mx.t(s, m)), mx.tril(s, m))), qbar)
    return mx.solve_right(s, r, total, lower=False, transpose=True)


@VJP_RULES.register("qr")
def _qr_vjp(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """M >= N: `_qr_tall_vjp`; M < N, A = [X | Y], R = [U | V]: X̄ = the square rule with
    (Q̄ + Y V̄ᵀ, Ū), Ȳ = Q V̄  (torch's rule)"""
    s, (q, r), a = ctx.scope, op.results, op.operands[0]
    qbar, rbar = bars
    if _qr_shape(op) == "tall":
        return [_qr_tall_vjp(s, q, r, qbar, rbar)]
    m, n = a.type.shape[-2:]
    u = mx.columns(s, r, Dim.const(0), m)
    if rbar is None:
        return [mx.beside(s, _qr_tall_vjp(s, q, u, qbar, None),
                          s.zeros(mx.columns(s, a, m, n).type))]
    ubar, vbar = mx.columns(s, rbar, Dim.const(0), m), mx.columns(s, rbar, m, n)
    moved = _add(s, qbar, mx.mm(s, mx.columns(s, a, m, n), mx.t(s, vbar)))
    return [mx.beside(s, _qr_tall_vjp(s, q, u, moved, ubar), mx.mm(s, q, vbar))]


def _qr_tall_jvp(s: Scope, q: Value, r: Value, da: Value) -> tuple[Value, Value]:
    """P = Qᵀ Ȧ R⁻¹, Ω = tril(P, −1) − tril(P, −1)ᵀ: Q̇ = Q (Ω − P) + Ȧ R⁻¹,
    Ṙ = (P − Ω) R  (JAX's rule, M >= N)"""
    da_rinv = mx.solve_right(s, r, da, lower=False)
    p = mx.mm(s, mx.t(s, q), da_rinv)
    below = mx.tril(s, p, -1)
    omega = s.sub(below, mx.t(s, below))
    return s.add(mx.mm(s, q, s.sub(omega, p)), da_rinv), mx.mm(s, s.sub(p, omega), r)


@JVP_RULES.register("qr")
def _qr_jvp(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """M >= N: `_qr_tall_jvp`; M < N: (Q̇, U̇) of the square X, V̇ = Qᵀ (Ẏ − Q̇ V)"""
    s, (q, r), da = ctx.scope, op.results, dots[0]
    if _qr_shape(op) == "tall":
        return list(_qr_tall_jvp(s, q, r, da))
    m, n = da.type.shape[-2:]
    dq, du = _qr_tall_jvp(s, q, mx.columns(s, r, Dim.const(0), m),
                          mx.columns(s, da, Dim.const(0), m))
    v = mx.columns(s, r, m, n)
    dv = mx.mm(s, mx.t(s, q), s.sub(mx.columns(s, da, m, n), mx.mm(s, dq, v)))
    return [dq, mx.beside(s, du, dv)]


# ---------------------------------------------------------------- batching


@BATCH_RULES.register(*LINALG_OPS)
def _batch(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """op(x: [B, …]) = op(x): the batch is one more leading axis of the stacks"""
    operands = [ctx.lift(x, f) for x, f in zip(xs, flags, strict=True)]
    return ctx.scope.emit(op.name, operands, dict(op.attrs)).results

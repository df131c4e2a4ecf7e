"""The own loops of the linear-algebra helpers (`lapack.py`), where no LAPACK was found.

Unblocked, O(n³), on row-major matrices in place, emitted into the helper being built:

- `own_cholesky`: Cholesky-Banachiewicz by columns (info 1 when a pivot is not > 0);
- `own_substitution`: op(T) X = B row by row, forward or backward by the run-time flags;
- `own_lu`: LU with partial pivoting, 1-based pivots as LAPACK's getrf (a zero pivot
  skips its column, as getrf);
- `own_jacobi`: the symmetric eigenproblem by cyclic Jacobi rotations, then sorted;
- `own_svd`: the reduced SVD by one-sided Jacobi rotations of columns (Hestenes);
- `own_householder`, `own_q`: QR by Householder reflectors with LAPACK's signs (geqr2,
  org2r), `upper_part` its R.

`MatrixLoops` holds the small pieces they are written with (element access, stack
variables, counted loops, `llvm.*` maths); `lapack.py`'s builder extends it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from llvmlite import ir

from reverie.compiler.backend.irutil import I64, alloca, counted_loop, i64, intrinsic

LOWER_FLAG, TRANSPOSE_FLAG, UNIT_FLAG = 1, 2, 4   # `triangular_solve`'s flags, as bits
JACOBI_SWEEPS = 60  # cyclic Jacobi converges quadratically: a few sweeps do; later ones skip


class MatrixLoops:
    """Loops over row-major matrices in LLVM IR: `b` the builder, `allocas` the entry
    block's, `t` the element type, `module` the module, (m, n, k) the sizes."""

    b: ir.IRBuilder
    allocas: ir.IRBuilder
    t: ir.Type
    dtype: str
    module: ir.Module
    m: ir.Value
    n: ir.Value
    k: ir.Value

    # ------------------------------------------------------------ small pieces

    def at(self, base: ir.Value, offset: ir.Value, type_: ir.Type | None = None) -> ir.Value:
        return self.b.gep(base, [offset], source_etype=type_ or self.t, inbounds=True)

    def load(self, base: ir.Value, offset: ir.Value, type_: ir.Type | None = None) -> ir.Value:
        return self.b.load(self.at(base, offset, type_), typ=type_ or self.t)

    def store(self, value: ir.Value, base: ir.Value, offset: ir.Value) -> None:
        self.b.store(value, self.at(base, offset, value.type))

    def index(self, row: ir.Value, column: ir.Value, width: ir.Value) -> ir.Value:
        return self.b.add(self.b.mul(row, width), column)

    def variable(self, initial: ir.Value, name: str) -> ir.Value:
        slot = alloca(self.allocas, initial.type, name)
        self.b.store(initial, slot)
        return slot

    def get(self, slot: ir.Value, type_: ir.Type | None = None) -> ir.Value:
        return self.b.load(slot, typ=type_ or self.t)

    def const(self, value: float) -> ir.Constant:
        return ir.Constant(self.t, value)

    def math(self, name: str, *args: ir.Value) -> ir.Value:
        return self.b.call(intrinsic(self.module, f"llvm.{name}", self.t, [self.t] * len(args)),
                           list(args))

    def loop(self, lo: ir.Value, hi: ir.Value) -> Iterator[ir.Value]:
        return counted_loop(self.b, lo, hi)

    # ------------------------------------------------------------ the own loops

    def own_cholesky(self, a: ir.Value, info: ir.Value) -> None:
        """L[j,j] = √(A[j,j] − Σ_{p<j} L[j,p]²),
        L[i,j] = (A[i,j] − Σ_{p<j} L[i,p] L[j,p]) / L[j,j]; info 1 when a pivot is not > 0."""
        b, n = self.b, self.n
        with self.loop(i64(0), n) as j:
            total = self.variable(self.load(a, self.index(j, j, n)), "diagonal")
            with self.loop(i64(0), j) as p:
                x = self.load(a, self.index(j, p, n))
                b.store(b.fsub(self.get(total), b.fmul(x, x)), total)
            square = self.get(total)
            b.store(b.select(b.fcmp_unordered("ule", square, self.const(0.0)), i64(1),
                             self.get(info, I64)), info)
            pivot = self.math("sqrt", square)
            self.store(pivot, a, self.index(j, j, n))
            with self.loop(b.add(j, i64(1)), n) as i:
                value = self.variable(self.load(a, self.index(i, j, n)), "value")
                with self.loop(i64(0), j) as p:
                    product = b.fmul(self.load(a, self.index(i, p, n)),
                                     self.load(a, self.index(j, p, n)))
                    b.store(b.fsub(self.get(value), product), value)
                self.store(b.fdiv(self.get(value), pivot), a, self.index(i, j, n))

    def own_substitution(self, a: ir.Value, x: ir.Value, flags: ir.Value) -> None:
        """op(T) X = B in place, row by row: forward when op(T) is lower, else backward.
        op(T)[i, p] = A[i·r + p·c] with (r, c) = (n, 1), or (1, n) when transposed."""
        b, n, k = self.b, self.n, self.k
        has = [b.icmp_signed("!=", b.and_(flags, i64(f)), i64(0))
               for f in (LOWER_FLAG, TRANSPOSE_FLAG, UNIT_FLAG)]
        lower, transpose, unit = has
        forward = b.xor(lower, transpose)
        r, c = b.select(transpose, i64(1), n), b.select(transpose, n, i64(1))
        last = b.sub(n, i64(1))
        with self.loop(i64(0), n) as step:
            i = b.select(forward, step, b.sub(last, step))
            diagonal = b.select(unit, self.const(1.0),
                                self.load(a, b.add(b.mul(i, r), b.mul(i, c))))
            with self.loop(i64(0), k) as col:
                value = self.variable(self.load(x, self.index(i, col, k)), "value")
                with self.loop(i64(0), step) as q:
                    p = b.select(forward, q, b.sub(last, q))
                    product = b.fmul(self.load(a, b.add(b.mul(i, r), b.mul(p, c))),
                                     self.load(x, self.index(p, col, k)))
                    b.store(b.fsub(self.get(value), product), value)
                self.store(b.fdiv(self.get(value), diagonal), x, self.index(i, col, k))

    def own_lu(self, a: ir.Value, pivots: ir.Value, info: ir.Value) -> None:
        """P A = L U in place with partial pivoting; pivots 1-based as LAPACK's getrf; info
        1 when a pivot is 0."""
        b, n = self.b, self.n
        with self.loop(i64(0), n) as j:
            best = self.variable(j, "best")
            with self.loop(b.add(j, i64(1)), n) as i:
                larger = b.fcmp_ordered(">", self.math("fabs", self.load(a, self.index(i, j, n))),
                                        self.math("fabs", self.load(a, self.index(
                                            self.get(best, I64), j, n))))
                b.store(b.select(larger, i, self.get(best, I64)), best)
            p = self.get(best, I64)
            self.store(b.add(p, i64(1)), pivots, j)
            with self.loop(i64(0), n) as col:
                here, there = self.index(j, col, n), self.index(p, col, n)
                upper, lower = self.load(a, here), self.load(a, there)
                self.store(lower, a, here)
                self.store(upper, a, there)
            pivot = self.load(a, self.index(j, j, n))
            b.store(b.select(b.fcmp_ordered("==", pivot, self.const(0.0)), i64(1),
                             self.get(info, I64)), info)
            with self.loop(b.add(j, i64(1)), n) as i:
                singular = b.fcmp_ordered("==", pivot, self.const(0.0))   # as getrf: skip
                factor = b.select(singular, self.const(0.0),
                                  b.fdiv(self.load(a, self.index(i, j, n)), pivot))
                self.store(factor, a, self.index(i, j, n))
                with self.loop(b.add(j, i64(1)), n) as col:
                    at = self.index(i, col, n)
                    self.store(b.fsub(self.load(a, at), b.fmul(factor, self.load(
                        a, self.index(j, col, n)))), a, at)

    def own_jacobi(self, w: ir.Value, v: ir.Value, a: ir.Value) -> None:
        """Eigen-decomposition of the symmetric matrix whose lower triangle `v` holds:
        a = that matrix, v = I; sweeps of rotations A ← Jᵀ A J, V ← V J zeroing each
        a[p, q] (Golub and Van Loan's sym.schur2: τ = (a_qq − a_pp) / 2a_pq,
        t = sign(τ) / (|τ| + √(1 + τ²)), c = 1/√(1 + t²), s = t c), skipping the a[p, q]
        already negligible against the diagonal; then w = diag(a), sorted ascending with
        V's columns."""
        b, n, zero, one = self.b, self.n, self.const(0.0), self.const(1.0)
        with self.loop(i64(0), n) as i:
            with self.loop(i64(0), n) as j:
                below = b.icmp_signed(">", i, j)   # read the lower triangle
                row, column = b.select(below, i, j), b.select(below, j, i)
                self.store(self.load(v, self.index(row, column, n)), a, self.index(i, j, n))
                self.store(b.select(b.icmp_signed("==", i, j), one, zero), v,
                           self.index(i, j, n))
        tiny = self.const(float(np.finfo(np.float32 if self.dtype == "f32" else np.float64).eps)
                          * 1e-3)
        with self.loop(i64(0), i64(JACOBI_SWEEPS)):
            with self.loop(i64(0), n) as p:
                with self.loop(b.add(p, i64(1)), n) as q:
                    apq = self.load(a, self.index(p, q, n))
                    app, aqq = self.load(a, self.index(p, p, n)), self.load(a, self.index(q, q, n))
                    scale = self.math("sqrt", self.math("fabs", b.fmul(app, aqq)))
                    negligible = b.fcmp_ordered("<=", self.math("fabs", apq), b.fmul(tiny, scale))
                    with b.if_then(b.not_(b.or_(negligible, b.fcmp_ordered("==", apq, zero)))):
                        self.rotate(a, v, p, q, app, aqq, apq)
        with self.loop(i64(0), n) as i:
            self.store(self.load(a, self.index(i, i, n)), w, i)
        self.sort_pairs(w, v)

    def rotate(self, a: ir.Value, v: ir.Value, p: ir.Value, q: ir.Value, app: ir.Value,
               aqq: ir.Value, apq: ir.Value) -> None:
        """The Jacobi rotation in the (p, q) plane that zeroes a[p, q] (`own_jacobi`)."""
        b, n = self.b, self.n
        c, s = self.rotation(b.fdiv(b.fsub(aqq, app), b.fmul(self.const(2.0), apq)))
        self.turn_columns(a, n, n, p, q, c, s)                 # A J
        with self.loop(i64(0), n) as k:                         # Jᵀ (A J)
            self.turn(a, self.index(p, k, n), self.index(q, k, n), c, s)
        self.turn_columns(v, n, n, p, q, c, s)                 # V J

    def rotation(self, tau: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(c, s) of the rotation for τ: t = sign(τ) / (|τ| + √(1 + τ²)) the smaller root
        of t² + 2τt − 1 = 0, c = 1/√(1 + t²), s = t c."""
        b, one = self.b, self.const(1.0)
        root = self.math("sqrt", b.fadd(one, b.fmul(tau, tau)))
        sign = b.select(b.fcmp_ordered("<", tau, self.const(0.0)), self.const(-1.0), one)
        t = b.fdiv(sign, b.fadd(self.math("fabs", tau), root))
        c = b.fdiv(one, self.math("sqrt", b.fadd(one, b.fmul(t, t))))
        return c, b.fmul(t, c)

    def turn(self, base: ir.Value, first: ir.Value, second: ir.Value, c: ir.Value,
             s: ir.Value) -> None:
        """(x, y) ← (c x − s y, s x + c y) for the elements at `first` and `second`."""
        b = self.b
        x, y = self.load(base, first), self.load(base, second)
        self.store(b.fsub(b.fmul(c, x), b.fmul(s, y)), base, first)
        self.store(b.fadd(b.fmul(s, x), b.fmul(c, y)), base, second)

    def turn_columns(self, base: ir.Value, rows: ir.Value, width: ir.Value, p: ir.Value,
                     q: ir.Value, c: ir.Value, s: ir.Value) -> None:
        with self.loop(i64(0), rows) as k:
            self.turn(base, self.index(k, p, width), self.index(k, q, width), c, s)

    def sort_pairs(self, w: ir.Value, v: ir.Value) -> None:
        """w ascending, V's columns moved with their values."""
        self.sort_with_columns(w, self.n, False, [(v, self.n, self.n)])

    def sort_with_columns(self, w: ir.Value, count: ir.Value, descending: bool,
                          matrices: list[tuple[ir.Value, ir.Value, ir.Value]]) -> None:
        """w[:count] sorted (selection sort, O(count²)), the columns of each (matrix, rows,
        width) moved with their values."""
        b = self.b
        with self.loop(i64(0), count) as i:
            best = self.variable(i, "best")
            with self.loop(b.add(i, i64(1)), count) as j:
                before = b.fcmp_ordered(">" if descending else "<", self.load(w, j),
                                        self.load(w, self.get(best, I64)))
                b.store(b.select(before, j, self.get(best, I64)), best)
            j = self.get(best, I64)
            first, second = self.load(w, i), self.load(w, j)
            self.store(second, w, i)
            self.store(first, w, j)
            for matrix, rows, width in matrices:
                with self.loop(i64(0), rows) as k:
                    here, there = self.index(k, i, width), self.index(k, j, width)
                    x, y = self.load(matrix, here), self.load(matrix, there)
                    self.store(y, matrix, here)
                    self.store(x, matrix, there)

    def own_svd(self, a: ir.Value, u: ir.Value, s: ir.Value, vh: ir.Value) -> None:
        """The reduced SVD by one-sided Jacobi on the taller of A and Aᵀ (Hestenes): for
        M >= N, A V = U S with a's columns made orthogonal and V in vh (then transposed);
        for M < N, the same on Aᵀ (copied into a through vh) with V in u, Vh = U'ᵀ. For
        M >= N, U's columns of zero singular values complete an orthonormal basis (as
        LAPACK's; det's adjugate needs det U); for M < N, Vh's rows of zero singular values
        are 0."""
        b, m, n = self.b, self.m, self.n
        with b.if_else(b.icmp_signed(">=", m, n)) as (tall, wide):
            with tall:
                self.one_sided(a, m, n, vh, s)
                self.normalised(a, m, n, s, lambda i, j: self.index(i, j, n), u)
                self.complete(u, m, n, s)
                with self.loop(i64(0), n) as i:
                    with self.loop(b.add(i, i64(1)), n) as j:
                        here, there = self.index(i, j, n), self.index(j, i, n)
                        x, y = self.load(vh, here), self.load(vh, there)
                        self.store(y, vh, here)
                        self.store(x, vh, there)
            with wide:
                with self.loop(i64(0), b.mul(m, n)) as i:
                    self.store(self.load(a, i), vh, i)
                with self.loop(i64(0), n) as i:
                    with self.loop(i64(0), m) as j:
                        self.store(self.load(vh, self.index(j, i, n)), a, self.index(i, j, m))
                self.one_sided(a, n, m, u, s)
                self.normalised(a, n, m, s, lambda i, j: self.index(j, i, n), vh)

    def one_sided(self, work: ir.Value, rows: ir.Value, cols: ir.Value, v: ir.Value,
                  s: ir.Value) -> None:
        """Rotate the columns of work (rows×cols, rows >= cols) orthogonal, accumulating
        the rotations in v (cols×cols, from I); s = the column norms, descending, the
        columns of work and v sorted with them."""
        b, zero, one = self.b, self.const(0.0), self.const(1.0)
        tiny = self.const(float(np.finfo(np.float32 if self.dtype == "f32" else np.float64).eps)
                          * 1e-3)
        with self.loop(i64(0), cols) as i:
            with self.loop(i64(0), cols) as j:
                self.store(b.select(b.icmp_signed("==", i, j), one, zero), v,
                           self.index(i, j, cols))
        with self.loop(i64(0), i64(JACOBI_SWEEPS)):
            with self.loop(i64(0), cols) as p:
                with self.loop(b.add(p, i64(1)), cols) as q:
                    alpha, beta, gamma = (self.variable(zero, name) for name in "abg")
                    with self.loop(i64(0), rows) as i:
                        x = self.load(work, self.index(i, p, cols))
                        y = self.load(work, self.index(i, q, cols))
                        for slot, product in ((alpha, b.fmul(x, x)), (beta, b.fmul(y, y)),
                                              (gamma, b.fmul(x, y))):
                            b.store(b.fadd(self.get(slot), product), slot)
                    g = self.get(gamma)
                    scale = self.math("sqrt", b.fmul(self.get(alpha), self.get(beta)))
                    negligible = b.fcmp_ordered("<=", self.math("fabs", g), b.fmul(tiny, scale))
                    with b.if_then(b.not_(b.or_(negligible, b.fcmp_ordered("==", g, zero)))):
                        zeta = b.fdiv(b.fsub(self.get(beta), self.get(alpha)),
                                      b.fmul(self.const(2.0), g))
                        c, sine = self.rotation(zeta)
                        self.turn_columns(work, rows, cols, p, q, c, sine)
                        self.turn_columns(v, cols, cols, p, q, c, sine)
        with self.loop(i64(0), cols) as j:
            total = self.variable(zero, "norm")
            with self.loop(i64(0), rows) as i:
                x = self.load(work, self.index(i, j, cols))
                b.store(b.fadd(self.get(total), b.fmul(x, x)), total)
            self.store(self.math("sqrt", self.get(total)), s, j)
        self.sort_with_columns(s, cols, True, [(work, rows, cols), (v, cols, cols)])

    def complete(self, u: ir.Value, rows: ir.Value, cols: ir.Value, s: ir.Value) -> None:
        """Each column j of u whose s[j] is 0 (the last ones: s is sorted) becomes the
        normalised residual e_c − Σ_{l<j} u[c, l] u[:, l] of the unit vector e_c with the
        largest one, orthogonal to the columns before it."""
        b, zero = self.b, self.const(0.0)

        def residual(i: ir.Value, c: ir.Value, j: ir.Value) -> ir.Value:
            value = self.variable(b.select(b.icmp_signed("==", i, c), self.const(1.0), zero),
                                  "residual")
            with self.loop(i64(0), j) as col:
                product = b.fmul(self.load(u, self.index(c, col, cols)),
                                 self.load(u, self.index(i, col, cols)))
                b.store(b.fsub(self.get(value), product), value)
            return self.get(value)

        with self.loop(i64(0), cols) as j:
            with b.if_then(b.fcmp_ordered("==", self.load(s, j), zero)):
                best, largest = self.variable(i64(0), "best"), self.variable(zero, "largest")
                with self.loop(i64(0), rows) as c:
                    total = self.variable(zero, "norm")
                    with self.loop(i64(0), rows) as i:
                        r = residual(i, c, j)
                        b.store(b.fadd(self.get(total), b.fmul(r, r)), total)
                    larger = b.fcmp_ordered(">", self.get(total), self.get(largest))
                    b.store(b.select(larger, c, self.get(best, I64)), best)
                    b.store(b.select(larger, self.get(total), self.get(largest)), largest)
                norm = self.math("sqrt", self.get(largest))
                with self.loop(i64(0), rows) as i:
                    value = b.fdiv(residual(i, self.get(best, I64), j), norm)
                    self.store(value, u, self.index(i, j, cols))

    def normalised(self, work: ir.Value, rows: ir.Value, cols: ir.Value, s: ir.Value,
                   at: Callable[[ir.Value, ir.Value], ir.Value], out: ir.Value) -> None:
        """out[at(i, j)] = work[i, j] / s[j] (0 where s[j] = 0)."""
        b, zero = self.b, self.const(0.0)
        with self.loop(i64(0), rows) as i:
            with self.loop(i64(0), cols) as j:
                norm = self.load(s, j)
                empty = b.fcmp_ordered("==", norm, zero)
                value = b.fdiv(self.load(work, self.index(i, j, cols)),
                               b.select(empty, self.const(1.0), norm))
                self.store(b.select(empty, zero, value), out, at(i, j))

    def upper_part(self, a: ir.Value, r: ir.Value) -> None:
        """R = the upper triangle of the first k rows of the factored a (m×n)."""
        b, n, k = self.b, self.n, self.k
        with self.loop(i64(0), k) as i:
            with self.loop(i64(0), n) as j:
                value = self.load(a, self.index(i, j, n))
                kept = b.select(b.icmp_signed(">=", j, i), value, self.const(0.0))
                self.store(kept, r, self.index(i, j, n))

    def own_householder(self, a: ir.Value, tau: ir.Value) -> None:
        """geqr2's factorisation in place: for each column j < k, the reflector
        H = I − τ v vᵀ (v_j = 1, the rest of v below the diagonal) that makes a[j:, j]
        (β, 0, ...) with β = −sign(a_jj)·‖a[j:, j]‖ (LAPACK's signs), applied to the
        columns after j; τ = 0 (H = I) where a[j+1:, j] is already 0, as larfg."""
        b, m, n, k, zero = self.b, self.m, self.n, self.k, self.const(0.0)
        with self.loop(i64(0), k) as j:
            total = self.variable(zero, "below")
            with self.loop(b.add(j, i64(1)), m) as i:
                x = self.load(a, self.index(i, j, n))
                b.store(b.fadd(self.get(total), b.fmul(x, x)), total)
            alpha = self.load(a, self.index(j, j, n))
            zero_column = b.fcmp_ordered("==", self.get(total), zero)   # as larfg: H = I
            norm = self.math("sqrt", b.fadd(self.get(total), b.fmul(alpha, alpha)))
            beta = b.select(b.fcmp_ordered("<", alpha, zero), norm, b.fneg(norm))
            safe = b.select(zero_column, self.const(1.0), beta)
            self.store(b.select(zero_column, zero, b.fdiv(b.fsub(safe, alpha), safe)), tau, j)
            with b.if_then(b.not_(zero_column)):
                head = b.fsub(alpha, beta)
                with self.loop(b.add(j, i64(1)), m) as i:
                    at = self.index(i, j, n)
                    self.store(b.fdiv(self.load(a, at), head), a, at)
                self.store(beta, a, self.index(j, j, n))
                self.reflect(a, tau, j, n, b.add(j, i64(1)), n, a, n)

    def reflect(self, v: ir.Value, tau: ir.Value, j: ir.Value, v_width: ir.Value,
                first: ir.Value, last: ir.Value, x: ir.Value, width: ir.Value) -> None:
        """x[j:, c] ← (I − τ_j v vᵀ) x[j:, c] for columns first ≤ c < last, v the reflector
        j stored below the diagonal of `v` (row-major, `v_width` columns; v_j = 1)."""
        b, m = self.b, self.m
        scale = self.load(tau, j)

        def v_at(i: ir.Value) -> ir.Value:
            return b.select(b.icmp_signed("==", i, j), self.const(1.0),
                            self.load(v, self.index(i, j, v_width)))

        with self.loop(first, last) as col:
            dot = self.variable(self.const(0.0), "dot")
            with self.loop(j, m) as i:
                product = b.fmul(v_at(i), self.load(x, self.index(i, col, width)))
                b.store(b.fadd(self.get(dot), product), dot)
            factor = b.fmul(scale, self.get(dot))
            with self.loop(j, m) as i:
                at = self.index(i, col, width)
                self.store(b.fsub(self.load(x, at), b.fmul(factor, v_at(i))), x, at)

    def own_q(self, a: ir.Value, tau: ir.Value, q: ir.Value) -> None:
        """Q (m×k) = H_0 ⋯ H_(k-1) applied to the first k columns of I, last reflector first."""
        b, m, n, k = self.b, self.m, self.n, self.k
        with self.loop(i64(0), m) as i:
            with self.loop(i64(0), k) as j:
                self.store(b.select(b.icmp_signed("==", i, j), self.const(1.0),
                                    self.const(0.0)), q, self.index(i, j, k))
        with self.loop(i64(0), k) as step:
            j = b.sub(b.sub(k, i64(1)), step)
            self.reflect(a, tau, j, n, i64(0), k, q, k)

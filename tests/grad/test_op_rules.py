"""Per-op tests of the forward-mode and batching rules (like PyTorch's OpInfo).

Every op in the op table has at least one case: a small program using it and a sampler of
inputs in its safe domain (positive for log, away from kinks and ties). For each case:
- its JVP equals central differences of the primal (every float parameter gets a tangent);
- batching each parameter alone, and all at once, equals a loop of unbatched runs;
- batching a JVP over its tangents (a Jacobian) and a VJP over its cotangents
  (`is_grads_batched`) equals the loop too.
A new op without a case fails `test_every_op_has_a_case`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from forward_helpers import (
    batch_error,
    float_params,
    ir_function,
    jvp_error,
    run,
    tensor_type,
)
from grad_helpers import dot_product_test

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.ops import OPS
from reverie.compiler.transforms.batch import batch_function
from reverie.compiler.transforms.forward import jvp_function
from reverie.compiler.transforms.reverse import vjp_function

DIMS = {"N": 4, "M": 3, "K": 2, "T": 5}
Rng = np.random.Generator


@dataclass(frozen=True)
class Case:
    """A program exercising `op`, and how to draw its arguments."""

    op: str
    name: str
    build: Callable[[], Function]
    sample: Callable[[Rng], list[object]]
    eps: float = 1e-6
    rtol: float = 1e-5
    atol: float = 1e-6
    reverse: bool = True  # reverse mode supports the op
    twice: bool = True  # the JVP's own derivative is exact at the sampled points

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}"


@functools.cache
def _source_function(source: str) -> Function:
    return rv.compile(source, backend="interp").lowering.specialise("f", "f64")


def source(text: str) -> Callable[[], Function]:
    """A builder of function `f` in `text`."""
    return lambda: _source_function(text)


def normal(*shape: int) -> Callable[[Rng], np.ndarray]:
    return lambda rng: rng.standard_normal(shape)


def positive(*shape: int) -> Callable[[Rng], np.ndarray]:
    return lambda rng: rng.uniform(0.3, 2.0, shape)


def away(*shape: int) -> Callable[[Rng], np.ndarray]:
    return lambda rng: rng.uniform(0.3, 1.5, shape) * rng.choice([-1.0, 1.0], shape)


def small(*shape: int) -> Callable[[Rng], np.ndarray]:
    return lambda rng: rng.uniform(-1.0, 1.0, shape)


def fractional(*shape: int) -> Callable[[Rng], np.ndarray]:
    return lambda rng: rng.uniform(0.1, 0.9, shape) + rng.integers(-3, 3, shape)


def gamma_domain(*shape: int) -> Callable[[Rng], np.ndarray]:
    """Positive and negative arguments of the gamma family, away from its poles."""
    return lambda rng: rng.uniform(0.2, 0.8, shape) + rng.integers(-3, 4, shape)


def inside_unit(*shape: int) -> Callable[[Rng], np.ndarray]:
    """Inside (−1, 1), away from ±1 (arcsin, arccos, arctanh)."""
    return lambda rng: rng.uniform(-0.8, 0.8, shape)


def above_one(*shape: int) -> Callable[[Rng], np.ndarray]:
    return lambda rng: rng.uniform(1.3, 3.0, shape)


def index(high: int, *shape: int) -> Callable[[Rng], np.ndarray]:
    return lambda rng: rng.integers(0, high, shape).astype(np.int64)


def with_zeros(*shape: int) -> Callable[[Rng], np.ndarray]:
    def draw(rng: Rng) -> np.ndarray:
        x = rng.uniform(0.3, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
        x[0, 0] = x[1, 0] = x[1, 2] = 0.0
        return x

    return draw


def args(*draws: Callable[[Rng], object]) -> Callable[[Rng], list[object]]:
    return lambda rng: [draw(rng) for draw in draws]


F, I64 = "f64", "i64"
N, M, K, T = 4, 3, 2, 5
CASES: list[Case] = []

UNARY = {"abs": away, "exp": normal, "expm1": normal, "log": positive, "log1p": positive,
         "sqrt": positive, "rsqrt": positive, "sin": normal, "cos": normal, "tan": small,
         "tanh": normal, "sigmoid": normal, "relu": away, "softplus": normal, "erf": normal,
         "sign": away, "floor": fractional, "ceil": fractional, "lgamma": gamma_domain,
         "digamma": gamma_domain, "sinh": normal, "cosh": normal, "arcsin": inside_unit,
         "arccos": inside_unit, "arctan": normal, "arcsinh": normal, "arccosh": above_one,
         "arctanh": inside_unit, "exp2": normal, "log2": positive, "log10": positive,
         "sinc": normal, "deg2rad": normal, "rad2deg": normal, "gamma": gamma_domain,
         "erfc": normal, "logit": lambda *shape: lambda rng: rng.uniform(0.1, 0.9, shape),
         "i0": normal, "i1": normal, "j0": normal, "j1": normal, "y0": positive,
         "y1": positive, "erfinv": inside_unit,
         "erfcinv": lambda *shape: lambda rng: rng.uniform(0.2, 1.8, shape)}
for _op, _draw in UNARY.items():
    CASES.append(Case(_op, "x", source(f"fn f(x: f64[N]) -> f64[N] {{ return {_op}(x); }}"),
                      args(_draw(N))))
CASES.append(Case("multigammaln", "x", source("fn f(x: f64[N]) -> f64[N] "
                                              "{ return multigammaln(x, 3); }"),
                  args(lambda rng: rng.uniform(1.5, 4.0, N))))
for _op, _order, _draw in (("jn", 4, normal), ("yn", 3, positive), ("iv", -1.5, positive),
                           ("ive", 2.5, positive), ("jv", 0.75, positive)):
    CASES.append(Case(_op, f"order{_order}", source(f"fn f(x: f64[N]) -> f64[N] "
                                                    f"{{ return {_op}({_order}, x * 3.0); }}"),
                      args(_draw(N))))
CASES += [
    Case("neg", "x", source("fn f(x: f64[N]) -> f64[N] { return -x * x; }"), args(normal(N))),
    Case("not", "where", source("fn f(x: f64[N]) -> f64[N] "
                                "{ return where(not (x > 0.0), x, 2.0 * x); }"),
         args(away(N))),
    Case("stop_gradient", "shift", lambda: ir_function(
        [("x", tensor_type(F, "N"))],
        lambda s, x: [s.mul(s.op("exp", [s.sub(x, s.op("stop_gradient", [x]))]),
                            s.op("exp", [s.op("stop_gradient", [x])]))]), args(normal(N))),
]

BINARY = {"add": ("a + b", normal, normal), "sub": ("a - b", normal, normal),
          "mul": ("a * b", normal, normal), "div": ("a / b", normal, away),
          "floordiv": ("a // b + a", fractional, positive), "pow": ("pow(a, b)", positive, normal),
          "maximum": ("max(a, b)", normal, normal), "minimum": ("min(a, b)", normal, normal),
          "lt": ("where(a < b, a * b, b)", normal, normal),
          "le": ("where(a <= b, a * b, b)", normal, normal),
          "gt": ("where(a > b, a * b, b)", normal, normal),
          "ge": ("where(a >= b, a * b, b)", normal, normal),
          "eq": ("where(a == b, a, b * b)", normal, normal),
          "ne": ("where(a != b, a * a, b)", normal, normal),
          "and": ("where(a > 0.0 and b > 0.0, a, b)", away, away),
          "or": ("where(a > 0.0 or b > 0.0, a, b)", away, away),
          "select": ("where(a > b, a * b, exp(b))", normal, normal),
          "arctan2": ("arctan2(a, b)", normal, away), "hypot": ("hypot(a, b)", away, normal),
          "logaddexp": ("logaddexp(a, b)", normal, normal),
          "logaddexp2": ("logaddexp2(a, b)", normal, normal),
          "beta": ("beta(a, b)", positive, positive),
          "betaln": ("betaln(a, b)", positive, positive)}
for _op, (_expr, _da, _db) in BINARY.items():
    CASES.append(Case(_op, "ab", source(f"fn f(a: f64[N], b: f64[N]) -> f64[N] "
                                        f"{{ return {_expr}; }}"), args(_da(N), _db(N))))

# differentiable in x only: a, from an integer argument, is not active
for _op in ("gammainc", "gammaincc"):
    CASES.append(Case(_op, "x", source(f"fn f(k: i64[N], x: f64[N]) -> f64[N] "
                                       f"{{ return {_op}(f64(k) + 0.5, x); }}"),
                      args(index(5, N), positive(N))))
CASES.append(Case("betainc", "x", source("fn f(k: i64[N], x: f64[N]) -> f64[N] "
                                         "{ return betainc(f64(k) + 0.5, 2.5, x / (x + 1.0)); }"),
                  args(index(5, N), positive(N))))


def _mod_args(rng: Rng) -> list[object]:
    b = rng.uniform(0.5, 2.0, N)
    return [(rng.integers(-3, 3, N) + rng.uniform(0.2, 0.8, N)) * b, b]


CASES += [
    Case("mod", "ab", source("fn f(a: f64[N], b: f64[N]) -> f64[N] { return a % b; }"),
         _mod_args),
    Case("cast", "f32", source("fn f(x: f64[N]) -> f64 { return sum(f64(f32(x)) * x); }"),
         args(normal(N)), eps=1e-2, rtol=1e-4, atol=1e-4),
    Case("cast", "int", source("fn f(x: f64[N], k: i64[N]) -> (f64[N], i64[N]) "
                               "{ return (f64(k) * x + f64(i64(x * 3.0)), i64(x)); }"),
         args(fractional(N), index(5, N))),
    Case("broadcast", "abc", source("fn f(a: f64[N, 1], b: f64[M], c: f64) -> f64[N, M] "
                                    "{ return a * b + c; }"),
         args(normal(N, 1), normal(M), normal())),
    Case("reduce_sum", "axis", source("fn f(x: f64[N, M]) -> f64[N] "
                                      "{ return sum(x * x, axis=1); }"), args(normal(N, M))),
    Case("reduce_prod", "axis", source("fn f(x: f64[N, M]) -> f64[N] "
                                       "{ return prod(x, axis=1); }"), args(away(N, M))),
    Case("reduce_prod", "zeros", source("fn f(x: f64[N, M]) -> f64[N] "
                                        "{ return prod(x, axis=1); }"), args(with_zeros(N, M)),
         twice=False),
    Case("scan", "cumsum", source("fn f(x: f64[N, M]) -> f64[N, M] "
                                  "{ return cumsum(x * x, axis=0); }"), args(normal(N, M))),
    Case("scan", "cumprod", source("fn f(x: f64[N, M]) -> f64[N, M] "
                                   "{ return cumprod(x, axis=1); }"), args(away(N, M))),
    Case("scan", "cumprod_zeros", source("fn f(x: f64[N, M]) -> f64[N, M] "
                                         "{ return cumprod(x, axis=1); }"),
         args(with_zeros(N, M)), twice=False),
    Case("argsort", "sort_topk", source(
        "fn f(x: f64[N, M]) -> (f64[N, M], f64[N, 2], i64[N, M]) "
        "{ return (sort(x, axis=0, descending=true), topk(x * x, 2), argsort(x)); }"),
        args(normal(N, M))),
    Case("reduce_max", "axis", source("fn f(x: f64[N, M]) -> f64[N] "
                                      "{ return max(x, axis=1); }"), args(normal(N, M))),
    Case("reduce_min", "all", source("fn f(x: f64[N, M]) -> f64 { return min(x); }"),
         args(normal(N, M))),
    Case("argmax", "axis", source("fn f(x: f64[N, M]) -> (i64[N], f64) "
                                  "{ return (argmax(x, axis=1), sum(x * x)); }"),
         args(normal(N, M))),
    Case("argmin", "all", source("fn f(x: f64[N, M]) -> i64 { return argmin(x); }"),
         args(normal(N, M))),
    Case("transpose", "3d", source("fn f(x: f64[N, M, K]) -> f64[K, N, M] "
                                   "{ return transpose(x, (2, 0, 1)) * 2.0; }"),
         args(normal(N, M, K))),
    Case("reshape", "flat", source("fn f(x: f64[N, M]) -> f64[M * N] "
                                   "{ return sin(reshape(x, (N * M,))); }"),
         args(normal(N, M))),
    Case("slice", "strided", source("fn f(x: f64[N, M]) { return sin(x[1:, ::2]) + x[:N-1, :1]; }"),
         args(normal(N, M))),
    Case("concat", "axis1", source("fn f(x: f64[N, M], y: f64[N]) "
                                   "{ return concat((x, x * x, reshape(y, (N, 1))), axis=1); }"),
         args(normal(N, M), normal(N))),
    Case("roll", "axis1", source("fn f(x: f64[N, M]) { return roll(x * x, 1, axis=1); }"),
         args(normal(N, M))),
    Case("dynamic_index", "argument", source("fn f(xs: f64[T, M], t: i64) -> f64[M] "
                                             "{ return xs[t] * xs[t]; }"),
         args(normal(T, M), index(T))),
    Case("dynamic_index", "constant", source("fn f(x: f64[N, M]) { return sin(x[-1, 2]); }"),
         args(normal(N, M))),
]

MATMULS = {"2d-2d": ("N, K", "K, M"), "1d-2d": ("K", "K, M"), "2d-1d": ("N, K", "K"),
           "1d-1d": ("K", "K")}
for _name, (_a, _b) in MATMULS.items():
    _shapes = [tuple(DIMS[d.strip()] for d in t.split(",")) for t in (_a, _b)]
    CASES.append(Case("matmul", _name, source(f"fn f(a: f64[{_a}], b: f64[{_b}]) "
                                              "{ return a @ b; }"),
                      args(normal(*_shapes[0]), normal(*_shapes[1]))))


def _pad_function() -> Function:
    attrs = {"shape": (2 * Dim.sym("N") + 1,), "starts": (Dim.const(1),), "steps": (2,)}
    return ir_function([("x", tensor_type(F, "N"))],
                       lambda s, x: [s.op("pad", [s.mul(x, x)], attrs)])


def _scatter_function() -> Function:
    attrs = {"shape": (Dim.sym("T"), Dim.sym("M")), "axis": 0, "label": "rows"}
    return ir_function([("g", tensor_type(F, "M")), ("t", tensor_type(I64))],
                       lambda s, g, t: [s.op("dynamic_scatter", [s.op("exp", [g]), t], attrs)])


def _read_function() -> Function:
    attrs = {"modes": ("checked",), "label": "x"}
    return ir_function([("x", tensor_type(F, "N")), ("i", tensor_type(I64))],
                       lambda s, x, i: [s.op("sin", [s.op("read", [x, i], attrs)])])


def _generic_scatter_function() -> Function:
    """out[labels[n]] += sin(v[n]) over n, a scatter-add with checked positions."""
    from reverie.compiler.ir.core import Block, Value
    from reverie.compiler.ir.scope import Scope
    from reverie.compiler.ir.types import scalar

    def build(s: Scope, v: Value, labels: Value) -> list[Value]:
        n = Value(scalar(I64), name="n")
        params = [Value(v.type, name="v"), Value(labels.type, name="labels")]
        body = Scope(Block(params=[n, *params]))
        direct = {"modes": ("direct",), "label": "v"}
        position = body.op("read", [params[1], n], direct)
        body.block.results = [position, body.op("sin", [body.op("read", [params[0], n],
                                                                direct)])]
        attrs = {"shape": (Dim.sym("M"),), "indices": (("n", Dim.const(0), Dim.sym("N")),),
                 "modes": ("checked",), "label": "out"}
        return [s.op("generic_scatter", [v, labels], attrs, [body.block])]

    return ir_function([("v", tensor_type(F, "N")), ("labels", tensor_type(I64, "N"))], build)


def _history_function(stride: int, trip: bool = False) -> Function:
    """for_history of h ← sin(h) · w + h over t in 0..steps (rows = 6; with `trip`, the
    trip dimension of `trip_dim steps`, and the history summed over its rows, which does
    not depend on the capacity the call chose)."""
    from reverie.compiler.ir.core import Block, Value
    from reverie.compiler.ir.scope import Scope
    from reverie.compiler.ir.types import scalar

    def build(s: Scope, h0: Value, w: Value, steps: Value) -> list[Value]:
        params = [Value(scalar(I64), name="t"), Value(h0.type, name="h"),
                  Value(w.type, name="w")]
        body = Scope(Block(params=params))
        _, h, w1 = params
        body.block.results = [body.add(body.mul(body.op("sin", [h]), w1), h)]
        zero = s.const(0, scalar(I64))
        rows = Dim.sym("#T0") if trip else Dim.const(6)
        if trip:
            steps = s.op("trip_dim", [steps], {"dim": rows})
        attrs = {"carried": 1, "rows": rows, "stride": stride}
        final, history = s.emit("for_history", [zero, steps, h0, w], attrs,
                                [body.block]).results
        return [final, s.op("reduce_sum", [history], {"axes": [0]}) if trip else history]

    return ir_function([("h0", tensor_type(F, "N")), ("w", tensor_type(F, "N")),
                        ("steps", tensor_type(I64))], build)


def _polygamma_function() -> Function:
    return ir_function([("x", tensor_type(F, "N"))],
                       lambda s, x: [s.op("polygamma", [x], {"order": 2})])


CASES += [
    Case("polygamma", "order2", _polygamma_function, args(gamma_domain(N))),
    Case("pad", "strided", _pad_function, args(normal(N))),
    Case("dynamic_scatter", "argument", _scatter_function, args(normal(M), index(T))),
    Case("read", "top-level", _read_function, args(normal(N), index(N)), reverse=False),
    Case("generic_scatter", "labels", _generic_scatter_function,
         args(normal(N), index(M, N))),
    Case("for_history", "stride1", lambda: _history_function(1), args(small(N), small(N),
                                                                      index(6))),
    Case("for_history", "stride2", lambda: _history_function(2), args(small(N), small(N),
                                                                      index(6))),
    Case("trip_dim", "history", lambda: _history_function(1, trip=True),
         args(small(N), small(N), index(6))),
    Case("generic", "matmul", source("fn f(A: f64[N, K], B: f64[K, M]) -> f64[N, M] "
                                     "{ let C[i, j] = sum[k](A[i, k] * B[k, j]); return C; }"),
         args(normal(N, K), normal(K, M))),
    Case("generic", "stencil", source("fn f(x: f64[N], k: f64[K]) -> f64[N] "
                                      "{ let y[i in 0..N] = sum[j](x[i + j - 1] * k[j]); "
                                      "return tanh(y); }"), args(normal(N), normal(K))),
    Case("generic", "gather", source("fn f(z: f64[N, M], labels: i64[N]) -> f64[N] "
                                     "{ let p[n] = z[n, labels[n]] * z[n, 0]; return p; }"),
         args(normal(N, M), index(M, N))),
    Case("generic", "max", source("fn f(A: f64[N, M], x: f64[M]) -> f64[N] "
                                  "{ let m[i] = max[j](A[i, j] * x[j]); return m; }"),
         args(normal(N, M), normal(M))),
    Case("generic", "prod", source("fn f(A: f64[N, M]) -> f64[N] "
                                   "{ let p[i] = prod[j](A[i, j] + 0.5); return p; }"),
         args(normal(N, M))),
    Case("generic", "scalar", source("fn f(x: f64[N], c: f64) -> f64[N] "
                                     "{ let y[i] = x[i] * c + min[j](x[j] * c); return y; }"),
         args(normal(N), normal())),
    Case("for", "argument", source(
        "fn f(x: f64[N], w: f64[N], steps: i64) -> (f64[N], i64) { var u = x; var c = 0; "
        "for t in 0..steps { u = roll(u, 1) * w + sin(u); c = c + t; } return (u, c); }"),
        args(small(N), small(N), index(4))),
    Case("for", "constant", source(
        "fn f(x: f64[N], w: f64[N]) -> f64 { var u = x; var s = 0.0; "
        "for t in 0..3 { u = tanh(u * w); s = s + sum(u); } return s; }"),
        args(normal(N), normal(N))),
    Case("if", "scalar_condition", source(
        "fn f(x: f64[N], w: f64[N]) -> f64[N] { var u = x; "
        "if sum(x * w) > 0.0 { u = sin(u) * w; } else { u = u * u + w; } return u; }"),
        args(normal(N), normal(N))),
    Case("while", "halving", source(
        "fn f(x: f64[N], w: f64[N]) -> (f64[N], i64) { var u = x * w; var k = 0; "
        "while max(abs(u)) > 0.1 and k < 8 { u = tanh(u) * 0.5 + 0.01 * w; k = k + 1; } "
        "return (u, k); }"), args(normal(N), normal(N))),
]
# linear algebra (ir/ops_linalg.py): well-conditioned matrices, symmetric where read so
_EYE = "let eye[i in 0..N, j in 0..N] = where(i == j, 1.0, 0.0);"
CASES += [
    Case("cholesky", "spd", source(
        f"fn f(x: f64[N, N]) -> f64[N, N] {{ {_EYE} return cholesky(x @ x.T + 4.0 * eye); }}"),
        args(normal(N, N))),
    Case("triangular_solve", "flags", source(
        f"fn f(a: f64[N, N], b: f64[N, M]) -> (f64[N, M], f64[N, M]) {{ {_EYE} "
        "return (triangular_solve(a + 4.0 * eye, b, lower=false, transpose=true), "
        "triangular_solve(a, b, unit_diagonal=true)); }"), args(normal(N, N), normal(N, M))),
    Case("solve", "inv", source(
        f"fn f(a: f64[N, N], b: f64[N, M]) -> (f64[N, M], f64[N, N]) {{ {_EYE} "
        "return (solve(a + 4.0 * eye, b), inv(a + 4.0 * eye)); }"),
        args(normal(N, N), normal(N, M))),
    Case("slogdet", "sign_log", source(
        f"fn f(a: f64[N, N]) -> f64 {{ {_EYE} let (s, l) = slogdet(a + 4.0 * eye); "
        "return s * l; }"), args(normal(N, N))),
    Case("det", "det", source(
        f"fn f(a: f64[N, N]) -> f64 {{ {_EYE} return det(a + 4.0 * eye); }}"),
        args(normal(N, N))),
    Case("eigh", "values_vectors", source(
        "fn f(x: f64[N, N]) -> (f64[N], f64[N, N]) { let (w, v) = eigh(x + x.T); "
        "return (w, v * v); }"), args(normal(N, N))),
    Case("svd", "tall", source(
        "fn f(a: f64[4, 3]) -> (f64[4, 3], f64[3], f64[3, 3]) { "
        "let (u, s, vh) = svd(a, full_matrices=false); return (u * u, s, vh * vh); }"),
        args(normal(4, 3))),
    Case("qr", "tall_wide", source(
        "fn f(a: f64[4, 3], b: f64[3, 4]) -> (f64[4, 3], f64[3, 3], f64[3, 3], f64[3, 4]) { "
        "let (q, r) = qr(a); let (p, t) = qr(b); return (q, r, p, t); }"),
        args(normal(4, 3), normal(3, 4))),
]
IDS = [case.id for case in CASES]


def test_every_op_has_a_case() -> None:
    covered = {case.op for case in CASES}
    assert sorted(set(OPS) - covered - {"const", "dim"}) == []


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_uses_its_op(case: Case) -> None:
    assert case.op in {op.name for op in case.build().body.walk()}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jvp_matches_central_differences(case: Case) -> None:
    inputs = case.sample(np.random.default_rng(1))
    for tangent, central in jvp_error(case.build(), inputs, DIMS, eps=case.eps):
        np.testing.assert_allclose(tangent, central, rtol=case.rtol, atol=case.atol)


def _assert_batch_matches_loop(fn: Function, arg_sets: list[list[object]],
                               batched: list[int]) -> None:
    for got, want in batch_error(fn, arg_sets, DIMS, batched):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_batching_matches_a_loop(case: Case) -> None:
    fn = case.build()
    arg_sets = [case.sample(np.random.default_rng(seed)) for seed in range(3)]
    for batched in [[i] for i in range(len(fn.params))] + [list(range(len(fn.params)))]:
        _assert_batch_matches_loop(fn, arg_sets, batched)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_batched_jvp_matches_a_loop(case: Case) -> None:
    fn = case.build()
    wrt = float_params(fn)
    jvp = jvp_function(fn, wrt)
    primal = case.sample(np.random.default_rng(0))
    rng = np.random.default_rng(5)
    arg_sets = [primal + [rng.standard_normal(np.shape(primal[i])) for i in wrt]
                for _ in range(3)]
    _assert_batch_matches_loop(jvp, arg_sets, list(range(len(fn.params), len(jvp.params))))


@pytest.mark.parametrize("case", [c for c in CASES if c.reverse and any(
    t.is_float for t in c.build().result_types)], ids=lambda c: c.id)
def test_batched_vjp_matches_a_loop(case: Case) -> None:
    """Every reverse case with a float result (others have no cotangent to batch)."""
    fn = case.build()
    vjp = vjp_function(fn, float_params(fn))
    primal = case.sample(np.random.default_rng(0))
    outputs = run(fn, primal, DIMS)
    rng = np.random.default_rng(6)
    arg_sets = [primal + [rng.standard_normal(o.shape) if o.dtype.kind == "f" else o * 0
                          for o in outputs] for _ in range(3)]
    cotangents = [len(fn.params) + j for j, o in enumerate(outputs) if o.dtype.kind == "f"]
    _assert_batch_matches_loop(vjp, arg_sets, cotangents)


@pytest.mark.parametrize("case", [c for c in CASES if c.reverse and c.twice],
                         ids=lambda c: c.id)
def test_jvp_is_differentiable_by_reverse_mode(case: Case) -> None:
    """The dot-product test on the JVP function: ⟨u, J v⟩ by differences = ⟨Jᵀ u, v⟩
    (not at the zeros of a product, where the exact rule's selects have no derivative)."""
    fn = case.build()
    jvp = jvp_function(fn, float_params(fn))
    primal = case.sample(np.random.default_rng(3))
    tangents = [np.random.default_rng(4).standard_normal(np.shape(primal[i]))
                for i in float_params(fn)]
    forward, backward = dot_product_test(jvp, primal + tangents, DIMS, eps=case.eps)
    assert forward == pytest.approx(backward, rel=max(case.rtol, 1e-5), abs=case.atol * 10)


@pytest.mark.parametrize("case", [c for c in CASES if c.op in ("generic", "for", "matmul")],
                         ids=lambda c: c.id)
def test_batched_functions_are_differentiable_again(case: Case) -> None:
    fn = batch_function(case.build(), [0])
    inputs = case.sample(np.random.default_rng(2))
    inputs[0] = np.stack([inputs[0], inputs[0] * 0.5])
    dims = {**DIMS, "B": 2}
    for tangent, central in jvp_error(fn, inputs, dims):
        np.testing.assert_allclose(tangent, central, rtol=1e-5, atol=1e-6)

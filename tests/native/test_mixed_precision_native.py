"""bf16 and f16 kernels in native code, family by family: elementwise ops, reductions, matrix
products, softmax/logsumexp, scans, gathers and scatters, index notation, `for`/`while`
loops carrying bf16/f16 values, sorts.

Each native result is compared with the NumPy reference interpreter's (the oracle: every op
computes in f32 and rounds its result, docs/language.md) in units in the last place of the
16-bit type: bit for bit where every op is correctly rounded in both (arithmetic, casts,
selects, sqrt, gathers, loops of those); within one ulp where an f32 intermediate may differ
in its last bits and so round the other way (the math library's transcendentals against
NumPy's, sums in another order, BLAS against NumPy's matmul). And with torch eager in bf16/f16,
which rounds after every op as well: within one ulp (its transcendentals are its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np
import pytest
import torch
from native_helpers import run_both, specialised
from storage_helpers import BF16, STORAGE, TORCH, assert_close_in_ulps

from reverie.compiler.backend.bf16_products import bf16_products
from reverie.compiler.loops.ir import Accumulate, Matmul, walk
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.pipeline import compile_function
from reverie.runtime.native.call import bind_arguments

Arrays = tuple[np.ndarray | int, ...]


@dataclass(frozen=True)
class Case:
    """A kernel (`T` standing for the 16-bit type), its arguments, torch's results and how
    many ulps from the interpreter's each native result may be (0: bit for bit)."""

    source: str
    arguments: Callable[[np.dtype, np.random.Generator], Arrays]
    torch: Callable[..., tuple[torch.Tensor, ...]] | None
    within: int = 0

# torch eager rounds every op, Reverie where values are stored: results differ by a few units
# of roundoff of their scale
EAGER_ROUNDOFFS = 4
EPS = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}


def normal(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator,
           scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


def positive(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(0.05, 4.0, shape).astype(dtype)


def shifted(x: torch.Tensor) -> torch.Tensor:
    return x - x.max(-1, keepdim=True).values


def shifted_exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(shifted(x))


CASES = {
    "arithmetic": Case(
        """fn f(a: T[N, D], b: T[D], s: T) -> (T[N, D], T[N, D], T[N, D], T[N, D], T[N, D],
                                                T[N, D], bool[N, D]) {
            return (a * b + s, a - b / s, a // b, a % b, where(a > b, max(a, b), min(a, -s)),
                    abs(a) ** 2.0 - sqrt(abs(b)), a <= b); }""",
        lambda t, r: (normal((7, 33), t, r, 3), normal((33,), t, r), np.asarray(0.7, t)),
        lambda a, b, s: (a * b + s, a - b / s, torch.floor_divide(a, b), torch.remainder(a, b),
                         torch.where(a > b, torch.maximum(a, b), torch.minimum(a, -s)),
                         a.abs() ** 2.0 - b.abs().sqrt(), a <= b)),
    "transcendental": Case(
        """fn f(x: T[N], p: T[N]) -> (T[N], T[N], T[N], T[N], T[N], T[N], T[N], T[N]) {
            return (exp(x), log(p), tanh(x), sigmoid(x), sin(x), erf(x), rsqrt(p),
                    softplus(x)); }""",
        lambda t, r: (normal((1000,), t, r, 3), positive((1000,), t, r)),
        lambda x, p: (x.exp(), p.log(), x.tanh(), x.sigmoid(), x.sin(), x.erf(), p.rsqrt(),
                      torch.nn.functional.softplus(x)),
        within=1),
    "casts": Case(
        """fn f(x: T[N], y: f32[N], n: i32[N]) -> (f32[N], T[N], f64, T[N], i64[N]) {
            return (f32(x) * y, x * 0.1 + T(y), f64(x[0]), T(n) / 3.0, i64(x * 100.0)); }""",
        lambda t, r: (normal((29,), t, r), normal((29,), np.float32, r),
                      r.integers(-300, 300, 29).astype(np.int32)),
        None),
    "reductions": Case(
        """fn f(x: T[N, D]) -> (T, T[N], T[D], T, T, i64[N], T) {
            return (sum(x), mean(x, axis=1), max(x, axis=0), min(x), prod(x[0, :8]),
                    argmax(x, axis=1), sum(x * x) / 3.0); }""",
        lambda t, r: (normal((17, 300), t, r),),
        lambda x: (x.sum(), x.mean(1), x.max(0).values, x.min(), x[0, :8].prod(),
                   x.argmax(1), (x * x).sum() / 3.0),
        within=1),
    "matmul": Case(
        """fn f(a: T[M, K], b: T[K, N], v: T[K], c: T[M, N]) -> (T[M, N], T[M], T[M, N]) {
            return (a @ b, a @ v, tanh(a @ b + c)); }""",
        lambda t, r: (normal((33, 70), t, r), normal((70, 9), t, r), normal((70,), t, r),
                      normal((33, 9), t, r)),
        lambda a, b, v, c: (a @ b, a @ v, torch.tanh(a @ b + c)),
        within=1),
    "softmax": Case(
        """fn f(x: T[N, D]) -> (T[N, D], T[N], T[N, D]) {
            return (softmax(x), logsumexp(x, axis=1), log_softmax(x)); }""",
        lambda t, r: (normal((6, 40), t, r, 3),),
        # softmax is `exp(x - max) / sum(...)` and log_softmax `(x - max) - log(sum(...))`,
        # each op rounded, as torch eager's compositions (torch.softmax and log_softmax
        # round once: up to ~16 and 8 ulps away, from the rounding of x - max)
        lambda x: (shifted_exp(x) / shifted_exp(x).sum(-1, keepdim=True),
                   torch.logsumexp(x, 1),
                   shifted(x) - shifted_exp(x).sum(-1, keepdim=True).log()),
        within=1),
    "scans": Case(
        """fn f(x: T[N, D]) -> (T[N, D], T[N, D]) {
            return (cumsum(x, axis=1), cumprod(x, axis=0)); }""",
        lambda t, r: (normal((6, 40), t, r),),
        lambda x: (torch.cumsum(x, 1), torch.cumprod(x, 0)),
        within=1),
    "gathers": Case(
        """fn f(t: T[V, D], ids: i64[N], w: T[D]) -> (T[N, D], T[N], T[V, D]) {
            let g[n, d] = t[ids[n], d] * 2.0;
            let s[n] = sum[d](t[ids[n], d] * w[d]);
            var u = t;
            u[0] = w;
            return (g, s, u); }""",
        lambda t, r: (normal((7, 5), t, r), r.integers(0, 7, 11), normal((5,), t, r)),
        None, within=1),
    "index notation": Case(
        """fn f(a: T[M, K], b: T[K, N], x: T[N]) -> (T[M, N], T[N], T[N]) {
            let c[m, n] = sum[k](a[m, k] * b[k, n]);
            let running[i in 0..N] = max[j in 0..i + 1](x[j]);
            let band[i in 0..N] = sum[j in i - 1..i + 2](x[j]);
            return (c, running, band); }""",
        lambda t, r: (normal((5, 300), t, r), normal((300, 4), t, r), normal((4,), t, r)),
        None, within=1),
    "for loop": Case(
        """fn f(u0: T[N], steps: i64) -> (T[N], T) {
            var u = u0;
            var total = 0.0;
            for t in 0..steps {
                u = u + 0.1 * (roll(u, 1) - 2.0 * u + roll(u, -1));
                total = total + u[0];
            }
            return (u, T(total)); }""",
        lambda t, r: (normal((31,), t, r), 7),
        None),
    "while loop": Case(
        """fn f(s: T[N]) -> (T[N], i64) {
            var y = max(s, 1.0);
            var steps = 0;
            var residual = max(abs(y * y - s) / s);
            while residual > 0.01 and steps < 30 {
                y = 0.5 * (y + s / y);
                residual = max(abs(y * y - s) / s);
                steps = steps + 1;
            }
            return (y, steps); }""",
        lambda t, r: (positive((31,), t, r),),
        None),
    "sorts": Case(
        "fn f(x: T[N]) -> (T[N], i64[N]) { return (sort(x), argsort(x)); }",
        lambda t, r: (normal((29,), t, r),),
        lambda x: (torch.sort(x, stable=True).values, torch.argsort(x, stable=True))),
}


def run_case(name: str, dtype: str) -> tuple[list[np.ndarray], list[np.ndarray], Arrays]:
    case = CASES[name]
    arguments = case.arguments(STORAGE[dtype], np.random.default_rng(len(name)))
    fn = specialised(case.source.replace("T", dtype), "f", "f32")
    got, want = run_both(fn, *arguments)
    return got, [np.asarray(w) for w in want], arguments


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("name", CASES)
def test_native_equals_the_interpreter(name: str, dtype: str) -> None:
    with np.errstate(all="ignore"):
        got, want, _ = run_case(name, dtype)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype)
        if w.dtype.itemsize == 2:
            assert_close_in_ulps(g, w, CASES[name].within, k)
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"result {k}")


LOOP_INTERPRETED = ["arithmetic", "casts", "gathers", "index notation", "for loop",
                    "while loop", "sorts"]


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("name", LOOP_INTERPRETED)
def test_the_loop_interpreter_agrees(name: str, dtype: str) -> None:
    """The loop program that native code is made of, run by the loop IR's interpreter."""
    case = CASES[name]
    arguments = case.arguments(STORAGE[dtype], np.random.default_rng(len(name)))
    fn = specialised(case.source.replace("T", dtype), "f", "f32")
    bound = bind_arguments(fn, arguments)
    with np.errstate(all="ignore"):
        looped = run_program(compile_function(fn, "to_loops"), bound.arrays, bound.dims)
        got, _ = run_both(fn, *arguments)
    for k, (g, w) in enumerate(zip(got, looped, strict=True)):
        if g.dtype.itemsize == 2:
            assert_close_in_ulps(g, np.asarray(w), case.within, k)
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"result {k}")


@pytest.mark.parametrize("dtype", STORAGE)
def test_casts_to_integers_of_nan_and_infinities_agree_at_every_level(dtype: str) -> None:
    """INT_MIN, as NumPy's f32 casts give on x86 (ml_dtypes' own bf16 casts give 0: the
    interpreters read bf16/f16 as f32 first)."""
    fn = specialised("fn f(x: T[N]) -> (i32[N], i64[N]) { return (i32(x), i64(x)); }"
                     .replace("T", dtype), "f", "f32")
    with np.errstate(all="ignore"):
        x = np.array([np.nan, np.inf, -np.inf, 1e30, -3.7, 2.5]).astype(STORAGE[dtype])
        bound = bind_arguments(fn, [x])
        looped = run_program(compile_function(fn, "to_loops"), bound.arrays, bound.dims)
        got, want = run_both(fn, x)
    for g, w, loop in zip(got, want, looped, strict=True):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(loop, w)
        assert list(g[:4]) == [np.iinfo(g.dtype).min] * 4 and list(g[4:]) == [-3, 2]


def to_torch(value: np.ndarray | int, dtype: str) -> torch.Tensor | int:
    if isinstance(value, int):
        return value
    if value.dtype == STORAGE[dtype]:
        return torch.from_numpy(value.astype(np.float32)).to(TORCH[dtype])
    return torch.from_numpy(np.asarray(value))


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("name", [name for name, case in CASES.items() if case.torch])
def test_native_is_near_torch_eager(name: str, dtype: str) -> None:
    """torch eager rounds after every op, Reverie where values are stored: a few ulps."""
    with np.errstate(all="ignore"):
        got, _, arguments = run_case(name, dtype)
    expected = CASES[name].torch(*(to_torch(a, dtype) for a in arguments))
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        if e.dtype == TORCH[dtype]:  # in units of roundoff of the result's scale: a*b + s
            theirs = e.float().numpy()  # cancels, where ulps of the result itself would grow
            scale = float(np.abs(theirs[np.isfinite(theirs)]).max(initial=1e-30))
            difference = np.abs(np.asarray(g, np.float32) - theirs)
            finite = np.isfinite(theirs)
            np.testing.assert_array_equal(np.isfinite(np.asarray(g, np.float32)), finite)
            assert difference[finite].max(initial=0) <= EAGER_ROUNDOFFS * EPS[dtype] * scale, k
        else:
            np.testing.assert_array_equal(g, e.numpy(), err_msg=f"result {k}")


def test_a_bf16_matrix_product_is_an_f32_product_of_converted_panels() -> None:
    """After the widening pass a bf16 `@` is one f32 `Matmul` (BLAS or the own kernel) of
    operands converted by vectorised loops, rounded once: no per-element product. (Where
    the host has `vdpbf16ps` at 512 bits, its operands are the bf16 buffers instead:
    tests/native/test_bf16_gemm.py.)"""
    fn = specialised("fn f(a: bf16[M, K], b: bf16[K, N]) -> bf16[M, N] { return a @ b; }",
                     "f", "f32")
    program = compile_function(fn, "to_loops")
    (product,) = [s for s in walk(program.body) if isinstance(s, Matmul)]
    operands = "bf16" if bf16_products(llvm.get_host_cpu_features()) else "f32"
    assert (product.a.buffer.dtype, product.b.buffer.dtype, product.out.buffer.dtype) == \
        (operands, operands, "f32")
    assert not [s for s in walk(program.body) if isinstance(s, Accumulate)]


def test_an_expression_rounds_once_where_torch_eager_rounds_twice() -> None:
    """`a * b + c` rounds once, where it is returned (torch eager rounds after `*` and after
    `+`): (1 + 2⁻⁷)² + 2⁻⁸ is above the midpoint 1 + 2⁻⁶ + 2⁻⁸, so it rounds up to
    1 + 3·2⁻⁷; torch's rounded product 1 + 2⁻⁶ plus 2⁻⁸ is on it, and the tie goes to the
    even 1 + 2⁻⁶. A `let` stores nothing: the same with the product bound to a name."""
    a, b, c = (np.asarray(v, BF16) for v in (1 + 2**-7, 1 + 2**-7, 2**-8))
    factor = torch.tensor(1 + 2**-7, dtype=torch.bfloat16)
    eager = factor * factor + torch.tensor(2**-8, dtype=torch.bfloat16)
    assert float(eager) == 1 + 2**-6
    for body in ("return a * b + c;", "let p = a * b; return p + c;"):
        fn = specialised(f"fn f(a: bf16, b: bf16, c: bf16) -> bf16 {{ {body} }}", "f", "f32")
        got, want = run_both(fn, a, b, c)
        assert float(got[0]) == float(want[0]) == 1 + 3 * 2**-7, body


def test_a_loop_rounds_the_state_it_carries() -> None:
    """A `for` loop stores its state: each step's sum is rounded to bf16 (1 + 2⁻⁹ is lost
    every time), where the same sum written out rounds once."""
    a = np.asarray(2**-9, BF16)
    fn = specialised("fn f(a: bf16) -> bf16 { var s = 1.0; for t in 0..4 { s = s + a; } "
                     "return s; }", "f", "f32")
    got, want = run_both(fn, a)
    assert float(got[0]) == float(want[0]) == 1.0
    fn = specialised("fn f(a: bf16) -> bf16 { return 1.0 + a + a + a + a; }", "f", "f32")
    got, want = run_both(fn, a)
    assert float(got[0]) == float(want[0]) == 1 + 2**-7

"""bf16 and f16 in the language and the tensor IR: typing, the rule of storage types
(compute in f32, round where a value is stored: an expression is its f32 computation rounded
once, checked bit for bit against NumPy in f32 and within torch eager's per-op rounding), and
the pass `widen_storage`, which writes that rule out for the interpreter and the back ends.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.widen_storage import widen_storage
from reverie.compiler.pipeline import Request, compile_source
from reverie.dsl.diagnostics import CompileError

STORAGE = {"bf16": (ml_dtypes.bfloat16, torch.bfloat16), "f16": (np.float16, torch.float16)}
DIMS = {"N": 6, "D": 3, "H": 4}

# Each kernel beside the same computation written for an array namespace (NumPy in f32, torch)
KERNELS = {
    "chain": ("fn k(x: DT[N], y: DT[N]) -> DT[N] { return tanh(x * y + 1.5) / (y * y + 1.0); }",
              lambda xp, x, y: xp.tanh(x * y + 1.5) / (y * y + 1.0)),
    "exp_log": ("fn k(x: DT[N], y: DT[N]) -> DT[N] { return exp(x) - log(abs(y) + 2.0); }",
                lambda xp, x, y: xp.exp(x) - xp.log(abs(y) + 2.0)),
    "sum": ("fn k(x: DT[N], y: DT[N]) -> DT { return sum(x * y); }",
            lambda xp, x, y: (x * y).sum()),
    "where": ("fn k(x: DT[N], y: DT[N]) -> DT[N] { return where(x > y, x - y, max(x, y)); }",
              lambda xp, x, y: xp.where(x > y, x - y, xp.maximum(x, y))),
}
ULP = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}  # a unit of roundoff relative to the value

TRANSFORMED = """
fn a(x: DT[N, D], w: DT[D, H]) -> DT { return mean(softmax(tanh(x @ w), axis=1) * 3.0); }
fn b(x: DT[N]) -> DT { var s = 0.0; for t in 0..4 { s = s + sum(exp(x) * x) / 10.0; }
                       return s; }
fn c(x: DT[N]) -> DT { let y[i] = x[i] * 2.0 + x[i] ** 2;
                       return logsumexp(y) + max(where(x > 0.5, x, -x)); }
fn d(x: DT[N]) -> DT { return sum(cumsum(x, axis=0) * sort(x)); }
"""


def _bits(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    return array.view(np.uint16) if array.dtype.itemsize == 2 else array


def _lowered(source: str, name: str, transform: str | None = None) -> Function:
    return compile_source(source, stop=transform or "lower",
                          request=Request(function=name, transform=transform))


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("kernel", KERNELS)
def test_an_expression_is_its_f32_computation_rounded_once(dtype: str, kernel: str) -> None:
    source, computation = KERNELS[kernel]
    numpy_dtype, torch_dtype = STORAGE[dtype]
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(DIMS["N"] * 50).astype(numpy_dtype) for _ in range(2))
    fn = _lowered(source.replace("DT", dtype), "k")
    (ours,) = interpret(fn, [x, y], {"N": x.size})
    assert np.asarray(ours).dtype == numpy_dtype
    in_f32 = computation(np, x.astype(np.float32), y.astype(np.float32))
    if kernel == "sum":  # NumPy's pairwise f32 sum against Reverie's f64 accumulator
        in_f32 = np.sum(x.astype(np.float64) * y.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(_bits(ours), _bits(np.asarray(in_f32).astype(numpy_dtype)))
    torch_args = (torch.from_numpy(a.astype(np.float32)).to(torch_dtype) for a in (x, y))
    eager = computation(torch, *torch_args).float().numpy()  # rounds after every op
    scale = np.abs(in_f32).max()
    np.testing.assert_allclose(np.float32(ours), eager, rtol=0, atol=4 * ULP[dtype] * scale)


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("name", "abcd")
@pytest.mark.parametrize("transform", [None, "reverse", "forward"])
def test_widen_storage_changes_no_bit(dtype: str, name: str, transform: str | None) -> None:
    fn = _lowered(TRANSFORMED.replace("DT", dtype), name, transform)
    widened = widen_storage(fn)
    rng = np.random.default_rng(7)
    args = [rng.standard_normal([DIMS[str(d)] for d in p.type.shape]).astype(STORAGE[dtype][0])
            for p in fn.params]
    expected, got = interpret(fn, args, DIMS), interpret(widened, args, DIMS)
    assert [np.asarray(r).dtype for r in got] == [STORAGE[dtype][0]] * len(expected)
    for want, have in zip(expected, got, strict=True):
        np.testing.assert_array_equal(_bits(have), _bits(want))


def test_widened_functions_compute_in_f32_and_round_each_result() -> None:
    fn = widen_storage(_lowered("fn k(x: bf16[N]) -> bf16 { return sum(exp(x[1:]) * x[1:]); }",
                                "k"))
    computing = [op for op in fn.body.ops if op.name in ("exp", "mul", "reduce_sum")]
    assert [op.result.type.dtype for op in computing] == ["f32"] * 3
    assert all(op.name in ("cast", "slice", "exp", "mul", "reduce_sum") for op in fn.body.ops)
    assert fn.body.results[0].op.name == "cast"
    plain = _lowered("fn k(x: f32[N]) -> f32 { return sum(x); }", "k")
    assert widen_storage(plain) is plain


def test_adjoints_are_stored_in_the_primal_dtype() -> None:
    fn = _lowered("fn k(x: f16[N], w: f16[N]) -> f16 { return sum(tanh(x * w)); }", "k",
                  "reverse")
    assert [t.dtype for t in fn.result_types] == ["f16", "f16", "f16"]


@pytest.mark.parametrize("source, message", [
    ("fn k(x: bf16[N], y: f32[N]) -> f32[N] { return x * y; }", "cannot mix bf16 and f32"),
    ("fn k(x: bf16[N], y: f16[N]) -> f16[N] { return x + y; }", "cannot mix bf16 and f16"),
    ("fn k(x: f16[N]) -> f32[N] { return x; }", "f32"),
])
def test_mixing_storage_types_is_a_compile_error(source: str, message: str) -> None:
    with pytest.raises(CompileError, match=message):
        rv.compile(source)


def test_casts_and_literals_take_the_storage_types() -> None:
    fn = _lowered("fn k(x: f32[N]) -> bf16[N] { return bf16(x) * 0.1; }", "k")
    (result,) = interpret(fn, [np.full(3, 3.0, np.float32)], {"N": 3})
    weak = np.float32(3.0) * np.float32(ml_dtypes.bfloat16(0.1))  # the literal is bf16 (JAX's)
    np.testing.assert_array_equal(result, np.full(3, weak).astype(ml_dtypes.bfloat16))


def test_float_kernels_specialise_to_storage_types() -> None:
    module = rv.compile("fn f(x: float[N]) -> float { return sum(x * x); }", backend="interp")
    x = np.arange(4.0)
    assert np.asarray(module.f(x.astype(ml_dtypes.bfloat16))).dtype == ml_dtypes.bfloat16
    assert np.asarray(module.f(x.astype(np.float16))).dtype == np.float16
    with pytest.raises(TypeError, match="bfloat16 .* and float16"):
        rv.compile("fn f(x: float[N], y: float[N]) -> float { return sum(x * y); }",
                   backend="interp").f(x.astype(ml_dtypes.bfloat16), x.astype(np.float16))


def test_a_matrix_product_reads_its_operands_as_stored() -> None:
    """`(a * 1.01) @ b`: the product's operand is rounded to bf16 first (XLA's dots and
    torch's autocast read bf16 operands), then the products sum in f32 and round once."""
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(shape).astype(ml_dtypes.bfloat16) for shape in ((4, 6), (6, 3)))
    fn = _lowered("fn k(a: bf16[N, K], b: bf16[K, M]) -> bf16[N, M] { return (a * 1.01) @ b; }",
                  "k")
    (result,) = interpret(fn, [a, b], {"N": 4, "K": 6, "M": 3})
    factor = np.float32(ml_dtypes.bfloat16(1.01))
    stored = (a.astype(np.float32) * factor).astype(ml_dtypes.bfloat16).astype(np.float64)
    expected = (stored @ b.astype(np.float64)).astype(np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(_bits(result), _bits(expected))


def test_a_move_of_a_rounded_value_moves_its_bits() -> None:
    """`h.T @ c` after `h @ b`, h computed: both products read h rounded once — the
    transpose moves the first product's bf16 operand (the same bits as rounding the
    transposed f32 values, since rounding is elementwise), as a gradient's `hidden.T @ d`
    reads the forward's `hidden` (W10: no transposing copy)."""
    source = ("fn k(a: bf16[N, K], b: bf16[K, M], c: bf16[N, M]) -> bf16[K, M] "
              "{ let h = a * 1.01; return (h.T @ c) * sum(h @ b); }")
    fn = widen_storage(_lowered(source, "k"))
    product = next(op for op in fn.body.ops if op.name == "mul")
    roundings = [op for op in fn.body.ops if op.name == "cast" and
                 op.result.type.dtype == "bf16" and op.operands[0] is product.result]
    moved = [op for op in fn.body.ops if op.name == "transpose" and
             op.result.type.dtype == "bf16"]  # (its f32 twin is left for dead code removal)
    assert len(roundings) == 1 and len(moved) == 1
    assert moved[0].operands[0] is roundings[0].result
    rng = np.random.default_rng(6)
    a, b, c = (rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
               for shape in ((5, 4), (4, 3), (5, 3)))
    (result,) = interpret(fn, [a, b, c], {"N": 5, "K": 4, "M": 3})
    factor = np.float32(ml_dtypes.bfloat16(1.01))
    stored = (a.astype(np.float32) * factor).astype(ml_dtypes.bfloat16).astype(np.float64)
    expected = (stored.T @ c.astype(np.float64)) * np.sum(stored @ b.astype(np.float64))
    np.testing.assert_allclose(np.asarray(result, np.float64), expected, rtol=2.0 ** -7)


def test_mean_divides_by_the_exact_count() -> None:
    """The count of `mean` is an integer converted to f16: arithmetic, kept in f32 (f16 holds
    2051 as 2052, which would make the mean of ones 0.99951)."""
    fn = _lowered("fn k(x: f16[N]) -> f16 { return mean(x); }", "k")
    (result,) = interpret(fn, [np.ones(2051, np.float16)], {"N": 2051})
    assert float(result) == 1.0


@pytest.mark.parametrize("backend", ["interp", "native", "mlir"])
def test_a_gathers_adjoint_adds_in_f32(backend: str) -> None:
    """300 reads of x[0] give it 300 adjoint contributions of 2·x[0] = 2: added in f32 and
    rounded once, 600 (bf16 holds it); added in bf16 they would stall at 512 (512 + 2
    rounds back to 512), which is what torch and JAX eager give."""
    module = rv.compile("fn f(x: bf16[N], idx: i64[M]) -> bf16 {"
                        " let g[m] = x[idx[m]]; return sum(g * g); }", backend=backend)
    x = np.array([1.0, 2.0, 3.0], ml_dtypes.bfloat16)
    grad = module.f.grad("x")(x, np.zeros(300, np.int64))
    np.testing.assert_array_equal(np.asarray(grad).astype(np.float32), [600.0, 0.0, 0.0])

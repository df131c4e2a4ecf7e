"""The native backend as a whole: fusion shape of the loop IR, vectorised LLVM IR, no
scalar libm calls in hot loops, bounds-checked gathers, caching, and results equal to the
interpreter's. Op-by-op coverage is in `tests/native/`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.loops.ir import Loop, Store
from reverie.compiler.loops.loop_printer import format_program
from reverie.compiler.pipeline import compile_function
from reverie.compiler.runtime_library.gemm import helper_module
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import NativeKernel, native_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
from native_helpers import check, sample, specialised  # noqa: E402

W1 = "fn f(x: float[N]) -> float { return sum(tanh(x) * sin(x) + exp(-x * x)); }"
AXPY = "fn f(a: float, x: float[N], y: float[N]) -> float[N] { return a * x + y; }"


def _loops(stmts: list) -> int:
    return sum(1 + _loops(s.body) for s in stmts if isinstance(s, Loop))


def test_w1_is_one_loop_with_no_temporaries() -> None:
    program = compile_function(specialised(W1, "f", "f32"), "to_loops")
    assert program.temps == []
    assert _loops(program.body) == 1
    text = format_program(program)
    assert text.count("load x[%i0]") == 1
    assert "%acc0: f64 = 0.0" in text  # f32 sums accumulate in f64


def test_loop_ir_is_deterministic() -> None:
    source = "fn f(x: f64[N, D]) -> f64[N, D] { return softmax(x, axis=1) * x.T.T; }"
    first = format_program(compile_function(specialised(source, "f", "f64"), "to_loops"))
    assert first == format_program(compile_function(specialised(source, "f", "f64"), "to_loops"))


def test_shared_values_are_materialised_once() -> None:
    source = "fn f(x: f64[N, D]) -> (f64[N, D], f64[D]) { let e = exp(x); " \
             "return (e / sum(e, axis=0), sum(e, axis=0)); }"
    program = compile_function(specialised(source, "f", "f64"), "to_loops")
    exp_lets = [line for line in format_program(program).splitlines() if "= exp " in line]
    assert len(exp_lets) == 1
    stores = [s for s in program.walk() if isinstance(s, Store)]
    assert any(s.view.buffer in program.outputs for s in stores)


@pytest.mark.parametrize(("reduction", "stored"), [
    ("sum[n](c[n, k])", False),               # each element read once: computed in the body
    ("sum[n](c[n, k] * c[n, 0])", True),      # read twice: stored once, then read
    ("sum[n](c[n, k] * x[n, k])", False),
])
def test_generic_operands_read_once_are_computed_in_its_body(reduction: str,
                                                             stored: bool) -> None:
    source = ("fn f(x: f64[N, K], y: f64[N, K]) -> f64[K] { let c = exp(x) * y + x; "
              f"let s[k] = {reduction}; return s; }}")
    program = compile_function(specialised(source, "f", "f64"), "to_loops")
    assert (len(program.temps) == 1) is stored
    x, y = sample((7, 5)), sample((7, 5), seed=1)
    c = np.exp(x) * y + x
    want = {"sum[n](c[n, k])": c.sum(0), "sum[n](c[n, k] * c[n, 0])": (c * c[:, :1]).sum(0),
            "sum[n](c[n, k] * x[n, k])": (c * x).sum(0)}[reduction]
    (got,) = check(source, x, y)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    leaves = [rv.tensor(a, requires_grad=True) for a in (x, y)]
    assert rv.gradcheck(rv.compile(source).f, leaves)


@pytest.mark.parametrize(("dtype", "element"), [("f32", "float"), ("f64", "double")])
def test_elementwise_kernel_is_vectorised(dtype: str, element: str) -> None:
    """Vectors of at least 2 lanes, at whatever width LLVM picks for the host's registers."""
    kernel = native_kernel(specialised(AXPY, "f", dtype))
    lanes = [int(n) for n in re.findall(rf"<(\d+) x {element}>", kernel.llvm_ir)]
    assert lanes and max(lanes) >= 2


def test_fused_transcendental_reduction_calls_no_scalar_function() -> None:
    kernel = native_kernel(specialised("fn f(x: f32[N]) -> f32 { return sum(tanh(x)); }",
                                       "f", "f32"))
    functions = kernel.llvm_ir.split("define ")
    body = functions[1]  # the kernel itself, not its Python entry
    assert "i32 @rv_f(" in body.split("\n")[0]
    # the loop's chunks for the worker pool, which the kernel passes to it
    chunks = "".join(f for f in functions if "i32 @rv_f_chunks" in f.split("\n")[0])
    assert chunks
    callees = set(re.findall(r"call [^@]*@\"?([\w.]+)", body + chunks)) - {"rv_f_chunks0"}
    assert callees <= {c for c in callees if c.startswith("llvm.")}, callees
    assert "<" in kernel.llvm_ir and " x float>" in kernel.llvm_ir


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("n", [0, 1, 7, 33, 1000])
def test_w1_matches_interpreter(n: int, dtype: str) -> None:
    check(W1, sample((n,), dtype) * 2, dtype=dtype, scale=30)


def test_out_of_range_gather_raises_the_interpreters_index_error() -> None:
    source = "fn f(z: f64[N, C], labels: i64[N]) -> f64 { let p[n] = z[n, labels[n]]; " \
             "return sum(p); }"
    fn = specialised(source, "f", "f64")
    z = sample((4, 3))
    check(source, z, np.array([0, 2, 1, 2]))
    bound = bind_arguments(fn, [z, np.array([0, 2, -1, 7])])
    with pytest.raises(IndexError) as native_error:
        native_kernel(fn)(bound)
    with pytest.raises(IndexError) as interpreter_error:
        check(source, z, np.array([0, 2, -1, 7]))
    assert str(native_error.value) == str(interpreter_error.value)
    assert str(native_error.value) == "index -1 is out of bounds for axis 1 of 'z' with size 3"


def test_argmax_of_empty_tensor_raises() -> None:
    fn = specialised("fn f(x: f64[N]) -> i64 { return argmax(x); }", "f", "f64")
    with pytest.raises(IndexError, match="empty"):
        native_kernel(fn)(bind_arguments(fn, [np.zeros(0)]))


def test_kernels_are_cached_per_function_and_inspectable() -> None:
    fn = specialised(AXPY, "f", "f64")
    kernel = native_kernel(fn)
    assert NativeKernel(fn) is kernel and native_kernel(fn) is kernel
    assert kernel.loop_ir.startswith("kernel @f(")
    assert "define" in kernel.llvm_ir and kernel.asm.strip()


def test_inputs_are_not_modified_and_outputs_are_fresh() -> None:
    fn = specialised(AXPY, "f", "f64")
    x, y = sample((100,), seed=1), sample((100,), seed=2)
    x0, y0 = x.copy(), y.copy()
    first = native_kernel(fn)(bind_arguments(fn, [2.0, x, y]))[0]
    second = native_kernel(fn)(bind_arguments(fn, [2.0, x, y]))[0]
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)
    assert first is not second and not np.shares_memory(first, second)
    np.testing.assert_allclose(first, 2.0 * x0 + y0, rtol=1e-15)


def test_very_long_fused_chains_are_cut_into_several_nests() -> None:
    body = "let a0 = x;\n" + "\n".join(f"let a{i + 1} = a{i} * 0.999 + 0.001;"
                                        for i in range(400))
    source = f"fn f(x: f64[N]) -> f64[N] {{ {body} return a400; }}"
    check(source, sample((10,)))
    assert 1 < _loops(compile_function(specialised(source, "f", "f64"), "to_loops").body) < 40


HELPERS_ON_DEMAND = """
import numpy as np
import reverie as rv
from reverie.runtime.native import native_kernel as native
def loaded():
    return [int(address) != 0 for address in native.helper_table()[:2]]
x = np.arange(6.0).reshape(2, 3)
assert rv.compile("fn f(x: f64[N, M]) -> f64 { return sum(x * x); }").f(x) == 55.0
assert native._helper.cache_info().currsize == 0 and loaded() == [False, False]
product = rv.compile("fn g(a: float[N, K], b: float[K, M]) -> float[N, M] { return a @ b; }").g
np.testing.assert_allclose(product(x, x.T), x @ x.T)
assert loaded() == [False, True], loaded()
product(x.astype(np.float32), x.T.astype(np.float32))
assert loaded() == [True, True], loaded()
print("ok")
"""


def test_helpers_are_compiled_only_for_kernels_that_call_them(tmp_path: Path) -> None:
    """In a fresh process: no helper for a kernel without a matmul, then one per dtype."""
    done = subprocess.run([sys.executable, "-c", HELPERS_ON_DEMAND], capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "REVERIE_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"]


def test_helper_module_rejects_an_unknown_name() -> None:
    with pytest.raises(ValueError, match="rv_gemm_f16"):
        helper_module("rv_gemm_f16")

"""Cold compile (issue 10): the own matrix kernel is compiled only when a kernel may need it.

With a BLAS found (else every helper gets its own kernel at once), a kernel whose products
all have layouts BLAS takes for every size (`abi.needs_own_kernel` is false) compiles only
the small public helper; its empty products go to the helper's dot-product fallback. A
product of another layout, `REVERIE_BLAS=0` or `use_blas(False)` hands the helper its own
kernel. Either way every result is NumPy's.
Each case runs in a fresh process with an empty cache, so the module state is its own.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from blas_cases import LAYOUTS

from reverie.compiler.call_boundary.abi import needs_own_kernel
from reverie.compiler.pipeline import Request, compile_function, compile_source
from reverie.runtime.native import jit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STRIDED_PRODUCT = "fn f(a: f64[M, K], b: f64[K, N]) -> f64[M, N] { return a[:, ::2] @ b[::2, :]; }"

PRELUDE = """
import numpy as np
import reverie as rv
from reverie.runtime.native import helpers
from reverie.runtime.native import native_kernel as native
def own_kernels():
    return helpers._give_own_kernel.cache_info().currsize
LAZY = 0 if helpers._blas_in_use() else 1  # own kernels compiled before one is needed
rng = np.random.default_rng(3)
"""

MLP_ONLY_BLAS = PRELUDE + """
m = rv.load("examples/mlp.rv")
x, y = rng.standard_normal((64, 8)), rng.standard_normal((64, 4))
w1, b1 = rng.standard_normal((8, 32)), rng.standard_normal(32)
w2, b2 = rng.standard_normal((32, 4)), rng.standard_normal(4)
hidden = np.tanh(x @ w1 + b1)
np.testing.assert_allclose(m.mlp_loss(x, y, w1, b1, w2, b2),
                           np.mean((hidden @ w2 + b2 - y) ** 2), rtol=1e-12)
gradients = m.mlp_loss.grad()(x, y, w1, b1, w2, b2)
assert len(gradients) == 6 and own_kernels() == LAZY, own_kernels()
product = rv.compile("fn g(a: f64[M, K], b: f64[K, N]) -> f64[M, N] { return a @ b; }").g
assert np.array_equal(product(np.ones((3, 0)), np.ones((0, 4))), np.zeros((3, 4)))
a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 6))
np.testing.assert_allclose(product(a, b), a @ b, rtol=1e-12)
assert own_kernels() == LAZY
print("no own kernel")
strided = rv.compile(STRIDED).f
a, b = rng.standard_normal((9, 11)), rng.standard_normal((11, 4))
np.testing.assert_allclose(strided(a, b), a[:, ::2] @ b[::2, :], rtol=1e-12)
assert own_kernels() == 1, own_kernels()
print("own kernel for a strided product")
"""

OWN_ONLY = PRELUDE + """
product = rv.compile("fn g(a: f64[M, K], b: f64[K, N]) -> f64[M, N] { return a @ b; }").g
a, b = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
np.testing.assert_allclose(product(a, b), a @ b, rtol=1e-12)
print(own_kernels())
"""

SWITCHED_OFF_LATER = PRELUDE + """
product = rv.compile("fn g(a: f64[M, K], b: f64[K, N]) -> f64[M, N] { return a @ b; }").g
a, b = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
np.testing.assert_allclose(product(a, b), a @ b, rtol=1e-12)
assert own_kernels() == LAZY
native.use_blas(False)
assert own_kernels() == 1
np.testing.assert_allclose(product(a, b), a @ b, rtol=1e-12)
print("own kernel after use_blas(False)")
"""

FALLBACK_ANY_LAYOUT = PRELUDE + """
import ctypes
from blas_cases import GEMM, LAYOUTS, gemm_arguments
from reverie.compiler.call_boundary.abi import HELPERS
for dtype in ("f32", "f64"):
    name = f"rv_gemm_{dtype}"
    gemm = GEMM(int(native.load_helpers(frozenset({name}), own_kernel=False)[HELPERS.index(name)]))
    for a_form, _ in LAYOUTS.values():
        for b_form, _ in LAYOUTS.values():
            a = a_form(rng.standard_normal((13, 9)).astype(dtype.replace("f", "float")))
            b = b_form(rng.standard_normal((9, 6)).astype(a.dtype))
            c = np.full((6, 13), np.nan, a.dtype).T
            gemm(*gemm_arguments(a, b, c))
            np.testing.assert_allclose(c, a @ b, rtol=1e-4)
assert own_kernels() == 0
print("fallback ok")
"""


def _run(script: str, tmp_path: Path, **env: str) -> list[str]:
    """Run `script` in a fresh process with an empty cache; its output lines."""
    done = subprocess.run([sys.executable, "-c", script.replace("STRIDED", repr(STRIDED_PRODUCT))],
                          capture_output=True, text=True, timeout=600, check=False,
                          cwd=ROOT, env={**os.environ, "REVERIE_CACHE_DIR": str(tmp_path),
                                         "PYTHONPATH": str(HERE), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def _program(source: str, transform: str | None = None) -> object:
    stage = transform or "lower"
    fn = compile_source(source, stage, Request(function="f", dtype="f64", transform=transform))
    return compile_function(fn, "to_loops")


@pytest.mark.parametrize("source", [
    "fn f(a: f64[M, K], b: f64[K, N]) -> f64[M, N] { return a @ b; }",
    "fn f(a: f64[K, M], b: f64[N, K]) -> f64[M, N] { return a.T @ b.T; }",
    "fn f(a: f64[M, K], v: f64[K]) -> f64[M] { return a @ v; }",
    "fn f(v: f64[K], a: f64[K, N]) -> f64[N] { return v @ a; }",
])
def test_products_of_whole_buffers_need_no_own_kernel(source: str) -> None:
    assert not needs_own_kernel(_program(source))


def test_gradients_of_whole_buffer_products_need_no_own_kernel() -> None:
    source = "fn f(a: f64[M, K], b: f64[N, K]) -> f64 { return sum(a @ b.T); }"
    assert not needs_own_kernel(_program(source, "reverse"))


def test_a_strided_operand_needs_the_own_kernel() -> None:
    assert needs_own_kernel(_program(STRIDED_PRODUCT))


def test_no_program_without_a_product_needs_it() -> None:
    assert not needs_own_kernel(_program("fn f(x: f64[N]) -> f64 { return sum(x * x); }"))


def test_with_blas_the_own_kernel_is_compiled_only_for_a_layout_blas_may_not_take(
        tmp_path: Path) -> None:
    assert _run(MLP_ONLY_BLAS, tmp_path) == ["no own kernel", "own kernel for a strided product"]


def test_without_blas_the_own_kernel_is_handed_over(tmp_path: Path) -> None:
    assert _run(OWN_ONLY, tmp_path, REVERIE_BLAS="0") == ["1"]


def test_turning_blas_off_later_hands_over_the_own_kernel(tmp_path: Path) -> None:
    assert _run(SWITCHED_OFF_LATER, tmp_path) == ["own kernel after use_blas(False)"]


def test_the_fallback_before_the_own_kernel_is_right_for_every_layout(tmp_path: Path) -> None:
    assert len(LAYOUTS) == 4  # every layout of `blas_cases`, BLAS-able or not
    assert _run(FALLBACK_ANY_LAYOUT, tmp_path) == ["fallback ok"]


LOOP_IR = """
define double @total(ptr %x, ptr %y, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %sum, %loop ]
  %px = getelementptr inbounds double, ptr %x, i64 %i
  %py = getelementptr inbounds double, ptr %y, i64 %i
  %vx = load double, ptr %px
  %vy = load double, ptr %py
  %product = fmul double %vx, %vy
  %sum = fadd double %acc, %product
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret double %sum
}
"""


def test_code_with_and_without_strength_reduction_computes_the_same() -> None:
    """Kernels skip loop strength reduction, helpers keep it: the choice is part of the
    object cache key, and either way (in any order) the code computes the same."""
    with_it = jit.Pipeline(strength_reduction=True)
    assert not jit.KERNEL_PIPELINE.strength_reduction
    assert jit.object_cache_key(LOOP_IR, with_it) != jit.object_cache_key(LOOP_IR)
    x, y = np.arange(1.0, 101.0), np.linspace(0.0, 1.0, 100)
    signature = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int64)
    results = []
    for pipeline in (jit.KERNEL_PIPELINE, with_it, jit.KERNEL_PIPELINE):
        module = jit.compile_module(LOOP_IR, name="total", pipeline=pipeline)
        results.append(signature(module.address("total"))(x.ctypes.data, y.ctypes.data, 100))
    assert results[0] == results[1] == results[2]
    np.testing.assert_allclose(results[0], x @ y, rtol=1e-13)

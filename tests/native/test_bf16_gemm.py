"""bf16 matrix products by `vdpbf16ps` (`runtime_library/gemm_bf16.py`, chosen by the loop
pass `backend/bf16_products.py` where the host has AVX512_BF16 at 512-bit vectors), or on AMX
tiles where the host has those (`gemm_amx.py`; test_amx_gemm.py runs that kernel anywhere).

The products of bf16 values are exact in f32, so the kernel differs from the f32 path (f32
copies of the operands, then sgemm or the own kernel) only in the order of its f32 sums and
in subnormals, which the instruction flushes: every result is compared with an f64
reference and with the interpreter within a few f32 roundings of its row's sum of
|products|, on both paths (the f32 one in a child process with REVERIE_VECTOR_BITS=256).
On a host without the instruction the kernel's own tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest
from native_helpers import specialised
from storage_helpers import BF16, assert_close_in_ulps

import reverie as rv
from reverie.compiler.backend.bf16_products import bf16_products
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.pipeline import compile_function
from reverie.compiler.runtime_library.gemm_bf16 import MR, helper_module
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.helpers import HELPER_PIPELINE
from reverie.runtime.native.jit import LlvmModule

HOST_HAS_IT = bf16_products(llvm.get_host_cpu_features())
needs_the_instruction = pytest.mark.skipif(
    not HOST_HAS_IT, reason="this host has no AVX512_BF16 at 512-bit vectors (vdpbf16ps): "
    "its bf16 products take the f32 path, which the other tests check")
ROUNDINGS = 4 * 2.0 ** -23  # of the row's sum of |products|
PRODUCT = "fn f(a: bf16[M, K], b: bf16[K, N]) -> f32[M, N] { return f32(a) @ f32(b); }"
LAYOUTS = {
    "plain": (PRODUCT, lambda a, b: (a, b)),
    "b transposed": ("fn f(a: bf16[M, K], b: bf16[N, K]) -> f32[M, N] "
                     "{ return f32(a) @ f32(transpose(b)); }", lambda a, b: (a, b.T.copy())),
    "a transposed": ("fn f(a: bf16[K, M], b: bf16[K, N]) -> f32[M, N] "
                     "{ return f32(transpose(a)) @ f32(b); }", lambda a, b: (a.T.copy(), b)),
}
# (M, K, N): ones, odd K, no terms, edges of the 8 x 32 tile, K past a 256-term block, M past
# a 192-row block, N past a 1024-column block, two large enough to split over the pool (by
# columns, by rows)
SHAPES = [(1, 1, 1), (5, 7, 3), (6, 0, 4), (33, 257, 65), (200, 300, 70), (9, 64, 1100),
          (256, 256, 128), (600, 301, 40)]
W10 = """
fn w3(x: bf16[B, D], W1: bf16[D, H], b1: bf16[H], W2: bf16[H, O], b2: bf16[O],
      y: bf16[B, O]) -> bf16 {
    let hidden = tanh(x @ W1 + b1);
    let err = hidden @ W2 + b2 - y;
    return mean(err ** 2);
}
"""


def operands(m: int, k: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((k, n)).astype(BF16))


def assert_product(got: np.ndarray, a: np.ndarray, b: np.ndarray,
                   want: np.ndarray | None = None) -> None:
    """`got` (f32) is `want` (default: a @ b in f64) within a few f32 roundings of each
    row's sum of |products| (twice that between two f32 results)."""
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    scale = np.abs(wide_a) @ np.abs(wide_b)
    roundings = ROUNDINGS if want is None else 2 * ROUNDINGS
    want = wide_a @ wide_b if want is None else want
    assert got.dtype == np.float32 and got.shape == want.shape
    error = np.abs(got - want)
    assert np.all(error <= roundings * scale), float(np.max(error / np.maximum(scale, 1e-300)))


def w10_arguments() -> list[np.ndarray]:
    """W10's arguments: an MLP's input (64 x 40), weights, biases and targets in bf16."""
    rng = np.random.default_rng(3)
    b, d, h, o = 64, 40, 48, 5
    wide = [rng.standard_normal((b, d)), rng.standard_normal((d, h)) / np.sqrt(d),
            0.1 * rng.standard_normal(h), rng.standard_normal((h, o)) / np.sqrt(h),
            0.1 * rng.standard_normal(o), rng.standard_normal((b, o))]
    return [w.astype(BF16) for w in wide]


def loop_products(module: rv.Module, wrt: list[str] | None = None) -> list[str]:
    """The `matmul` lines of a function's loop program (its gradient's with `wrt`)."""
    text = module.ir("loops", wrt=wrt) if wrt else module.ir("loops")
    return [line.strip() for line in text.splitlines() if line.strip().startswith("matmul")]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_products_are_the_f64_products_within_f32_roundings(shape: tuple[int, int, int],
                                                            layout: str) -> None:
    """Native results against an f64 product and the interpreter's f32 one, each within a few
    f32 roundings of the row's sum of |products| (zeros for K = 0)."""
    source, arrange = LAYOUTS[layout]
    a, b = operands(*shape)
    native = rv.compile(source).f(*arrange(a, b))
    interpreted = rv.compile(source, backend="interp").f(*arrange(a, b))
    assert_product(native, a, b)
    assert_product(np.asarray(interpreted), a, b)
    assert_product(native, a, b, want=np.asarray(interpreted))


def test_batched_products() -> None:
    """A 3-D `@` is one batch of products, each checked as a 2-D one."""
    source = ("fn f(a: bf16[B, M, K], b: bf16[B, K, N]) -> f32[B, M, N] "
              "{ return f32(a) @ f32(b); }")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 17, 41)).astype(BF16)
    b = rng.standard_normal((3, 41, 35)).astype(BF16)
    got = rv.compile(source).f(a, b)
    for i in range(3):
        assert_product(got[i], a[i], b[i])


@needs_the_instruction
def test_the_product_reads_the_bf16_buffers() -> None:
    """No f32 copies of the operands: the loop program's product reads the parameters (a
    transpose as strides) and its only temporary is the packing scratch."""
    module = rv.compile(LAYOUTS["b transposed"][0])
    text = module.ir("loops")
    assert loop_products(module) == ["matmul out0 = a @ b{offset = 0, strides = [1, K]}  "
                                     "# packing in pack"]
    assert re.findall(r"temp (\w+)", text) == ["pack"]
    assert "cast" not in text


def test_the_loop_interpreter_runs_the_loop_program() -> None:
    """The loop program (bf16 operands where the host has the instruction) run by the loop
    interpreter: the same product."""
    source, arrange = LAYOUTS["b transposed"]
    fn = specialised(source, "f", "f32")
    a, b = operands(33, 257, 65)
    bound = bind_arguments(fn, arrange(a, b))
    (looped,) = run_program(compile_function(fn, "to_loops"), bound.arrays, bound.dims)
    assert_product(np.asarray(looped), a, b)


def test_mixed_operands_and_f16_keep_the_f32_path() -> None:
    """An f32 operand (a bf16 one would change its value) and f16 products are f32 products
    of f32 buffers."""
    for source in ("fn f(a: f32[M, K], b: bf16[K, N]) -> f32[M, N] { return a @ f32(b); }",
                   PRODUCT.replace("bf16", "f16")):
        (line,) = loop_products(rv.compile(source))
        assert re.fullmatch(r"matmul \w+ = t\d+ @ t\d+.*|matmul \w+ = a @ t\d+.*", line), line


@needs_the_instruction
def test_the_helper_runs_vdpbf16ps() -> None:
    """The micro-kernel's inner loop is 2 * MR `vdpbf16ps` on zmm registers (the kernel of
    hosts without AMX tiles: test_amx_gemm.py checks the other)."""
    asm = LlvmModule(helper_module(tiles="off"), name="rv_gemm_bf16",
                     pipeline=HELPER_PIPELINE).asm
    assert len(re.findall(r"vdpbf16ps\s+[^\n]*%zmm", asm)) >= 2 * MR


@needs_the_instruction
def test_subnormals_are_flushed() -> None:
    """What the instruction does differently: a subnormal operand reads as zero, and a
    subnormal sum of products is flushed to zero (the f32 path keeps both)."""
    module = rv.compile(PRODUCT)
    tiny = np.array([[1e-39]], BF16)  # bf16 subnormal
    assert module.f(tiny, np.array([[1e3]], BF16))[0, 0] == 0.0
    result = module.f(np.array([[2.0 ** -100]], BF16), np.array([[2.0 ** -30]], BF16))
    assert result[0, 0] == 0.0  # 2^-130 in f32 is subnormal
    infinite = module.f(np.array([[np.inf, 1.0]], BF16), np.array([[0.0], [1.0]], BF16))
    assert np.isnan(infinite[0, 0])  # inf * 0, as in f32


def test_w10_gradient_against_the_interpreter_and_f64() -> None:
    """W3's MLP in bf16 (benchmarks W10): its gradient in native code is the interpreter's
    within one bf16 ulp (f32 sums in another order may round the other way), and the f64
    gradient of the same program within bf16 roundings. Every product reads its operands
    as stored (rounded) bf16 values, so where the host has the instruction all five are
    bf16 products: x @ W1 straight from the arguments, the others from bf16 temporaries
    holding the rounded hidden layer and adjoints (`bf16_products`'s narrowing) or from the
    arguments through transposed views (a transpose of a stored value moves its 16 bits:
    `widen_storage`)."""
    args = w10_arguments()
    wrt = ["W1", "b1", "W2", "b2"]
    module = rv.compile(W10)
    native = module.w3.grad(wrt)(*args)
    interpreted = rv.compile(W10, backend="interp").w3.grad(wrt)(*args)
    exact = rv.compile(W10.replace("bf16", "f64")).w3.grad(wrt)(
        *[a.astype(np.float64) for a in args])
    for got, want, reference in zip(native, interpreted, exact, strict=True):
        assert_close_in_ulps(np.asarray(got), np.asarray(want), 1)
        tolerance = 4e-2 * np.max(np.abs(reference))
        assert np.max(np.abs(np.asarray(got).astype(np.float64) - reference)) <= tolerance
    lines = loop_products(module, wrt)
    assert ("matmul t2 = x @ W1  # packing in pack" in lines) == HOST_HAS_IT, lines
    text = module.ir("loops", wrt=wrt)
    dtypes = dict(re.findall(r"(\w+): (\w+)\[", text))  # parameters and temporaries
    operand_dtypes = {dtypes[name] for line in lines
                      for name in re.match(r"matmul \w+ = (\w+)(?:\{.*?\})? @ (\w+)",
                                           line).groups()}
    assert len(lines) == 5 and operand_dtypes == ({"bf16"} if HOST_HAS_IT else {"f32"}), text
    if HOST_HAS_IT:  # hidden.T @ d_err reads the forward's rounded hidden layer, as strides
        assert not re.search(r"temp \w+: \w+\[H, B\]", text), text


CHILD = """
import json, sys
import numpy as np
sys.path.insert(0, "tests/native")
from test_bf16_gemm import PRODUCT, loop_products, operands
import reverie as rv
module = rv.compile(PRODUCT)
print(json.dumps({"products": loop_products(module),
                  "result": module.f(*operands(33, 257, 65)).tolist()}))
"""


def test_the_avx2_path_agrees() -> None:
    """With REVERIE_VECTOR_BITS=256 (no AVX-512, so no vdpbf16ps) the product is an f32 one
    of converted copies, with the same results within f32 roundings."""
    environment = {**os.environ, "REVERIE_VECTOR_BITS": "256"}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=300, env=environment, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    (line,) = report["products"]
    assert re.match(r"matmul out0 = t\d+ @ t\d+", line), line
    a, b = operands(33, 257, 65)
    avx2 = np.asarray(report["result"], np.float32)
    assert_product(avx2, a, b)
    assert_product(rv.compile(PRODUCT).f(a, b), a, b, want=avx2)


def test_rounded_values_read_through_slices() -> None:
    """A computed value rounded for two products through slices, beside a transposed
    argument: the interpreter's values within one bf16 ulp. (A product reading a narrowed
    temporary at an offset: test_fx_autocast's DropoutOfTransposed.)"""
    source = """fn f(a: bf16[M, K], b: bf16[N, K]) -> bf16[M - 1, N] {
        let h = tanh(a) * 2.0;
        return h[1:] @ b.T - h[:M - 1] @ b.T; }"""
    a, b = operands(9, 70, 33, seed=4)
    module, interpreted = rv.compile(source), rv.compile(source, backend="interp")
    got, want = module.f(a, b.T.copy()), interpreted.f(a, b.T.copy())
    assert_close_in_ulps(np.asarray(got), np.asarray(want), 1)
    assert len(loop_products(module)) == 2

"""The loop pass `tabulate` (compiler/loops/tabulation.py): a long nest whose expensive work
depends on one bf16/f16 element alone computes that work once per bit pattern, into
tables, and looks each element's result up.

The tables hold the very values the statements compute, so a tabulated kernel gives the
untabulated kernel's bits for every one of the 65,536 patterns (NaNs, infinities and
subnormals included), natively, for bf16 and f16, elementwise results, gradients, sums and
2-D nests alike; the loop-IR interpreter runs the same program (its `bits` and `from_bits`
included) to the same bits. Short nests, cheap bodies and wide inputs are left as they were.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.loops import tabulation
from reverie.compiler.loops.ir import If, Let, Loop
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.loops.loop_printer import format_program
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel
from tests.unit.level_helpers import ladder_without, loop_program

NUMPY = {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16)}
W9 = "fn f(x: bf16[N]) -> bf16 { return sum(tanh(x) * sin(x) + exp(-x * x)); }"
ELEMENTWISE = "fn f(x: {t}[N]) -> {t}[N] {{ return tanh(x) * sin(x) + exp(-x * x); }}"


def _gradient(source: str) -> Function:
    return rv.compile(source, backend="interp").adjoint("f", "f32")


def _forward(source: str) -> Function:
    return rv.compile(source, backend="interp").lowering.specialise("f", "f32")


def _every_pattern(dtype: str, repeats: int) -> np.ndarray:
    """All 65,536 values of `dtype`, `repeats` times over (a shuffled order)."""
    patterns = np.tile(np.arange(1 << 16, dtype=np.uint16), repeats)
    return np.random.default_rng(0).permutation(patterns).view(NUMPY[dtype])


def _native_both_ways(build: Callable[[], Function],
                      arrays: list[np.ndarray]) -> tuple[list, list]:
    """The results of native kernels of `build()` with and without the pass (a kernel is
    kept per Function object: each gets its own)."""
    fn = build()
    bound = bind_arguments(fn, arrays)
    tabulated = native_kernel(fn)(bound)
    with ladder_without("tabulate"):
        computed = native_kernel(build())(bound)
    return tabulated, computed


def _same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    mismatched = np.flatnonzero(np.atleast_1d(got).view(width) !=
                                np.atleast_1d(expected).view(width))
    assert mismatched.size == 0, (mismatched[:5], got.ravel()[mismatched[:5]],
                                  expected.ravel()[mismatched[:5]])


def test_the_w9_gradient_reads_tables_when_long() -> None:
    text = format_program(loop_program(_gradient(W9)))
    assert "temp t0: f32[65536]" in text and "temp t1: bf16[65536]" in text
    assert f"ge N, {tabulation.MIN_TRIPS}" in text
    table, lookups, as_it_was = text.split("for %")[1:4]
    assert "from_bits %i1 : bf16" in table and "tanh" in table
    assert "bits %0 : i64" in lookups and "load t0[" in lookups and "tanh" not in lookups
    assert "sum %acc0, %" in lookups  # the f64 sum of the f32 table's values
    assert "tanh" in as_it_was and "bits" not in as_it_was


@pytest.mark.parametrize(("source", "why"), [
    ("fn f(x: bf16[N]) -> bf16[N] { return tanh(x) * 2.0 + x; }", "one expensive op"),
    ("fn f(x: f32[N]) -> f32[N] { return tanh(x) * sin(x); }", "a 32-bit element"),
    ("fn f(x: bf16[N], y: bf16[N]) -> bf16[N] { return tanh(x * y) * sin(x + y); }",
     "two elements"),
    ("fn f(x: bf16[1000]) -> bf16[1000] { return tanh(x) * sin(x); }", "a short nest"),
])
def test_what_stays_as_it_was(source: str, why: str) -> None:
    text = format_program(loop_program(_forward(source)))
    assert "bits" not in text, why


def test_a_long_constant_nest_needs_no_test() -> None:
    source = "fn f(x: bf16[1048576]) -> bf16[1048576] { return tanh(x) * sin(x); }"
    program = loop_program(_forward(source))
    assert [type(s) for s in program.body] == [Loop, Loop]
    assert not any(isinstance(s, If) for s in program.walk())


def test_only_the_element_s_work_is_tabulated() -> None:
    """`y` varies per element: the table holds `tanh(x) * sin(x)`, the rest is computed."""
    source = "fn f(x: bf16[M, N], y: bf16[N]) -> bf16 { return sum(tanh(x) * sin(x) + y); }"
    program = loop_program(_forward(source))
    lookups = [s for s in program.walk() if isinstance(s, Loop)][2].body
    assert [s.op for s in lookups if isinstance(s, Let)] == ["bits", "cast", "add", "cast"]


CASES = {
    "bf16 gradient (W9)": (lambda: _gradient(W9), "bf16"),
    "f16 gradient": (lambda: _gradient(W9.replace("bf16", "f16")), "f16"),
    "bf16 elementwise": (lambda: _forward(ELEMENTWISE.format(t="bf16")), "bf16"),
    "f16 elementwise": (lambda: _forward(ELEMENTWISE.format(t="f16")), "f16"),
}


@pytest.mark.parametrize("case", CASES)
def test_every_bit_pattern_gives_the_computed_bits(case: str) -> None:
    build, dtype = CASES[case]
    x = _every_pattern(dtype, tabulation.MIN_TRIPS >> 16)
    tabulated, computed = _native_both_ways(build, [x])
    for got, expected in zip(tabulated, computed, strict=True):
        if got.ndim == 0:  # a sum over every pattern: NaN
            assert np.isnan(np.float32(got)) and np.isnan(np.float32(expected))
        else:
            _same_bits(got, expected)


MORE = [
    # a max of the looked-up values, a sum of a select over a comparison, an integer cast
    "fn f(x: {t}[N]) -> {t} {{ return max(tanh(x) * sin(x)); }}",
    "fn f(x: {t}[N]) -> {t} {{ return sum(where(tanh(x) * cos(x) > 0.1, exp(x), 0.0)); }}",
    "fn f(x: {t}[N]) -> i64[N] {{ return i64(exp(x) * sin(x) * 100.0); }}",
    # a 2-D element beside a broadcast row (which the lookups multiply in)
    "fn f(x: {t}[M, N], y: {t}[N]) -> {t}[M, N] {{ return y * tanh(x) * log1p(x * x); }}",
]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("template", MORE, ids=range(len(MORE)))
def test_more_bodies_give_the_computed_values(template: str, dtype: str) -> None:
    source = template.format(t=dtype)
    assert "bits" in format_program(loop_program(_forward(source)))
    rng = np.random.default_rng(2)
    fn = _forward(source)
    sizes = {"N": tabulation.MIN_TRIPS} if "M" not in source else {"N": 1 << 12, "M": 1 << 8}
    arrays = [(rng.standard_normal([sizes[str(d)] for d in p.type.shape]) * 3).astype(
        NUMPY[dtype]) for p in fn.params]
    tabulated, computed = _native_both_ways(lambda: _forward(source), arrays)
    for got, expected in zip(tabulated, computed, strict=True):
        if got.ndim == 0 and "sum" in source:  # one f64 sum in two orders, rounded once
            np.testing.assert_allclose(np.float32(got), np.float32(expected), rtol=2 ** -7)
        else:
            _same_bits(got, expected)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_a_sum_and_a_2d_nest_over_finite_values(dtype: str) -> None:
    source = f"fn f(x: {dtype}[M, N], y: {dtype}[N]) -> {dtype} {{" \
             " return sum(tanh(x) * sin(x) + y * exp(x)); }"
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1024, 1024)).astype(NUMPY[dtype])
    y = rng.standard_normal(1024).astype(NUMPY[dtype])
    assert "bits" in format_program(loop_program(_forward(source)))
    (tabulated,), (computed,) = _native_both_ways(lambda: _forward(source), [x, y])
    # the same f64 sum of the same terms, in another order, then rounded once
    np.testing.assert_allclose(tabulated.astype(np.float32), computed.astype(np.float32),
                               rtol=2.0 ** -7 if dtype == "bf16" else 2.0 ** -10)


def test_the_loop_interpreter_runs_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tabulated from 1 element on: the interpreter's `from_bits` and `bits` agree with
    native code (which computed the same statements) bit for bit."""
    monkeypatch.setattr(tabulation, "MIN_TRIPS", 1)
    fn = _forward("fn f(x: bf16[N]) -> bf16[N] { return tanh(x) * sin(x); }")
    program = loop_program(fn)
    assert "from_bits" in format_program(program)
    x = _every_pattern("bf16", 1)[:64]
    bound = bind_arguments(fn, [x])
    (looped,) = run_program(program, bound.arrays, bound.dims)
    (native,) = native_kernel(fn)(bound)
    expected = (np.tanh(x.astype(np.float32)) * np.sin(x.astype(np.float32))).astype(
        NUMPY["bf16"])
    _same_bits(native, looped)
    np.testing.assert_allclose(looped.astype(np.float32), expected.astype(np.float32),
                               rtol=1e-2, atol=1e-6)

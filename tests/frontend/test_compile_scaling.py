"""Compile time grows linearly with the program (issue 8, finding 4).

Each blow-up shape is compiled at two sizes, ten times apart, in a fresh subprocess with a
private disk cache; the larger must take at most RATIO times as long as the smaller (linear
growth gives about 10x; the exponential fan-out and the quadratic tuple return of old gave
far more, or never finished: the subprocess is stopped after HANG_SECONDS). Results are
checked too, so a shortcut that compiles the wrong program fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from fuzzing import fan_out, wide_tuple

import reverie as rv
from reverie.runtime.native import jit

RATIO = 30.0
HANG_SECONDS = 300
SIZE_FACTOR = 10

CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import reverie as rv
    source, backend, call = json.loads(sys.stdin.read())
    warm = rv.compile("fn loss(x: f64[N]) -> f64 { return sum(sin(x)); }", backend=backend)
    warm.loss.grad("x")(np.ones(2))  # parser tables and JIT set-up off the clock
    start = time.perf_counter()
    module = rv.compile(source, backend=backend)
    if call:
        kernel = module[call]
        x = np.linspace(0.1, 0.9, 4)
        kernel(x)
        if call == "loss":
            kernel.grad("x")(x)
    print(time.perf_counter() - start)
""")


def _seconds(source: str, backend: str, call: str | None, cache: Path) -> float:
    """Wall time of compiling (and calling) `source` in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps([source, backend, call]),
                          capture_output=True, text=True, timeout=HANG_SECONDS,
                          env={**os.environ, "REVERIE_CACHE_DIR": str(cache)}, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def _assert_linear(small: str, large: str, tmp_path: Path, backend: str = "interp",
                   call: str | None = None) -> None:
    """`large` (SIZE_FACTOR times `small`) compiles within RATIO times `small`'s time."""
    base = _seconds(small, backend, call, tmp_path / "small")
    big = _seconds(large, backend, call, tmp_path / "large")
    assert big <= RATIO * base, f"{big:.2f}s vs {base:.2f}s for a {SIZE_FACTOR}x smaller one"


def _loss(depth: int) -> str:
    return fan_out(depth) + f"\nfn loss(x: f64[N]) -> f64 {{ return sum(g{depth}(x)); }}"


def test_call_fan_out_lowers_each_call_once(tmp_path: Path) -> None:
    module = rv.compile(_loss(40))
    x = np.linspace(0.1, 0.9, 5)
    np.testing.assert_allclose(module.g40(x), 2.0**40 * np.sin(x), rtol=1e-12)
    np.testing.assert_allclose(module.loss.grad("x")(x), 2.0**40 * np.cos(x), rtol=1e-12)
    _assert_linear(_loss(4), _loss(40), tmp_path, backend="native", call="loss")


def test_distinct_arguments_are_not_merged() -> None:
    source = ("fn g(x: f64[N], c: f64) -> f64[N] { return x * c; }\n"
              "fn f(x: f64[N]) -> f64[N] { return g(x, 2.0) + g(x, 3.0) + g(x * 2.0, 2.0); }")
    x = np.arange(3.0)
    np.testing.assert_array_equal(rv.compile(source).f(x), 9.0 * x)


def test_wide_tuple_returns_are_linear(tmp_path: Path) -> None:
    x = np.array([0.5, -1.0, 2.0, 3.0])
    native = rv.compile(wide_tuple(3000)).f(x)
    interpreted = rv.compile(wide_tuple(3000), backend="interp").f(x)
    assert len(native) == 3000 and native[2999] == 3.0 * 2999.0
    np.testing.assert_array_equal(native, interpreted)
    _assert_linear(wide_tuple(300), wide_tuple(3000), tmp_path, backend="native", call="f")


def test_only_huge_blocks_skip_codegen_optimisation() -> None:
    small = rv.compile("fn f(x: f64[N]) -> f64[N] { return x * 2.0; }").ir("llvm", "f")
    huge = rv.compile(wide_tuple(3000)).ir("llvm", "f")
    assert jit._code_generator(small) is jit.host_target().target_machine
    assert jit._code_generator(huge) is not jit.host_target().target_machine


def _many_functions(count: int) -> str:
    """`count` small functions, then one whose sum is wider than the nesting limit."""
    small = [f"fn h{i}(x: f32[N]) -> f32[N] {{ let y = x * {i}.0 + 1.0; "
             "return exp(y) + " + " + ".join(["y"] * 20) + "; }" for i in range(count)]
    wide = "fn wide(x: f32[N]) -> f32[N] { return " + " + ".join(["x"] * 300) + "; }"
    return "\n".join(small + [wide])


def test_large_sources_compile_in_time_proportional_to_size(tmp_path: Path) -> None:
    assert len(_many_functions(800)) > 80_000
    _assert_linear(_many_functions(80), _many_functions(800), tmp_path)


@pytest.mark.parametrize("terms", [200, 5000])
def test_flat_sums_compile_and_differentiate(terms: int) -> None:
    source = ("fn f(x: f32[N]) -> f32 { return sum(" + " + ".join(
        f"x * {k % 5}.0" for k in range(terms)) + "); }")
    x = np.linspace(0.0, 1.0, 3, dtype=np.float32)
    weight = sum(k % 5 for k in range(terms))
    for backend in ("native", "interp"):
        module = rv.compile(source, backend=backend)
        np.testing.assert_allclose(module.f(x), weight * x.sum(), rtol=1e-5)
        np.testing.assert_allclose(module.f.grad("x")(x), np.full(3, weight), rtol=1e-5)
        assert module.ir("ast").count("(+ ") == terms - 1


def test_flat_sums_in_index_notation_and_dimensions() -> None:
    source = ("fn f(x: f32[N]) -> f32[N + " + " + ".join(["1"] * 3000) + "] { let y[i in 0..N + "
              + " + ".join(["1"] * 3000) + "] = " + " + ".join(["x[i]"] * 3000)
              + "; return y; }")
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(rv.compile(source, backend="interp").f(x)[:3], 3000 * x)


def test_deep_floor_division_chains_do_not_recurse() -> None:
    fits = "fn f(x: f32[N]) -> f32[N // 2 // 2 // 2] { return x[0:N // 2 // 2 // 2]; }"
    assert rv.compile(fits, backend="interp").f(np.zeros(17, np.float32)).shape == (2,)
    chain = " // 2" * 5000
    with pytest.raises(rv.CompileError, match="more than 64 bits"):
        rv.compile(f"fn f(x: f32[N]) -> f32[N{chain}] {{ return x[0:N{chain}]; }}")

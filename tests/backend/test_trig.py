"""sin, cos and tan through `compiler/backend/trig.py`: the f32 reduction below F32_SHORT and
the one sincos (a call, whose vector versions are inlined once the loop is vectorised) that a
sin and a cos of the same value share.

`test_mathlib.py` samples the whole float range; here the f32 reduction's hard cases are
sampled densely: floats next to odd multiples of pi/4 (where x * 2/pi rounded in f32 can
land on the wrong side of the tie, leaving |r| a little above pi/4) and next to multiples of
pi/2 (where r cancels), for every quadrant count k below F32_SHORT * 2/pi.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.backend.trig import F32_SHORT

BOUNDS = {"sin": 2.0, "cos": 2.0, "tan": 3.5}  # ulps, as test_mathlib.py asserts
REFERENCES = {"sin": np.sin, "cos": np.cos, "tan": np.tan}
SOURCE = """
fn sin_of(x: f32[N]) -> f32[N] { return sin(x); }
fn cos_of(x: f32[N]) -> f32[N] { return cos(x); }
fn tan_of(x: f32[N]) -> f32[N] { return tan(x); }
fn both(x: f32[N]) -> f32[N] { return sin(x) * cos(x); }
"""


def _neighbours(centres: np.ndarray, ulps: int) -> np.ndarray:
    """The f32 numbers within `ulps` steps of each centre (rounded to f32), both signs."""
    bits = centres.astype(np.float32).view(np.int32)
    steps = np.arange(-ulps, ulps + 1, dtype=np.int32)
    x = (bits[:, None] + steps[None, :]).ravel().view(np.float32)
    return np.concatenate([x, -x])


def _ulp_errors(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the last place of `exact` rounded to f32."""
    return np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(exact.astype(np.float32)))


def _hard_cases() -> np.ndarray:
    k = np.arange(int(F32_SHORT * 2 / np.pi) + 2, dtype=np.float64)
    ties = _neighbours((k + 0.5) * np.pi / 2, 64)
    multiples = _neighbours(k[1:] * np.pi / 2, 64)
    uniform = np.random.default_rng(11).uniform(-F32_SHORT, F32_SHORT, 200_000)
    x = np.concatenate([ties, multiples, uniform.astype(np.float32)])
    return x[np.abs(x) < F32_SHORT].astype(np.float32)


@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_f32_reduction_is_accurate_at_ties_and_near_multiples_of_pi_over_2(name: str) -> None:
    x = _hard_cases()
    got = getattr(rv.compile(SOURCE), f"{name}_of")(x)
    errors = _ulp_errors(got, REFERENCES[name](x.astype(np.float64)))
    worst = int(np.argmax(errors))
    assert errors[worst] <= BOUNDS[name], f"{name}({x[worst]!r}): {errors[worst]:.2f} ulp"


def test_f32_reduction_agrees_with_the_f64_one_across_the_switch() -> None:
    """Just below F32_SHORT the f32 reduction runs, at and above it the f64 one: a vector of
    both kinds takes the f64 path for all lanes, so each value is also computed alone."""
    below = np.nextafter(np.float32(F32_SHORT), np.float32(0)) - np.arange(8, dtype=np.float32)
    mixed = np.concatenate([below[:4], np.full(4, F32_SHORT, np.float32)])
    kernel = rv.compile(SOURCE).sin_of
    alone = np.concatenate([kernel(np.repeat(v, 8))[:1] for v in mixed])
    np.testing.assert_allclose(kernel(mixed), alone, rtol=3e-7)
    assert np.all(_ulp_errors(kernel(mixed), np.sin(mixed.astype(np.float64))) <= 2.0)


def _vector_reductions(module: rv.Module, fn: str) -> int:
    """How many vector f32 reductions `k = x * 2/pi` the kernel of `fn` runs per iteration of
    its loops: one per vector version of sincos inlined into the vectorised loop."""
    functions = re.split(r"^define ", module.ir("llvm", fn=fn), flags=re.MULTILINE)
    kernel = "".join(f for f in functions if re.match(rf"[^@]*@rv_{fn}(_chunks\d+)?\(", f))
    return len(re.findall(r"fmul <\d+ x float> %[\w.]+, splat \(float 0x3FE45F3060000000\)",
                          kernel))


def test_sin_and_cos_of_one_value_share_one_reduction() -> None:
    module = rv.compile(SOURCE)
    assert _vector_reductions(module, "sin_of") > 0
    assert _vector_reductions(module, "both") == _vector_reductions(module, "sin_of")
    x = np.linspace(-20, 20, 1001, dtype=np.float32)
    np.testing.assert_array_equal(module.both(x), module.sin_of(x) * module.cos_of(x))


def test_vector_versions_are_inlined_into_the_vectorised_loop() -> None:
    text = rv.compile(SOURCE).ir("llvm", fn="both")
    assert not re.search(r"call \{ <\d+ x float>, <\d+ x float> \} @rv\.sincos", text)

"""Robustness of the whole front end (docs/language.md §13): parse, check and lower mutated
programs.

Every mutant of the golden and example programs must compile or raise a `CompileError`
with a position, within a time bound; whatever compiles must give verifiable IR. So must
the blow-up shapes of `fuzzing.blow_up` (call fan-out, wide tuples, flat chains, long
names, empty ranges, literals that do not fit), whose results native code and the
interpreter must agree on.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
from fuzzing import blow_up, mutate

import reverie as rv
from reverie.compiler.ir.tensor_verifier import verify_function

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.rv"))
SEEDS = EXAMPLES + sorted((ROOT / "tests" / "golden" / "ast").glob("*.rv"))
MUTANTS = 1000
SECONDS_PER_SOURCE = 5.0  # of CPU time: a blow-up is exponential, far beyond this; CPU time
# (not wall-clock) so that other jobs on a shared machine do not count


def _compile(source: str) -> bool:
    """Compile `source` (every function, f32 and f64) or raise only CompileError."""
    start = time.process_time()
    try:
        module = rv.compile(source, name="fuzz.rv", backend="interp")
        for name in module.kernels:
            for dtype in ("f32", "f64"):
                verify_function(module.lowering.specialise(name, dtype))
        accepted = True
    except rv.CompileError as error:
        assert error.diagnostics and error.diagnostics[0].line >= 1, str(error)
        assert str(error).startswith("fuzz.rv:"), str(error)
        accepted = False
    elapsed = time.process_time() - start
    assert elapsed < SECONDS_PER_SOURCE, f"took {elapsed:.1f}s on:\n{source}"
    return accepted


def test_examples_compile() -> None:
    assert EXAMPLES
    for path in EXAMPLES:
        assert _compile(path.read_text()), path


def test_mutated_programs_compile_or_raise_compile_error() -> None:
    rng = random.Random(7)
    sources = [p.read_text() for p in SEEDS]
    outcomes = []
    for _ in range(MUTANTS):
        source = mutate(rng.choice(sources), rng)
        try:
            outcomes.append(_compile(source))
        except AssertionError:
            raise
        except Exception as error:  # anything else is a compiler bug: show the input
            message = f"{type(error).__name__}: {error}\non source:\n{source}"
            raise AssertionError(message) from error
    assert any(outcomes) and not all(outcomes)


BLOW_UPS = 24


def test_blow_up_shapes_compile_in_bounded_time_and_agree() -> None:
    rng = random.Random(11)
    outcomes = []
    for _ in range(BLOW_UPS):
        source = blow_up(rng)
        accepted = _compile(source)
        outcomes.append(accepted)
        if accepted:
            _agree(source)
    assert any(outcomes) and not all(outcomes)


def _agree(source: str) -> None:
    """Native code and the interpreter give the same results on a small input."""
    native, interp = rv.compile(source), rv.compile(source, backend="interp")
    name = list(native.kernels)[-1]
    dtypes = native.kernels[name].declared_dtypes
    args = [np.arange(1, 5).astype("i4" if dtype == "i32" else "f4" if dtype == "f32" else "f8")
            for dtype in dtypes]
    expected, got = interp.kernels[name](*args), native.kernels[name](*args)
    np.testing.assert_allclose(np.asarray(got, dtype="f8"), np.asarray(expected, dtype="f8"),
                               rtol=1e-6)

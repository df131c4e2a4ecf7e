"""Robustness of the whole front end (SPEC §5): parse, check and lower mutated programs.

Every mutant of the golden and example programs must compile or raise a `CompileError`
with a position, within a time bound; whatever compiles must give verifiable IR.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from fuzzing import mutate

import reverie as rv
from reverie.compiler.ir.verifier import verify_function

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.rv"))
SEEDS = EXAMPLES + sorted((ROOT / "tests" / "golden" / "ast").glob("*.rv"))
MUTANTS = 1000
SECONDS_PER_SOURCE = 2.0


def _compile(source: str) -> bool:
    """Compile `source` (every function, f32 and f64) or raise only CompileError."""
    start = time.perf_counter()
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
    elapsed = time.perf_counter() - start
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

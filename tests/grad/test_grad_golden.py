"""Golden tests for the adjoint IR: each tests/golden/grad/*.rv prints as its .ir file.

Every function is specialised to f32 and differentiated with respect to all its float
parameters: `grad_function` for one scalar float result, `vjp_function` otherwise. After an
intended change to reverse mode or simplification, regenerate the files with

    REVERIE_UPDATE_GOLDEN=1 python -m pytest tests/grad/test_grad_golden.py

and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.ir.tensor_verifier import verify_function
from reverie.compiler.transforms.reverse import grad_function, vjp_function

GOLDEN_DIR = Path(__file__).parents[1] / "golden" / "grad"
PROGRAMS = sorted(GOLDEN_DIR.glob("*.rv"))


def adjoint(fn: Function) -> Function:
    """The adjoint IR of `fn` with respect to every float parameter."""
    wrt = [i for i, p in enumerate(fn.params) if p.type.is_float]
    types = fn.result_types
    if len(types) == 1 and types[0].rank == 0 and types[0].is_float:
        return grad_function(fn, wrt)
    return vjp_function(fn, wrt)


def adjoint_text(program: Path) -> str:
    module = rv.compile(program.read_text(encoding="utf-8"), name=program.name)
    functions = [adjoint(module.lowering.specialise(name, "f32")) for name in module.kernels]
    for fn in functions:
        verify_function(fn)
    return "\n\n".join(format_function(fn) for fn in functions) + "\n"


def test_golden_programs_are_present() -> None:
    assert len(PROGRAMS) >= 5


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda path: path.stem)
def test_adjoint_ir_matches_golden_file(program: Path, golden) -> None:  # noqa: ANN001
    printed = adjoint_text(program)
    golden(printed, program.with_suffix(".ir"))


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda path: path.stem)
def test_adjoint_ir_is_deterministic(program: Path) -> None:
    assert adjoint_text(program) == adjoint_text(program)

"""Golden tests for the `tensor` stage: the typed IR of every example program.

Each `examples/NAME.rv` prints, through `module.ir("tensor")` (f32 specialisation), as
`tests/golden/tensor/NAME.ir`. Regenerate with
`REVERIE_UPDATE_GOLDEN=1 python -m pytest tests/tensor_ir/test_golden_tensor.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import reverie as rv
from reverie.compiler.ir.tensor_verifier import verify_function

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.rv"))
GOLDEN_DIR = ROOT / "tests" / "golden" / "tensor"


@pytest.mark.parametrize("program", EXAMPLES, ids=lambda p: p.stem)
def test_tensor_ir_matches_golden_file(program: Path, golden) -> None:  # noqa: ANN001
    module = rv.compile(program.read_text(encoding="utf-8"), name=program.name, backend="interp")
    golden(module.ir("tensor"), GOLDEN_DIR / f"{program.stem}.ir")


@pytest.mark.parametrize("program", EXAMPLES, ids=lambda p: p.stem)
def test_tensor_ir_verifies_and_prints_deterministically(program: Path) -> None:
    source = program.read_text(encoding="utf-8")
    first = rv.compile(source, backend="interp")
    for name in first.kernels:
        for dtype in ("f32", "f64"):
            verify_function(first.lowering.specialise(name, dtype))
    assert first.ir("tensor") == rv.compile(source, backend="interp").ir("tensor")

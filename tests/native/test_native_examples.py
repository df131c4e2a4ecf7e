"""Every function of every `examples/*.rv`, and its gradient, natively equals the
interpreter (in f32 and f64 where the function is generic)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from native_helpers import assert_same, run_both

import reverie as rv
from reverie.compiler.transforms.reverse import grad_function

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_examples import EXAMPLE_FILES, make_args  # noqa: E402

CASES = [(path, fn.name) for path in EXAMPLE_FILES
         for fn in rv.compile(path.read_text(), backend="interp").ast.functions]


def _grad_or_none(fn):
    """The gradient w.r.t. every float parameter, when the function has one scalar float
    result and float parameters."""
    wrt = [i for i, p in enumerate(fn.params) if p.type.is_float]
    results = fn.result_types
    if not wrt or len(results) != 1 or results[0].rank or not results[0].is_float:
        return None
    return grad_function(fn, wrt)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize(("path", "name"), CASES, ids=[f"{p.stem}.{n}" for p, n in CASES])
def test_example_function_and_gradient(path: Path, name: str, dtype: str) -> None:
    module = rv.compile(path.read_text(), backend="interp")
    fn = module.lowering.specialise(name, dtype)
    args = make_args(module, name, dtype)
    assert_same(*run_both(fn, *args), scale=30)
    grad = _grad_or_none(fn)
    if grad is not None:
        assert_same(*run_both(grad, *args), scale=300)

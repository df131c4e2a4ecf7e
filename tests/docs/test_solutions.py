"""Every exercise's solution (docs/tutorial/solutions/) does what its chapter asks.

Solutions that change the compiler's behaviour do it for the length of a `with` block or
on a copy of the IR, never by editing the installed files; each test checks the effect and
that the compiler is as it was afterwards.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from tutorial_runner import ROOT

import reverie as rv
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.tensor_printer import format_function

SOLUTIONS = ROOT / "docs" / "tutorial" / "solutions"
LINEAR = ROOT / "docs" / "tutorial" / "kernels" / "linear.rv"
LOSS = ROOT / "docs" / "tutorial" / "kernels" / "loss.rv"


@pytest.fixture(autouse=True)
def _in_repository_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # solutions name files as the chapters do, from the root


def solution(name: str) -> ModuleType:
    """Import `docs/tutorial/solutions/<name>.py`."""
    spec = importlib.util.spec_from_file_location(f"tutorial_{name}", SOLUTIONS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_solution_a_chapter_names_exists_and_is_tested() -> None:
    named = set()
    for chapter in (ROOT / "docs" / "tutorial").glob("[0-9][0-9]-*.md"):
        named |= {Path(p).name for p in _solution_paths(chapter.read_text())}
    on_disk = {p.name for p in SOLUTIONS.iterdir() if p.suffix in (".py", ".rv")}
    assert named == on_disk
    tested = Path(__file__).read_text()
    assert all(Path(name).stem in tested for name in on_disk)


def _solution_paths(text: str) -> list[str]:
    return [word.strip("`.,()") for word in text.split() if "tutorial/solutions/" in word]


def test_ch01_softplus() -> None:
    module = rv.load(SOLUTIONS / "ch01_softplus.rv")
    x = np.linspace(-3, 3, 7)
    assert np.isclose(module.softplus_total(x), np.log1p(np.exp(x)).sum())


def test_ch01_missing_semicolon() -> None:
    found = solution("ch01_missing_semicolon")
    diagnostic = found.missing_semicolon_diagnostic()
    assert (diagnostic.line, diagnostic.column) == (2, 14) and "'return'" in diagnostic.message
    rv.compile(found.SOURCE.replace("let y = x\n", "let y = x;\n"))  # the fix compiles


def test_ch02_shapes() -> None:
    shapes = solution("ch02_shapes")
    assert shapes.wrong_return_message() == (
        "'steps' returns f64[N - 1] where its signature says f64[N]")
    assert any("{shape = [N, D]}" in line for line in shapes.centred_broadcasts())
    x = np.arange(6.0).reshape(3, 2)
    assert np.allclose(rv.compile(shapes.CENTRED).centred(x), x - x.mean(axis=0))


def test_ch03_types_inline_and_count_ops() -> None:
    inline = solution("ch03_inline_types")
    fn = rv.load(LOSS).loss.ir_for("f32")
    plain = format_function(fn)
    with inline.types_inline():
        assert "%0 = mul %x: f32[N], %w: f32[N] : f32[N]" in format_function(fn)
    assert format_function(fn) == plain  # the printer is restored
    mse = rv.load(LINEAR).mse.ir_for("f64")
    assert inline.count_ops(mse) == solution("ch04_simplify_count").op_lines(
        format_function(mse)) == 11


def test_ch04_softsign() -> None:
    kernel = rv.load(SOLUTIONS / "ch04_softsign.rv").softsign_total
    x = np.array([-2.0, -0.5, 0.25, 3.0])
    assert np.isclose(kernel(x), np.sum(x / (1 + np.abs(x))))
    assert np.allclose(kernel.grad("x")(x), 1 / (1 + np.abs(x)) ** 2)


def test_ch04_simplify_count() -> None:
    count = solution("ch04_simplify_count")
    raw, simplified = count.removed_by_simplify(rv.load(LINEAR), "mse")
    assert raw > simplified > 0


def test_ch05_higher_order() -> None:
    higher = solution("ch05_higher_order")
    assert higher.hvp_matches_hessian(n=5, seed=3)
    points = np.random.default_rng(1).normal(size=(3, 4))
    assert np.allclose(higher.row_gradients(points), higher.central_differences(points),
                       atol=1e-5)


def test_ch06_memory() -> None:
    memory = solution("ch06_memory")
    assert memory.stored_states(100) == (100, 10)
    assert memory.stored_states(10) == (10, 3)
    assert memory.recompute_ratio(steps=50, width=8) > 0  # and both gradients agree


def test_ch07_loops() -> None:
    kinds = solution("ch07_loops").loop_nests()
    assert kinds["Loop"] == 1 and kinds["Matmul"] == 1


def test_ch07_fold_pow_one() -> None:
    module = rv.compile("fn f(x: f64[N]) -> f64[N] { return x ** 1.0 + x ** 3.0; }")
    fn = module.f.ir_for("f64")
    before = format_function(fn)
    folded = solution("ch07_fold_pow_one").fold_pow_one(fn)
    assert format_function(fn) == before  # the input is not changed
    pows = [op for op in folded.body.ops if op.name == "pow"]
    assert len(pows) == 1 and len(folded.body.ops) == len(fn.body.ops) - 3
    x = np.array([-2.0, 0.0, 0.5, 3.0])
    (expected,), (got,) = interpret(fn, [x], {"N": 4}), interpret(folded, [x], {"N": 4})
    assert np.allclose(expected, got)


def test_ch08_boundary(tmp_path: Path) -> None:
    boundary = solution("ch08_boundary")
    value, refused = boundary.converted_or_refused()
    assert np.isclose(value, 3 * np.tanh(1.0)) and refused == "ArgumentTypeError"
    files, cold, warm = boundary.cold_then_warm(tmp_path / "cache", ROOT)
    assert files > 0 and cold > 0 and warm > 0


@pytest.mark.mlir
def test_ch09_mlir() -> None:
    mlir = solution("ch09_mlir")
    assert mlir.backends_agree(str(LINEAR))
    counts = mlir.generic_count(str(LOSS))
    assert counts["loss_grad"] > counts["loss"] > 0


def test_ch10_control() -> None:
    control = solution("ch10_control")
    rng = np.random.default_rng(0)
    assert control.sort_gradient_is_a_scatter(np.array([2.0, 5.0, 2.0, -1.0, 2.0]),
                                              np.arange(5.0))
    np.testing.assert_allclose(control.overwritten_entry(np.array([1.0, 2.0, 3.0])),
                               [5.0, 11.0, 12.0])
    assert control.running_rows(rng.standard_normal((6, 3)), rng.standard_normal((6, 3)))

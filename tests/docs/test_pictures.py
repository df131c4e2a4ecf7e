"""The pictures of the tutorial: `module.ir(stage, format="dot")`, `reverie emit --format
dot [-o FILE]` (compiler/ir/dot.py) and `reverie demo --plot` (reverie/demo.py).

The dot text is checked against the text printer (same names, one node per op, one edge
per operand), the colouring against the definition of the primal half, and the error
paths (no Graphviz, no matplotlib, a stage that has no picture) for their messages.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
from tutorial_runner import ROOT

import reverie as rv
from reverie import demo
from reverie.__main__ import main
from reverie.compiler.ir.dot import ADJOINT_COLOUR, PRIMAL_COLOUR, format_dot, primal_half
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.transforms.reverse import vjp_function

KERNELS = ROOT / "docs" / "tutorial" / "kernels"
NODE = re.compile(r"^  (\w+) \[(?:shape=\w+, )?fillcolor=(\w+), label=\"(.*)\"\];$", re.MULTILINE)
EDGE = re.compile(r"^  (\w+) -> (\w+) ", re.MULTILINE)


def nodes(dot: str) -> dict[str, tuple[str, str]]:
    """Node id → (colour, label)."""
    return {node: (colour, label) for node, colour, label in NODE.findall(dot)}


def test_the_graph_has_a_node_per_op_and_an_edge_per_use() -> None:
    module = rv.load(KERNELS / "linear.rv")
    fn = module.adjoint("mse", "f64")
    dot = format_dot(fn, module.mse.ir_for("f64"))
    drawn = nodes(dot)
    assert len(drawn) == len(fn.params) + len(fn.body.ops) + 1
    uses = sum(len(op.operands) for op in fn.body.ops) + len(fn.body.results)
    assert len(EDGE.findall(dot)) == uses
    printed = re.findall(r"^  (%[\w, %]+) = (\w+)", format_function(fn), re.MULTILINE)
    labels = [label.split("\\n")[0] for colour, label in drawn.values()]
    assert all(any(label.startswith(f"{names} = {op}") for label in labels)
               for names, op in printed)


def test_primal_and_adjoint_halves_are_coloured_apart() -> None:
    module = rv.load(KERNELS / "loss.rv")
    dot = module.ir("grad", format="dot")
    colours = [colour for colour, label in nodes(dot).values() if label != "return"]
    assert colours == [PRIMAL_COLOUR] * 5 + [ADJOINT_COLOUR] * 6  # 2 params, 3 primal ops
    assert set(nodes(module.ir("tensor", format="dot")).values()) >= {
        (PRIMAL_COLOUR, "%1 = tanh\\nf32[N]")}
    assert ADJOINT_COLOUR not in module.ir("tensor", format="dot")
    assert "legend [" in dot and "legend [" not in module.ir("tensor", format="dot")


def test_a_vjp_colours_its_cotangent_parameters_as_adjoint() -> None:
    program = rv.load(KERNELS / "linear.rv").steps.ir_for("f64")
    vjp = vjp_function(program, [0])
    drawn = nodes(format_dot(vjp, program))
    assert drawn["p0"][0] == PRIMAL_COLOUR and drawn["p1"] == (
        ADJOINT_COLOUR, f"%out_bar: {vjp.params[1].type}")
    assert len(primal_half(vjp, 1)) == 3  # the two slices and their difference


def test_a_loop_is_one_node_and_later_values_keep_the_printers_numbers() -> None:
    module = rv.load(KERNELS / "decay.rv")
    dot = module.ir("grad", format="dot", dtype="f64")
    text = module.ir("grad", dtype="f64")
    assert "%2, %3 = for_history" in text and "%6 = reduce_sum" in text
    labels = [label for _, label in nodes(dot).values()]
    assert any(label.startswith("%2, %3 = for_history") and "(region)" in label
               for label in labels)
    assert any(label.startswith("%6 = reduce_sum") for label in labels)


@pytest.mark.parametrize(("stage", "form"), [("loops", "dot"), ("grad-raw", "dot"),
                                             ("tensor", "svg")])
def test_a_stage_or_format_without_a_picture_is_a_clear_error(stage: str, form: str) -> None:
    with pytest.raises(ValueError, match="format must be one of text, dot"):
        rv.load(KERNELS / "loss.rv").ir(stage, format=form)


def test_emit_prints_writes_and_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    loss = str(KERNELS / "loss.rv")
    assert main(["emit", loss, "--stage", "grad", "--format", "dot"]) == 0
    printed = capsys.readouterr().out
    assert printed == rv.load(loss).ir("grad", format="dot")
    assert main(["emit", loss, "--stage", "grad", "--format", "dot",
                 "-o", str(tmp_path / "g.dot")]) == 0
    assert (tmp_path / "g.dot").read_text() == printed
    fake_dot = tmp_path / "bin" / "dot"  # stands in for Graphviz: echoes what it was given
    fake_dot.parent.mkdir()
    fake_dot.write_text("#!/bin/sh\necho \"<svg $1>\"; cat\n")
    fake_dot.chmod(fake_dot.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake_dot.parent}{os.pathsep}{os.environ['PATH']}")
    assert main(["emit", loss, "--stage", "grad", "--format", "dot",
                 "-o", str(tmp_path / "g.svg")]) == 0
    assert (tmp_path / "g.svg").read_text() == "<svg -Tsvg>\n" + printed


def test_drawing_without_graphviz_or_with_two_functions_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on it
    svg = str(tmp_path / "g.svg")
    assert main(["emit", str(KERNELS / "loss.rv"), "--format", "dot", "-o", svg]) == 1
    assert "needs Graphviz's `dot` program" in capsys.readouterr().err
    assert main(["emit", str(KERNELS / "linear.rv"), "--format", "dot", "-o", svg]) == 1
    assert "name it with --fn" in capsys.readouterr().err
    assert not Path(svg).exists()


def test_demo_plot_without_matplotlib_stops_before_fitting(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    assert main(["demo", "--plot", "loss.png"]) == 1
    captured = capsys.readouterr()
    assert "needs matplotlib" in captured.err and captured.out == ""


class FakePyplot:
    """Records what the demo draws (matplotlib is optional, so not needed by the tests)."""

    def __init__(self) -> None:
        self.calls: dict[str, tuple] = {}
        self.saved: list[str] = []

    def subplots(self, **kwargs: object) -> tuple[FakePyplot, FakePyplot]:
        return self, self

    def savefig(self, path: str) -> None:
        self.saved.append(path)

    def close(self, figure: object) -> None:
        self.calls["close"] = (figure,)

    def __getattr__(self, name: str):  # plot, set_yscale, set_xlabel, ...
        return lambda *args, **kwargs: self.calls.__setitem__(name, args)


def test_demo_plot_saves_the_loss_of_every_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    pyplot = FakePyplot()
    monkeypatch.setattr(demo, "pyplot_or_message", lambda: (pyplot, None))
    monkeypatch.setattr(demo, "STEPS", 40)
    monkeypatch.setattr(demo, "median_seconds", lambda run: 1.0)
    target = str(tmp_path / "loss.png")
    assert main(["demo", "--plot", target]) == 0
    steps, losses = pyplot.calls["plot"]
    assert list(steps) == list(range(1, 41)) and len(losses) == 40
    assert losses[-1] < losses[0] and np.all(np.isfinite(losses))
    assert pyplot.saved == [target] and f"loss curve saved to {target}" in capsys.readouterr().out

"""The torch.compile backend's examples run (issue 14): `examples/wgan_gp.py` (a gradient
penalty, so a double backward every step), `examples/pinn.py` (u_xx in the loss, so a
third derivative every step) and `examples/amp_gradient_penalty.py` (PyTorch's AMP recipe
in bf16/f16 with a GradScaler, issue 37), each beside eager PyTorch from the same weights."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(argv)
    return capsys.readouterr().out


def test_wgan_gp_trains_like_eager(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_example("wgan_gp", ["--steps", "12", "--batch", "64"], capsys)
    first, last, drift = map(float, re.search(
        r"loss (\S+) -> (\S+) \(eager \S+; largest difference (\S+)\)", out).groups())
    assert last < first and drift < 1e-4
    assert re.search(r"time per step: reverie [\d.]+ ms, eager PyTorch [\d.]+ ms", out)


def test_pinn_trains_like_eager(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_example("pinn", ["--steps", "12", "--points", "16"], capsys)
    first, last, drift = map(float, re.search(
        r"loss (\S+) -> (\S+) \(eager \S+; largest relative difference (\S+)\)", out).groups())
    assert last < first and drift < 1e-10
    assert "time per step: reverie" in out


@pytest.mark.parametrize("options", [["--dtype", "bf16"], ["--dtype", "f16", "--whole-step"]],
                         ids=["bf16-model", "f16-whole-step"])
def test_amp_gradient_penalty_trains_like_eager_autocast(
        options: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    with torch._dynamo.config.patch(trace_autograd_ops=False):  # the example may set it
        out = run_example("amp_gradient_penalty", ["--steps", "10", "--batch", "64",
                                                   *options], capsys)
    first, last, drift = map(float, re.search(
        r"loss (\S+) -> (\S+) \(eager \S+; largest relative difference (\S+)\)", out).groups())
    assert last < first and drift < 3e-2  # a few bf16 roundoffs
    assert "time per step: reverie" in out

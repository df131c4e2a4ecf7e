"""`reverie demo`: the main job on embedded defaults (README.md).

Compiles a bundled two-layer MLP regression loss, fits it to synthetic data with compiled
gradients and Adam (a progress bar shows the loss going down), checks the compiled
gradient against central finite differences, and times the compiled gradient against a
hand-written NumPy gradient of the same loss. `--plot FILE` saves the loss of every step
as a picture (matplotlib, an optional dependency: without it the demo says so and stops
before fitting).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

import reverie as rv
from reverie.cli_grad import check_gradient, median_seconds

PROGRESS_LINE_SECONDS = 5.0  # off a terminal, one progress line this often at most
MODEL = """
# Two-layer perceptron, mean squared error (the model `reverie demo` fits).
fn loss(x: float[N, D], w1: float[D, H], b1: float[H], w2: float[H], b2: float,
        y: float[N]) -> float {
    let hidden = tanh(x @ w1 + b1);
    let prediction = hidden @ w2 + b2;
    return mean((prediction - y) ** 2);
}
"""

SAMPLES, FEATURES, HIDDEN, STEPS = 1024, 8, 32, 2000


def synthetic_data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and a smooth nonlinear target with a little noise."""
    x = rng.normal(size=(SAMPLES, FEATURES))
    direction = rng.normal(size=FEATURES) / np.sqrt(FEATURES)
    y = np.sin(2 * x @ direction) + 0.5 * np.cos(x[:, 0]) + 0.05 * rng.normal(size=SAMPLES)
    return x, y


def numpy_value_and_grad(x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray,
                         b2: np.ndarray, y: np.ndarray) -> tuple:
    """The same loss and its gradient, derived by hand."""
    hidden = np.tanh(x @ w1 + b1)
    residual = hidden @ w2 + b2 - y
    value = np.mean(residual**2)
    d_prediction = 2 * residual / len(y)
    d_pre = np.outer(d_prediction, w2) * (1 - hidden**2)
    return value, (x.T @ d_pre, d_pre.sum(0), hidden.T @ d_prediction, d_prediction.sum())


def pyplot_or_message() -> tuple[Any, str | None]:
    """matplotlib's pyplot (headless), or None and why it cannot be used."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        return None, ("reverie demo --plot needs matplotlib, which is not installed "
                      "(pip install matplotlib); the demo runs without --plot")
    return pyplot, None


def save_loss_plot(pyplot: Any, losses: Sequence[float], path: str) -> None:
    """The loss at every step of the fit, on a log scale, saved to `path`."""
    figure, axes = pyplot.subplots(figsize=(6, 4))
    axes.plot(range(1, len(losses) + 1), losses)
    axes.set_yscale("log")
    axes.set_xlabel("step")
    axes.set_ylabel("mean squared error")
    axes.set_title("reverie demo: fitting a two-layer perceptron with Adam")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def run_demo(plot: str | None = None) -> int:
    """Fit, check and time (saving the loss curve to `plot`); a process exit status."""
    pyplot, missing = pyplot_or_message() if plot else (None, None)
    if missing:
        print(f"reverie: error: {missing}", file=sys.stderr)
        return 1
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    module = rv.compile(MODEL, name="demo_mlp.rv")
    loss = module.loss
    value_and_grad = loss.value_and_grad(("w1", "b1", "w2", "b2"))
    x, y = synthetic_data(rng)
    params = [rng.normal(size=(FEATURES, HIDDEN)) / np.sqrt(FEATURES), np.zeros(HIDDEN),
              rng.normal(size=HIDDEN) / np.sqrt(HIDDEN), np.zeros(())]
    value_and_grad(x, *params, y)
    print(f"compiled {module.name}: loss and its gradient in {time.perf_counter() - start:.2f} s")

    moments = [np.zeros_like(p) for p in params]
    squares = [np.zeros_like(p) for p in params]
    on_terminal = sys.stderr.isatty()  # README.md: elsewhere a line every few seconds at most
    bar = tqdm(range(1, STEPS + 1), desc="fitting", unit="step", disable=not on_terminal)
    losses: list[float] = []
    last_line = -math.inf
    for step in bar:
        value, grads = value_and_grad(x, *params, y)
        losses.append(float(value))
        for i, g in enumerate(grads):
            moments[i] = 0.9 * moments[i] + 0.1 * g
            squares[i] = 0.999 * squares[i] + 0.001 * g * g
            correction = np.sqrt(1 - 0.999**step) / (1 - 0.9**step)
            params[i] = np.asarray(
                params[i] - 0.01 * correction * moments[i] / (np.sqrt(squares[i]) + 1e-8))
        if step % 50 == 0:
            bar.set_postfix(loss=f"{float(value):.4f}")
        if not on_terminal and time.monotonic() - last_line >= PROGRESS_LINE_SECONDS:
            last_line = time.monotonic()
            print(f"fitting: step {step}/{STEPS}, loss {float(value):.4f}", flush=True)
    first, final = losses[0], float(loss(x, *params, y))
    print(f"loss: {first:.4f} -> {final:.4f}")
    if plot:
        save_loss_plot(pyplot, losses, plot)
        print(f"loss curve saved to {plot}")

    value, grads = value_and_grad(x, *params, y)
    reference = numpy_value_and_grad(x, *params, y)[1]
    agree = max(float(np.max(np.abs(g - r))) for g, r in zip(grads, reference, strict=True))
    check = check_gradient(loss, [x, *params, y], [1, 2, 3, 4], value, grads, rng,
                           relative_step=1e-5)
    print(f"gradient check: max relative error vs central differences {check.error:.1e} "
          f"at {check.compared} entries; "
          f"max difference vs hand-written NumPy gradient {agree:.1e}")

    compiled = median_seconds(lambda: value_and_grad(x, *params, y))
    baseline = median_seconds(lambda: numpy_value_and_grad(x, *params, y))
    print(f"value and gradient, {SAMPLES}x{FEATURES} -> {HIDDEN} -> 1, float64: "
          f"reverie {compiled * 1e3:.3f} ms, NumPy {baseline * 1e3:.3f} ms "
          f"(reverie/NumPy = {compiled / baseline:.2f})")
    ok = final < first and check.passed(1e-6)
    print("demo finished: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1

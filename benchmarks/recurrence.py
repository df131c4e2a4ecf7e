"""A recurrence's gradient wrt its input sequence, `xs[t]` read in the loop, at growing T.

    python benchmarks/recurrence.py                # T = 1000, 4096, 16384; 7 rounds
    python benchmarks/recurrence.py --rounds 3

Cases: `h = tanh(w * h + xs[t])` over xs: f64[T] (scalar state), and `h = tanh(xs[t] @ wx +
h @ wh)` over xs: f64[T, 16], h: f64[16] (a row of xs per step), loss h_T (resp. sum(h_T²)),
gradient wrt xs. Peers: NumPy (the recurrence and its reverse sweep written out in Python)
and JAX (`jax.jit(jax.grad(...))` of a `lax.scan`). The reverse sweep adds one row of x̄s
per step (`compiler/to_loops/accumulate.py`), so the time should grow as T, not T². Each
variant is checked once against NumPy; then the rounds take one sample of each variant in
turn (`scans.sample`, about 20 ms of calls); medians.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from scans import interleaved_medians

import reverie as rv

jax.config.update("jax_enable_x64", True)

SOURCE = """
fn scalar(xs: f64[T], w: f64, h0: f64) -> f64 {
    var h = h0;
    for t in 0..T { h = tanh(w * h + xs[t]); }
    return h;
}
fn rows(xs: f64[T, D], h0: f64[H], wx: f64[D, H], wh: f64[H, H]) -> f64 {
    var h = h0;
    for t in 0..T { h = tanh(xs[t] @ wx + h @ wh); }
    return sum(h * h);
}
"""
WIDTH = 16


def numpy_scalar(xs: np.ndarray, w: float, h0: float) -> np.ndarray:
    hs = np.empty(len(xs) + 1)
    hs[0] = h0
    for t in range(len(xs)):
        hs[t + 1] = np.tanh(w * hs[t] + xs[t])
    bars, bar = np.empty(len(xs)), 1.0
    for t in range(len(xs) - 1, -1, -1):
        bar *= 1.0 - hs[t + 1] ** 2
        bars[t] = bar
        bar *= w
    return bars


def numpy_rows(xs: np.ndarray, h0: np.ndarray, wx: np.ndarray, wh: np.ndarray) -> np.ndarray:
    hs = [h0]
    for x in xs:
        hs.append(np.tanh(x @ wx + hs[-1] @ wh))
    bars, bar = np.empty_like(xs), 2.0 * hs[-1]
    for t in range(len(xs) - 1, -1, -1):
        pre_bar = bar * (1.0 - hs[t + 1] ** 2)
        bars[t] = wx @ pre_bar
        bar = wh @ pre_bar
    return bars


def _jax_scalar(xs: jnp.ndarray, w: float, h0: float) -> jnp.ndarray:
    def step(h: jnp.ndarray, x: jnp.ndarray) -> tuple[jnp.ndarray, None]:
        return jnp.tanh(w * h + x), None

    return jax.lax.scan(step, h0, xs)[0]


def _jax_rows(xs: jnp.ndarray, h0: jnp.ndarray, wx: jnp.ndarray,
              wh: jnp.ndarray) -> jnp.ndarray:
    def step(h: jnp.ndarray, x: jnp.ndarray) -> tuple[jnp.ndarray, None]:
        return jnp.tanh(x @ wx + h @ wh), None

    return jnp.sum(jax.lax.scan(step, h0, xs)[0] ** 2)


def cases(steps: int) -> dict[str, dict[str, tuple[Callable, tuple]]]:
    """Each case: its variants, as (function, arguments)."""
    module = rv.compile(SOURCE)
    rng = np.random.default_rng(0)
    scalar_args = (rng.standard_normal(steps) * 0.5, 0.7, 0.1)
    rows_args = (rng.standard_normal((steps, WIDTH)) * 0.5, rng.standard_normal(WIDTH) * 0.5,
                 rng.standard_normal((WIDTH, WIDTH)) * 0.3,
                 rng.standard_normal((WIDTH, WIDTH)) * 0.3)
    return {
        f"scalar T={steps}": {
            "reverie": (module.scalar.grad(wrt="xs"), scalar_args),
            "numpy": (numpy_scalar, scalar_args),
            "jax": (jax.jit(jax.grad(_jax_scalar)), scalar_args)},
        f"rows T={steps}": {
            "reverie": (module.rows.grad(wrt="xs"), rows_args),
            "numpy": (numpy_rows, rows_args),
            "jax": (jax.jit(jax.grad(_jax_rows)), rows_args)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="1000,4096,16384")
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    print(f"{options.rounds} rounds, load average "
          f"{', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print(f"{'case':<18}{'reverie':>12}{'numpy':>12}{'jax':>12}{'rv/numpy':>10}{'rv/jax':>10}")
    for steps in map(int, options.steps.split(",")):
        for name, variants in cases(steps).items():
            want = variants["numpy"][0](*variants["numpy"][1])
            for variant, (fn, args) in variants.items():
                error = np.max(np.abs(np.asarray(fn(*args)) - want)) / np.max(np.abs(want))
                if error > 1e-10:
                    print(f"  MISMATCH {name} {variant}: relative error {error:.1e}")
            median = interleaved_medians(variants, options.rounds)
            print(f"{name:<18}" + "".join(f"{median[v] * 1e3:>10.3f}ms" for v in variants) +
                  f"{median['reverie'] / median['numpy']:>10.2f}"
                  f"{median['reverie'] / median['jax']:>10.2f}")


if __name__ == "__main__":
    main()

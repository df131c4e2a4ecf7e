"""`rv.jax.function` inside `jax.jit` against the same maths in jax.numpy, in one run.

    python benchmarks/interop_jax.py            # about a minute on 2 cores
    python benchmarks/interop_jax.py --quick    # fewer samples

Three measurements, each with its jax.numpy peer (ratio = Reverie / JAX; below 1 is faster):

1. W4-size call, `sum(x * x)` on x: f64[16]: a jitted call of the value, and of its
   gradient (dispatch included, what a user sees per call);
2. the same call inside the compiled program: 1000 dependent calls in one `lax.fori_loop`,
   per call (the custom call's own cost against XLA's fused loop), and, as the floor of
   any custom call, a kernel that does nothing;
3. one training step of the W3 MLP (x: f32[1024, 256], hidden 512, 10 outputs) with Adam
   written as optax writes it (b1 = 0.9, b2 = 0.999, eps = 1e-8, bias-corrected moments),
   the whole step under `jax.jit`.

Samples alternate between Reverie and the peer so that a change of machine load hits
both; each reported time is the median sample.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import reverie as rv  # noqa: E402
from benchmarks.workloads import w3_mlp, w4_call_overhead  # noqa: E402
from benchmarks.workloads.core import random_generator  # noqa: E402

INNER_CALLS = 1000
NOTHING = "fn nothing(x: f64[N]) -> f64 { return 0.0; }"
LEARNING_RATE = 1e-3
Step = Callable[[], object]


def per_call(run: Step, target_s: float) -> float:
    """Seconds per call of `run`, repeated for about `target_s`."""
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < target_s or count < 3:
        jax.block_until_ready(run())
        count += 1
    return elapsed / count


UNITS = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def compare(name: str, unit: str, ours: Step, peer: Step, samples: int, target_s: float,
            calls: int = 1) -> float:
    """Print the median time of both (per call of `run` / `calls`) and their ratio; return
    the ratio."""
    jax.block_until_ready(ours())
    jax.block_until_ready(peer())
    times: dict[str, list[float]] = {"reverie": [], "jax": []}
    for _ in range(samples):
        times["reverie"].append(per_call(ours, target_s))
        times["jax"].append(per_call(peer, target_s))
    medians = {k: statistics.median(v) / calls / UNITS[unit] for k, v in times.items()}
    ratio = medians["reverie"] / medians["jax"]
    print(f"{name:<50} reverie {medians['reverie']:9.2f} {unit}   "
          f"jax {medians['jax']:9.2f} {unit}   ratio {ratio:5.2f}")
    return ratio


def w4_calls(samples: int, target_s: float) -> None:
    """The W4 kernel called from jit, alone and inside a compiled loop."""
    kernel = rv.compile(w4_call_overhead.SOURCE).w4
    ours = rv.jax.function(kernel)

    def theirs(x: jax.Array) -> jax.Array:
        return jnp.sum(x * x)

    x = jnp.asarray(random_generator("W4").standard_normal(16))
    for name, f, g in [("W4 value, jit", ours, theirs),
                       ("W4 gradient, jit(grad)", jax.grad(ours), jax.grad(theirs))]:
        fast_ours, fast_theirs = jax.jit(f), jax.jit(g)
        compare(name, "us", lambda a=fast_ours: a(x), lambda a=fast_theirs: a(x),
                samples, target_s)

    def looped(f: Callable[[jax.Array], jax.Array]) -> Callable[[jax.Array], jax.Array]:
        # each call's input depends on the last result, so none is hoisted or merged
        return jax.jit(lambda x: jax.lax.fori_loop(
            0, INNER_CALLS, lambda i, x: x + 1e-9 * f(x), x))

    loop_ours, loop_theirs = looped(ours), looped(theirs)
    compare(f"W4 value inside jit ({INNER_CALLS} calls), per call", "ns",
            lambda: loop_ours(x), lambda: loop_theirs(x), samples, target_s, INNER_CALLS)
    # the floor: a kernel that reads nothing costs the custom call itself
    nothing = looped(rv.jax.function(rv.compile(NOTHING).nothing))
    compare("  (a no-op kernel inside jit, per call)", "ns", lambda: nothing(x),
            lambda: loop_theirs(x), samples, target_s, INNER_CALLS)


def adam_step(loss: Callable[..., jax.Array]) -> Callable[..., tuple]:
    """One jitted training step: the loss's gradient, then Adam as optax.adam does it."""
    b1, b2, eps = 0.9, 0.999, 1e-8

    @jax.jit
    def step(params: tuple, moments: tuple, count: jax.Array, x: jax.Array,
             y: jax.Array) -> tuple:
        value, grads = jax.value_and_grad(lambda p: loss(x, *p, y))(params)
        count = count + 1
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, moments[0], grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, moments[1], grads)
        mu_hat = jax.tree.map(lambda m: m / (1 - b1 ** count), mu)
        nu_hat = jax.tree.map(lambda v: v / (1 - b2 ** count), nu)
        params = jax.tree.map(lambda p, m, v: p - LEARNING_RATE * m / (jnp.sqrt(v) + eps),
                              params, mu_hat, nu_hat)
        return params, (mu, nu), count, value

    return step


def w3_training(samples: int, target_s: float) -> None:
    """A W3 training step under jit, Reverie's loss and gradient against jax.numpy's."""
    rng = random_generator("W3")
    batch, d, h, o = 1024, 256, 512, 10
    x = jnp.asarray(rng.standard_normal((batch, d)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((batch, o)), jnp.float32)
    params = tuple(jnp.asarray(a, jnp.float32) for a in (
        rng.standard_normal((d, h)) / np.sqrt(d), 0.1 * rng.standard_normal(h),
        rng.standard_normal((h, o)) / np.sqrt(h), 0.1 * rng.standard_normal(o)))
    moments = tuple(tuple(jnp.zeros_like(p) for p in params) for _ in range(2))
    ours = adam_step(rv.jax.function(rv.compile(w3_mlp.SOURCE).w3))
    theirs = adam_step(lambda *a: w3_mlp.loss(jnp, *a))
    count = jnp.zeros((), jnp.int32)
    first_ours, first_theirs = ours(params, moments, count, x, y), theirs(params, moments,
                                                                        count, x, y)
    for a, b in zip(jax.tree.leaves(first_ours), jax.tree.leaves(first_theirs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
    compare("W3 MLP Adam training step, jit", "ms",
            lambda: ours(params, moments, count, x, y),
            lambda: theirs(params, moments, count, x, y), samples, target_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 samples of 20 ms")
    options = parser.parse_args()
    samples, target_s = (5, 0.02) if options.quick else (9, 0.1)
    jax.config.update("jax_enable_x64", True)  # W4 is f64; W3 stays f32
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    w4_calls(samples, target_s)
    w3_training(samples, target_s)


if __name__ == "__main__":
    main()

"""The cost of `checkpoint=True`: checkpointed over stored-states gradients of one loop.

    python benchmarks/checkpointing.py [--steps 1000,16384] [--rounds 5] [--width 64]

An RNN-like scan `h = tanh(w * h + xs[t])` over a state `h: f64[H]`, its gradient with
respect to xs, w and h0, for each way of giving the trip count T:
- `dimension`: `for t in 0..L - 1` (C, the length of xs, fixed at call time);
- `literal`: `for t in 0..T` with T written in the source;
- `i64 argument`: `for t in 0..steps`;
- `i32 argument`: `for t in 0..steps` with `steps: i32` (no dimension: a trip dimension);
- `while`: `while t < steps` (its trip count is known only once the loop has run).
Each round times one call of every variant in turn (a sample repeats the call until it lasts
about 20 ms), so the machine's load hits stored and checkpointed alike; the report gives
the median per-call time and the ratio checkpointed / stored.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

import reverie as rv

TEMPLATE = """fn f(u: f64[H], w: f64[H], h0: f64[H]EXTRA) -> f64 {
    var h = h0;
    LOOP
    return sum(h * h);
}"""
BODY = "h = tanh(w * h + u);"
LOOPS = {  # kind: (extra parameters, the loop)
    "dimension": (", marks: f64[L]", f"for t in 0..L - 1 {{ {BODY} }}"),
    "literal": ("", f"for t in 0..STEPS {{ {BODY} }}"),
    "i64 argument": (", steps: i64", f"for t in 0..steps {{ {BODY} }}"),
    "i32 argument": (", steps: i32", f"for t in 0..steps {{ {BODY} }}"),
    "while": (", steps: i64", f"var t = 0; while t < steps {{ {BODY} t = t + 1; }}"),
}


def source(kind: str, steps: int) -> str:
    """The Reverie source of one variant."""
    extra, loop = LOOPS[kind]
    return TEMPLATE.replace("EXTRA", extra).replace("LOOP", loop.replace("STEPS", str(steps)))


def per_call(fn: Callable[[], object], budget: float = 0.02) -> float:
    """Seconds per call of `fn`, repeated until the sample lasts about `budget` seconds."""
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return elapsed / calls


def gradient_calls(kind: str, steps: int, width: int) -> dict[bool, Callable[[], object]]:
    """The stored (False) and checkpointed (True) gradient calls of one variant."""
    rng = np.random.default_rng(0)
    u, w, h0 = (rng.standard_normal(width), rng.uniform(0.5, 1.0, width),
                rng.standard_normal(width))
    extra = {"dimension": (np.zeros(steps + 1),), "literal": (),
             "i32 argument": (np.int32(steps),)}.get(kind, (np.int64(steps),))
    args = (u, w, h0, *extra)
    calls = {}
    for checkpoint in (False, True):
        grad = rv.compile(source(kind, steps), checkpoint=checkpoint).f.grad(("u", "w", "h0"))
        calls[checkpoint] = lambda grad=grad: grad(*args)
    stored, checkpointed = (calls[c]() for c in (False, True))
    for a, b in zip(stored, checkpointed, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="1000,16384", help="trip counts T")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--width", type=int, default=64, help="state size H")
    parser.add_argument("--kinds", default=",".join(LOOPS), help="trip count kinds")
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, H = {options.width}")
    print(f"{'trip count':14} {'T':>6} {'stored ms':>10} {'checkpointed ms':>16} {'ratio':>6}")
    for steps in (int(s) for s in options.steps.split(",")):
        variants = {kind: gradient_calls(kind, steps, options.width)
                    for kind in options.kinds.split(",")}
        samples: dict[tuple[str, bool], list[float]] = {}
        for _ in range(options.rounds):
            for kind, calls in variants.items():
                for checkpoint, call in calls.items():
                    samples.setdefault((kind, checkpoint), []).append(per_call(call))
        for kind in variants:
            stored, checkpointed = (statistics.median(samples[kind, c]) for c in (False, True))
            print(f"{kind:14} {steps:6} {1e3 * stored:10.3f} {1e3 * checkpointed:16.3f} "
                  f"{checkpointed / stored:6.2f}")


if __name__ == "__main__":
    main()

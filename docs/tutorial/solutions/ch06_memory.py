"""Chapter 6: what stored histories and checkpoints cost.

Exercise 1: the stored adjoint's history has type f64[max(steps, 0), H]: 100 states for
100 steps. The checkpointed adjoint has a segment length s = max(⌈√steps⌉, 1) (the
dimension `ceil_sqrt(steps)`, computed at call time), keeps one state per segment,
⌈steps / s⌉ = 10 of them, and stores the states of one segment (at most s = 10 more)
while sweeping it backwards.

Exercise 2: the cost model says the checkpointed gradient runs every forward step about
twice more, so it should take at most about twice the time of the stored one, keeping
about 2√T states instead of T (200 instead of 10000 at 10000 steps). Measured at 10000
steps and H = 256 the ratio is about 1 (0.8 to 1.0 on a loaded 2-core machine): the
forward steps are cheap next to the reverse ones, and the checkpointed version touches
far less memory.
"""

from __future__ import annotations

import math
import time

import numpy as np

import reverie as rv
from reverie.compiler.ir.dims import evaluate_shape

DECAY = "docs/tutorial/kernels/decay.rv"


def stored_states(steps: int) -> tuple[int, int]:
    """States kept by the stored and by the checkpointed adjoint of `decay` for `steps`."""
    adjoint = rv.load(DECAY).adjoint("decay", "f64")
    (history,) = [op for op in adjoint.body.ops if op.name == "for_history"]
    rows = evaluate_shape(history.results[1].type.shape, {"steps": steps, "H": 1})[0]
    segment = max(math.ceil(math.sqrt(steps)), 1)
    return rows, math.ceil(steps / segment)


def recompute_ratio(steps: int = 10000, width: int = 256) -> float:
    """Time of the checkpointed gradient over the stored one (both checked equal)."""
    h0, a = np.full(width, 0.5), np.linspace(0.5, 1.5, width)
    grads, seconds = [], []
    for checkpoint in (False, True):
        gradient = rv.load(DECAY, checkpoint=checkpoint).decay.grad(("h0", "a"))
        gradient(h0, a, steps)  # compile first
        start = time.perf_counter()
        grads.append(gradient(h0, a, steps))
        seconds.append(time.perf_counter() - start)
    assert all(np.allclose(p, q) for p, q in zip(*grads, strict=True))
    return seconds[1] / seconds[0]

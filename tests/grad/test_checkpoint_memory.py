"""Checkpointing a long loop (docs/language.md §11): O(sqrt(T)) saved states instead of T, with the
same gradient. Memory is the native kernel's workspace, which holds every temporary of a
call (the state history included) at once, so it is the call's peak scratch memory.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv
from reverie.runtime.native.call import bind_arguments

# A nonlinear reaction-diffusion step: its adjoint needs every primal state (a linear
# step such as the plain heat equation needs none, and stores none).
REACTION_DIFFUSION = """
fn heat(u0: f64[N], steps: i64) -> f64 {
    var u = u0;
    for t in 0..steps {
        u = u + 0.1 * (roll(u, 1) - 2.0 * u + roll(u, -1)) - 0.01 * u * u * u;
    }
    return sum(u * u);
}
"""
N, STEPS = 1000, 400


def _gradient_and_workspace(checkpoint: bool) -> tuple[np.ndarray, int]:
    module = rv.compile(REACTION_DIFFUSION, checkpoint=checkpoint)
    grad = module.heat.grad("u0")
    u0 = np.random.default_rng(0).uniform(-1, 1, N)
    fn = grad.ir_for("f64")
    bound = bind_arguments(fn, [u0, np.int64(STEPS)])
    return grad(u0, np.int64(STEPS)), module.executable(fn).workspace_bytes(bound.dims)


def test_checkpointing_saves_memory_and_keeps_the_gradient() -> None:
    stored, stored_bytes = _gradient_and_workspace(checkpoint=False)
    checkpointed, checkpointed_bytes = _gradient_and_workspace(checkpoint=True)
    np.testing.assert_array_equal(checkpointed, stored)
    state = N * 8
    assert stored_bytes >= STEPS * state  # every state is kept
    assert checkpointed_bytes <= 8 * int(np.sqrt(STEPS)) * state  # O(sqrt(T)) states
    print(f"T={STEPS}, N={N}: stored {stored_bytes / 2**20:.2f} MiB, "
          f"checkpointed {checkpointed_bytes / 2**20:.2f} MiB")


@pytest.mark.parametrize("steps", [0, 1, 3, 4, 5, 15, 16, 17, 99, 100, 101])
def test_native_segments_match_stored_gradients_around_squares(steps: int) -> None:
    """⌈√T⌉ computed in the kernel (f64 estimate, corrected) and by the workspace layout
    (exact integers) agree: a disagreement would overrun a history or change the gradient."""
    u0 = np.random.default_rng(steps).uniform(-1, 1, 8)
    stored = rv.compile(REACTION_DIFFUSION).heat.grad("u0")(u0, np.int64(steps))
    checkpointed = rv.compile(REACTION_DIFFUSION, checkpoint=True).heat.grad("u0")
    np.testing.assert_array_equal(checkpointed(u0, np.int64(steps)), stored)

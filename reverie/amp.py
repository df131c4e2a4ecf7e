"""Dynamic loss scaling for mixed-precision training of language kernels (`rv.amp`).

A bf16/f16 kernel's gradient is computed in its own dtype (docs/language.md §2), where small
adjoints underflow to 0 (f16 below 6e-8, bf16 below 1e-40 but with 8 bits of precision).
Loss scaling seeds reverse mode with a large power of two S instead of 1, so every adjoint
is S times larger, then divides the gradients by S in f32. When a scaled gradient
overflows to inf or NaN the step is skipped and S is halved; after `growth_interval` finite
steps in a row it doubles. This is `torch.amp.GradScaler`'s rule, with its defaults:

    scaler = rv.amp.LossScaler()
    for batch in data:
        grads, finite = scaler.gradients(m.loss, ("w", "b"))(x, w16, b16, y)  # f32, unscaled
        if finite:
            w -= lr * grads[0]; b -= lr * grads[1]   # f32 master weights
        scaler.update(finite)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from reverie.compiler.ir.dtypes import NUMPY_DTYPES

if TYPE_CHECKING:
    from reverie.kernel import Kernel, Wrt


class LossScaler:
    """The scale S of dynamic loss scaling and its update rule (torch.amp.GradScaler's)."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        for name, value, valid in (("init_scale", init_scale, init_scale > 0),
                                   ("growth_factor", growth_factor, growth_factor > 1),
                                   ("backoff_factor", backoff_factor, 0 < backoff_factor < 1),
                                   ("growth_interval", growth_interval, growth_interval > 0)):
            if not valid:
                raise ValueError(f"LossScaler: {name} = {value!r} is out of range "
                                 "(init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, "
                                 "growth_interval > 0)")
        self.scale = float(init_scale)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = int(growth_interval)
        self.finite_steps = 0

    def unscale(self, grads: np.ndarray | Sequence[np.ndarray]
                ) -> tuple[np.ndarray | list[np.ndarray], bool]:
        """The gradients divided by S, in f32 (f64 stays f64), and whether all are finite."""
        arrays = [grads] if isinstance(grads, np.ndarray) else list(grads)
        unscaled = [np.asarray(g).astype(np.result_type(np.asarray(g).dtype, np.float32))
                    * np.float32(1.0 / self.scale) for g in arrays]
        finite = all(bool(np.isfinite(g).all()) for g in unscaled)
        return (unscaled[0] if isinstance(grads, np.ndarray) else unscaled), finite

    def update(self, finite: bool) -> None:
        """S × backoff_factor after a step with inf/NaN gradients; S × growth_factor after
        growth_interval finite steps in a row."""
        if not finite:
            self.scale *= self.backoff_factor
            self.finite_steps = 0
            return
        self.finite_steps += 1
        if self.finite_steps == self.growth_interval:
            self.scale *= self.growth_factor
            self.finite_steps = 0

    def gradients(self, kernel: Kernel, wrt: Wrt = None
                  ) -> Callable[..., tuple[np.ndarray | list[np.ndarray], bool]]:
        """A function of `kernel`'s arguments giving (its unscaled f32 gradients with respect
        to `wrt`, whether they are finite): reverse mode seeded with S (`kernel.vjp`)."""
        vjp = kernel.vjp(wrt)

        def scaled_gradients(*args: object) -> tuple[np.ndarray | list[np.ndarray], bool]:
            with np.errstate(over="ignore"):  # S beyond f16's range: inf, so the step backs off
                seed = np.asarray(self.scale, dtype=_result_dtype(kernel, args))
            return self.unscale(vjp(*args, seed))

        return scaled_gradients

    def __repr__(self) -> str:
        return f"LossScaler(scale={self.scale:g}, finite_steps={self.finite_steps})"


def _result_dtype(kernel: Kernel, args: Sequence[object]) -> np.dtype:
    """The NumPy dtype of `kernel`'s scalar result for these arguments."""
    (result,) = kernel.specialisation_for(args).result_types
    if result.rank != 0:
        raise ValueError(f"LossScaler.gradients: {kernel.name} must return one scalar loss, "
                         f"got {result}")
    return NUMPY_DTYPES[result.dtype]

"""The compiled path of `rv.autograd.functional`: the function traced into one kernel.

`rv.autograd.functional.jacobian(f, x)` (and `hessian`, `vjp`, `jvp`, `hvp`, `vhp`) first
records `f` with `rv.trace` (docs/api.md §8–9) at the sizes of the inputs; the result is then the
kernel's compiled transform (docs/api.md §3), one native call:

    traced = trace_function(f, (x,))        # None where tracing refuses
    traced.jacobian()                       # ((d out / d x,),): [output][input] blocks

Tracing refuses (`rv.TraceError`) a Python `if` on a value, a Tensor constant, an output
that is not a float array computed from the inputs, ...; a Tensor method the stand-ins do
not have (`x.detach()`) is a refusal too. `trace_function` then returns None and the
caller differentiates on the tape. Every array this path returns is a new Tensor that does
not require grad (the path serves `create_graph=False` only). A function traced again to
the same source reuses the kernels compiled the first time (`MODULES`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

import reverie as rv
from reverie.tracing import FLOAT_NAMES, Traced, TracedModule, TraceError

if TYPE_CHECKING:
    from reverie.kernel import Kernel

Tensors = tuple["rv.Tensor", ...]
# Traced modules by source text, oldest first: a function traced again (the same program)
# reuses the compiled kernels and transforms of the first time
MODULES: dict[str, TracedModule] = {}
MODULES_KEPT = 64


def trace_function(func: Callable[..., object], inputs: Sequence[rv.Tensor],
                   scalar: bool = False) -> TracedFunction | None:
    """`func` traced at the values of `inputs`, or None where tracing refuses. With `scalar`
    (Hessians) it must return one 0-d float value, else it is refused too."""
    returned: list[object] = []

    def recorded(*stand_ins: Traced) -> object:
        result = func(*stand_ins)
        values = result if isinstance(result, tuple) else (result,)
        if not values or not all(isinstance(v, Traced) and v.element in FLOAT_NAMES
                                 for v in values):
            raise TraceError("the function returns something other than float values "
                             "computed from its inputs")
        if scalar and (isinstance(result, tuple) or result.ndim != 0):
            raise TraceError("the function does not return one 0-d value")
        returned.append(result)
        return result

    arrays = tuple(t.detach().numpy() for t in inputs)
    try:
        module = rv.trace(recorded, *arrays)
    except TraceError:
        return None
    except AttributeError as error:  # a Tensor method the stand-in lacks: a refusal too
        if isinstance(error.obj, Traced):
            return None
        raise
    result = returned[-1]
    count = len(result) if isinstance(result, tuple) else None
    return TracedFunction(_kept(module).kernel, arrays, count)


def _kept(module: TracedModule) -> TracedModule:
    """The module traced earlier from the same source, else `module` (kept from now on)."""
    kept = MODULES.pop(module.source, module)
    MODULES[module.source] = kept
    if len(MODULES) > MODULES_KEPT:
        del MODULES[next(iter(MODULES))]
    return kept


def _tensors(results: object) -> Tensors:
    """A kernel's results (one array, or a tuple of them) as a tuple of Tensors."""
    return tuple(rv.tensor(a) for a in (results if isinstance(results, tuple) else (results,)))


@dataclass(frozen=True)
class TracedFunction:
    """A traced function and the arrays it was traced at; each method is one compiled call
    and returns Tensors in torch's nesting, with tuples where torch would unpack later."""

    kernel: Kernel
    arrays: tuple[np.ndarray, ...]
    returned_tuple_of: int | None  # the function returned one value (None) or a tuple

    @property
    def outputs(self) -> int:
        return self.returned_tuple_of or 1

    @property
    def wrt(self) -> list[int]:
        return list(range(len(self.arrays)))

    def _cotangent(self, vectors: Sequence[rv.Tensor]) -> object:
        """`vectors` as a kernel takes the cotangents of its results."""
        arrays = tuple(v.detach().numpy() for v in vectors)
        return arrays if len(arrays) > 1 else arrays[0]

    def value(self) -> rv.Tensor | Tensors:
        """What the function returns: one Tensor or a tuple of them."""
        values = _tensors(self.kernel(*self.arrays))
        return values if self.returned_tuple_of is not None else values[0]

    def jacobian(self) -> tuple[Tensors, ...]:
        """blocks[i][j] = d output i / d input j (forward or reverse mode by sizes)."""
        blocks = self.kernel.jacobian(self.wrt)(*self.arrays)
        per_output = blocks if self.outputs > 1 else (blocks,)
        return tuple(_tensors(row) for row in per_output)

    def hessian(self) -> tuple[Tensors, ...]:
        """blocks[i][j] = d² f / d input i d input j (`scalar` traces only)."""
        blocks = self.kernel.hessian(self.wrt)(*self.arrays)
        return tuple(_tensors(row) for row in blocks)

    def vjp(self, v: Sequence[rv.Tensor]) -> Tensors:
        """v · J for each input."""
        grads = self.kernel.vjp(self.wrt)(*self.arrays, self._cotangent(v))
        return _tensors(grads)

    def jvp(self, v: Sequence[rv.Tensor]) -> Tensors:
        """J · v for each output (forward mode)."""
        tangents = tuple(t.detach().numpy() for t in v)
        _, tangents_out = self.kernel.jvp(self.wrt)(*self.arrays, tangents)
        return _tensors(tangents_out)

    def hvp(self, v: Sequence[rv.Tensor]) -> Tensors:
        """H · v for each input (forward over reverse)."""
        tangents = tuple(t.detach().numpy() for t in v)
        return _tensors(self.kernel.hvp(self.wrt)(*self.arrays, tangents))

    def vhp(self, v: Sequence[rv.Tensor]) -> Tensors:
        """v · H for each input: the VJP of the gradient (reverse over reverse)."""
        gradient = self.kernel.grad(self.wrt)
        return _tensors(gradient.vjp(self.wrt)(*self.arrays, self._cotangent(v)))

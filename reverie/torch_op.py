"""One compiled kernel as a torch custom operator (`torch.library`), for `rv.torch.function`.

Consumes a reverie `Kernel`; produces a `KernelOp`: the operator
`reverie::<name>_<token>_<n>`, defined once per kernel (in each process), with a CPU
implementation (the compiled kernel on the tensors' memory, as NumPy arrays) and a fake
implementation (result shapes and dtypes from the kernel's IR, its symbolic dimensions
bound from the argument shapes, which may be symbolic), so `torch.compile(fullgraph=True)`
traces a call as one graph node. Its autograd and vmap rules are registered by
`reverie/torch_rules.py`.

The schema has one argument per (flat) kernel parameter: `SymInt` for an integer scalar
whose value sizes a dimension (`fn.value_dims`), `Tensor` for every other one; one
`Tensor` per kernel result:

    fn layer(x: float[B, D], w: float[D, H], b: float[H]) -> float[B, H]
    reverie::layer_1f0e9a3c_0(Tensor a0, Tensor a1, Tensor a2) -> Tensor

Operator names hold a token drawn per process: TorchInductor keeps compiled graphs on disk
keyed by the operators they call, and a later process, whose operators are other kernels
(or the same ones, whose derivative operators it has not yet defined), must not be handed
those graphs.

Tensors are converted as at the Python call boundary (docs/api.md §1–2: NumPy `same_kind`
casting to the declared dtype; `float` is f32, f64, bf16 or f16 by the float tensors
given), and results have the kernel's dtypes. A bfloat16 tensor, which NumPy cannot view,
reaches the kernel as its memory seen as `ml_dtypes.bfloat16` (`to_numpy`), and a bf16
result comes back the same way (`from_numpy`). The registration (and the kernel it refers
to) lives as long as the process.
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dtypes import NUMPY_DTYPES
from reverie.compiler.transforms.reverse import activity
from reverie.kernel import Kernel
from reverie.runtime.native.call import ArgumentTypeError, ShapeMismatchError, _solve
from reverie.runtime.tensors.tape import DIFFERENTIABLE

__all__ = ["LIBRARY", "TORCH_DTYPES", "KernelOp", "from_numpy", "to_numpy"]

LIBRARY = torch.library.Library("reverie", "FRAGMENT")
TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16,
                "f16": torch.float16, "i32": torch.int32, "i64": torch.int64, "bool": torch.bool}
_PROCESS_TOKEN = secrets.token_hex(4)
_NUMBERS = itertools.count()

# NumPy's dtype for each torch dtype (bfloat16, which NumPy lacks, is ml_dtypes', looked up
# on first use: see `numpy_dtype_of`)
NUMPY_OF_TORCH = {
    dtype: np.dtype(name) for dtype, name in [
        (torch.float16, "float16"), (torch.float32, "float32"), (torch.float64, "float64"),
        (torch.int8, "int8"), (torch.int16, "int16"), (torch.int32, "int32"),
        (torch.int64, "int64"), (torch.uint8, "uint8"), (torch.bool, "bool"),
        (torch.complex64, "complex64"), (torch.complex128, "complex128")]}
# 0-d stand-ins of those dtypes, for the boundary's `float` rule (Kernel.float_dtype_for)
_STAND_INS = {dtype: np.zeros((), numpy) for dtype, numpy in NUMPY_OF_TORCH.items()}


def stand_in(value: Any) -> Any:
    """A 0-d array of a tensor's NumPy dtype; anything else unchanged."""
    if not isinstance(value, torch.Tensor):
        return value
    array = _STAND_INS.get(value.dtype)
    if array is None:
        if value.dtype != torch.bfloat16:
            raise ArgumentTypeError(f"reverie kernels take no {value.dtype} tensors")
        array = _STAND_INS[torch.bfloat16] = np.zeros((), NUMPY_DTYPES["bf16"])
    return array


def to_numpy(value: Any) -> Any:
    """The NumPy array behind a CPU tensor (a view where possible); ints pass through. A
    bfloat16 tensor, which `Tensor.numpy` refuses, is its memory seen as
    `ml_dtypes.bfloat16` (through int16, of the same width: no copy, no rounding)."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.dtype == torch.bfloat16:
        return value.detach().view(torch.int16).numpy().view(NUMPY_DTYPES["bf16"])
    return value.numpy(force=value.requires_grad)


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing `array`'s memory (an `ml_dtypes.bfloat16` array as bfloat16)."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def to_torch(results: Any) -> tuple[torch.Tensor, ...]:
    """The kernel's NumPy results (one, or a tuple) as tensors (0-d for scalars), none
    sharing memory with another."""
    if not isinstance(results, tuple):
        return (from_numpy(results if isinstance(results, np.ndarray) else np.array(results)),)
    tensors: list[torch.Tensor] = []
    seen: set[int] = set()
    for result in results:
        array = result if isinstance(result, np.ndarray) else np.array(result)
        if id(array) in seen:
            array = array.copy()
        seen.add(id(array))
        tensors.append(from_numpy(array))
    return tuple(tensors)


class KernelOp:
    """The custom operator of `kernel` (flat parameters, one output per result)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.forward_half: Kernel | None = None  # the VJP's forward half, once one has run
        self.halves: dict[tuple[str, tuple[int, ...]], Kernel] = {}  # (half, wrt) -> kernel
        fn = kernel.ir_for("f32")
        self.outputs = len(fn.result_types)
        self.value_params = frozenset(index for _, index in fn.value_dims)
        self.differentiable = tuple(d in DIFFERENTIABLE and i not in self.value_params
                                    for i, d in enumerate(kernel.declared_dtypes))
        # results no differentiable input reaches but through `stop_gradient` (`x.detach()`
        # in a compiled graph) or integer ops, and every integer result: autograd is told
        # they need no gradient, as eager's detached values and integers need none
        active = activity(fn.body, self.differentiable)
        self.constant_outputs = frozenset(index for index, result in enumerate(fn.body.results)
                                          if result not in active)
        base = re.sub(r"[^0-9A-Za-z_]", "_", kernel.name)
        self.name = f"{base}_{_PROCESS_TOKEN}_{next(_NUMBERS)}"
        self.qualname = f"reverie::{self.name}"
        params = ", ".join(f"{'SymInt' if i in self.value_params else 'Tensor'} a{i}"
                           for i in range(len(kernel.param_names)))
        returns = "Tensor" if self.outputs == 1 else f"({', '.join(['Tensor'] * self.outputs)})"
        LIBRARY.define(f"{self.name}({params}) -> {returns}")
        LIBRARY.impl(self.name, self.implementation, "CPU")
        torch.library.register_fake(self.qualname, self.fake, lib=LIBRARY)
        self.overload = getattr(torch.ops.reverie, self.name).default

    def __repr__(self) -> str:
        return f"<torch op {self.qualname} of {self.kernel!r}>"

    def float_dtype(self, args: Sequence[Any]) -> str:
        """What `float` means for a call on `args` (the call boundary's rule)."""
        return self.kernel.float_dtype_for([stand_in(a) for a in args])

    def run(self, args: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        """The kernel's results on plain CPU tensors (and ints), through its native entry."""
        return to_torch(self.kernel.run_arrays([to_numpy(a) for a in args]))

    def run_without_grad(self, args: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        """The results where autograd records nothing: through the forward half of the VJP
        when training compiled one and the kernel itself has not run (so a `no_grad` call
        after training steps compiles nothing; its residuals are dropped), else `run`."""
        if self.forward_half is None or self.kernel.has_run():
            return self.run(args)
        results = to_torch(self.forward_half.run_arrays([to_numpy(a) for a in args]))
        return results[:self.outputs]

    def implementation(self, *args: Any) -> Any:
        """The operator's CPU implementation."""
        outputs = self.run(args)
        return outputs if self.outputs > 1 else outputs[0]

    def fake(self, *args: Any) -> Any:
        """The operator's fake implementation: empty results of the right shapes and dtypes
        (shapes may be symbolic under `torch.compile`)."""
        fn = self.kernel.ir_for(self.float_dtype(args))
        dims = bound_dims(fn, args)
        outputs = []
        for result in fn.result_types:
            missing = sorted(set().union(*(d.symbols() for d in result.shape)) - set(dims))
            if missing:
                raise ShapeMismatchError(f"{fn.name}(): cannot determine dimension "
                                         f"{', '.join(missing)} from the argument shapes")
            shape = [d.evaluate(dims) for d in result.shape]
            outputs.append(torch.empty(shape, dtype=TORCH_DTYPES[result.dtype]))
        return tuple(outputs) if self.outputs > 1 else outputs[0]

    def call(self, args: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        """A call through the dispatcher (what `torch.compile` records): a tuple always."""
        outputs = self.overload(*args)
        return outputs if self.outputs > 1 else (outputs,)


def bound_dims(fn: Function, args: Sequence[Any]) -> dict[str, Any]:
    """The dimensions of `fn` bound from the arguments' (possibly symbolic) shapes and the
    integer scalars that size dimensions; the CPU implementation checks them all."""
    dims: dict[str, Any] = {symbol: args[index] for symbol, index in fn.value_dims}
    pending = []
    for param, name, arg in zip(fn.params, fn.param_names, args, strict=True):
        if not isinstance(arg, torch.Tensor):
            continue
        if arg.dim() != param.type.rank:
            raise ShapeMismatchError(
                f"{fn.name}(): argument '{name}' must have {param.type.rank} dimension(s) "
                f"({param.type}), got a tensor of shape {tuple(arg.shape)}")
        for dim, size in zip(param.type.shape, arg.shape, strict=True):
            if dim.symbol is not None:
                dims.setdefault(dim.symbol, size)
            elif not dim.is_const:
                pending.append((dim, size))
    for dim, size in pending:
        _solve(dim, size, dims)
    return dims


"""PyTorch interop (SPEC §3.5): compiled kernels as `torch.autograd.Function`s.

Consumes a reverie `Kernel`; produces a callable on CPU torch tensors whose results are
torch tensors recorded by torch autograd. The forward pass runs the compiled kernel on the
tensors' memory (as NumPy arrays); the backward pass runs the kernel's compiled VJP for
the inputs that need a gradient. That VJP is called through the same autograd.Function,
so with `create_graph=True` it is recorded too and second (and higher) derivatives run the
VJP of the VJP, compiled from its IR:

    f = rv.torch.function(m.mlp_loss)
    loss = f(x, y, w1, b1, w2, b2)     # a 0-d torch tensor
    loss.backward()                    # runs m.mlp_loss.vjp([...]) natively

Integer and bool inputs and outputs carry no gradient; Python numbers may be passed for
scalar parameters. Kernels run on the CPU only: a tensor on another device is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from reverie.kernel import Kernel
from reverie.runtime.tape import DIFFERENTIABLE, vjp_plan
from reverie.transforms import GroupedKernel

__all__ = ["KernelFunction", "function"]


def function(kernel: Kernel) -> KernelFunction:
    """A callable running `kernel` on torch tensors, differentiable by torch autograd."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"rv.torch.function expects a compiled kernel such as module.f, "
                        f"got {type(kernel).__name__}")
    return KernelFunction(kernel)


class KernelFunction:
    """`kernel` called the way it is called on NumPy arrays (a VJP kernel's cotangents as
    one tuple, `value_and_grad` results nested), but on torch tensors."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def __call__(self, *args: Any) -> Any:
        kernel = self.kernel
        grouped = kernel.grouped if isinstance(kernel, GroupedKernel) else None
        if grouped is not None and args:
            *head, group = args
            if not isinstance(group, tuple | list) or len(group) != grouped:
                raise TypeError(f"{kernel.name}() takes its last {grouped} arguments as one "
                                f"tuple, got {group!r}")
            args = (*head, *group)
        outputs = KernelCall.apply(kernel, *args)
        if isinstance(kernel, GroupedKernel):
            return kernel.regroup(outputs)
        return outputs if len(outputs) > 1 else outputs[0]

    def __repr__(self) -> str:
        return f"<rv.torch.function of {self.kernel!r}>"


def to_numpy(value: Any, kernel: Kernel, index: int) -> Any:
    """The NumPy array behind a CPU tensor (Python numbers and arrays pass through)."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.device.type != "cpu":
        name = kernel.param_names[index]
        raise ValueError(f"{kernel.name}(): argument '{name}' is on {value.device}, but "
                         f"reverie kernels run on the CPU; pass {name}.cpu()")
    value = value.detach().resolve_conj().resolve_neg()
    if value.dtype == torch.bfloat16:
        value = value.float()
    return np.asarray(value.numpy(), order="C")


def to_torch(value: Any) -> torch.Tensor:
    """A torch tensor sharing the memory of a fresh NumPy result (0-d for scalars)."""
    array = value if isinstance(value, np.ndarray) else np.array(value)
    return torch.from_numpy(array)


class KernelCall(torch.autograd.Function):
    """One call of a kernel with its parameters passed one by one; always returns a tuple
    of tensors (one per kernel result)."""

    @staticmethod
    def forward(ctx: Any, kernel: Kernel, *args: Any) -> tuple[torch.Tensor, ...]:
        arrays = [to_numpy(a, kernel, i) for i, a in enumerate(args)]
        dtype = kernel.float_dtype_for(arrays)
        fn = kernel.ir_for(dtype)
        results = kernel.execute(fn, arrays)
        outputs = tuple(to_torch(r) for r in (results if isinstance(results, tuple)
                                              else (results,)))
        ctx.kernel = kernel
        ctx.dtype = dtype
        ctx.output_types = [(tuple(o.shape), o.dtype, t.is_float)
                            for o, t in zip(outputs, fn.result_types, strict=True)]
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        ctx.tensor_positions = tensors
        ctx.constants = [None if isinstance(a, torch.Tensor) else a for a in args]
        ctx.input_dtypes = [a.dtype if isinstance(a, torch.Tensor) else None for a in args]
        ctx.save_for_backward(*(args[i] for i in tensors))
        ctx.mark_non_differentiable(*(o for o, (_, _, is_float)
                                      in zip(outputs, ctx.output_types, strict=True)
                                      if not is_float))
        return outputs

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        kernel: Kernel = ctx.kernel
        args = list(ctx.constants)
        for position, tensor in zip(ctx.tensor_positions, ctx.saved_tensors, strict=True):
            args[position] = tensor
        wrt = tuple(i for i in range(len(args)) if ctx.needs_input_grad[1 + i]
                    and kernel.declared_dtypes[i] in DIFFERENTIABLE)
        grads: list[torch.Tensor | None] = [None] * (1 + len(args))
        if not wrt:
            return tuple(grads)
        plan = vjp_plan(kernel, wrt, ctx.dtype)
        cotangents = cotangents_for(grad_outputs, ctx.output_types)
        results = KernelCall.apply(plan.kernel, *args, *cotangents)
        for i, g, zero in zip(wrt, results, plan.zero, strict=True):
            if not zero:
                grads[1 + i] = g.to(ctx.input_dtypes[i])
        return tuple(grads)


def cotangents_for(grad_outputs: Sequence[torch.Tensor | None],
                   output_types: Sequence[tuple[tuple[int, ...], torch.dtype, bool]]
                   ) -> list[torch.Tensor]:
    """The VJP kernel's cotangent arguments: torch's output gradients, and zeros of the
    output's dtype for integer and bool outputs (and for outputs torch sent none for)."""
    return [grad if grad is not None and is_float else torch.zeros(shape, dtype=dtype)
            for grad, (shape, dtype, is_float) in zip(grad_outputs, output_types, strict=True)]

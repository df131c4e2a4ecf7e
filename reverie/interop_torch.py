"""PyTorch interop (docs/api.md §6–7): `rv.torch.function(kernel)`, a compiled kernel as a torch
custom operator.

Consumes a reverie `Kernel`; produces a callable on CPU torch tensors whose results are
torch tensors. Each call is one call of the kernel's operator `reverie::<name>_<n>`
(`reverie/torch_op.py`), through rules (`reverie/torch_rules.py`) that run Reverie's
compiled VJP, JVP and batched kernels, so all of these work through it, to any order:

    f = rv.torch.function(m.mlp_loss)
    loss = f(x, y, w1, b1, w2, b2)                  # a 0-d torch tensor
    loss.backward()                                 # runs m.mlp_loss.vjp([...]) natively
    torch.func.hessian(f, argnums=2)(x, y, w1, b1, w2, b2)
    torch.vmap(f, in_dims=(0, 0, None, None, None, None))(xs, ys, w1, b1, w2, b2)
    torch.compile(model, fullgraph=True)            # the call is one graph node

A kernel is called the way it is called on NumPy arrays (a VJP kernel's cotangents as one
tuple, `value_and_grad` results nested). Tensors are converted as at the Python call
boundary (NumPy `same_kind` casting; an f32 tensor for an f64 parameter is converted and
the results are f64), and gradients come back in each input's dtype. bfloat16 and float16
tensors reach `bf16` and `f16` parameters (and `float` ones, which then mean that dtype)
without a copy, and `bf16`/`f16` results are bfloat16/float16 tensors. Python numbers may
be passed for scalar parameters (as tensors of the call's `float` dtype for `float` ones);
an integer scalar that sizes a dimension is passed as an int (a 0-d tensor is read with
`int()`, outside `torch.compile`). Integer and bool inputs and outputs carry no gradient.
Kernels run on the CPU only: a tensor on another device is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from reverie.compiler.ir.types import FLOAT_DTYPES
from reverie.kernel import Kernel
from reverie.kernel_transforms import GroupedKernel
from reverie.runtime.native.call import ArgumentTypeError, ArgumentValueError, check_arity
from reverie.torch_op import TORCH_DTYPES, KernelOp
from reverie.torch_rules import call, op_for

__all__ = ["KernelFunction", "function"]


def function(kernel: Kernel) -> KernelFunction:
    """A callable running `kernel` on torch tensors, differentiable by torch autograd and
    transformable by torch.func, torch.vmap and torch.compile."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"rv.torch.function expects a compiled kernel such as module.f, "
                        f"got {type(kernel).__name__}")
    return KernelFunction(kernel)


class KernelFunction:
    """`kernel` on torch tensors, called with its own calling convention."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.op: KernelOp = op_for(kernel)
        self.grouped = kernel.grouped if isinstance(kernel, GroupedKernel) else None

    def __call__(self, *args: Any) -> Any:
        kernel = self.kernel
        if self.grouped is not None and args:
            *head, group = args
            if not isinstance(group, tuple | list) or len(group) != self.grouped:
                raise TypeError(f"{kernel.name}() takes its last {self.grouped} arguments "
                                f"as one tuple, got {group!r}")
            args = (*head, *group)
        outputs = call(self.op, operator_arguments(self.op, args))
        if isinstance(kernel, GroupedKernel):
            return kernel.regroup(outputs)
        return outputs if len(outputs) > 1 else outputs[0]

    def __repr__(self) -> str:
        return f"<rv.torch.function of {self.kernel!r}>"


def operator_arguments(op: KernelOp, args: Sequence[Any]) -> Sequence[Any]:
    """`args` as the operator takes them: CPU tensors, and ints for the integer scalars
    that size dimensions (TypeError, ValueError for what cannot be)."""
    kernel = op.kernel
    check_arity(kernel.name, kernel.param_names, args)
    if not op.value_params and all(type(a) is torch.Tensor and a.is_cpu for a in args):
        return args  # the common call: nothing to convert
    number_dtype = float_dtype_for_numbers(kernel, args)
    converted: list[Any] = []
    for index, (arg, declared, name) in enumerate(zip(args, kernel.declared_dtypes,
                                                      kernel.param_names, strict=True)):
        if isinstance(arg, torch.Tensor) and arg.device.type != "cpu":
            raise ValueError(f"{kernel.name}(): argument '{name}' is on {arg.device}, but "
                             f"reverie kernels run on the CPU; pass {name}.cpu()")
        if index in op.value_params:
            converted.append(size_argument(kernel, name, arg))
        elif isinstance(arg, torch.Tensor):
            converted.append(arg)
        else:
            converted.append(as_tensor(kernel, name, arg, number_dtype if declared == "float"
                                       else TORCH_DTYPES.get(declared) if declared
                                       in FLOAT_DTYPES else None))
    return converted


def float_dtype_for_numbers(kernel: Kernel, args: Sequence[Any]) -> torch.dtype:
    """The dtype a Python number for a `float` parameter becomes: that of the first float
    tensor of at most 32 bits given for a `float` parameter (float32, bfloat16, float16),
    else float64 (the call boundary then checks that the tensors agree)."""
    narrow = (a.dtype for a, declared in zip(args, kernel.declared_dtypes, strict=True)
              if declared == "float" and isinstance(a, torch.Tensor)
              and a.dtype.is_floating_point and a.dtype.itemsize <= 4)
    return next(narrow, torch.float64)


def size_argument(kernel: Kernel, name: str, arg: Any) -> int:
    """An integer scalar that sizes a dimension, as a Python int."""
    if isinstance(arg, torch.Tensor) and arg.dim() == 0 and not arg.dtype.is_floating_point:
        arg = int(arg)
    if isinstance(arg, bool) or not isinstance(arg, int):
        raise ArgumentTypeError(f"{kernel.name}(): argument '{name}' sizes a dimension, so "
                                f"it must be an int, got {arg!r}")
    return arg


def as_tensor(kernel: Kernel, name: str, value: Any, dtype: torch.dtype | None
              ) -> torch.Tensor:
    """A Python number or array-like as a tensor: of `dtype` where given (a `float` or
    f32/f64 parameter), else of its own dtype, which the call boundary converts."""
    try:
        return torch.as_tensor(value, dtype=dtype)
    except (RuntimeError, TypeError, ValueError) as error:
        kind = ArgumentValueError if "overflow" in str(error).lower() else ArgumentTypeError
        raise kind(f"{kernel.name}(): argument '{name}' cannot be made a tensor: "
                   f"{error}") from None

"""The derivative and batching rules of a kernel's torch operator (`reverie/torch_op.py`).

Consumes a `KernelOp`; provides `call(op, args)`, a call that torch autograd, every
`torch.func` transform, `torch.vmap` and `torch.compile` see through, each rule running
one compiled Reverie kernel:

- reverse mode (`backward`): the kernel's VJP, `f.vjp(wrt)`, for the inputs that need a
  gradient, called through `call` again, so it is itself differentiable (any order):
  `x̄_i = Σ_j ȳ_j · ∂y_j/∂x_i`, cast to the dtype of input i;
- forward mode (`jvp`): the kernel's JVP, `f.jvp(wrt)`, for the inputs with a tangent:
  `ẏ_j = Σ_i ∂y_j/∂x_i · ẋ_i`;
- batching (`vmap`): the kernel batched over the inputs with a batch dimension (moved to
  the front), the ladder's batch stage (`compiler/pipeline.py`), called once for the whole
  batch, every result batched along dimension 0: `vmap(f)(X)[b] = f(X[b])`.

Which path a call takes (`call`):

- under `torch.compile`: the operator itself (TorchDynamo does not trace a Function with a
  custom `jvp`), whose registered autograd formula (`register_autograd`) and vmap rule
  (`register_vmap`) are the rules above;
- under a torch.func transform, forward-mode AD, a dispatch mode or a tensor subclass:
  `KernelCall`, a `torch.autograd.Function` with `setup_context`, `backward`, `jvp` and
  `vmap` (what torch.func needs of one), whose forward calls the operator on the
  unwrapped tensors (or, on plain ones, the kernel directly);
- on plain tensors: `EagerKernelCall` (the same rules, old-style, cheaper to apply) when
  one requires grad, else the kernel directly, without the dispatcher (the per-call cost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
import torch.autograd.forward_ad as forward_ad

from reverie.compiler.ir.core import Function
from reverie.dsl.diagnostics import CompileError
from reverie.kernel import Kernel
from reverie.kernel_transforms import batch_function, derived_kernel, vjp_backward, vjp_forward
from reverie.runtime.tensors.tape import vjp_plan
from reverie.runtime.tensors.tape_plans import is_zero
from reverie.torch_op import LIBRARY, KernelOp, to_numpy, to_torch

__all__ = ["KernelCall", "batched_kernel", "call", "op_for"]


OP_KEY = "torch.op"  # where a kernel keeps its KernelOp (Kernel.autograd_cache)
Via = Callable[[KernelOp, Sequence[Any]], tuple[torch.Tensor, ...]]


def op_for(kernel: Kernel) -> KernelOp:
    """The torch operator of `kernel`, defined with its rules on first use."""
    op = kernel.autograd_cache.get(OP_KEY)
    if op is None:
        op = KernelOp(kernel)
        torch.library.register_autograd(op.qualname, op_backward,
                                        setup_context=partial(save_context, op), lib=LIBRARY)
        torch.library.register_vmap(op.qualname, partial(op_vmap, op), lib=LIBRARY)
        kernel.autograd_cache[OP_KEY] = op
    return op


def call(op: KernelOp, args: Sequence[Any]) -> tuple[torch.Tensor, ...]:
    """`op` on `args` (tensors, and ints for the SymInt parameters), recorded by autograd
    and transformable by torch.func; always a tuple."""
    if torch.compiler.is_compiling():
        return op.call(args)
    # forward_ad._current_level: the innermost `dual_level` (-1 outside one); torch has no
    # public query, and dual tensors need KernelCall's jvp
    if not is_plain(args) or forward_ad._current_level >= 0:
        return KernelCall.apply(op, *args)
    if torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
        return EagerKernelCall.apply(op, *args)
    return op.run_without_grad(args)


def is_plain(args: Sequence[Any]) -> bool:
    """Whether `args` are ordinary tensors outside any torch.func transform, dispatch
    mode or tensor subclass, so the kernel may run on them without the dispatcher."""
    return (torch._C._functorch.peek_interpreter_stack() is None
            and torch._C._len_torch_dispatch_stack() == 0
            and not torch.overrides.has_torch_function(args))


class KernelCall(torch.autograd.Function):
    """One call of a kernel's operator, with the rules torch autograd and torch.func use."""

    @staticmethod
    def forward(op: KernelOp, *args: Any) -> tuple[torch.Tensor, ...]:
        return op.run(args) if is_plain(args) else op.call(args)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        op, *args = inputs
        save_context(op, ctx, args, output)
        ctx.save_for_forward(*(a for a in args if isinstance(a, torch.Tensor)))

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor | None) -> tuple:
        return None, *gradients(ctx, grad_outputs, ctx.needs_input_grad[1:], call)

    @staticmethod
    def jvp(ctx: Any, _op_tangent: None, *tangents: torch.Tensor | None) -> tuple:
        return output_tangents(ctx, tangents)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, op: KernelOp, *args: Any) -> tuple[tuple, tuple]:
        return batched_call(op, in_dims[1:], args, call)


class EagerKernelCall(torch.autograd.Function):
    """`KernelCall` for plain tensors outside torch.func, in the old style (forward takes
    `ctx`), which spares `apply` binding the arguments to `setup_context` on every call.

    Its forward runs the forward half of the VJP (`transforms.vjp_forward`), which also
    returns the residuals the backward half reads, so a plain `.backward()` runs the
    adjoint sweep alone instead of the whole VJP, forward included, again (a backward
    that builds a graph, `create_graph=True`, still calls the differentiable VJP)."""

    @staticmethod
    def forward(ctx: Any, op: KernelOp, *args: Any) -> tuple[torch.Tensor, ...]:
        ctx.split_wrt = split_wrt(op, args)
        outputs = None
        if ctx.split_wrt is not None:
            try:
                forward = vjp_half(op, "forward", ctx.split_wrt)
                *outputs, ctx.residuals = split_results(
                    forward.run_arrays([to_numpy(a) for a in args]), op.outputs)
                op.forward_half = forward
            except CompileError:  # no VJP (an op reverse mode cannot differentiate): the
                ctx.split_wrt = None  # forward still runs; a backward raises, as before
        if outputs is None:
            outputs = op.run(args)
        save_context(op, ctx, args, outputs)
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor | None) -> tuple:
        needs = ctx.needs_input_grad[1:]
        if ctx.split_wrt is not None and not torch.is_grad_enabled() \
                and ctx.split_wrt == wanted(ctx.reverie_op, needs):
            return None, *residual_gradients(ctx, grad_outputs)
        return None, *gradients(ctx, grad_outputs, needs, call)


# ---------------------------------------------------------------- rules


def save_context(op: KernelOp, ctx: Any, inputs: Sequence[Any], output: Any) -> None:
    """Keep what the rules need: the inputs and the outputs' types."""
    outputs = output if isinstance(output, tuple | list) else (output,)
    ctx.reverie_op = op
    ctx.ints = [None if isinstance(a, torch.Tensor) else a for a in inputs]
    ctx.output_types = [(o.shape, o.dtype) for o in outputs]
    ctx.save_for_backward(*(a for a in inputs if isinstance(a, torch.Tensor)))
    ctx.mark_non_differentiable(*(o for i, o in enumerate(outputs) if i in op.constant_outputs))


def saved_inputs(ctx: Any) -> list[Any]:
    """The call's inputs, put back together from the saved tensors and ints."""
    args = list(ctx.ints)
    tensors = iter(ctx.saved_tensors)
    return [next(tensors) if a is None else a for a in args]


def wanted(op: KernelOp, needs_input_grad: Sequence[bool]) -> tuple[int, ...]:
    """The inputs to differentiate: those that need a gradient and can have one."""
    return tuple(i for i, need in enumerate(needs_input_grad) if need and op.differentiable[i])


def split_wrt(op: KernelOp, args: Sequence[Any]) -> tuple[int, ...] | None:
    """The inputs a forward saving residuals is split for (those requiring grad), or None
    where the kernel recomputes instead (a module that asked for checkpointing)."""
    if op.kernel.module.checkpoint:
        return None
    wrt = wanted(op, [isinstance(a, torch.Tensor) and a.requires_grad for a in args])
    return wrt or None


def split_results(results: Any, outputs: int) -> list[Any]:
    """The forward half's flat results as the outputs, then one tuple of residuals."""
    tensors = to_torch(results)
    return [*tensors[:outputs], tensors[outputs:]]


def cotangents_of(ctx: Any, grad_outputs: Sequence[torch.Tensor | None]) -> list[torch.Tensor]:
    """One cotangent per output: zeros for integer outputs and outputs given none."""
    return [g if g is not None and dtype.is_floating_point else torch.zeros(shape, dtype=dtype)
            for g, (shape, dtype) in zip(grad_outputs, ctx.output_types, strict=True)]


def in_input_dtypes(wrt: Sequence[int], results: Sequence[torch.Tensor], zero: Sequence[bool],
                    args: Sequence[Any]) -> list[torch.Tensor | None]:
    """One gradient per input: the results at `wrt` in their inputs' dtypes, None
    elsewhere and where the adjoint is a known zero."""
    grads: list[torch.Tensor | None] = [None] * len(args)
    for i, grad, known_zero in zip(wrt, results, zero, strict=True):
        if not known_zero:
            grads[i] = grad if grad.dtype == args[i].dtype else grad.to(args[i].dtype)
    return grads


def gradients(ctx: Any, grad_outputs: Sequence[torch.Tensor | None],
              needs_input_grad: Sequence[bool], via: Via) -> list[torch.Tensor | None]:
    """One gradient per input (None where none is needed or it is zero), by one call of
    the VJP kernel: `x̄_i = Σ_j ȳ_j · ∂y_j/∂x_i` in the dtype of input i."""
    op: KernelOp = ctx.reverie_op
    args = saved_inputs(ctx)
    wrt = wanted(op, needs_input_grad)
    if not wrt:
        return [None] * len(args)
    plan = vjp_plan(op.kernel, wrt, op.float_dtype(args))
    results = via(op_for(plan.kernel), [*args, *cotangents_of(ctx, grad_outputs)])
    return in_input_dtypes(wrt, results, plan.zero, args)


def residual_gradients(ctx: Any, grad_outputs: Sequence[torch.Tensor | None]
                       ) -> list[torch.Tensor | None]:
    """`gradients` by the backward half of the split VJP, from the forward's residuals."""
    op: KernelOp = ctx.reverie_op
    args = saved_inputs(ctx)
    backward = vjp_half(op, "backward", ctx.split_wrt)
    flat = [*args, *ctx.residuals, *cotangents_of(ctx, grad_outputs)]
    results = to_torch(backward.run_arrays([to_numpy(a) for a in flat]))
    zero = zero_results(backward, op.float_dtype(args))
    return in_input_dtypes(ctx.split_wrt, results, zero, args)


HALVES = {"forward": vjp_forward, "backward": vjp_backward}


def vjp_half(op: KernelOp, half: str, wrt: tuple[int, ...]) -> Kernel:
    """`transforms.vjp_forward`/`vjp_backward` of the op's kernel for `wrt`, kept on the op
    (asked for at every call: this skips resolving `wrt` and the transform cache's key)."""
    kernel = op.halves.get((half, wrt))
    if kernel is None:
        kernel = op.halves[half, wrt] = HALVES[half](op.kernel, list(wrt))
    return kernel


def zero_results(kernel: Kernel, dtype: str) -> tuple[bool, ...]:
    """Which results of `kernel` are known zeros (read from its IR once per dtype)."""
    zero = kernel.autograd_cache.get(("zero results", dtype))
    if zero is None:
        zero = tuple(is_zero(v) for v in kernel.ir_for(dtype).body.results)
        kernel.autograd_cache[("zero results", dtype)] = zero
    return zero


def output_tangents(ctx: Any, tangents: Sequence[torch.Tensor | None]) -> tuple:
    """One tangent per output by one call of the JVP kernel (None for integer and bool
    outputs): `ẏ_j = Σ_i ∂y_j/∂x_i · ẋ_i`."""
    op: KernelOp = ctx.reverie_op
    args = saved_inputs(ctx)
    wrt = [i for i, t in enumerate(tangents) if t is not None and op.differentiable[i]]
    results = call(op_for(op.kernel.jvp(wrt)), [*args, *(tangents[i] for i in wrt)])
    return tuple(t if dtype.is_floating_point else None
                 for t, (_, dtype) in zip(results[op.outputs:], ctx.output_types, strict=True))


def batched_call(op: KernelOp, in_dims: Sequence[int | None], args: Sequence[Any],
                 via: Via) -> tuple[tuple[torch.Tensor, ...], tuple[int, ...]]:
    """The outputs for a batch, by one call of the kernel batched over the inputs whose
    `in_dims` entry is not None (that dimension moved to the front); all batched on 0."""
    positions = tuple(i for i, d in enumerate(in_dims) if d is not None)
    moved = [a if d is None else a.movedim(d, 0) for a, d in zip(args, in_dims, strict=True)]
    outputs = via(op_for(batched_kernel(op.kernel, positions)), moved)
    return outputs, (0,) * len(outputs)


def batched_kernel(kernel: Kernel, positions: tuple[int, ...]) -> Kernel:
    """`kernel` over a leading batch axis of its parameters at `positions` (every result
    batched): one compiled call for the whole batch, cached with its transforms."""
    def build(dtype: str) -> Function:
        return batch_function(kernel.ir_for(dtype), positions)

    return kernel.cached_transform(("batch", positions),
                                   lambda: derived_kernel(kernel, "batched", build, False))


# ---------------------------------------------------------------- the operator's own rules


def op_backward(ctx: Any, *grad_outputs: torch.Tensor | None) -> Any:
    """The operator's autograd formula (`torch.compile`): VJP through the VJP's operator."""
    grads = gradients(ctx, grad_outputs, ctx.needs_input_grad, KernelOp.call)
    return tuple(grads) if len(grads) > 1 else grads[0]


def op_vmap(op: KernelOp, info: Any, in_dims: tuple, *args: Any) -> tuple[Any, Any]:
    """The operator's vmap rule: the batched kernel's operator, called once."""
    outputs, out_dims = batched_call(op, in_dims, args, KernelOp.call)
    return (outputs, out_dims) if op.outputs > 1 else (outputs[0], out_dims[0])

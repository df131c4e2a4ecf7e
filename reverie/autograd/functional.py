"""`rv.autograd.functional`: torch.autograd.functional's Jacobians, Hessians and products.

    J = jacobian(f, x)              # d f(x) / d x, shape f(x).shape + x.shape
    H = hessian(f, (x, y))          # H[i][j] = d² f / d inputs[i] d inputs[j]
    out, g = vjp(f, x, v)           # f(x) and v · J   (jvp: J · v, hvp: H · v, vhp: v · H)

Each takes a Python function of `rv.Tensor`s and its inputs (a Tensor or a tuple of them)
and returns torch's structures: one Tensor where torch gives one, tuples nested as torch
nests them ([output][input] for Jacobians, [input][input] for Hessians; lists with
`strategy="forward-mode"`, as torch's). Arguments, defaults and exception classes are
torch's (docs/api.md §4); messages are Reverie's.

Two paths compute them (the docstrings say which applies):

- compiled (`functional_traced.py`): with `create_graph=False` and `strict=False` the
  function is traced (`rv.trace`) into one kernel, and the Jacobian, Hessian or product is
  that kernel's compiled transform, one native call. Where tracing refuses (`rv.TraceError`:
  a Python `if` on a value, a Tensor constant, `x.detach()`, ...), the tape path runs
  instead. The function then runs twice (once on stand-ins), so side effects repeat.
- tape (`functional_tape.py`): the function runs on Tensors that record, and `rv.grad`
  differentiates it as torch's implementation does: `create_graph=True` records everything
  so that the results differentiate again; `strict=True` checks which outputs are
  independent of which inputs, which only the tape can see. JVPs and HVPs use the
  double-VJP trick: a VJP is linear in its cotangent `u`, so its VJP with respect to `u` is
  a JVP.
"""

from __future__ import annotations

from collections.abc import Sequence

import reverie as rv
from reverie.autograd.functional_tape import (
    Function,
    Tensors,
    as_tuple,
    autograd_grad,
    check_requires_grad,
    check_single_element,
    check_strategy,
    checked_outputs,
    checked_vectors,
    detached,
    fill_in_zeros,
    ones_like,
    prepare,
    tape_jacobian,
    unpack,
    zero_cotangents,
)
from reverie.autograd.functional_traced import TracedFunction, trace_function

__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]


def _traced(func: Function, inputs: Tensors, create_graph: bool, strict: bool,
            scalar: bool = False) -> TracedFunction | None:
    """The compiled path where it applies (see the module docstring), else None."""
    if create_graph or strict:
        return None
    return trace_function(func, inputs, scalar)


# ---------------------------------------------------------------- public API


def jacobian(func: Function, inputs: rv.Tensor | Tensors, create_graph: bool = False,
             strict: bool = False, vectorize: bool = False,
             strategy: str = "reverse-mode") -> rv.Tensor | tuple:
    """The Jacobian of `func` at `inputs` (torch.autograd.functional.jacobian): blocks of
    shape `output.shape + input.shape`, nested [output][input] where `func` returns a tuple
    and `inputs` is one.

    With `create_graph=False` and `strict=False`, a function that `rv.trace` records runs
    as one compiled Jacobian kernel (forward or reverse mode, whichever has the smaller
    batch). On the tape, the rows of all outputs come from one batched compiled VJP
    (`rv.grad(..., is_grads_batched=True)`) with `vectorize=True`, from one per output
    otherwise (torch's loop over outputs); with `create_graph=True`, from one recorded VJP
    per row, joined by a recorded concat. `strategy="forward-mode"` is checked as torch
    checks it and gives the same Jacobian (computed as above: the tape is reverse mode)."""
    is_inputs_tuple, inputs = as_tuple(inputs, "inputs", "jacobian")
    check_strategy(strategy, create_graph, strict, vectorize)
    with rv.enable_grad():
        traced = _traced(func, prepare(inputs, False, True), create_graph, strict)
        if traced is not None:
            is_outputs_tuple, blocks = traced.returned_tuple_of is not None, traced.jacobian()
        else:
            is_outputs_tuple, blocks = tape_jacobian(func, inputs, create_graph, strict,
                                                     vectorize)
    return unpack(_nested(blocks, strategy), (is_outputs_tuple, is_inputs_tuple))


def _nested(blocks: Sequence[Sequence[rv.Tensor]], strategy: str) -> Sequence:
    """Tuples of tuples, or lists of lists as torch's forward mode returns them."""
    return [list(row) for row in blocks] if strategy == "forward-mode" else blocks


def hessian(func: Function, inputs: rv.Tensor | Tensors, create_graph: bool = False,
            strict: bool = False, vectorize: bool = False,
            outer_jacobian_strategy: str = "reverse-mode") -> rv.Tensor | tuple:
    """The Hessian of the one-element `func` at `inputs` (torch.autograd.functional.hessian):
    blocks of shape `input_i.shape + input_j.shape`, nested [i][j] where `inputs` is a tuple.

    With `create_graph=False` and `strict=False`, a function that `rv.trace` records to a
    0-d result runs as one compiled Hessian kernel. Otherwise, as torch: the Jacobian (on
    the tape) of the recorded gradient."""
    is_inputs_tuple, inputs = as_tuple(inputs, "inputs", "hessian")
    check_strategy(outer_jacobian_strategy, create_graph, strict, vectorize)
    with rv.enable_grad():
        traced = _traced(func, prepare(inputs, False, True), create_graph, strict, True)
        if traced is not None:
            blocks = traced.hessian()
        else:
            blocks = _tape_hessian(func, inputs, create_graph, strict, vectorize)
    return unpack(_nested(blocks, outer_jacobian_strategy), (is_inputs_tuple, is_inputs_tuple))


def _tape_hessian(func: Function, inputs: Tensors, create_graph: bool, strict: bool,
                  vectorize: bool) -> tuple[Tensors, ...]:
    """torch's Hessian: the Jacobian of a function returning the recorded gradient."""
    def squeezed(*args: rv.Tensor) -> rv.Tensor:
        is_tuple, outputs = checked_outputs(func(*args), "hessian", strict)
        check_single_element(is_tuple, outputs, "hessian")
        return outputs[0].reshape(())

    def gradient(*args: rv.Tensor) -> Tensors:
        _, blocks = tape_jacobian(squeezed, args, True, False, False, "hessian")
        check_requires_grad(blocks[0], "jacobian", strict)
        return blocks[0]

    return tape_jacobian(gradient, inputs, create_graph, strict, vectorize)[1]


def vjp(func: Function, inputs: rv.Tensor | Tensors, v: rv.Tensor | Tensors | None = None,
        create_graph: bool = False, strict: bool = False) -> tuple[object, object]:
    """(`func(inputs)`, v · J) (torch.autograd.functional.vjp); `v` may be None for a
    one-element output. With `create_graph=False` and `strict=False`, a function that
    `rv.trace` records runs as its compiled value and VJP kernels."""
    is_inputs_tuple, inputs = as_tuple(inputs, "inputs", "vjp")
    with rv.enable_grad():
        inputs = prepare(inputs, create_graph, need_graph=True)
        traced = _traced(func, inputs, create_graph, strict)
        result = traced.value() if traced is not None else func(*inputs)
        is_outputs_tuple, outputs = checked_outputs(result, "vjp", strict)
        v = checked_vectors(v, outputs, is_outputs_tuple, "vjp", create_graph,
                            "the user-provided function returns")
        if traced is not None:
            grads = traced.vjp(ones_like(outputs) if v is None else v)
        else:
            grads = fill_in_zeros(autograd_grad(outputs, inputs, v, create_graph), inputs,
                                  strict, create_graph, "back")
    return (unpack(detached(outputs, create_graph), is_outputs_tuple),
            unpack(detached(grads, create_graph), is_inputs_tuple))


def jvp(func: Function, inputs: rv.Tensor | Tensors, v: rv.Tensor | Tensors | None = None,
        create_graph: bool = False, strict: bool = False) -> tuple[object, object]:
    """(`func(inputs)`, J · v) (torch.autograd.functional.jvp); `v` may be None for one
    one-element input. With `create_graph=False` and `strict=False`, a function that
    `rv.trace` records runs as its compiled value and forward-mode JVP kernels; on the
    tape, J · v is the VJP of a VJP (torch's double-backward trick)."""
    is_inputs_tuple, inputs = as_tuple(inputs, "inputs", "jvp")
    with rv.enable_grad():
        inputs = prepare(inputs, create_graph, need_graph=True)
        v = checked_vectors(v, inputs, is_inputs_tuple, "jvp", create_graph,
                            "the input to the user-provided function is")
        traced = _traced(func, inputs, create_graph, strict)
        result = traced.value() if traced is not None else func(*inputs)
        is_outputs_tuple, outputs = checked_outputs(result, "jvp", strict)
        if traced is not None:
            tangents = traced.jvp(ones_like(inputs) if v is None else v)
        else:
            tangents = _double_vjp(outputs, inputs, v, create_graph, strict)
    return (unpack(detached(outputs, create_graph), is_outputs_tuple),
            unpack(detached(tangents, create_graph), is_outputs_tuple))


def _double_vjp(outputs: Tensors, inputs: Tensors, v: Tensors | None, create_graph: bool,
                strict: bool) -> Tensors:
    """J · v on the tape: the VJP with respect to u of u ↦ u · J (`zero_cotangents`)."""
    u = zero_cotangents(outputs)
    u_j = autograd_grad(outputs, inputs, u, create_graph=True)
    check_requires_grad(u_j, "grad_inputs", strict)
    return fill_in_zeros(autograd_grad(u_j, u, v, create_graph), outputs, strict,
                         create_graph, "back_trick")


def vhp(func: Function, inputs: rv.Tensor | Tensors, v: rv.Tensor | Tensors | None = None,
        create_graph: bool = False, strict: bool = False) -> tuple[object, object]:
    """(`func(inputs)`, v · H) for a one-element `func` (torch.autograd.functional.vhp).
    With `create_graph=False` and `strict=False`, a function that `rv.trace` records to a
    0-d result runs as its compiled value and gradient-VJP kernels."""
    return _hessian_product(func, inputs, v, create_graph, strict, "vhp")


def hvp(func: Function, inputs: rv.Tensor | Tensors, v: rv.Tensor | Tensors | None = None,
        create_graph: bool = False, strict: bool = False) -> tuple[object, object]:
    """(`func(inputs)`, H · v) for a one-element `func` (torch.autograd.functional.hvp).
    With `create_graph=False` and `strict=False`, a function that `rv.trace` records to a
    0-d result runs as its compiled forward-over-reverse HVP kernel; on the tape, H · v is
    torch's double-backward trick over the recorded gradient."""
    return _hessian_product(func, inputs, v, create_graph, strict, "hvp")


def _hessian_product(func: Function, inputs: rv.Tensor | Tensors, v: object,
                     create_graph: bool, strict: bool, fn_name: str) -> tuple[object, object]:
    """`vhp` (v · H) or `hvp` (H · v), as torch computes them."""
    is_inputs_tuple, inputs = as_tuple(inputs, "inputs", fn_name)
    with rv.enable_grad():
        inputs = prepare(inputs, create_graph, need_graph=True)
        v = checked_vectors(v, inputs, is_inputs_tuple, fn_name, create_graph,
                            "the input to the user-provided function is")
        traced = _traced(func, inputs, create_graph, strict, scalar=True)
        result = traced.value() if traced is not None else func(*inputs)
        is_outputs_tuple, outputs = checked_outputs(result, fn_name, strict)
        check_single_element(is_outputs_tuple, outputs, fn_name)
        v_or_ones = ones_like(inputs) if v is None else v
        if traced is not None:
            product = traced.vhp(v_or_ones) if fn_name == "vhp" else traced.hvp(v_or_ones)
        else:
            product = _tape_hessian_product(outputs, inputs, v, create_graph, strict, fn_name)
    return (unpack(detached(outputs, create_graph), is_outputs_tuple),
            unpack(detached(product, create_graph), is_inputs_tuple))


def _tape_hessian_product(outputs: Tensors, inputs: Tensors, v: Tensors | None,
                          create_graph: bool, strict: bool, fn_name: str) -> Tensors:
    """v · H: the VJP of the recorded gradient g; H · v: the double-VJP trick on it (the
    VJP of u ↦ u · dg/dx with respect to u)."""
    gradient = autograd_grad(outputs, inputs, create_graph=True)
    check_requires_grad(gradient, "jacobian", strict)
    if fn_name == "vhp":
        return fill_in_zeros(autograd_grad(gradient, inputs, v, create_graph), inputs,
                             strict, create_graph, "double_back")
    u = zero_cotangents(inputs)
    u_h = autograd_grad(gradient, inputs, u, create_graph=True)
    return fill_in_zeros(autograd_grad(u_h, u, v, create_graph), inputs, strict,
                         create_graph, "double_back_trick")

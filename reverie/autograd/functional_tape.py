"""torch.autograd.functional's machinery over Reverie's tape, for `functional.py`.

Its argument checks (`as_tuple`, `checked_vectors`, `check_strategy`, ...), which raise
torch's exception classes, and the tape path's pieces: `autograd_grad` (torch's
`_autograd_grad`: `rv.grad` of the outputs that require grad), `fill_in_zeros`, and
`tape_jacobian`, the Jacobian of a function run on recorded Tensors:

    is_tuple, blocks = tape_jacobian(f, (x, y), create_graph, strict, vectorize)
    blocks[i][j]                     # d output i / d input j, output.shape + input.shape

Its rows come from batched compiled VJPs (`rv.grad(..., is_grads_batched=True)`), or, where
they must differentiate again (`create_graph`), from one recorded VJP per row, joined by a
recorded compiled concat. Names follow torch's `torch/autograd/functional.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

import reverie as rv

Tensors = tuple["rv.Tensor", ...]
Function = Callable[..., object]
STRATEGIES = ("forward-mode", "reverse-mode")
# rows of a Jacobian that must differentiate again are joined by this recorded kernel
JOIN_SOURCE = "fn join_rows(a: float[A, N], b: float[B, N]) { return concat((a, b), axis=0); }"

# ---------------------------------------------------------------- arguments (torch's checks)


def as_tuple(value: object, arg_name: str, fn_name: str) -> tuple[bool, Tensors]:
    """(whether `value` is a tuple, its Tensors); TypeError for anything but Tensors."""
    is_tuple = isinstance(value, tuple)
    values = value if is_tuple else (value,)
    for i, item in enumerate(values):
        if not isinstance(item, rv.Tensor):
            where = f"the value at index {i}" if is_tuple else f"the given {arg_name}"
            raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a "
                            f"tuple of Tensors, but {where} is a {type(item).__name__}")
    return is_tuple, values


def unpack(result: Sequence[object], is_tuple: bool | tuple[bool, bool]) -> object:
    """torch's `_tuple_postprocess`: drop the tuple levels the caller did not give."""
    outer, inner = is_tuple if isinstance(is_tuple, tuple) else (is_tuple, None)
    if inner is False:
        result = tuple(row[0] for row in result)
    return result if outer else result[0]


def prepare(tensors: Tensors, create_graph: bool, need_graph: bool) -> Tensors:
    """torch's `_grad_preprocess`: new graph ends for the function to run on: a recorded
    copy where the result must differentiate back into the caller's tensor, else a detached
    leaf (which requires grad where `need_graph`)."""
    return tuple(t * 1.0 if create_graph and t.requires_grad
                 else t.detach().requires_grad_(need_graph) for t in tensors)


def checked_vectors(v: object, references: Tensors, is_tuple: bool, fn_name: str,
             create_graph: bool, about: str) -> Tensors | None:
    """`v` checked against `references` (shapes, count); None only where torch allows it
    (one reference with one element)."""
    if v is None:
        if len(references) != 1 or references[0].size != 1:
            raise RuntimeError(f"The vector v can only be None if {about} a single Tensor "
                               f"with a single element; pass v to {fn_name}")
        return None
    _, v = as_tuple(v, "v", fn_name)
    v = prepare(v, create_graph, need_graph=False)
    if len(v) != len(references):
        raise RuntimeError(f"v is a tuple of invalid length: should be {len(references)} but "
                           f"got {len(v)}" if is_tuple else
                           "The given v should contain a single Tensor.")
    for i, (vector, reference) in enumerate(zip(v, references, strict=True)):
        if vector.shape != reference.shape:
            entry = f"Entry {i} in " if is_tuple else ""
            raise RuntimeError(f"{entry}v has invalid size: should be {reference.shape} but "
                               f"got {vector.shape}")
    return v


def checked_outputs(result: object, fn_name: str, strict: bool) -> tuple[bool, Tensors]:
    """The function's result checked: Tensors, each requiring grad under `strict`."""
    is_tuple, outputs = as_tuple(result, "outputs of the user-provided function", fn_name)
    check_requires_grad(outputs, "outputs", strict)
    return is_tuple, outputs


def check_single_element(is_tuple: bool, outputs: Tensors, fn_name: str) -> None:
    """RuntimeError unless the function returned one Tensor of one element."""
    if is_tuple:
        raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
    if outputs[0].size != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {fn_name} should "
                           f"contain a single element, not shape {outputs[0].shape}")


STRICT_ERRORS = {
    "outputs": "Output {i} of the user-provided function does not require gradients; "
               "in strict mode outputs must be computed differentiably from the inputs",
    "grad_inputs": "The gradient with respect to input {i} is independent of the inputs "
                   "of the user-provided function, which strict mode does not allow",
    "jacobian": "While computing the hessian, found that the jacobian of the user-provided "
                "function with respect to input {i} is independent of the input, which "
                "strict mode does not allow (is the function linear?)",
}


def check_requires_grad(tensors: Sequence[rv.Tensor | None], kind: str, strict: bool) -> None:
    """Under `strict`, RuntimeError for an entry that is None or does not require grad."""
    if not strict:
        return
    for i, t in enumerate(tensors):
        if t is None:
            raise RuntimeError(f"The output of the user-provided function is independent of "
                               f"input {i}, which strict mode does not allow")
        if not t.requires_grad:
            raise RuntimeError(STRICT_ERRORS[kind].format(i=i))


def check_strategy(strategy: str, create_graph: bool, strict: bool, vectorize: bool) -> None:
    """torch's refusals: an unknown strategy, and what forward mode does not support."""
    if strategy not in STRATEGIES:
        raise AssertionError(f'strategy must be "forward-mode" or "reverse-mode", not '
                             f"{strategy!r}")
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError('create_graph=True and strategy="forward-mode" are not '
                                      "supported together; use reverse-mode")
        if strict:
            raise RuntimeError('strict=True and strategy="forward-mode" are not supported '
                               "together; use reverse-mode")
        if not vectorize:
            raise NotImplementedError('strategy="forward-mode" is only implemented for '
                                      "vectorize=True")


# ---------------------------------------------------------------- the tape path


def autograd_grad(outputs: Sequence[rv.Tensor | None], inputs: Tensors, grad_outputs: object = None,
          create_graph: bool = False, batched: bool = False) -> tuple[rv.Tensor | None, ...]:
    """torch's `_autograd_grad`: `rv.grad` of the outputs that require grad (None for
    inputs they do not reach, and for every input when no output requires grad)."""
    seeds = (None,) * len(outputs) if grad_outputs is None else grad_outputs
    kept = [(o, s) for o, s in zip(outputs, seeds, strict=True)
            if o is not None and o.requires_grad]
    if not kept:
        return (None,) * len(inputs)
    kept_outputs, kept_seeds = zip(*kept, strict=True)
    return rv.grad(kept_outputs, inputs, kept_seeds, retain_graph=True,
                   create_graph=create_graph, allow_unused=True, is_grads_batched=batched)


# torch's stages of `fill_in_zeros`: what is independent of input i where a gradient is
# None, and where (strict, create_graph) it does not require grad
STAGES = {"back": ("output", "jacobian"), "back_trick": ("output", "jacobian"),
          "double_back": ("jacobian", "hessian"), "double_back_trick": ("hessian", "hessian")}


def fill_in_zeros(grads: Sequence[rv.Tensor | None], references: Tensors, strict: bool,
                  create_graph: bool, stage: str) -> Tensors:
    """Zeros where a gradient is None; under `strict`, RuntimeError there instead, and
    (with `create_graph`) for a gradient that does not depend on the inputs."""
    missing, constant = STAGES[stage]
    filled = []
    for i, (g, reference) in enumerate(zip(grads, references, strict=True)):
        if g is None and strict:
            raise RuntimeError(f"The {missing} of the user-provided function is independent "
                               f"of input {i}, which strict mode does not allow")
        if g is not None and strict and create_graph and not g.requires_grad:
            raise RuntimeError(f"The {constant} of the user-provided function is independent "
                               f"of input {i}, which strict mode does not allow with "
                               "create_graph=True")
        filled.append(_zeros(reference.shape, reference.dtype) if g is None else g)
    return tuple(filled)


def _zeros(shape: tuple[int, ...], dtype: np.dtype) -> rv.Tensor:
    return rv.tensor(np.zeros(shape, dtype))


def zero_cotangents(tensors: Tensors) -> Tensors:
    """Zeros like `tensors` that require grad: the `u` of the double-VJP trick (the VJP
    u ↦ u · J is linear, so its VJP with respect to u is J · v)."""
    return tuple(rv.tensor(np.zeros(t.shape, t.dtype), requires_grad=True) for t in tensors)


def ones_like(tensors: Tensors) -> Tensors:
    """The implicit `v` of a one-element reference: ones."""
    return tuple(rv.tensor(np.ones(t.shape, t.dtype)) for t in tensors)


def detached(tensors: Tensors, create_graph: bool) -> Tensors:
    """torch's `_grad_postprocess`: results leave the graph unless `create_graph`."""
    return tensors if create_graph else tuple(t.detach() for t in tensors)


def _standard_basis(outputs: Tensors) -> list[np.ndarray]:
    """One seed per output for a batched VJP: row r of the batch is the r-th unit vector
    of all the outputs' elements together (torch's `_construct_standard_basis_for`)."""
    sizes = [o.size for o in outputs]
    columns = np.split(np.eye(sum(sizes)), np.cumsum(sizes)[:-1], axis=1)
    return [c.reshape(c.shape[0], *o.shape).astype(o.dtype)
            for c, o in zip(columns, outputs, strict=True)]


def _independent(output: int | None, input_: int) -> None:
    """Under strict mode (`output` given), the error for an output that misses an input."""
    if output is not None:
        raise RuntimeError(f"Output {output} of the user-provided function is independent "
                           f"of input {input_}, which strict mode does not allow")


def _batched_rows(outputs: Tensors, inputs: Tensors, strict_index: int | None
                  ) -> list[rv.Tensor]:
    """Per input, the Jacobian rows of all `outputs` (shape (rows, *input.shape)) from one
    batched compiled VJP call."""
    grads = autograd_grad(outputs, inputs, _standard_basis(outputs), batched=True)
    rows = []
    for j, (g, x) in enumerate(zip(grads, inputs, strict=True)):
        if g is None:
            _independent(strict_index, j)
        rows.append(_zeros((sum(o.size for o in outputs), *x.shape), x.dtype) if g is None
                    else g)
    return rows


def _recorded_rows(outputs: Tensors, inputs: Tensors, strict_index: int | None
                   ) -> list[rv.Tensor]:
    """Per input, the Jacobian rows of all `outputs` (shape (rows, input.size)) that
    differentiate again: one recorded VJP per row (the batched VJP does not record its
    adjoint), joined by a recorded concat."""
    rows: list[list[rv.Tensor]] = [[] for _ in inputs]
    for output in outputs:
        for seed in np.eye(output.size, dtype=output.dtype):
            seeds = (seed.reshape(output.shape),)
            grads = autograd_grad((output,), inputs, seeds, create_graph=True)
            for j, g in enumerate(grads):
                if g is None:
                    _independent(strict_index, j)
            grads = fill_in_zeros(grads, inputs, strict_index is not None, True, "back")
            for row, g in zip(rows, grads, strict=True):
                row.append(g.reshape(1, g.size))
    return [_join(row) for row in rows]


def _jacobian_blocks(outputs: Tensors, inputs: Tensors, create_graph: bool,
                     strict_index: int | None = None) -> list[Tensors]:
    """Blocks [output][input] of the Jacobian of `outputs`, whose rows are computed together
    (as torch's `vectorize` does; with `strict_index`, `outputs` is that one output, which
    must reach every input)."""
    rows = (_recorded_rows if create_graph else _batched_rows)(outputs, inputs, strict_index)
    bounds = np.cumsum([0, *(o.size for o in outputs)])

    def block(i: int, j: int) -> rv.Tensor:  # output i's rows (all of them for one output)
        mine = rows[j] if len(outputs) == 1 else rows[j][bounds[i]:bounds[i + 1]]
        return mine.reshape(outputs[i].shape + inputs[j].shape)

    return [tuple(block(i, j) for j in range(len(inputs))) for i in range(len(outputs))]


@functools.cache
def _join_kernel() -> rv.Kernel:
    return rv.compile(JOIN_SOURCE).join_rows


def _join(rows: list[rv.Tensor]) -> rv.Tensor:
    """`rows` (each of shape (k, n)) joined along axis 0, recorded: halves, joined."""
    if len(rows) == 1:
        return rows[0]
    half = len(rows) // 2
    joined = _join_kernel()(_join(rows[:half]), _join(rows[half:]))
    return joined if isinstance(joined, rv.Tensor) else rv.tensor(joined)


def tape_jacobian(func: Function, inputs: Tensors, create_graph: bool, strict: bool,
                   vectorize: bool, fn_name: str = "jacobian") -> tuple[bool, tuple[Tensors]]:
    """(whether `func` returned a tuple, blocks [output][input]) on the tape."""
    inputs = prepare(inputs, create_graph, need_graph=True)
    is_outputs_tuple, outputs = checked_outputs(func(*inputs), fn_name, strict)
    if vectorize and strict:
        raise RuntimeError("strict=True and vectorize=True are not supported together; "
                           "set one of them to False")
    if vectorize:
        blocks = _jacobian_blocks(outputs, inputs, create_graph)
    else:  # output by output, as torch's loop (which strict mode needs)
        blocks = [_jacobian_blocks((o,), inputs, create_graph, i if strict else None)[0]
                  for i, o in enumerate(outputs)]
    return is_outputs_tuple, tuple(blocks)

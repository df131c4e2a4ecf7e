"""`rv.gradcheck` and `rv.gradgradcheck`: compiled gradients against finite differences.

Consumes a function of Tensors (a compiled kernel, or Python code built from Tensor
operators and kernel calls) and a tuple of inputs; produces True, or raises
`GradcheckError` (a RuntimeError) naming the output and input whose Jacobians disagree.
The analytical Jacobian is built row by row with `rv.grad` (one-hot grad_outputs); the
numerical one column by column with central differences in the inputs' dtype — pass float64
inputs (a warning says so otherwise). Defaults match torch.autograd.gradcheck.

bf16/f16 inputs (storage types: their gradients are bf16/f16) are checked against an f64
reference: the numerical Jacobian evaluates `fn` on every bf16/f16 input widened to f64 (the
same points, exactly), so `fn` must compute in f64 then (a kernel whose parameters are
`float`; a ValueError says so otherwise), and the tolerances grow to at least
`STORAGE_TOLERANCE` units of the narrowest input's rounding (2**-8 for bf16, 2**-11 for f16)
times the Jacobian's largest entry: each op of the analytical side rounds.

    rv.gradcheck(m.loss, (rv.tensor(x, requires_grad=True), labels))
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

from reverie.compiler.ir.dtypes import STORAGE_NUMPY_NAMES
from reverie.runtime.tensors.autograd_api import grad
from reverie.runtime.tensors.tensor import Tensor
from reverie.runtime.tensors.tensor_core import wrap

Function = Callable[..., object]

UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}
STORAGE_TOLERANCE = 8   # units of the storage type's rounding, relative to the largest entry


class GradcheckError(RuntimeError):
    """The analytical and numerical Jacobians differ."""


def _as_tuple(values: object) -> tuple[object, ...]:
    """A tuple or list as a tuple, anything else as a 1-tuple."""
    return tuple(values) if isinstance(values, tuple | list) else (values,)


def _array(value: object) -> np.ndarray:
    """The array behind a Tensor (graph or not), or `value` as an array."""
    return value._data if isinstance(value, Tensor) else np.asarray(value)


def _storage_dtype(value: object) -> str | None:
    """"bf16" or "f16" for such an array or Tensor, else None."""
    return STORAGE_NUMPY_NAMES.get(_array(value).dtype.name)


def _outputs(fn: Function, inputs: Sequence[object]) -> tuple[object, ...]:
    """The float outputs of `fn(*inputs)` (the ones that can be differentiated)."""
    return tuple(out for out in _as_tuple(fn(*inputs))
                 if _array(out).dtype.kind == "f" or _storage_dtype(out))


def _reference_point(inputs: Sequence[object]) -> list[object]:
    """The inputs the numerical Jacobian perturbs: bf16/f16 ones widened to f64 (exactly),
    Tensors staying Tensors."""
    def widened(x: object) -> object:
        if not _storage_dtype(x):
            return x
        wide = np.asarray(_array(x), np.float64)
        return wrap(wide) if isinstance(x, Tensor) else wide

    return [widened(x) for x in inputs]


def _numerical(fn: Function, inputs: Sequence[object], index: int, eps: float,
               sizes: Sequence[int]) -> list[np.ndarray]:
    """d outputs / d inputs[index] by central differences, one (out.size, in.size) per output."""
    base = np.array(_array(inputs[index]))
    columns: list[list[np.ndarray]] = [[] for _ in sizes]
    for k in range(base.size):
        values = []
        for step in (eps, -eps):
            moved = base.copy()
            moved.flat[k] += step
            args = [wrap(moved) if i == index else
                    wrap(x._data) if isinstance(x, Tensor) else x
                    for i, x in enumerate(inputs)]
            outputs = _outputs(fn, args)
            narrow = [o for o, out in enumerate(outputs) if _storage_dtype(out)]
            if narrow:
                raise ValueError(f"gradcheck: output {narrow[0]} is "
                                 f"{_storage_dtype(outputs[narrow[0]])} even with the bf16/f16 "
                                 "inputs widened to f64, so finite differences cannot see eps: "
                                 "give fn `float` parameters (specialised to f64 for the "
                                 "reference) instead of bf16/f16 ones")
            values.append([_array(o).astype(np.float64).ravel() for o in outputs])
        for column, plus, minus in zip(columns, *values, strict=True):
            column.append((plus - minus) / (2 * eps))
    return [np.stack(c, axis=1) if c else np.zeros((size, 0))
            for c, size in zip(columns, sizes, strict=True)]


def _analytical(outputs: Sequence[object], inputs: Sequence[Tensor]) -> list[list[np.ndarray]]:
    """d outputs / d inputs with rv.grad, one row per output element."""
    jacobians = []
    for out in outputs:
        rows = [np.zeros((out.size, x.size)) for x in inputs]
        if isinstance(out, Tensor) and out.requires_grad:
            for k in range(out.size):
                seed = np.zeros(out.shape, out.dtype)
                seed.flat[k] = 1
                grads = grad(out, inputs, seed, retain_graph=True, allow_unused=True)
                for row, g in zip(rows, grads, strict=True):
                    if g is not None:
                        row[k] = _array(g).astype(np.float64).ravel()
        jacobians.append(rows)
    return jacobians


def _check(fn: Function, inputs: tuple[object, ...], eps: float, atol: float,
           rtol: float) -> None:
    """Raise GradcheckError at the first (output, input) pair whose Jacobians differ."""
    differentiable = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not differentiable:
        raise ValueError("gradcheck needs at least one input tensor with requires_grad=True")
    storage = [d for d in map(_storage_dtype, inputs) if d]
    for i in differentiable:
        if inputs[i].dtype != np.float64 and not _storage_dtype(inputs[i]):
            warnings.warn(f"input {i} requires grad but is {inputs[i].dtype}: finite "
                          "differences are unreliable below float64; pass float64 inputs",
                          UserWarning, stacklevel=3)
    outputs = _outputs(fn, inputs)
    sizes = [int(_array(o).size) for o in outputs]
    analytical = _analytical(outputs, [inputs[i] for i in differentiable])
    reference = _reference_point(inputs) if storage else inputs
    unit = max((UNIT_ROUNDOFF[d] for d in storage), default=0.0) * STORAGE_TOLERANCE
    for column, i in enumerate(differentiable):
        numerical = _numerical(fn, reference, i, eps, sizes)
        for o, (num, ana) in enumerate(zip(numerical, analytical, strict=True)):
            within = (max(atol, unit * float(np.max(np.abs(num), initial=0.0))),
                      max(rtol, unit))
            if not np.allclose(ana[column], num, rtol=within[1], atol=within[0]):
                raise GradcheckError(
                    f"Jacobian mismatch for output {o} with respect to input {i} "
                    f"(rows: output elements, columns: input elements):\n"
                    f"numerical (central differences, eps={eps}):\n{num}\n"
                    f"analytical (compiled gradient):\n{ana[column]}\n"
                    f"they differ by up to {np.max(np.abs(ana[column] - num)):.3g}, more "
                    f"than atol={within[0]:.3g} + rtol={within[1]:.3g} * |numerical| allows")


def gradcheck(fn: Function, inputs: object, *, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """True when fn's compiled Jacobian matches central differences (else GradcheckError,
    or False with raise_exception=False)."""
    try:
        _check(fn, _as_tuple(inputs), eps, atol, rtol)
    except GradcheckError:
        if raise_exception:
            raise
        return False
    return True


def gradgradcheck(fn: Function, inputs: object, grad_outputs: object = None, *,
                  eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
                  raise_exception: bool = True) -> bool:
    """gradcheck of the first derivative: the compiled second derivative against central
    differences of the compiled first derivative (random grad_outputs in [-1, 1])."""
    inputs = _as_tuple(inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = tuple(
            Tensor(rng.uniform(-1, 1, np.shape(o)).astype(_array(o).dtype),
                   requires_grad=True)
            for o in _outputs(fn, inputs))
    grad_outputs = _as_tuple(grad_outputs)
    count = len(inputs)
    differentiable = {i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad}
    seeded = {i for i, g in enumerate(grad_outputs) if isinstance(g, Tensor) and g.requires_grad}

    def restore(x: object, wanted: bool) -> object:
        """`x` as a leaf requiring grad when `wanted` (finite differences pass plain ones)."""
        return Tensor(x._data, requires_grad=True) if wanted and not x.requires_grad else x

    def first_derivative(*args: object) -> tuple[Tensor, ...]:
        """The VJP of fn at the primal args for the grad_outputs args, differentiable."""
        primal = [restore(x, i in differentiable) for i, x in enumerate(args[:count])]
        seeds = [restore(g, i in seeded) for i, g in enumerate(args[count:])]
        grads = grad(_outputs(fn, primal), [primal[i] for i in sorted(differentiable)], seeds,
                     create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_derivative, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)

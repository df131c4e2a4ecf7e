"""Shared helpers for the reverse-mode tests: compile, differentiate, compare Jacobians.

Everything runs in float64 through the NumPy reference interpreter. `vjp_jacobian` builds
the Jacobian one row per output element from the adjoint IR; `fd_jacobian` builds it one
column per input element from central differences of the primal IR.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.tensor_verifier import verify_function
from reverie.compiler.transforms.reverse import grad_function, vjp_function


@functools.cache
def _module(source: str) -> rv.Module:
    return rv.compile(source, backend="interp")


def specialise(source: str, name: str = "f", dtype: str = "f64") -> Function:
    """The typed IR of function `name` in `source`."""
    return _module(source).lowering.specialise(name, dtype)


def run(fn: Function, args: Sequence[object], dims: dict[str, int]) -> list[np.ndarray]:
    """Interpret `fn` and return its results as arrays."""
    return [np.asarray(r) for r in interpret(fn, [np.asarray(a) for a in args], dims)]


def grad(fn: Function, wrt: Sequence[int], args: Sequence[object], dims: dict[str, int],
         checkpoint: bool = False) -> list[np.ndarray]:
    """The gradients of a scalar function (its grad IR verified and interpreted)."""
    g = grad_function(fn, wrt, checkpoint=checkpoint)
    verify_function(g)
    return run(g, args, dims)[1:]


def vjp_jacobian(fn: Function, args: Sequence[object], dims: dict[str, int],
                 wrt: Sequence[int], checkpoint: bool = False) -> list[np.ndarray]:
    """Per `wrt` parameter, the Jacobian (all float outputs flattened × parameter elements)."""
    g = vjp_function(fn, wrt, checkpoint=checkpoint)
    verify_function(g)
    outputs = run(fn, args, dims)
    rows: list[list[np.ndarray]] = [[] for _ in wrt]
    for j, out in enumerate(outputs):
        if out.dtype.kind != "f":
            continue
        for e in range(out.size):
            cotangents = [np.zeros_like(o) for o in outputs]
            flat = cotangents[j].reshape(-1)
            flat[e] = 1.0
            cotangents[j] = flat.reshape(out.shape)
            grads = run(g, list(args) + cotangents, dims)[len(outputs):]
            for row, gr in zip(rows, grads, strict=True):
                row.append(gr.reshape(-1))
    return [np.stack(r) for r in rows]


def fd_jacobian(fn: Function, args: Sequence[object], dims: dict[str, int], index: int,
                eps: float = 1e-6) -> np.ndarray:
    """The Jacobian with respect to parameter `index` by central differences."""
    x = np.asarray(args[index], dtype=np.float64)
    columns = []
    for e in range(x.size):
        step = np.zeros(x.size)
        step[e] = eps
        step = step.reshape(x.shape)
        plus, minus = list(args), list(args)
        plus[index], minus[index] = x + step, x - step
        outs = zip(run(fn, plus, dims), run(fn, minus, dims), strict=True)
        columns.append(np.concatenate([((p - m) / (2 * eps)).reshape(-1)
                                       for p, m in outs if p.dtype.kind == "f"]))
    return np.stack(columns, axis=1)


def assert_jacobians_match(fn: Function, args: Sequence[object], dims: dict[str, int],
                           wrt: Sequence[int] | None = None, rtol: float = 1e-6,
                           atol: float = 1e-7) -> None:
    """Reverse-mode Jacobians equal finite differences for every float parameter."""
    if wrt is None:
        wrt = [i for i, p in enumerate(fn.params) if p.type.is_float]
    for index, jac in zip(wrt, vjp_jacobian(fn, args, dims, wrt), strict=True):
        np.testing.assert_allclose(jac, fd_jacobian(fn, args, dims, index), rtol=rtol,
                                   atol=atol, err_msg=f"parameter {fn.param_names[index]}")


def dot_product_test(fn: Function, args: Sequence[object], dims: dict[str, int],
                     seed: int = 0, eps: float = 1e-6) -> tuple[float, float]:
    """⟨u, J v⟩ by central differences and ⟨Jᵀ u, v⟩ from the adjoint, for random u, v."""
    rng = np.random.default_rng(seed)
    wrt = [i for i, p in enumerate(fn.params) if p.type.is_float]
    outputs = run(fn, args, dims)
    us = [rng.standard_normal(o.shape) if o.dtype.kind == "f" else np.zeros_like(o)
          for o in outputs]
    vs = [rng.standard_normal(np.shape(args[i])) for i in wrt]
    g = vjp_function(fn, wrt)
    verify_function(g)
    grads = run(g, list(args) + us, dims)[len(outputs):]
    plus, minus = list(args), list(args)
    for i, v in zip(wrt, vs, strict=True):
        plus[i], minus[i] = args[i] + eps * v, args[i] - eps * v
    pairs = zip(us, run(fn, plus, dims), run(fn, minus, dims), strict=True)
    forward = sum(float(np.sum(u * (p - m))) / (2 * eps) for u, p, m in pairs
                  if p.dtype.kind == "f")
    backward = sum(float(np.sum(gr * v)) for gr, v in zip(grads, vs, strict=True))
    return forward, backward

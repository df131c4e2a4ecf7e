"""Shared helpers for the forward-mode and batching tests.

Everything runs in float64 through the NumPy reference interpreter: `jvp_error` compares
a JVP with central differences of the primal, `batch_error` compares one batched run with a
Python loop of unbatched runs. `ir_function` builds small IR functions op by op, for ops
the front end never emits on its own (pad, scatters, for_history, a top-level read).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.scope import Scope
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.tensor_verifier import verify_function
from reverie.compiler.ir.types import NUMPY_DTYPES, TensorType
from reverie.compiler.transforms.batch import batch_function
from reverie.compiler.transforms.forward import jvp_function


def tensor_type(dtype: str, *dims: str | int) -> TensorType:
    """`tensor_type("f64", "N", 3)` is f64[N, 3]."""
    return TensorType(dtype, tuple(Dim.sym(d) if isinstance(d, str) else Dim.const(d)
                                   for d in dims))


def ir_function(params: Sequence[tuple[str, TensorType]],
                body: Callable[..., Sequence[Value]], name: str = "f") -> Function:
    """A verified function whose body `body(scope, *params)` emits ops and returns results."""
    values = [Value(t, name=n) for n, t in params]
    scope = Scope(Block(params=values))
    scope.block.results = list(body(scope, *values))
    fn = Function(name, scope.block, [n for n, _ in params])
    verify_function(fn)
    return fn


def run(fn: Function, args: Sequence[object], dims: dict[str, int]) -> list[np.ndarray]:
    """Interpret `fn`; results as arrays."""
    return [np.asarray(r) for r in interpret(fn, [np.asarray(a) for a in args], dims)]


def float_params(fn: Function) -> list[int]:
    """Positions of the float parameters of `fn`."""
    return [i for i, p in enumerate(fn.params) if p.type.is_float]


def jvp_error(fn: Function, args: Sequence[object], dims: dict[str, int], seed: int = 0,
              eps: float = 1e-6) -> list[tuple[np.ndarray, np.ndarray]]:
    """(JVP tangent, central difference) per result, for random tangents of every float
    parameter; also checks the JVP's primal results equal `fn`'s."""
    rng = np.random.default_rng(seed)
    wrt = float_params(fn)
    tangents = [rng.standard_normal(np.shape(args[i])) for i in wrt]
    jvp = jvp_function(fn, wrt)
    outputs = run(fn, args, dims)
    results = run(jvp, list(args) + tangents, dims)
    for got, want in zip(results[:len(outputs)], outputs, strict=True):
        np.testing.assert_array_equal(got, want)
    plus, minus = list(args), list(args)
    for i, t in zip(wrt, tangents, strict=True):
        plus[i], minus[i] = np.asarray(args[i]) + eps * t, np.asarray(args[i]) - eps * t
    pairs = []
    for tangent, p, m in zip(results[len(outputs):], run(fn, plus, dims), run(fn, minus, dims),
                             strict=True):
        assert tangent.dtype == p.dtype and tangent.shape == p.shape
        central = (p - m) / (2 * eps) if p.dtype.kind == "f" else np.zeros_like(p)
        pairs.append((tangent, central))
    return pairs


def batch_dim(fn: Function, batched: Sequence[int]) -> str:
    """The name of the batch dimension of a function made by `batch_function`."""
    (name,) = fn.params[batched[0]].type.shape[0].symbols()
    return name


def batch_error(fn: Function, arg_sets: Sequence[Sequence[object]], dims: dict[str, int],
                batched: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(batched result, stacked loop results) per result of `fn`, batching the parameters
    at `batched` over the argument sets (the others come from the first set)."""
    batched_fn = batch_function(fn, batched)
    args = [np.stack([np.asarray(s[i]) for s in arg_sets]) if i in batched else arg_sets[0][i]
            for i in range(len(fn.params))]
    sizes = {**dims, batch_dim(batched_fn, batched): len(arg_sets)}
    got = run(batched_fn, args, sizes)
    loops = [run(fn, [s[i] if i in batched else arg_sets[0][i] for i in range(len(s))], dims)
             for s in arg_sets]
    return [(g, np.stack([loop[k] for loop in loops])) for k, g in enumerate(got)]


# ---------------------------------------------------------------- example programs

EXAMPLE_SIZES = {"B": 2, "C": 3, "D": 4, "E": 3, "F": 2, "H": 5, "K": 3, "KH": 3, "KW": 2,
                 "L": 7, "N": 6, "O": 2, "P": 3, "S": 4, "T": 5, "W": 6}
EXAMPLE_SCALARS = {"steps": 3, "alpha": 0.2, "delta": 0.7, "width": 0.5, "lo": -0.5, "hi": 0.8,
                   "h": 0.1, "limit": 1.0, "decay": 0.01, "slope": 0.1}


def example_args(fn: Function, seed: int) -> list[np.ndarray]:
    """Arguments for an example function: normal floats, integers in the range their name
    suggests (labels, time steps, counts), fixed values for scalar settings."""
    rng = np.random.default_rng(seed)
    sizes = EXAMPLE_SIZES
    args = []
    for value, name in zip(fn.params, fn.param_names, strict=True):
        shape = tuple(d.evaluate(sizes) for d in value.type.shape)
        dtype = NUMPY_DTYPES[value.type.dtype]
        if name == "labels":
            arg = rng.integers(0, sizes["C"], shape)
        elif name == "t":
            arg = rng.integers(0, sizes["T"])
        elif name == "steps":
            arg = rng.integers(1, 4)
        elif name in EXAMPLE_SCALARS and not shape:
            arg = EXAMPLE_SCALARS[name]
        elif dtype == np.bool_:
            arg = rng.random(shape) < 0.3
        elif dtype.kind == "i":
            arg = rng.integers(-5, 5, shape)
        else:
            arg = rng.standard_normal(shape)
        args.append(np.asarray(arg, dtype=dtype))
    return args

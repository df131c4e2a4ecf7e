"""`reverie grad FILE.rv --fn NAME`: run a function and its gradient on random inputs.

Inputs are drawn from the signature: every dimension gets the size from `--dims`
(default 8), float tensors are uniform in [0.1, 1) (safe for log and sqrt), integer tensors
are uniform in [0, smallest dimension), integer scalars (trip counts) get that smallest
dimension. `--check` compares the compiled gradient with central finite differences in
float64; `--bench` times the value, the gradient and the NumPy reference interpreter.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.interpreter import interpret
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.runtime.call import bind_arguments

from .kernel import Kernel
from .module import Module

DEFAULT_SIZE = 8


def parse_dims(text: str | None) -> dict[str, int]:
    """`N=1000,D=8` → {"N": 1000, "D": 8}."""
    sizes: dict[str, int] = {}
    for item in filter(None, (text or "").split(",")):
        name, _, value = item.partition("=")
        if not value.strip().isdigit():
            raise ValueError(f"--dims entries look like N=1000, got {item!r}")
        sizes[name.strip()] = int(value)
    return sizes


def random_arguments(fn: Function, sizes: dict[str, int], rng: np.random.Generator) -> list:
    """Arguments fitting `fn`'s signature, with dimension sizes from `sizes`."""
    dims = {name: sizes.get(name, DEFAULT_SIZE) for name in fn.dim_names}
    smallest = max(1, min(dims.values(), default=DEFAULT_SIZE))
    args = []
    for param in fn.params:
        shape = tuple(d.evaluate(dims) for d in param.type.shape)
        dtype = NUMPY_DTYPES[param.type.dtype]
        if param.type.is_float:
            args.append(rng.uniform(0.1, 1.0, size=shape).astype(dtype))
        elif param.type.dtype == "bool":
            args.append(rng.random(size=shape) < 0.5)
        elif shape:
            args.append(rng.integers(0, smallest, size=shape).astype(dtype))
        else:
            args.append(dtype.type(smallest))
    return args


def median_seconds(run: Callable[[], object], repeats: int = 15) -> float:
    """Median wall time of `run` over `repeats` calls, after one warm-up call."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def finite_difference_error(kernel: Kernel, args: list, wrt: list[int], grads: tuple,
                            rng: np.random.Generator, relative_step: float,
                            probes: int = 8) -> float:
    """Largest difference between compiled partials and central differences, relative to
    the partials compared plus a thousandth of the largest gradient entry (so tiny
    partials of a large loss do not drown in rounding noise)."""
    largest = max(float(np.max(np.abs(g), initial=0.0)) for g in grads)
    worst = 0.0
    for _ in range(probes):
        slot = int(rng.integers(len(wrt)))
        position = wrt[slot]
        base = np.asarray(args[position], dtype=np.float64)
        if base.size == 0:
            continue
        index = np.unravel_index(int(rng.integers(base.size)), base.shape)
        step = relative_step * max(1.0, abs(float(base[index])))
        values = []
        for sign in (1, -1):
            moved = base.copy()
            moved[index] += sign * step
            values.append(float(kernel(*args[:position], moved, *args[position + 1:])))
        numeric = (values[0] - values[1]) / (2 * step)
        analytic = float(np.asarray(grads[slot])[index])
        scale = abs(numeric) + abs(analytic) + 1e-3 * largest
        worst = max(worst, abs(numeric - analytic) / max(scale, 1e-300))
    return worst


def run_grad(module: Module, name: str, wrt_text: str | None, dims_text: str | None,
             dtype: str, check: bool, bench: bool) -> int:
    """The `reverie grad` command; returns the exit status."""
    kernel = module[name]
    wrt = wrt_text.split(",") if wrt_text else None
    chosen, _ = kernel.wrt_indices(wrt)
    rng = np.random.default_rng(0)
    fn = kernel.ir_for(dtype)
    args = random_arguments(fn, parse_dims(dims_text), rng)
    value_and_grad = kernel.value_and_grad([kernel.param_names[i] for i in chosen])
    value, grads = value_and_grad(*args)
    print(f"{name}{tuple(np.shape(a) for a in args)} = {float(value):.6g}")
    for i, g in zip(chosen, grads, strict=True):
        print(f"  d/d{kernel.param_names[i]}: shape {np.shape(g)}, |g| = {np.linalg.norm(g):.6g}")
    status = 0
    if check:
        wide = [np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else a for a in args]
        _, wide_grads = value_and_grad(*wide)
        precision = kernel.ir_for("f64").params[chosen[0]].type.dtype
        step, bound = (1e-5, 1e-4) if precision == "f64" else (3e-3, 2e-2)
        error = finite_difference_error(kernel, wide, chosen, wide_grads, rng, step)
        passed = error < bound
        print(f"gradient check ({precision}, central differences): max relative error "
              f"{error:.2e} (bound {bound:g}) — {'ok' if passed else 'FAILED'}")
        status = 0 if passed else 1
    if bench:
        bound = bind_arguments(fn, args)
        value_time = median_seconds(lambda: kernel(*args))
        grad_time = median_seconds(lambda: value_and_grad(*args))
        numpy_time = median_seconds(lambda: interpret(fn, bound.arrays, bound.dims))
        print(f"value {value_time * 1e3:.3f} ms, value and gradient {grad_time * 1e3:.3f} ms, "
              f"NumPy reference (value) {numpy_time * 1e3:.3f} ms; "
              f"value/NumPy = {value_time / numpy_time:.2f}, "
              f"gradient/value = {grad_time / value_time:.2f}")
    return status

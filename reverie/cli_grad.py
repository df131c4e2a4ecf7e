"""`reverie grad FILE.rv --fn NAME`: run a function and its gradient on random inputs.

Inputs are drawn from the signature: every dimension gets the size from `--dims`
(default 8), float tensors are uniform in [0.1, 1) (safe for log and sqrt), integer tensors
are uniform in [0, smallest dimension), integer scalars (trip counts) get that smallest
dimension. `--check` compares the compiled gradient with central finite differences in
float64, at every entry of a parameter of up to 64 entries and at 64 random entries of a
larger one; a NaN or inf in the value, anywhere in the gradients or in a difference fails
the check (exit status 1), as does a relative error over the bound. `--bench` times the
value, the gradient and the NumPy reference interpreter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.kernel import Kernel
from reverie.module import Module
from reverie.runtime.native.call import bind_arguments

DEFAULT_SIZE = 8
EVERY_ENTRY_UP_TO = 64  # --check perturbs every entry of a parameter this small
SAMPLED_ENTRIES = 64  # and this many entries, drawn at random, of a larger one
# --check's difference step and error bound by the precision the kernel computes in at f64
# arguments
CHECK_STEPS = {"f64": (1e-5, 1e-4), "f32": (3e-3, 2e-2)}


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


@dataclass
class GradientCheck:
    """The outcome of `check_gradient`: the worst relative error over the entries compared
    (`worst_at` names the entry), how many were compared, and every NaN or inf found (in
    the value, the gradients or the finite differences), each a line for the user."""

    error: float = 0.0
    worst_at: str = "-"
    compared: int = 0
    non_finite: list[str] = field(default_factory=list)

    def passed(self, bound: float) -> bool:
        """No NaN or inf, and every error compared under `bound`."""
        return not self.non_finite and self.error < bound


def entry_name(name: str, index: tuple[int, ...]) -> str:
    """`x[3, 1]` for entry (3, 1) of parameter x, `w` for a scalar."""
    return f"{name}[{', '.join(map(str, index))}]" if index else name


def non_finite_entries(what: str, name: str, values: np.ndarray,
                       entries: list[tuple[int, ...]] | None = None) -> list[str]:
    """A line for `values` if any is NaN or inf: how many, and the first, named as an
    entry of parameter `name` (`entries`: the entry of each of `values`, else their own
    positions)."""
    bad = np.argwhere(~np.isfinite(values))
    if not len(bad):
        return []
    first = tuple(int(i) for i in bad[0])
    where = entries[first[0]] if entries is not None else first
    return [f"{what} has {len(bad)} NaN or inf entries of {values.size} "
            f"(first: {entry_name(name, where)} = {values[first]})"]


def entries_to_check(shape: tuple[int, ...], rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Every entry of a parameter of at most `EVERY_ENTRY_UP_TO` entries, else
    `SAMPLED_ENTRIES` distinct ones drawn at random."""
    size = int(np.prod(shape, dtype=np.int64))
    flat = range(size) if size <= EVERY_ENTRY_UP_TO else \
        sorted(rng.choice(size, SAMPLED_ENTRIES, replace=False))
    return [tuple(int(i) for i in np.unravel_index(k, shape)) for k in flat]


def check_gradient(kernel: Kernel, args: list, wrt: list[int], value: object, grads: tuple,
                   rng: np.random.Generator, relative_step: float) -> GradientCheck:
    """Compiled partials against central differences (`entries_to_check` of each `wrt`
    parameter), each difference relative to the two partials plus a thousandth of the
    largest gradient entry (so tiny partials of a large loss do not drown in rounding
    noise). NaN or inf in the value, anywhere in the gradients, or in a difference is
    reported, never compared (max(0, nan) is 0)."""
    names = [kernel.param_names[p] for p in wrt]
    report = GradientCheck(non_finite=non_finite_entries("the value", "value",
                                                         np.asarray(value, np.float64)))
    gradients = [np.asarray(g, np.float64) for g in grads]
    largest = max(float(np.max(np.abs(g), initial=0.0, where=np.isfinite(g)))
                  for g in gradients)
    for position, name, g in zip(wrt, names, gradients, strict=True):
        report.non_finite += non_finite_entries(f"d/d{name}", name, g)
        entries = entries_to_check(g.shape, rng)
        numeric = np.array([central_difference(kernel, args, position, index, relative_step)
                            for index in entries])
        analytic = np.array([g[index] for index in entries])
        report.non_finite += non_finite_entries(f"the central differences of {name}", name,
                                                numeric, entries)
        finite = np.isfinite(numeric) & np.isfinite(analytic)
        scale = np.abs(numeric) + np.abs(analytic) + 1e-3 * largest
        errors = np.abs(numeric - analytic)[finite] / np.maximum(scale[finite], 1e-300)
        report.compared += len(errors)
        if len(errors) and errors.max() >= report.error:
            worst = np.flatnonzero(finite)[np.argmax(errors)]
            report.error, report.worst_at = float(errors.max()), entry_name(name, entries[worst])
    return report


def central_difference(kernel: Kernel, args: list, position: int, index: tuple[int, ...],
                       relative_step: float) -> float:
    """(f(x + h e) − f(x − h e)) / 2h for entry `index` of argument `position`, with
    h = `relative_step` · max(1, |x at index|)."""
    base = np.asarray(args[position], dtype=np.float64)
    step = relative_step * max(1.0, abs(float(base[index])))
    values = []
    for sign in (1, -1):
        moved = base.copy()
        moved[index] += sign * step
        values.append(float(kernel(*args[:position], moved, *args[position + 1:])))
    return (values[0] - values[1]) / (2 * step)


def print_check(report: GradientCheck, precision: str, bound: float) -> None:
    """The check's verdict, and every NaN or inf found."""
    verdict = "ok" if report.passed(bound) else "FAILED"
    print(f"gradient check ({precision}, central differences at {report.compared} entries): "
          f"max relative error {report.error:.2e} at {report.worst_at} (bound {bound:g}) "
          f"— {verdict}")
    for line in report.non_finite:
        print(f"  not finite: {line}")


def run_grad(module: Module, name: str, wrt_text: str | None, dims_text: str | None,
             dtype: str, check: bool, bench: bool) -> int:
    """The `reverie grad` command; returns the exit status."""
    kernel = module[name]
    wrt = wrt_text.split(",") if wrt_text else None
    chosen, _ = kernel.wrt_indices(wrt)
    precision = kernel.ir_for("f64").params[chosen[0]].type.dtype
    if check and precision not in CHECK_STEPS:  # a bf16/f16 kernel's differences are noise
        raise ValueError(f"--check compares with central differences in f64, but "
                         f"'{kernel.param_names[chosen[0]]}' of {name} is declared "
                         f"{precision}; declare it float to check the gradient")
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
        wide = [a.astype(np.float64) if fn.params[i].type.is_float else a
                for i, a in enumerate(args)]
        wide_value, wide_grads = value_and_grad(*wide)
        step, bound = CHECK_STEPS[precision]
        report = check_gradient(kernel, wide, chosen, wide_value, wide_grads, rng, step)
        print_check(report, precision, bound)
        status = 0 if report.passed(bound) else 1
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

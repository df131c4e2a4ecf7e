"""Property test: random well-typed programs (tests/native/program_generator.py) compile
without error, and the native backend agrees with the NumPy reference interpreter on values
and gradients, in f64 and f32, at sizes 1..6; f64 gradients also match central finite
differences. The programs come from fixed seeds, so every run checks the same ones."""

from __future__ import annotations

import random

import numpy as np
import pytest
from program_generator import GeneratedProgram, generate_program

import reverie as rv

BATCHES = 6
PROGRAMS_PER_BATCH = 6
TOLERANCE = {"f64": 1e-10, "f32": 1e-4}
NUMPY_DTYPE = {"f64": np.float64, "f32": np.float32}
FINITE_DIFFERENCE_STEP = 1e-6
FINITE_DIFFERENCE_COORDINATES = 3


def batch_programs(seed: int) -> list[GeneratedProgram]:
    """The programs of one batch, all drawn from `seed`."""
    rng = random.Random(seed)
    return [generate_program(rng, f"f{index}") for index in range(PROGRAMS_PER_BATCH)]


def random_arguments(program: GeneratedProgram, sizes: dict[str, int], dtype: str,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Standard-normal arguments of the parameter shapes, with N and M taken from `sizes`."""
    return [rng.standard_normal(tuple(sizes[d] for d in shape)).astype(NUMPY_DTYPE[dtype])
            for shape in program.param_shapes]


def as_tuple(result: object) -> tuple[np.ndarray, ...]:
    """A gradient result as a tuple of arrays (a single parameter gives one array)."""
    return tuple(np.asarray(r) for r in result) if isinstance(result, tuple) \
        else (np.asarray(result),)


def assert_close(got: object, want: object, dtype: str, what: str) -> None:
    """Equal up to the dtype's relative tolerance, with the absolute tolerance scaled to the
    largest magnitude."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.dtype, want.dtype)
    tol = TOLERANCE[dtype]
    magnitude = float(np.max(np.abs(want), initial=1.0))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * magnitude, err_msg=what)


def check_finite_differences(kernel: rv.Kernel, args: list[np.ndarray],
                             grads: tuple[np.ndarray, ...], rng: np.random.Generator,
                             what: str) -> None:
    """A few coordinates of the f64 gradient against central differences of the value."""
    for _ in range(FINITE_DIFFERENCE_COORDINATES):
        which = int(rng.integers(len(args)))
        if args[which].size == 0:
            continue
        flat = int(rng.integers(args[which].size))
        shifted = []
        for sign in (1.0, -1.0):
            moved = [a.copy() for a in args]
            moved[which].reshape(-1)[flat] += sign * FINITE_DIFFERENCE_STEP
            shifted.append(float(kernel(*moved)))
        estimate = (shifted[0] - shifted[1]) / (2 * FINITE_DIFFERENCE_STEP)
        exact = float(np.asarray(grads[which]).reshape(-1)[flat]) if grads[which].ndim else \
            float(grads[which])
        scale = 1.0 + abs(exact) + abs(float(kernel(*args)))
        assert abs(estimate - exact) <= 1e-5 * scale, \
            (what, f"argument {which}, element {flat}", estimate, exact)


def check_program(native: rv.Module, interp: rv.Module, program: GeneratedProgram, dtype: str,
                  seed: int) -> None:
    """Values and gradients of one program, natively and interpreted, on two size draws."""
    rng = np.random.default_rng(seed)
    sizes = {"N": int(rng.integers(1, 7)), "M": int(rng.integers(1, 7))}
    args = random_arguments(program, sizes, dtype, rng)
    what = f"{program.source}sizes {sizes}, {dtype}"
    assert_close(native[program.name](*args), interp[program.name](*args), dtype, what)
    got = as_tuple(native[program.name].grad()(*args))
    want = as_tuple(interp[program.name].grad()(*args))
    assert len(got) == len(want) == len(args)
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_close(g, w, dtype, f"{what}, gradient {index}")
    if dtype == "f64":
        check_finite_differences(native[program.name], args, got, rng, what)


@pytest.mark.parametrize("batch", range(BATCHES))
def test_random_programs_match_the_interpreter(batch: int) -> None:
    programs = batch_programs(1000 + batch)
    source = "\n".join(p.source for p in programs)
    native, interp = rv.compile(source), rv.compile(source, backend="interp")
    for index, program in enumerate(programs):
        for dtype in ("f64", "f32"):
            check_program(native, interp, program, dtype, seed=100 * batch + index)



# Constructs that the plain batches draw only now and then, each tested on its own batch.
FEATURES = {
    "control flow": ("while ", "if "),
    "scans and orderings": ("cumsum(", "cumprod(", "sort(", "topk("),
    "indexed updates": ("] = ",),
}


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_random_programs_with_a_feature_match_the_interpreter(feature: str) -> None:
    """Generated programs that contain `feature`, checked the same way."""
    rng = random.Random(7)
    programs = []
    while len(programs) < PROGRAMS_PER_BATCH:
        program = generate_program(rng, f"g{len(programs)}")
        if any(marker in program.source for marker in FEATURES[feature]):
            programs.append(program)
    source = "\n".join(p.source for p in programs)
    native, interp = rv.compile(source), rv.compile(source, backend="interp")
    for index, program in enumerate(programs):
        for dtype in ("f64", "f32"):
            check_program(native, interp, program, dtype, seed=7000 + index)

"""Shared helpers: the ladder without some of its passes, the loop program it makes of a
tensor-IR function, and one function run at every level that executes it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.loops.ir import Program
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.pipeline import LADDERS, compile_function
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel


@contextlib.contextmanager
def ladder_without(*passes: str) -> Iterator[None]:
    """Inside the block, the native ladder runs without the passes named (a program
    compared with and without a pass)."""
    ladder = tuple(replace(rung, passes=tuple(p for p in rung.passes if p.name not in passes))
                   for rung in LADDERS["native"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(LADDERS, "native", ladder)
        yield


def loop_program(fn: Function, without: tuple[str, ...] = ()) -> Program:
    """The loop program the ladder makes of `fn` (stages fuse and to_loops, verified after
    every loop pass: tests/conftest.py), without the passes named in `without`."""
    with ladder_without(*without):
        return compile_function(fn, "to_loops")


def every_level(fn: Function, args: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray,
                                                              np.ndarray]:
    """The single result of `fn` on `args` from the tensor-IR interpreter, the loop-IR
    interpreter (the ladder's loop program) and native code, in that order."""
    bound = bind_arguments(fn, args)
    (interpreted,) = interpret(fn, bound.arrays, bound.dims)
    (looped,) = run_program(loop_program(fn), bound.arrays, bound.dims)
    (native,) = native_kernel(fn)(bound)
    return interpreted, looped, native

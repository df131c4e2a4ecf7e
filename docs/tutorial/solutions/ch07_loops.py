"""Chapter 7, exercise 1: the loop nests of `mse`.

There is one loop nest: the add of `b`, the difference, the square and the sum fuse into a
single loop over N with an accumulator. The matrix product is not a loop nest of its own
but a `matmul` statement (a call of the blocked-matmul helper, which packs its operands in
the `pack` workspace), writing the temporary buffer t0 that the loop then reads.
"""

from __future__ import annotations

from collections import Counter

import reverie as rv
from reverie.compiler.pipeline import compile_function


def loop_nests(path: str = "docs/tutorial/kernels/linear.rv", fn: str = "mse") -> Counter:
    """The kinds of top-level statements of `fn`'s loop program, counted."""
    program = compile_function(rv.load(path)[fn].ir_for("f64"), "to_loops")
    return Counter(type(statement).__name__ for statement in program.body)

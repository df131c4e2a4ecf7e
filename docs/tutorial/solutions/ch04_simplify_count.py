"""Chapter 4, exercise 2: how much `simplify` removes from an adjoint.

Count the op lines (`%name = ...`) of stage "grad-raw" and of stage "grad"; for `mse` of
docs/tutorial/kernels/linear.rv simplification folds the reshaped, broadcast seed and the
multiplications by one, and removes what became dead.
"""

from __future__ import annotations

import re

import reverie as rv

OP_LINE = re.compile(r"^\s+%[\w.]+(?:, %[\w.]+)* = ", re.MULTILINE)


def op_lines(text: str) -> int:
    """The number of ops in printed tensor IR."""
    return len(OP_LINE.findall(text))


def removed_by_simplify(module: rv.Module, fn: str) -> tuple[int, int]:
    """The op counts of `fn`'s adjoint before and after simplification."""
    return op_lines(module.ir("grad-raw", fn=fn)), op_lines(module.ir("grad", fn=fn))

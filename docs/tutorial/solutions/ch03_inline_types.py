"""Chapter 3: the printer with types inline, and counting ops.

Exercise 1: the printer names every operand through `Namer.__getitem__`
(`compiler/ir/tensor_printer.py`). Replacing that one method for the duration of a `with` block
makes every use print its type, without editing the compiler:

    %0 = mul %x: f32[N], %w: f32[N] : f32[N]

Exercise 2: `Block.walk` yields every op, regions included. Every op of the tensor IR has
a result, so the count equals the number of `%name = ...` lines of the printed function:
11 for `mse` (`%prediction` is the one with a name).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from reverie.compiler.ir import tensor_printer as printer
from reverie.compiler.ir.core import Function, Value


@contextlib.contextmanager
def types_inline() -> Iterator[None]:
    """While active, `format_function` prints each operand as `%name: type`."""
    original = printer.Namer.__getitem__

    def with_type(namer: printer.Namer, value: Value) -> str:
        return f"{original(namer, value)}: {value.type}"

    printer.Namer.__getitem__ = with_type
    try:
        yield
    finally:
        printer.Namer.__getitem__ = original


def count_ops(fn: Function) -> int:
    """The number of ops in `fn`, those inside regions included."""
    return sum(1 for _ in fn.body.walk())

"""The call boundary of a loop program: what a native caller must check before running it.

`lower_blocks.lower_function` attaches one to each `Program` it makes (None when the call needs the
Python path); the code generator turns it into the kernel's native Python entry
(`call_boundary/fastcall_entry.py`), which checks exactly what `runtime/native/call.py` would accept
without conversion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dims import Dim

if TYPE_CHECKING:
    from reverie.compiler.loops.ir import Program

MAX_ARRAYS = 32  # more parameters and results than this: no native entry (code size)


@dataclass(frozen=True)
class CallBoundary:
    """What the call boundary of one specialisation checks: each parameter's dtype and
    shape, the dimensions bound by the value of an integer parameter, and the sizes that
    must not be negative. Every name in a shape is bound by an axis of its own (`N`) or
    a value; axes written as expressions (`N + 1`) are checked once all are bound."""

    dtypes: tuple[str, ...]
    shapes: tuple[tuple[Dim, ...], ...]
    value_dims: tuple[tuple[str, int], ...]
    constraints: tuple[Dim, ...]

    @staticmethod
    def of(fn: Function, program: Program) -> CallBoundary | None:
        """The boundary of `fn`, or None when its call needs the Python path (a size that
        only an expression such as `2 * K` determines, or too many arrays)."""
        shapes = tuple(p.type.shape for p in fn.params)
        bound = {str(d) for s in shapes for d in s if not d.is_const and str(d) in d.symbols()}
        bound.update(symbol for symbol, _ in fn.value_dims)
        needed = set(program.symbols).union(*(d.symbols() for s in shapes for d in s))
        if not bound >= needed or len(fn.params) + len(program.outputs) > MAX_ARRAYS:
            return None
        return CallBoundary(tuple(p.type.dtype for p in fn.params), shapes,
                            tuple(fn.value_dims), tuple(d for d, _ in fn.constraints))

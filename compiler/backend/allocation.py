"""What one call of a kernel allocates, the largest size it may have, and the errors that say
why a call's sizes cannot be allocated (no llvmlite: the run time imports it).

A call of a loop program allocates each output and one workspace holding every temporary
and loop history (`workspace_offsets`). Their sizes in bytes are dimension expressions of
the call's sizes (`allocations`), and those come from the arguments: an `i64` argument can
be anything up to 2⁶³ - 1, so `n * n * 8` may overflow int64 and a loop's history of
`steps` rows may need more memory than exists. Every entry checks these sizes before it
allocates anything:

- the Python path (`runtime/native/native_kernel.py`) computes them in Python integers and allocates
  within `allocating`: `ValueError` when one exceeds what int64 holds, `MemoryError` when
  one is above MAX_ALLOCATION_BYTES or the allocation fails, naming the kernel, what it
  could not allocate and the arguments that sized it;
- the generated entries compute them in int64 with every product and sum checked
  (`irutil.index_value(..., overflow=...)`): the native call entry's `bind`
  (`fastcall_bind.py`) hands such a call to the Python path, which explains it, and the
  XLA FFI handler (`xla_ffi.py`) returns the same explanation as an XLA error.

MAX_ALLOCATION_BYTES is far above any machine's memory (x86-64 addresses 2⁵⁷ bytes at
most), and far enough below 2⁶³ that what the entries add to a size (a block header, one
byte for malloc(0)) or multiply it by (the spare-workspace slack) cannot overflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from reverie.compiler.call_boundary.abi import ITEMSIZE
from reverie.compiler.ir.capacity import is_trip_symbol
from reverie.compiler.ir.dims import Dim, shape_str
from reverie.compiler.loops.ir import Program, workspace_offsets

MAX_ALLOCATION_BYTES = 1 << 60
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class Allocation:
    """One block a call allocates: what it is, in words, and its size in bytes."""

    what: str
    nbytes: Dim


def allocations(program: Program) -> list[Allocation]:
    """The outputs of `program`, in order, then its workspace."""
    outputs = [Allocation(f"result {k} ({buffer.dtype}{shape_str(buffer.shape)})",
                          buffer.size * ITEMSIZE[buffer.dtype])
               for k, buffer in enumerate(program.outputs)]
    workspace = Allocation("the call's workspace (temporaries and loop histories)",
                           workspace_offsets(program.temps, ITEMSIZE)[-1])
    return [*outputs, workspace]


def source_of(program: Program, symbol: str) -> str:
    """Where a call's size `symbol` comes from: an argument's value or axis, or a loop."""
    if is_trip_symbol(symbol):
        return "a loop's trip count"
    for buffer in program.inputs:
        if not buffer.shape and buffer.name == symbol:
            return f"argument '{symbol}'"
    for buffer in program.inputs:
        for axis, dim in enumerate(buffer.shape):
            if dim.symbol == symbol:
                return f"argument '{buffer.name}' axis {axis}"
    return "a size of the call"


def sizes_text(program: Program, dim: Dim, value_of: Callable[[str], str]) -> str:
    """The sizes `dim` depends on, each with its value (`value_of`) and source:
    `n = 5 from argument 'n', N = 8 from argument 'x' axis 0`."""
    symbols = [s for s in program.symbols if s in dim.symbols()]
    return ", ".join(f"{s} = {value_of(s)} from {source_of(program, s)}" for s in symbols)


def overflow_message(program: Program, allocation: Allocation,
                     value_of: Callable[[str], str]) -> str:
    """Why a call whose `allocation` overflows int64 is refused."""
    return (f"{program.name}(): {allocation.what} would need more bytes than a 64-bit size "
            f"holds ({sizes_text(program, allocation.nbytes, value_of)})")


def memory_message(program: Program, allocation: Allocation, nbytes: str,
                   value_of: Callable[[str], str]) -> str:
    """Why a call could not allocate `allocation` (`nbytes` bytes)."""
    return (f"{program.name}(): cannot allocate {allocation.what}: {nbytes} bytes "
            f"({sizes_text(program, allocation.nbytes, value_of)})")


@contextmanager
def allocating(program: Program, dims: Mapping[str, int], shapes: Sequence[tuple[int, ...]],
               workspace: int) -> Iterator[None]:
    """Around the allocation of a call's outputs (`shapes`, from `program`'s layout for the
    sizes `dims`) and workspace (`workspace` bytes): ValueError before it when one needs
    more bytes than int64 holds, MemoryError when one needs more than MAX_ALLOCATION_BYTES
    or the allocation fails; both name the largest allocation and the sizes that made it."""
    needed = [math.prod(shape) * ITEMSIZE[buffer.dtype]
              for shape, buffer in zip(shapes, program.outputs, strict=True)] + [workspace]
    largest = max(range(len(needed)), key=needed.__getitem__)
    if needed[largest] > MAX_ALLOCATION_BYTES:
        raise _error(program, dims, largest, needed[largest])
    try:
        yield
    except MemoryError:
        raise _error(program, dims, largest, needed[largest]) from None


def _error(program: Program, dims: Mapping[str, int], index: int, nbytes: int) -> Exception:
    """The error for allocation `index` of `program` needing `nbytes` bytes."""
    allocation = allocations(program)[index]
    value_of = {symbol: str(size) for symbol, size in dims.items()}.__getitem__
    if nbytes > INT64_MAX:
        return ValueError(overflow_message(program, allocation, value_of))
    return MemoryError(memory_message(program, allocation, str(nbytes), value_of))

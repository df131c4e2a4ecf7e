"""What the generic native call entry (`fastcall.py`) knows of one kernel: its descriptor.

The entry is compiled once per process and serves every kernel; what differs between
kernels is plain data, kept here without llvmlite or the loop IR (a warm start,
`runtime/native/fastcall.py`, builds a descriptor from its launch record):

- a `CallSignature`: each parameter's dtype and rank (rank 0: a scalar parameter, which
  takes a 0-d array or a Python number), each output's dtype and rank (rank 0: returned
  boxed as a NumPy scalar), how many dimension sizes the kernel reads, and whether the
  kernel is *heavy* (it loops or multiplies matrices: the GIL is always released);
- the descriptor itself, an int64 array in the entry's `self` tuple (`abi.DESCRIPTOR`):

      word 0   P          number of parameters
      word 1   R          number of outputs
      word 2   S          dimension sizes the kernel reads (three error slots follow them)
      word 3   L          words `bind` writes to `layout`: 1 + the outputs' ranks summed
      word 4   flags      HEAVY | TUPLE_RESULT (one output returned as a 1-tuple)
      word 5   kernel     address of  int32_t kernel(void **buffers, int64_t *dims)
      word 6   bind       address of  int32_t bind(const int64_t **shapes, void **buffers,
                                                   int64_t *dims, int64_t *layout)
      word 7 + 2k, 8 + 2k              parameter k: dtype code, rank
      word 7 + 2P + 2k, 8 + 2P + 2k    output k: dtype code, rank

  A dtype code is the dtype's index in ENTRY_DTYPES.

    signature = signature_of(program)                    # when the loop IR is at hand
    words = descriptor(signature, kernel, bind, tuple_result=False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from reverie.compiler.loops.ir import Program

ENTRY_DTYPES = ("f32", "f64", "i32", "i64", "bool", "bf16", "f16")  # a code: its index
BIND_SUFFIX = "_bind"  # a kernel's bind function is `<kernel entry symbol>_bind`
PARAMETERS, OUTPUTS, SYMBOLS, LAYOUT, FLAGS, KERNEL, BIND, FIRST_ARRAY = range(8)
HEAVY, TUPLE_RESULT = 1, 2  # bits of the flags word
# bounds a signature read back from the disk cache must keep (the entry sizes its stack
# arrays from them; compiled signatures stay far below: `to_loops/boundary.py`'s MAX_ARRAYS)
MAX_ARRAYS, MAX_RANK, MAX_SYMBOLS = 256, 64, 1 << 12


class CallSignature(NamedTuple):
    """A kernel's call as the generic entry sees it (see the module docstring)."""

    params: tuple[tuple[str, int], ...]   # (dtype, rank) per parameter
    outputs: tuple[tuple[str, int], ...]  # (dtype, rank) per output
    symbols: int                          # dimension sizes the kernel reads
    heavy: bool                           # always call the kernel without the GIL

    def well_formed(self) -> bool:
        """Whether every field has the type and range the entry relies on (a signature
        read back from the disk cache is checked before an entry trusts it)."""
        arrays = (self.params, self.outputs)
        return (all(isinstance(group, tuple) for group in arrays)
                and 0 < len(self.params) + len(self.outputs) <= MAX_ARRAYS
                and all(isinstance(item, tuple) and len(item) == 2 and item[0] in ENTRY_DTYPES
                        and type(item[1]) is int and 0 <= item[1] <= MAX_RANK
                        for group in arrays for item in group)
                and type(self.symbols) is int and 0 <= self.symbols <= MAX_SYMBOLS
                and isinstance(self.heavy, bool))


def signature_of(program: Program) -> CallSignature:
    """The signature of `program`, which must have a call boundary."""
    from reverie.compiler.loops.ir import ForLoop, Matmul

    boundary = program.boundary
    assert boundary is not None, "a program without a call boundary has no native entry"
    return CallSignature(
        params=tuple((dtype, len(shape)) for dtype, shape
                     in zip(boundary.dtypes, boundary.shapes, strict=True)),
        outputs=tuple((buffer.dtype, len(buffer.shape)) for buffer in program.outputs),
        symbols=len(program.symbols),
        heavy=any(isinstance(s, ForLoop | Matmul) for s in program.walk()))


def descriptor(signature: CallSignature, kernel: int, bind: int,
               tuple_result: bool) -> list[int]:
    """The descriptor words (module docstring) of a kernel at `kernel` with its `bind`."""
    flags = (HEAVY if signature.heavy else 0) | (TUPLE_RESULT if tuple_result else 0)
    layout = 1 + sum(rank for _, rank in signature.outputs)
    words = [len(signature.params), len(signature.outputs), signature.symbols, layout, flags,
             kernel, bind]
    for dtype, rank in (*signature.params, *signature.outputs):
        words += [ENTRY_DTYPES.index(dtype), rank]
    return words

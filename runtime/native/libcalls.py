"""The compiler-rt routine LLVM's code calls for a bf16 conversion on a host without
AVX512_BF16, defined here: this process has no compiler-rt.

Native kernels never need it (`compiler/backend/storage_conversions.py` writes every
conversion out). Code from the MLIR tools does: it holds bf16 values as LLVM `bfloat`, which
x86 without AVX512_BF16 keeps as an f32 in registers, so a `bfloat` loaded in one block and
stored in another is narrowed back by a call to `__truncsfbf2` (exact there: the value is
a bf16's). `_link` in `jit.py` gives the symbol to each JIT library whose object code names
it; the definitions (LIBCALL_IR) are compiled once per process, on first need:

    called_libcalls(object_code)   # ["__truncsfbf2"] or []

`__truncsfbf2(float) -> bfloat` rounds to nearest even, a NaN to ±0x7FC0 (ml_dtypes'
bits), as the integer emulation of `storage_conversions.py`; the result is returned in the
low 16 bits of xmm0 (x86-64's psABI for bf16, which LLVM's caller follows).
"""

from __future__ import annotations

LIBCALLS = {"__truncsfbf2": "rv_truncsfbf2"}  # routine -> its definition in LIBCALL_IR
LIBCALL_IR = """
define bfloat @rv_truncsfbf2(float %x) {
  %bits = bitcast float %x to i32
  %high = lshr i32 %bits, 16
  %lowest_kept = and i32 %high, 1
  %half_less_one = add i32 %lowest_kept, 32767
  %sum = add i32 %bits, %half_less_one
  %rounded = lshr i32 %sum, 16
  %nan = fcmp uno float %x, %x
  %sign = and i32 %high, 32768
  %quiet = or i32 %sign, 32704
  %chosen = select i1 %nan, i32 %quiet, i32 %rounded
  %narrow = trunc i32 %chosen to i16
  %result = bitcast i16 %narrow to bfloat
  ret bfloat %result
}
"""


def called_libcalls(object_code: bytes) -> list[str]:
    """The routines of LIBCALLS that `object_code` names (calls)."""
    return [name for name in LIBCALLS if name.encode() in object_code]

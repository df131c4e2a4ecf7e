"""The native entry's workspace between calls: one spare block per entry, taken and given back.

Allocating a kernel's workspace (its temporaries and loop histories) on every call costs
more than the allocation: above glibc's mmap threshold (32 MB at most) every block is
fresh memory, so every call page-faults the whole workspace in again (benchmarks/README.md,
"Scans": workspace reuse). The entry (`fastcall.py`) therefore keeps each
kernel's last block in a cell, the int64 array in that kernel's `self` tuple's
SPARE_WORKSPACE slot (`runtime/native/fastcall.py` makes it and frees what is left in it when the
entry goes). The block layout and the policy are in `abi.py`:

    spare  = atomic_exchange(cell, 0)             # this call owns it now, or there is none
    block  = spare if workspace_fits(capacity(spare), needed) else malloc(HEADER + needed)
                                                  # (a spare that does not fit is freed)
    ... the kernel runs on block + HEADER ...
    if capacity(block) <= KEEP_WORKSPACE_BYTES:
        free(atomic_exchange(cell, block))        # the spare it displaces, if any
    else:
        free(block)

(`malloc` and `free` are CPython's `PyMem_RawMalloc` and `PyMem_RawFree`.)

The exchanges make it safe for calls from several threads at once (with or without the
GIL): a block belongs to one call at a time; a call that finds the cell empty allocates
its own, and of two blocks given back the later one stays.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from reverie.compiler.backend.irutil import I64, PTR, alloca, i64
from reverie.compiler.call_boundary.abi import (
    KEEP_WORKSPACE_BYTES,
    WORKSPACE_HEADER,
    WORKSPACE_SLACK,
)

CallC = Callable[..., ir.Value]  # calls a CPython function by name (`fastcall._Builder._c`)


def _capacity(b: ir.IRBuilder, block: ir.Value) -> ir.Value:
    return b.load(b.inttoptr(block, PTR), typ=I64)


def take_workspace(b: ir.IRBuilder, call_c: CallC, cell: ir.Value,
                   needed: ir.Value) -> ir.Value:
    """The block (an i64 address; 0 if the allocation failed) of a call needing `needed`
    bytes of workspace: the spare in `cell` when it fits, else a new one."""
    spare = b.atomic_rmw("xchg", cell, i64(0), "acq_rel")
    block = alloca(b, I64, "workspace_block")
    b.store(spare, block)
    present = b.icmp_unsigned("!=", spare, i64(0))
    with b.if_then(present):
        capacity = _capacity(b, spare)
        fits = b.and_(b.icmp_unsigned("<=", needed, capacity),
                      b.icmp_unsigned("<=", capacity, b.mul(needed, i64(WORKSPACE_SLACK))))
        with b.if_then(b.not_(fits)):
            call_c("PyMem_RawFree", b.inttoptr(spare, PTR))
            b.store(i64(0), block)
    with b.if_then(b.icmp_unsigned("==", b.load(block, typ=I64), i64(0))):
        fresh = call_c("PyMem_RawMalloc", b.add(needed, i64(WORKSPACE_HEADER)))
        with b.if_then(b.icmp_unsigned("!=", fresh, ir.Constant(PTR, None))):
            b.store(needed, fresh)
        b.store(b.ptrtoint(fresh, I64), block)
    return b.load(block, typ=I64)


def workspace_of(b: ir.IRBuilder, block: ir.Value) -> ir.Value:
    """The workspace pointer inside `block`."""
    return b.gep(b.inttoptr(block, PTR), [i64(WORKSPACE_HEADER)], source_etype=ir.IntType(8))


def give_back_workspace(b: ir.IRBuilder, call_c: CallC, cell: ir.Value,
                        block: ir.Value) -> None:
    """After the call: keep `block` as the spare (freeing the one it displaces), or free it
    when it is larger than KEEP_WORKSPACE_BYTES."""
    keep = b.icmp_unsigned("<=", _capacity(b, block), i64(KEEP_WORKSPACE_BYTES))
    with b.if_else(keep) as (kept, dropped):
        with kept:
            displaced = b.atomic_rmw("xchg", cell, block, "acq_rel")
            with b.if_then(b.icmp_unsigned("!=", displaced, i64(0))):
                call_c("PyMem_RawFree", b.inttoptr(displaced, PTR))
        with dropped:
            call_c("PyMem_RawFree", b.inttoptr(block, PTR))

"""The native call entry's workspace: one spare block per kernel, kept from call to call.

Every temporary of a kernel lives in one workspace per call (`loops/ir.workspace_offsets`).
Allocated fresh each call, a large one (glibc maps anything over 32 MB freshly from the
system) makes the kernel fault in and zero every page again: 91 k page faults, a third of
the call, for W8's 370 MB gradient workspace. So the entry (`fastcall.py`) keeps the last
workspace in an internal global of its module, as the Python path keeps a spare
(`runtime/native.py`), both up to KEEP_WORKSPACE_BYTES:

    block = atomic xchg(spare, null)        # take the spare (another call may hold it)
    if block == null or size(block) < need:
        free(block); block = malloc(HEADER + need); size(block) = need   # null: fall back
    workspace = block + HEADER
    ... the kernel ...
    if need <= KEEP_WORKSPACE_BYTES: free(atomic xchg(spare, block)) else: free(block)

The header (HEADER bytes, holding the block's size) keeps the workspace's alignment that
of malloc. Two threads calling one kernel at once each get a block of their own; the one
given back last is kept. The spare lives as long as the module's code, which stays loaded
for the life of the process.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from .abi import KEEP_WORKSPACE_BYTES
from .irutil import I64, PTR, alloca, i64

HEADER = 64  # bytes before the workspace in a block: its size (an i64), then padding
NULL = ir.Constant(PTR, None)
CallC = Callable[..., ir.Value]  # the entry's call of a CPython function by name


def _spare_slot(module: ir.Module) -> ir.GlobalVariable:
    """The module's internal global holding the spare block (null: none)."""
    slot = module.globals.get("rv_spare_workspace")
    if slot is None:
        slot = ir.GlobalVariable(module, PTR, name="rv_spare_workspace")
        slot.linkage = "internal"
        slot.initializer = NULL
    return slot


def take_workspace(b: ir.IRBuilder, module: ir.Module, need: ir.Value,
                   call: CallC) -> tuple[ir.Value, ir.Value]:
    """(block, workspace) for a workspace of `need` bytes: the spare when it is large
    enough, else a fresh block (null when malloc failed: the caller falls back)."""
    block, have = alloca(b, PTR, "block"), alloca(b, I64, "have")
    spare = b.atomic_rmw("xchg", _spare_slot(module), NULL, "acquire")
    b.store(spare, block)
    b.store(i64(0), have)
    with b.if_then(b.icmp_unsigned("!=", spare, NULL)):  # its size, in its header
        b.store(b.load(spare, typ=I64), have)
    with b.if_then(b.icmp_signed("<", b.load(have, typ=I64), need)):
        call("PyMem_RawFree", spare)  # no-op on null
        fresh = call("PyMem_RawMalloc", b.add(need, i64(HEADER)))
        b.store(fresh, block)
        with b.if_then(b.icmp_unsigned("!=", fresh, NULL)):
            b.store(need, fresh)
    taken = b.load(block, typ=PTR)
    workspace = b.gep(taken, [i64(HEADER)], source_etype=ir.IntType(8))
    return taken, b.select(b.icmp_unsigned("==", taken, NULL), NULL, workspace)


def give_back_workspace(b: ir.IRBuilder, module: ir.Module, block: ir.Value, need: ir.Value,
                        call: CallC) -> None:
    """Keep `block` as the spare (freeing the one it replaces) or, past the limit, free it."""
    with b.if_else(b.icmp_signed("<=", need, i64(KEEP_WORKSPACE_BYTES))) as (keep, drop):
        with keep:
            call("PyMem_RawFree", b.atomic_rmw("xchg", _spare_slot(module), block, "acq_rel"))
        with drop:
            call("PyMem_RawFree", block)

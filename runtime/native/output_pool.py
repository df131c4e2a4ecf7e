"""A reuse pool for the native kernels' largest outputs.

glibc's malloc serves every block of at least `abi.POOLED_OUTPUT_BYTES` (32 MiB, its largest
dynamic mmap threshold on 64-bit) with a fresh mmap and unmaps it on free, so an output that
large made by `numpy.empty` on every call page-faults, and the OS zeroes, all of its memory
again each call (benchmarks/README.md, "W1, third round: the output pool"). Both call paths
of native kernels allocate outputs through `empty` below (`native_kernel.py`; the native
entry through its POOLED_EMPTY slot, `call_boundary/fastcall_entry.py`): an output that
large is a view of a block the pool keeps, a smaller one comes from `numpy.empty`.

A block is free again when nothing but the pool refers to it. The output, every view of it
(NumPy points a view's `base` at the array owning the data: here the block) and every
buffer export (a memoryview, `torch.from_numpy`, ...) keep the block alive, so CPython's
reference count says whether anyone still holds it (compared with the count of a block only
the pool holds, measured once on this interpreter). Finding a free block and claiming it
(the reference the caller gets) is one step under a lock, so threads calling at once get
distinct blocks; a free block serves a request at most an eighth smaller than itself.

Retention is bounded: the pool keeps at most MAX_BLOCKS blocks of MAX_BYTES in all, free or
held by the user. Four blocks are enough for a kernel with two large outputs called in a
loop that keeps the last call's results while the next one runs; 512 MiB, half of what the
workspace cache may keep (`abi.KEEP_WORKSPACE_BYTES`), is the most memory the pool holds
that no array uses. A request that does not fit drops the least recently used free blocks;
if the blocks in use leave no room, the output is a plain `numpy.empty` array.

What a NumPy user sees differently for an output this large: `out.base` is the pool's block
(a uint8 array at least `out.nbytes` long) and `out.flags.owndata` is False, so
`out.resize(...)` raises ValueError as for any view (`numpy.resize(out, ...)` works).
`REVERIE_OUTPUT_POOL=0` (read at import) turns the pool off; `clear()` releases the free
blocks.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable

import numpy as np

from reverie.compiler.call_boundary.abi import POOLED_OUTPUT_BYTES
from reverie.runtime.native.locks import runtime_lock

MAX_BLOCKS = 4
MAX_BYTES = 512 << 20
SLACK = 8  # a block serves requests of at least capacity - capacity / SLACK bytes
ENABLED = os.environ.get("REVERIE_OUTPUT_POOL", "1").strip() != "0"


def _references(blocks: list[np.ndarray], k: int) -> int:
    """The reference count of `blocks[k]` seen from here (the list's, the call's)."""
    return sys.getrefcount(blocks[k])


# the count `_references` reads for a block that only the pool's list holds
FREE_REFERENCES = _references([np.empty(0, np.uint8)], 0)
_LOCK = runtime_lock()  # the pools' (one lock; new in a fork's child: `runtime/native/locks.py`)


class OutputPool:
    """Blocks for outputs of at least `POOLED_OUTPUT_BYTES`, reused once nothing else holds
    them; at most `max_blocks` blocks and `max_bytes` bytes in all."""

    def __init__(self, max_blocks: int = MAX_BLOCKS, max_bytes: int = MAX_BYTES) -> None:
        self.max_blocks, self.max_bytes = max_blocks, max_bytes
        self._blocks: list[np.ndarray] = []  # least recently taken first

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """`numpy.empty(shape, dtype)`, from a pool block when it is that large."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if not POOLED_OUTPUT_BYTES <= nbytes <= self.max_bytes:
            return np.empty(shape, dtype)
        block = self._take(nbytes)
        if block is None:
            return np.empty(shape, dtype)
        return np.ndarray(shape, dtype, buffer=block)

    def _take(self, nbytes: int) -> np.ndarray | None:
        """A free block serving `nbytes` bytes (now the most recently taken), else a new
        one kept when there is room; None when the blocks in use leave none."""
        with _LOCK:
            blocks = self._blocks
            for k in range(len(blocks)):
                capacity = blocks[k].nbytes
                if (capacity - capacity // SLACK <= nbytes <= capacity
                        and _references(blocks, k) == FREE_REFERENCES):
                    block = blocks.pop(k)
                    blocks.append(block)
                    return block
            self._drop_free(until=lambda: self._room_for(nbytes))
            if not self._room_for(nbytes):
                return None
            blocks.append(np.empty(nbytes, np.uint8))
            return blocks[-1]

    def _room_for(self, nbytes: int) -> bool:
        return len(self._blocks) < self.max_blocks and \
            self.held_bytes() + nbytes <= self.max_bytes

    def _drop_free(self, until: Callable[[], bool]) -> int:
        """Drop free blocks, least recently taken first, until `until()` holds (the lock
        held); the bytes released."""
        released, k = 0, 0
        while k < len(self._blocks) and not until():
            if _references(self._blocks, k) == FREE_REFERENCES:
                released += self._blocks.pop(k).nbytes
            else:
                k += 1
        return released

    def holds(self, block: object) -> bool:
        """Whether `block` (an output's `base`) is one of the pool's blocks."""
        return any(block is kept for kept in self._blocks)

    def held_bytes(self) -> int:
        """Bytes of every block the pool keeps, free or in use."""
        return sum(block.nbytes for block in self._blocks)

    def free_bytes(self) -> int:
        """Bytes of the blocks that nothing but the pool holds (memory no array uses)."""
        with _LOCK:
            return sum(self._blocks[k].nbytes for k in range(len(self._blocks))
                       if _references(self._blocks, k) == FREE_REFERENCES)

    def clear(self) -> int:
        """Release every free block; the bytes released."""
        with _LOCK:
            return self._drop_free(until=lambda: False)


POOL = OutputPool()
empty = POOL.empty if ENABLED else np.empty
clear = POOL.clear

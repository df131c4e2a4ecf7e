"""Whether bf16 matrix products run on AMX tiles: one setting, read once per process, that
the product kernel's generator (`runtime_library/gemm_amx.py`), the loop pass choosing bf16
products (`bf16_products.py`) and the host description every cache key holds
(`runtime/native/remembered.py`) all follow.

    REVERIE_AMX=auto      (the default) tiles where the host has AMX-TILE and AMX-BF16 and
                          AVX512_BF16 at 512-bit vectors, and Linux grants this process the
                          tiles' register state; else `vdpbf16ps` or the f32 path
    REVERIE_AMX=off       never tiles
    REVERIE_AMX=emulate   the tile kernel on any host, its tile instructions lowered by LLVM
                          to loops over the tiles' elements: how the tests check the kernel's
                          packing, blocking and edges on hosts without AMX (slow: for tests)

Linux hands a process the tile registers' state (8 KB of XSAVE area per thread) only when
asked: `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, once per process, for all its
threads; a tile instruction before that is an illegal instruction. `tile_refusal` asks
(a syscall through libc, no LLVM), and the warm start's host description asks too, so a
process that loads the kernel from the disk cache has asked before it runs it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Mapping

from reverie.compiler.backend.storage_hardware import BF16_FEATURE
from reverie.compiler.backend.vector_width import AVX512, environment_choice, vector_bits

TILES_VARIABLE = "REVERIE_AMX"
TILES_CHOICES = ("auto", "off", "emulate")
TILE_FEATURES = ("amx-tile", "amx-bf16")  # LLVM's names of the host features
SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18  # x86-64 Linux


@functools.cache
def requested_tiles() -> str:
    """REVERIE_AMX, else "auto" (a ValueError for any other value)."""
    return environment_choice(TILES_VARIABLE, TILES_CHOICES)


@functools.cache
def tile_refusal() -> str | None:
    """None where Linux lets this process use the tile registers (asking once per process),
    else why not: the error of the request (EOPNOTSUPP or EINVAL without AMX in the CPU or
    the kernel; ENOSPC where a thread's signal stack is too small for the tiles' state)."""
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        return "not x86-64 Linux"  # (the syscall's number means another call elsewhere)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0:
            return None
        return os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as error:  # no libc `syscall`
        return str(error)


def tile_setting() -> str:
    """What the warm start's host description keys on: the request, and under "auto"
    whether this process was granted the tiles (asking now)."""
    requested = requested_tiles()
    return f"{requested} {tile_refusal()}" if requested == "auto" else requested


def matrix_tiles(host_features: Mapping[str, bool]) -> str:
    """How bf16 products use tiles on a host with `host_features`: "hardware", "emulate"
    or "off"."""
    requested = requested_tiles()
    if requested != "auto":
        return requested
    capable = (all(host_features.get(name) for name in TILE_FEATURES)
               and bool(host_features.get(BF16_FEATURE)) and bool(host_features.get(AVX512))
               and vector_bits(host_features) >= 512)
    return "hardware" if capable and tile_refusal() is None else "off"

"""Which conversions of the storage types bf16 and f16 use the host's instructions: one
setting, read once per process, that the code generator (`storage_conversions.py`) and the
host description every cache key holds (`runtime/native/remembered.py`) both follow.

    bf16   f32 → bf16 rounding by `vcvtneps2bf16` where the target has AVX512_BF16 (LLVM's
           `fptrunc float to bfloat` selects it), else exact integer emulation; never an
           `fptrunc` without the feature (LLVM would call `__truncsfbf2`, absent here)
    f16    LLVM's `half` conversions where the target has F16C (`vcvtps2ph`, `vcvtph2ps`),
           else exact integer emulation (LLVM would call `__truncsfhf2`/`__extendhfsf2`)

    REVERIE_STORAGE_CONVERSION=emulate   the emulation even where the host has the
                                         instructions (the tests compare both paths: the
                                         results are bit-identical)

AVX512_BF16 counts only at 512-bit vectors (`vector_width.py`): at 256 bits the target
machine gets no AVX-512 feature, that one included. Plain Python (no LLVM): the warm start's
host description reads it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from reverie.compiler.backend.vector_width import AVX512, environment_choice, vector_bits

STORAGE_CONVERSION_VARIABLE = "REVERIE_STORAGE_CONVERSION"
STORAGE_CONVERSION_CHOICES = ("hardware", "emulate")
BF16_FEATURE, F16_FEATURE = "avx512bf16", "f16c"  # LLVM's names of the host features


@functools.cache
def requested_conversion() -> str:
    """REVERIE_STORAGE_CONVERSION, else "hardware" (a ValueError for any other value)."""
    return environment_choice(STORAGE_CONVERSION_VARIABLE, STORAGE_CONVERSION_CHOICES)


def bf16_hardware(host_features: Mapping[str, bool]) -> bool:
    """Whether f32 → bf16 rounding uses `vcvtneps2bf16` on a host with `host_features`."""
    return (requested_conversion() == "hardware" and bool(host_features.get(BF16_FEATURE))
            and bool(host_features.get(AVX512)) and vector_bits(host_features) >= 512)


def f16_hardware(host_features: Mapping[str, bool]) -> bool:
    """Whether f16 conversions use LLVM's `half` (F16C) on a host with `host_features`."""
    return requested_conversion() == "hardware" and bool(host_features.get(F16_FEATURE))

"""The width of the vectors kernels are generated for: one setting, read once per process,
that both the code generators (`irutil.vector_lanes`, the vectoriser's width hints and the
vector versions of sin and cos) and the target machine (`runtime/native/jit.py`) follow.

    REVERIE_VECTOR_BITS=512   AVX-512 where the host has it (the default), 512-bit
                              vectors even where LLVM's tuning for the CPU prefers 256-bit
                              ones (Intel's AVX-512 CPUs: the `prefer-256-bit` tuning
                              feature is turned off), so every loop gets the width
                              `vector_lanes` gives the hinted ones
    REVERIE_VECTOR_BITS=256   AVX2: the target machine gets the host's features less
                              AVX-512, so the code is the code of an AVX2-only CPU

Tails stay scalar loops: LLVM can fold a vectorised loop's tail into masked iterations
(AVX-512's `k` registers, `-prefer-predicate-over-epilogue`), but measured on the
workloads that made the heat stencil (W7) slower and gained nowhere (the figures are in
the commit that added this module).

A width wider than the host's widest is the host's widest (AVX: 256, else 128). The
setting is part of the host description that every cache key holds
(`runtime/native/remembered.py`), so code of one width is never loaded for the other.
Plain Python (no LLVM): the target machine's module imports it at start-up.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

VECTOR_BITS_VARIABLE = "REVERIE_VECTOR_BITS"
VECTOR_BITS_CHOICES = ("512", "256")  # the default first
# AVX-512's foundation: turning it off turns off every AVX-512 extension that needs it
AVX512 = "avx512f"
PREFER_256 = "prefer-256-bit"  # LLVM's X86 tuning feature: vectorise at 256 bits


def environment_choice(variable: str, choices: tuple[str, ...]) -> str:
    """The environment's setting `variable`, one of `choices`: the first where it is unset
    or empty, a ValueError naming the variable for any other value (the code generation
    settings: this module's, `storage_hardware.py`'s, `matrix_tiles.py`'s)."""
    requested = os.environ.get(variable, "").strip() or choices[0]
    if requested not in choices:
        raise ValueError(f"{variable} must be one of {', '.join(choices)}, got {requested!r}")
    return requested


@functools.cache
def requested_bits() -> int:
    """REVERIE_VECTOR_BITS, else 512 (a ValueError for any other value)."""
    return int(environment_choice(VECTOR_BITS_VARIABLE, VECTOR_BITS_CHOICES))


def vector_bits(host_features: Mapping[str, bool]) -> int:
    """The vector width for a host with `host_features` (LLVM's feature map): the
    requested one, capped by the host's widest."""
    widest = 512 if host_features.get(AVX512) else 256 if host_features.get("avx") else 128
    return min(widest, requested_bits())


def target_features(host_features: Mapping[str, bool], flattened: str) -> str:
    """The features the target machine gets (LLVM's "+a,-b" string, `flattened` the
    host's): on an AVX-512 host, the host's less AVX-512 when the vectors are narrower
    than 512 bits, else less the tuning that prefers 256-bit vectors."""
    if not host_features.get(AVX512):
        return flattened
    if vector_bits(host_features) < 512:
        return f"{flattened},-{AVX512}"
    return f"{flattened},-{PREFER_256}"

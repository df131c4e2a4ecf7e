"""The benchmark workloads W1–W10 (benchmarks/README.md, "The workloads").

`WORKLOADS` maps a key ("W1") to a `make(tiny=False)` returning the `Workload` at the
reference size, or at a tiny size for the correctness tests.
"""

from collections.abc import Callable

from . import (
    w1_elementwise,
    w2_softmax_xent,
    w3_mlp,
    w4_call_overhead,
    w5_rosenbrock_hvp,
    w6_jacobian,
    w7_heat,
    w8_gmm,
    w9_bf16_elementwise,
    w10_bf16_mlp,
)
from .core import PEERS, Variant, Workload, as_numpy, relative_error

WORKLOADS: dict[str, Callable[..., Workload]] = {
    "W1": w1_elementwise.make,
    "W2": w2_softmax_xent.make,
    "W3": w3_mlp.make,
    "W4": w4_call_overhead.make,
    "W5": w5_rosenbrock_hvp.make,
    "W6": w6_jacobian.make,
    "W7": w7_heat.make,
    "W8": w8_gmm.make,
    "W9": w9_bf16_elementwise.make,
    "W10": w10_bf16_mlp.make,
}

__all__ = ["PEERS", "WORKLOADS", "Variant", "Workload", "as_numpy", "relative_error"]

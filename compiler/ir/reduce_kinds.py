"""The four reductions (sum, prod, max, min): identities, combining op, accumulator dtype.

The one place for two rules that every level applies (the reference interpreter, the loop
lowering, the MLIR export):

- a reduction starts from its identity: 0, 1, the smallest value (max, argmax) or the
  largest (min, argmin) of the dtype, -inf and +inf for floats;
- f32 sums and products accumulate in f64 and are rounded to f32 once at the end; max and
  min, and every reduction of another dtype, accumulate in the element dtype.

    REDUCE_KINDS["sum"].accumulator_dtype("f32")   # 'f64'
    REDUCE_KINDS["max"].identity("i32")            # -2147483648
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reverie.compiler.ir.dtypes import compute_dtype
from reverie.compiler.ir.types import FLOAT_DTYPES, NUMPY_DTYPES

Number = float | int


@dataclass(frozen=True)
class ReduceKind:
    """One reduction: `op` is its tensor-IR op, `combine` the elementwise op that merges
    two partial results, `ufunc` that op in NumPy."""

    name: str
    op: str
    combine: str
    ufunc: np.ufunc

    @property
    def widens_f32(self) -> bool:
        """Whether f32 values accumulate in f64 (sums and products: rounding builds up)."""
        return self.name in ("sum", "prod")

    def accumulator_dtype(self, dtype: str) -> str:
        """The dtype a reduction of `dtype` values accumulates in (bf16/f16 as f32)."""
        dtype = compute_dtype(dtype)
        return "f64" if dtype == "f32" and self.widens_f32 else dtype

    def identity(self, dtype: str) -> Number:
        """The starting value of the accumulator, as a Python number of `dtype`'s kind."""
        if self.name in ("max", "min"):
            return extreme_identity(self.name, dtype)
        one = self.name == "prod"
        return float(one) if dtype in FLOAT_DTYPES else int(one)


def extreme_identity(kind: str, dtype: str) -> Number:
    """The start of a max/argmax (smallest value) or min/argmin (largest value) search."""
    largest = kind in ("min", "argmin")
    if dtype in FLOAT_DTYPES:
        return np.inf if largest else -np.inf
    info = np.iinfo(NUMPY_DTYPES[dtype])
    return int(info.max if largest else info.min)


REDUCE_KINDS: dict[str, ReduceKind] = {k.name: k for k in (
    ReduceKind("sum", "reduce_sum", "add", np.add),
    ReduceKind("prod", "reduce_prod", "mul", np.multiply),
    ReduceKind("max", "reduce_max", "maximum", np.maximum),
    ReduceKind("min", "reduce_min", "minimum", np.minimum),
)}
REDUCE_OPS: dict[str, ReduceKind] = {k.op: k for k in REDUCE_KINDS.values()}


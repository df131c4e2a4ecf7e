"""The scan op of the op table: a cumulative sum or product along one axis, in O(n).

    %y = scan %x {axis = 1, kind = sum, reverse = false} : f32[B, N]

Along `axis` (of length n; the other axes are carried along), `kind = sum` gives
y[i] = x[0] + ... + x[i] and `kind = prod` gives y[i] = x[0] · ... · x[i], NumPy's
`cumsum`/`cumprod`; `reverse = true` runs from the end, y[i] = x[i] + ... + x[n - 1] (the
transpose of a forward cumulative sum, which its VJP needs). f32 values accumulate in f64
and are rounded once per element, like the reductions (`reduce_kinds.py`); the result has
the operand's type. Each level runs it as one pass along the axis carrying the running
value: the rules are `transforms/scan_rules.py` (derivatives, batching),
`to_loops/scans.py` (loop nests) and `export/mlir_scan.py` (`scf.for` with `iter_args`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from reverie.compiler.ir.dtypes import dtype_name
from reverie.compiler.ir.op_defs import ROOT, expect_arity, register
from reverie.compiler.ir.reduce_kinds import REDUCE_KINDS
from reverie.compiler.ir.types import NUMPY_DTYPES, ShapeError, TensorType
from reverie.compiler.ir.views import OpView

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Op

ScanKind = Literal["sum", "prod"]


class ScanOp(OpView):
    """`%y = scan %x {axis = 1, kind = sum, reverse = false} : f32[B, N]`."""

    NAMES = ("scan",)

    @property
    def axis(self) -> int:
        return self.op.attrs["axis"]

    @property
    def kind(self) -> str:
        """`sum` or `prod`."""
        return self.op.attrs["kind"]

    @property
    def reverse(self) -> bool:
        """Whether the scan runs from the last element to the first."""
        return self.op.attrs["reverse"]


def _infer_scan(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("scan", ops, 1)
    (x,) = ops
    if not 0 <= attrs["axis"] < x.rank:
        raise ShapeError(f"axis {attrs['axis']} is out of range for a rank-{x.rank} operand")
    if x.dtype == "bool":
        raise ShapeError("'scan' needs a numeric operand, got bool")
    return [x]


def scan_array(kind: str, x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    """The cumulative `kind` of `x` along `axis` (from the end when `reverse`), in the
    accumulator dtype of `reduce_kinds.py`; the result has x's dtype."""
    reduction = REDUCE_KINDS[kind]
    work = x.astype(NUMPY_DTYPES[reduction.accumulator_dtype(dtype_name(x.dtype))], copy=False)
    if reverse:
        work = np.flip(work, axis)
    out = reduction.ufunc.accumulate(work, axis=axis)
    if reverse:
        out = np.flip(out, axis)
    return np.ascontiguousarray(out).astype(x.dtype, copy=False)


def _eval_scan(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    scan = ScanOp(op)
    return [scan_array(scan.kind, args[0], scan.axis, scan.reverse)]


register("scan", "scan", _infer_scan, _eval_scan,
         "Cumulative sum or product along an axis: "
         "`%y = scan %x {axis = 1, kind = sum, reverse = false} : f32[B, N]`.",
         attrs={"axis": int, "kind": ScanKind, "reverse": bool}, fusion=ROOT)

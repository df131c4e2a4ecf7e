"""The argsort op of the op table: the stable sorting permutation along one axis, O(n log n).

    %p = argsort %x {axis = 1, descending = false} : i64[B, N]

Along `axis` (of length n; the other axes are carried along), p[..., r, ...] is the index
of the element that lands at position r once the line is sorted: the order of
`torch.sort(stable=True)` (and `torch.argsort(stable=True)`):

- by value, ascending (largest first when `descending`);
- every NaN after every number (before, when descending), all NaNs tied;
- -0.0 and +0.0 tied;
- tied elements in their original order, in both directions.

`sort(x)` is the gather x[p] and `topk(x, k)` the gather of the first k of the descending
permutation (`lower/scans_sorts.py`), so gradients flow through the gather (a scatter of the
cotangent back through the permutation); the permutation itself is an integer and carries
none. Each level runs it in O(n log n) per line: NumPy's stable sort here (the tensor
interpreter) and in the loop interpreter, a merge sort at run time in native code (the
loop IR's `Sort`, `runtime_library/sort.py`). Only the MLIR export counts ranks, in O(n²)
(`export/mlir_sort.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from reverie.compiler.ir.op_defs import ROOT, expect_arity, no_derivative, register
from reverie.compiler.ir.types import ShapeError, TensorType
from reverie.compiler.ir.views import OpView

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Op


class ArgsortOp(OpView):
    """`%p = argsort %x {axis = 1, descending = false} : i64[B, N]`."""

    NAMES = ("argsort",)

    @property
    def axis(self) -> int:
        return self.op.attrs["axis"]

    @property
    def descending(self) -> bool:
        """Whether the largest value comes first (and NaN before every number)."""
        return self.op.attrs["descending"]


def _infer_argsort(ops: list[TensorType], attrs: dict, regions: list) -> list[TensorType]:
    expect_arity("argsort", ops, 1)
    (x,) = ops
    if not 0 <= attrs["axis"] < x.rank:
        raise ShapeError(f"axis {attrs['axis']} is out of range for a rank-{x.rank} operand")
    if x.dtype == "bool":
        raise ShapeError("'argsort' needs a numeric operand, got bool")
    return [TensorType("i64", x.shape)]


def stable_argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """The permutation of the module docstring along `axis` (i64, x's shape).

    NumPy's stable sort already ranks NaN last and ties -0.0 with +0.0. Descending is the
    ascending sort of the reversed line, reversed: the reversal puts ties in reverse
    order, the second one restores their original order, and NaN moves to the front."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable").astype(np.int64, copy=False)
    n = x.shape[axis]
    backwards = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return np.ascontiguousarray(n - 1 - np.flip(backwards, axis)).astype(np.int64, copy=False)


def _eval_argsort(ctx: Any, args: list[np.ndarray], op: Op) -> list[np.ndarray]:
    view = ArgsortOp(op)
    return [stable_argsort(args[0], view.axis, view.descending)]


register("argsort", "sort", _infer_argsort, _eval_argsort,
         "Stable sorting permutation along an axis (torch.sort's order, NaN last): "
         "`%p = argsort %x {axis = 1, descending = false} : i64[B, N]`.",
         attrs={"axis": int, "descending": bool}, fusion=ROOT,
         exempt=no_derivative("its result is an integer permutation"))

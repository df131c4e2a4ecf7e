"""The NumPy reference interpreter of the tensor IR: the oracle for every compiled result.

Consumes a `Function`, concrete dimension bindings and NumPy arguments; produces NumPy
results by walking the ops in order and calling each op's `evaluate` from the op table.
Results are cast to the dtype the IR says, so f32 programs stay f32. A function with
storage types (bf16, f16) runs as `ir/widen_storage.py` writes it out (f32
arithmetic, rounded where values are stored), as every back end runs it; an op that still
reads them (a cast, a region's parameters) reads them as f32, exactly. Trip dimensions
(`capacity.py`) start at 0 and grow until every run-time count fits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from reverie.compiler.ir.capacity import run_with_capacity, trip_symbols
from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.dtypes import NUMPY_DTYPES, computable
from reverie.compiler.ir.ops import OPS
from reverie.compiler.ir.widen_storage import widened


class Interpreter:
    """Evaluation context: the dimension bindings of one call and a block runner."""

    def __init__(self, dims: Mapping[str, int]) -> None:
        self.dims = dict(dims)

    def run_block(self, block: Block, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Evaluate `block` with its parameters bound to `args`."""
        env: dict[Value, np.ndarray] = dict(zip(block.params, args, strict=True))
        for op in block.ops:
            operands = [computable(env[v]) for v in op.operands]
            values = OPS[op.name].evaluate(self, operands, op)
            for result, value in zip(op.results, values, strict=True):
                env[result] = np.asarray(value).astype(NUMPY_DTYPES[result.type.dtype], copy=False)
        return [env[v] for v in block.results]


def interpret(
    fn: Function, args: Sequence[np.ndarray], dims: Mapping[str, int]
) -> list[np.ndarray]:
    """Run `fn` on `args` with symbolic dimensions bound by `dims` (dimensions bound by an
    i64 scalar argument are taken from that argument when `dims` lacks them)."""
    fn = widened(fn)
    sizes = {symbol: int(args[index]) for symbol, index in fn.value_dims}
    sizes.update(dims)
    trips = trip_symbols(fn.body)

    def run(bound: dict[str, int]) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return Interpreter(bound).run_block(fn.body, args)

    return run_with_capacity(run, sizes, trips)

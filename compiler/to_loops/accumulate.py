"""Scatter-add accumulators of `for` loops: a state `acc = acc + dynamic_scatter(v, i)` adds
one row in place instead of being carried whole.

The reverse sweep of a loop that reads a tensor at a loop-dependent index (`xs[t]` in the
body) accumulates that tensor's adjoint as a carried state, one row per iteration:

    %xs_bar_2 = dynamic_scatter %v, %i {shape = [T], axis = 0}     # v at row i, 0 elsewhere
    %28 = add %xs_bar_1, %xs_bar_2                                  # yielded as the new state

Carried like any state (`control.py`), every iteration would write the whole next state:
O(T) work per step, O(T²) for the loop. A state whose new value is exactly that `add` —
the body reads the state nowhere else, and the scatter and the sum have no other use —
is kept instead in one temporary outside the loop's states (the initial value copied in
before the loop), and each iteration adds the row in place:

    check 0 <= %i < T else error k      # the scatter's own bounds check, as before
    for %j in 0..H { acc[%i, %j] = acc[%i, %j] + v[%j] }

(v is first written to a temporary of its row's shape, like any block result). A sum of
several scatters (`xs[t] - xs[t - 1]` in the body) adds each row in turn. Where one
scatter hits a row per step, the sums are the carried state's (bitwise, up to the sign of
a zero that it would have added 0.0 to); two scatters hitting one row in the same step
are added one after the other rather than summed first (a last-bit difference).
Only `for` loops are rewritten: a `for_history` also records its states row by row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.views import ForOp
from reverie.compiler.loops.ir import Buffer, Store, View
from reverie.compiler.to_loops.emitter import Emitter

if TYPE_CHECKING:
    from reverie.compiler.to_loops.lower_blocks import BlockLowering


def _uses(block: Block) -> dict[Value, int]:
    """How often each value is used in `block` (its regions' ops included) and its results."""
    uses: dict[Value, int] = {}
    for value in [v for op in block.walk() for v in op.operands] + list(block.results):
        uses[value] = uses.get(value, 0) + 1
    return uses


def _scatters(value: Value, uses: dict[Value, int]) -> list[Op] | None:
    """The dynamic_scatter ops whose sum `value` is (a tree of single-use adds), or None."""
    op = value.op
    if op is None or uses[value] != 1 or op.name not in ("add", "dynamic_scatter"):
        return None
    if op.name == "dynamic_scatter":
        return [op]
    terms = [_scatters(v, uses) for v in op.operands]
    return None if None in terms else [t for term in terms for t in term]


def _accumulated_scatters(param: Value, result: Value, uses: dict[Value, int]
                          ) -> list[Op] | None:
    """The dynamic_scatters whose values the body adds to state `param` to make `result`,
    when that is all the body does with the state (else None)."""
    add = result.op
    if add is None or add.name != "add" or result.type != param.type or \
            result.type.dtype == "bool" or uses.get(param) != 1 or uses[result] != 1:
        return None
    a, b = add.operands
    scattered = b if a is param else a if b is param else None
    return None if scattered is None else _scatters(scattered, uses)


class Accumulators:
    """The states of one loop that are scatter-add accumulators (none for a `for_history`),
    their temporaries, and the rewritten body that leaves them out."""

    def __init__(self, lowering: BlockLowering, op: Op, em: Emitter) -> None:
        loop = ForOp(op)
        self.scatters: dict[int, list[Op]] = {}
        if op.name == "for":
            uses = _uses(loop.body)
            for k, (param, result) in enumerate(zip(loop.state_params, loop.body.results,
                                                    strict=True)):
                scatters = _accumulated_scatters(param, result, uses)
                if scatters is not None:
                    self.scatters[k] = scatters
        self.totals: dict[int, View] = {}
        for k in self.scatters:
            init = loop.inits[k]
            total = View.of(lowering.ctx.temp(init.type.dtype, init.type.shape))
            em.map_nest(total, lambda index, body, v=init: lowering.eval.at(v, index, body))
            self.totals[k] = total

    def carried(self, values: list) -> list:
        """`values` (one per state) without the accumulators'."""
        return [v for k, v in enumerate(values) if k not in self.scatters]

    def lower_body(self, nested: BlockLowering, block: Block, targets: list[Buffer],
                   em: Emitter) -> None:
        """Lower the loop body: the carried states' results into `targets`, then each
        accumulator's row added in place."""
        if not self.scatters:
            nested.lower(block, targets, em)
            return
        sums = {block.results[k].op for k in self.scatters}
        updates = [(k, scatter) for k, scatters in self.scatters.items() for scatter in scatters]
        rows = [scatter.operands[0] for _, scatter in updates]
        row_buffers = [nested.ctx.temp(v.type.dtype, v.type.shape) for v in rows]
        reduced = Block(block.params, [op for op in block.ops if op not in sums],
                        self.carried(block.results) + rows)
        nested.lower(reduced, targets + row_buffers, em)
        for (k, scatter), row in zip(updates, row_buffers, strict=True):
            self._add_row(nested, scatter, self.totals[k], View.of(row), em)

    @staticmethod
    def _add_row(nested: BlockLowering, scatter: Op, total: View, row: View,
                 em: Emitter) -> None:
        """total[..., i, ...] += row (the position was bounds-checked with the scatter)."""
        axis, dtype = scatter.attrs["axis"], total.buffer.dtype
        position = em.index(nested.scalar(scatter.operands[1], em))
        index, inner = em.nest([(Dim.const(0), d) for d in row.shape])
        at = (*index[:axis], position, *index[axis:])
        added = inner.let("add", (inner.load(total, at), inner.load(row, index)), dtype)
        inner.stmts.append(Store(total, at, added))

    def bind_results(self, lowering: BlockLowering, results: list[Value]) -> None:
        """The loop's results of the accumulator states: their temporaries."""
        for k, total in self.totals.items():
            lowering.env[results[k]] = total

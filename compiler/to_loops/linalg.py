"""The loop nests of the linear-algebra ops (`ir/ops_linalg.py`): copies, then one helper call.

Used by `to_loops/lower_blocks.py`, whose `BlockLowering` supplies the environment and the
result buffers. The helpers (`runtime_library/lapack.py`) work in place on whole
row-major buffers, so each operand is first copied (a loop nest reading it wherever it
lives: a buffer, a strided view, or a fused producer) into the buffer the op's table
(`ir/ops_linalg.py`, IN_PLACE) names: a result's buffer when the op overwrites the operand
with that result, else a temporary (an operand the helper only reads is passed as is
when it already is a whole buffer). A result whose target is not a whole buffer (a view
into another) is computed in a temporary and copied there. `cholesky(a)` of an f64[B, N, N]
`a` computed elementwise:

    for %i0 in 0..B { for %i1 in 0..N { for %i2 in 0..N {
      ... store out0[%i0 * N * N + %i1 * N + %i2] = %3
    } } }
    linalg cholesky out0 in place  # sizes B, N, N, N, flags 0
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reverie.compiler.ir.core import Op, Value
from reverie.compiler.ir.dims import Dim, num_elements
from reverie.compiler.ir.ops_linalg import IN_PLACE, READ_ONLY, flags_of, smaller
from reverie.compiler.loops.ir import Buffer, LinalgCall, Store, View
from reverie.compiler.to_loops.emitter import Emitter

if TYPE_CHECKING:
    from reverie.compiler.to_loops.lower_blocks import BlockLowering

BUFFER_COUNT = {"cholesky": 1, "triangular_solve": 2, "solve": 3, "slogdet": 4, "eigh": 3,
                "svd": 4, "qr": 4}


def _sizes(op: Op) -> tuple[Dim, Dim, Dim, Dim]:
    """(batch, m, n, k) of the helper call."""
    a = op.operands[0].type
    *batch, m, n = a.shape
    k = op.operands[1].type.shape[-1] if len(op.operands) > 1 else \
        smaller(m, n) if op.name in ("svd", "qr") else n
    return num_elements(tuple(batch)), m, n, k


def _copy(em: Emitter, lowering: BlockLowering, value: Value, into: View) -> None:
    """into[i...] = value[i...]."""
    em.map_nest(into, lambda index, body: lowering.eval.at(value, index, body))


def lower_linalg(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """The op's results by one `LinalgCall` on buffers holding copies of its operands."""
    if op.name == "det":
        lower_det(lowering, op, em)
        return
    operands, results = IN_PLACE[op.name]
    batch, m, n, k = sizes = _sizes(op)
    dtype = op.operands[0].type.dtype
    buffers: list[Buffer | None] = [None] * BUFFER_COUNT[op.name]
    moves: list[tuple[Buffer, View]] = []
    for slot, value in zip(results, op.results, strict=True):
        target = lowering.buffer_for(value)
        whole = target.covers(target.buffer)
        buffers[slot] = target.buffer if whole else lowering.ctx.temp(dtype, value.type.shape)
        if not whole:
            moves.append((buffers[slot], target))
        lowering.env[value] = target
    for slot, value in zip(operands, op.operands, strict=True):
        bound = lowering.env.get(value)
        if slot in READ_ONLY.get(op.name, ()) and isinstance(bound, View) and \
                bound.covers(bound.buffer):   # already a whole buffer, which stays unchanged
            buffers[slot] = bound.buffer
            continue
        if buffers[slot] is None:
            buffers[slot] = lowering.ctx.temp(dtype, value.type.shape)
        _copy(em, lowering, value, View.of(buffers[slot]))
    scratch = {"solve": ("i64", n), "slogdet": ("i64", n), "qr": (dtype, k), "eigh": (dtype, n * n)}
    if op.name in scratch:
        kind, size = scratch[op.name]
        buffers[-1] = lowering.ctx.temp(kind, (size,))
    assert all(b is not None for b in buffers)
    em.stmts.append(LinalgCall(op.name, dtype, list(buffers), sizes, flags_of(op.attrs)))
    for source, target in moves:
        index, body = em.nest([(Dim.const(0), d) for d in target.shape])
        body.stmts.append(Store(target, index, body.load(View.of(source), index)))


def lower_det(lowering: BlockLowering, op: Op, em: Emitter) -> None:
    """det = sign · exp(log|det|) of slogdet's helper, into temporaries."""
    a, dtype, shape = op.operands[0], op.result.type.dtype, op.result.type.shape
    copy, sign, logabs = (lowering.ctx.temp(dtype, s) for s in (a.type.shape, shape, shape))
    pivots = lowering.ctx.temp("i64", (a.type.shape[-1],))
    _copy(em, lowering, a, View.of(copy))
    em.stmts.append(LinalgCall("slogdet", dtype, [copy, sign, logabs, pivots], _sizes(op)))
    out = lowering.buffer_for(op.result)
    index, body = em.nest([(Dim.const(0), d) for d in shape])
    size = body.let("exp", (body.load(View.of(logabs), index),), dtype)
    body.stmts.append(Store(out, index, body.let("mul", (body.load(View.of(sign), index), size),
                                                 dtype)))
    lowering.env[op.result] = out

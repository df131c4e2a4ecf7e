"""VJP rules of the control-flow ops `if` and `while` (docs/language.md §11.1): the path that
was taken.

`if`: the adjoint is an `if` on the same condition. Each of its branches re-runs the primal
branch on the same operands and transposes it (a region VJP, as a loop body is
transposed), so only the branch that ran is differentiated, as in PyTorch eager mode:

    x̄ = (∂ then/∂x)ᵀ ȳ  if c,   (∂ else/∂x)ᵀ ȳ  otherwise.

`while`: reverse mode asks the primal loop for its trip count T (`counted = true`, see
`while_forward`). Once T is known the loop is `for t in 0..T { body }`, so it is reversed
by the `for` rule (`reverse_loops.loop_vjp`) with the while body as the loop body:

    x̄_{k} = (∂ body/∂x)ᵀ x̄_{k+1}  for k = T − 1 … 0,  ū0 = x̄_0.

T gets a trip dimension (`trip_dim`, `ir/capacity.py`), so the `for` rule treats it as a
dimension count: by default the loop runs once more as a `for_history` of T rows, storing
every state (2T body evaluations forward, T transposed); with `checkpoint=True` it keeps
⌈√T⌉ checkpoints and re-runs one segment at a time (about 3T body evaluations forward).
"""

from __future__ import annotations

from dataclasses import replace

from reverie.compiler.ir.core import Block, Op, Value
from reverie.compiler.ir.scope import Scope, copy_block, share_captures
from reverie.compiler.ir.types import scalar
from reverie.compiler.ir.views import IfOp, WhileOp
from reverie.compiler.transforms.reverse_loops import loop_forward, loop_vjp, trip_count
from reverie.compiler.transforms.reverse_rules import VJP_RULES, Bars, RuleContext

I64 = scalar("i64")


def while_forward(scope: Scope, op: Op, operands: list[Value]) -> Op:
    """Emit an active primal `while` that also returns its trip count (for `_while`)."""
    return scope.emit("while", operands, {**op.attrs, "counted": True},
                      [copy_block(r) for r in op.regions])


@VJP_RULES.register("if")
def _if(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d if: x̄ = (∂ branch/∂x)ᵀ ȳ for the branch the condition picks (an `if` whose
    branches re-run and transpose the primal ones)"""
    view, s = IfOp(op), ctx.scope
    wants = ctx.wants[1:]
    seeded = [bar is not None for bar in bars]
    seeds = [bar for bar in bars if bar is not None]
    regions = []
    for branch in (view.then, view.orelse):
        params = [Value(v.type, name=v.name) for v in seeds]
        args = [Value(p.type, name=p.name) for p in branch.params]
        block = Block(params=params + args)
        inner = s.child(block)
        vjp = ctx.transpose(inner, branch, args, wants, seeded, ctx.checkpoint)
        vjp.forward()
        given = iter(params)
        vjp.backward([next(given) if seed else None for seed in seeded])
        block.results = [vjp.adjoint(p) or inner.zeros(p.type)
                         for p, want in zip(branch.params, wants, strict=True) if want]
        regions.append((block, inner))
    outers = share_captures(regions, len(seeds) + len(view.inputs))
    results = iter(s.emit("if", [view.cond, *seeds, *view.inputs, *outers], {},
                          [block for block, _ in regions]).results)
    return [None] + [next(results) if want else None for want in wants]


@VJP_RULES.register("while")
def _while(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """d while: with T its trip count the loop is `for t in 0..T { body }`, reversed as that
    loop: x̄_k = (∂ body/∂x)ᵀ x̄_{k+1} for k = T − 1 … 0"""
    view, s = WhileOp(op), ctx.scope
    assert view.counted, "reverse mode emits an active while with its trip count"
    body = copy_block(view.body)
    body.params.insert(0, Value(I64, name="t"))
    operands = [s.zeros(I64), trip_count(s, op.results[-1]), *op.operands]
    loop = Op("for", operands, {"carried": view.carried}, list(view.final_states), [body],
              op.span)
    if not ctx.checkpoint:  # run again, storing every state
        loop = loop_forward(s, loop, operands, checkpoint=False)
    return loop_vjp(replace(ctx, wants=[False, False, *ctx.wants]), loop,
                    bars[:view.carried])[2:]

"""Forward mode as an IR → IR pass: `jvp_function`.

Consumes a typed `Function` and the positions of float parameters to differentiate;
produces a new `Function` computing the original results and their tangents (Jacobian-
vector products) for given parameter tangents. The result is ordinary tensor IR
(simplified and verified): it can be printed, lowered, batched (`batch.py`, for Jacobians)
and differentiated again (forward-over-reverse gives Hessian-vector products).

How a block is transformed (`BlockJVP`), one op at a time in program order:
1. the primal op is copied into the new block;
2. if some operand has a tangent and the op has a float result, the op's rule in
   `JVP_RULES` emits the tangents of its results from its operands' tangents. A value
   without a tangent has a zero tangent, and no IR is emitted for it. An op on a
   differentiable path without a rule is a `CompileError` naming it. Which loop states
   carry a tangent is reverse mode's activity fixed point (`state_activity`).

    f(x: f64[N]) -> f64 = sum(tanh(x))
    func @f_jvp(%x: f64[N], %x_dot: f64[N]) -> (f64, f64) {
      %0 = tanh %x : f64[N]
      %1 = const {value = 1.0, dtype = f64} : f64
      %2 = broadcast %1 {shape = [N]} : f64[N]
      %3 = mul %0, %0 : f64[N]
      %4 = sub %2, %3 : f64[N]
      %5 = mul %4, %x_dot : f64[N]              # (1 − y²) · ẋ
      %6 = reduce_sum %0 {axes = [0]} : f64
      %7 = reduce_sum %5 {axes = [0]} : f64     # the tangent of the sum
      return %6, %7
    }
"""

from __future__ import annotations

from collections.abc import Sequence

from reverie.compiler.ir.core import Block, Function, Value
from reverie.compiler.ir.scope import Scope, copy_block
from reverie.compiler.ir.tensor_verifier import after_pass, show_raw

# With forward_rules.py, scan_rules.py and linalg_rules.py fill JVP_RULES: importing this
# module gives it whole
from reverie.compiler.transforms import linalg_rules, scan_rules  # noqa: F401
from reverie.compiler.transforms.forward_rules import (
    JVP_RULES,
    NON_DIFFERENTIABLE,
    Dots,
    JvpContext,
    JvpRegion,
)
from reverie.compiler.transforms.reverse import check_wrt, state_activity
from reverie.compiler.transforms.simplify import simplify

# ---------------------------------------------------------------- transforming a block


class BlockJVP:
    """The forward-mode transformation of one block, emitted into `scope`.

    `args` bind the block's parameters and `dots` their tangents (None for zero), all
    values visible from `scope`.
    """

    def __init__(self, scope: Scope, body: Block, args: Sequence[Value], dots: Dots) -> None:
        self.scope = scope
        self.body = body
        self.values: dict[Value, Value] = dict(zip(body.params, args, strict=True))
        self.tangents: dict[Value, Value] = {
            p: d for p, d in zip(body.params, dots, strict=True) if d is not None}

    def run(self) -> tuple[list[Value], Dots]:
        """Emit primal and tangent ops; return the block's results and their tangents."""
        for op in self.body.ops:
            self.scope.span = op.span
            operands = [self.values[v] for v in op.operands]
            new = self.scope.emit(op.name, operands, dict(op.attrs),
                                  [copy_block(r) for r in op.regions])
            results = list(new.results)
            dots = [self.tangents.get(v) for v in op.operands]
            differentiable = op.name not in NON_DIFFERENTIABLE and any(
                r.type.is_float for r in op.results)
            if differentiable and any(d is not None for d in dots):
                ctx = JvpContext(self.scope, self.region, state_activity)
                outs = JVP_RULES.lookup(op.name, op.span)(ctx, new, dots)
                results = ctx.primal or results
                for result, dot in zip(op.results, outs, strict=True):
                    if dot is not None and result.type.is_float:
                        assert dot.type == result.type, f"{op.name}: tangent {dot.type} " \
                                                        f"for {result.type}"
                        self.tangents[result] = dot
            self.values.update(zip(op.results, results, strict=True))
        return ([self.values[v] for v in self.body.results],
                [self.tangents.get(v) for v in self.body.results])

    @staticmethod
    def region(body: Block, params: list[Value], active: list[bool]) -> JvpRegion:
        """The JVP of region `body` in a fresh block (see `JvpContext.region`)."""
        dots = [Value(p.type, name=f"{p.name or 'arg'}_dot") if a else None
                for p, a in zip(params, active, strict=True)]
        tangent_params = [d for d in dots if d is not None]
        scope = Scope(Block(params=list(params) + tangent_params))
        results, tangents = BlockJVP(scope, body, params, dots).run()
        return JvpRegion(scope, results, tangents, tangent_params)


# ---------------------------------------------------------------- functions


def jvp_function(fn: Function, wrt: Sequence[int], *, name: str | None = None) -> Function:
    """`fn`'s results and their tangents for tangents of the parameters at `wrt`.

    Parameters: `fn`'s, then one tangent per `wrt` position (same type, named `<param>_dot`).
    Results: `fn`'s, then one tangent per result (same type; zeros where a result does not
    depend on the `wrt` parameters, and always for integer and bool results).
    """
    check_wrt(fn, wrt)
    params = [Value(p.type, name=n) for p, n in zip(fn.params, fn.param_names, strict=True)]
    tangent_params = [Value(params[i].type, name=f"{fn.param_names[i]}_dot") for i in wrt]
    block = Block(params=params + tangent_params)
    scope = Scope(block, span=fn.span)
    dots: Dots = [None] * len(params)
    for i, param in zip(wrt, tangent_params, strict=True):
        dots[i] = param
    results, tangents = BlockJVP(scope, fn.body, params, dots).run()
    block.results = results + [t if t is not None else scope.zeros(r.type)
                               for r, t in zip(results, tangents, strict=True)]
    names = list(fn.param_names) + [p.name or "arg" for p in tangent_params]
    out = fn.derive(name or f"{fn.name}_jvp", block, names)
    simplify(show_raw(out, "forward"))
    return after_pass(out, "simplify")

"""Reverse mode as an IR → IR pass (Autodidax style): `vjp_function` and `grad_function`.

Consumes a typed `Function`; produces a new `Function` that computes the original results
and the vector-Jacobian product with respect to chosen float parameters. The result is
ordinary tensor IR (simplified and verified), so it can be printed, lowered, and
differentiated again for higher derivatives.

How a block is transposed (`BlockVJP`):
1. Activity: a value is active when it is float and depends on an active parameter through
   differentiable ops (`NON_DIFFERENTIABLE` ops, ints and bools stop it). A value is
   relevant when some seeded result depends on it. Only active, relevant ops get adjoints.
2. Forward: the primal ops are copied into the new block. An active `for` loop is copied as
   `for_history`, which also returns the states the reverse sweep needs (see
   `reverse_loops.py` for loops, checkpointing and run-time trip counts); an active
   `while` also returns its trip count (`reverse_control.py`, with `if`).
3. Backward: walk the primal ops in reverse, keep a map value → adjoint, sum contributions
   over fan-out, and look each op's rule up in `VJP_RULES`. An op on a differentiable path
   without a rule is a `CompileError` naming it.

    grad_function of  fn f(x: f64[N]) -> f64 { return sum(tanh(x)); }
    func @f_grad(%x: f64[N]) -> (f64, f64[N]) {
      %0 = tanh %x : f64[N]
      %1 = reduce_sum %0 {axes = [0]} : f64
      %2 = const {value = 1.0, dtype = f64} : f64
      %3 = broadcast %2 {shape = [N]} : f64[N]      # ȳ broadcast back over x (all ones)
      %4 = mul %0, %0 : f64[N]
      %x_bar = sub %3, %4 : f64[N]                  # (ȳ · 1) · (1 − y²), the ȳ · 1 folded
      return %1, %x_bar
    }
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from reverie.compiler.ir.core import Block, Function, Op, Value
from reverie.compiler.ir.scope import Scope, copy_block
from reverie.compiler.ir.tensor_verifier import after_pass, show_raw
from reverie.compiler.ir.types import one_float_element
from reverie.compiler.ir.views import ForOp, IfOp, WhileOp

# With reverse_rules.py, these modules fill VJP_RULES: importing this one gives the whole table
from reverie.compiler.transforms import (  # noqa: F401
    linalg_rules,
    reverse_control,
    reverse_loops,
    reverse_structured,
    scan_rules,
)
from reverie.compiler.transforms.reverse_rules import (
    NON_DIFFERENTIABLE,
    VJP_RULES,
    Bars,
    RuleContext,
)
from reverie.compiler.transforms.simplify import simplify

STATEFUL_OPS = ("for", "for_history", "while", "if")  # results follow `state_activity`


# ---------------------------------------------------------------- activity


def activity(block: Block, active_params: Sequence[bool]) -> set[Value]:
    """The float values of `block` that depend on an active parameter."""
    active = {p for p, a in zip(block.params, active_params, strict=True)
              if a and p.type.is_float}
    for op in block.ops:
        flags = [v in active for v in op.operands]
        if op.name in NON_DIFFERENTIABLE or not any(flags):
            continue
        if op.name in STATEFUL_OPS:
            states = state_activity(op, flags)
            histories = states if op.name == "for_history" else []
            # a counted while's last result, its trip count, is an integer: never active
            active.update(r for r, a in zip(op.results, states + histories, strict=False) if a)
        else:
            active.update(r for r in op.results if r.type.is_float)
    return active


def state_activity(op: Op, operand_active: list[bool]) -> list[bool]:
    """Which carried states of a loop (`for`, `while`) are active, a fixed point over its
    body; for an `if`, which results are (active in either branch)."""
    if op.name == "if":
        branches = (IfOp(op).then, IfOp(op).orelse)
        inner = [activity(b, operand_active[1:]) for b in branches]
        return [any(r in a for r, a in zip(results, inner, strict=True)) and v.type.is_float
                for v, *results in zip(op.results, *(b.results for b in branches), strict=True)]
    if op.name == "while":
        index, body = [], WhileOp(op).body
        states, invariants = WhileOp(op).split(operand_active)
    else:
        index, body = [False], ForOp(op).body
        _, states, invariants = ForOp(op).split_operands(operand_active)
    while True:
        inner = activity(body, index + states + invariants)
        updated = [(s or r in inner) and r.type.is_float
                   for s, r in zip(states, body.results, strict=True)]
        if updated == states:
            return states
        states = updated


def relevance(block: Block, seeded: Sequence[bool]) -> set[Value]:
    """The values of `block` that some seeded result depends on."""
    relevant = {v for v, s in zip(block.results, seeded, strict=True) if s}
    for op in reversed(block.ops):
        if any(r in relevant for r in op.results):
            relevant.update(op.operands)
    return relevant


# ---------------------------------------------------------------- transposing a block


class BlockVJP:
    """The reverse-mode transformation of one block, emitted into `scope`.

    `args` bind the block's parameters (values visible from `scope`), `active_args` says
    which of them want adjoints, `seeded` which results will get cotangents. Ops named in
    `leaf_ops` (the `read`s of a generic body) are copied but not transposed: their results
    are leaves whose adjoints the caller collects.
    """

    def __init__(self, scope: Scope, body: Block, args: Sequence[Value],
                 active_args: Sequence[bool], seeded: Sequence[bool], checkpoint: bool,
                 leaf_ops: Sequence[str] = ()) -> None:
        self.scope = scope
        self.body = body
        self.checkpoint = checkpoint
        self.leaf_ops = tuple(leaf_ops)
        self.active = activity(body, active_args)
        self.relevant = relevance(body, seeded)
        self.values: dict[Value, Value] = dict(zip(body.params, args, strict=True))
        self.copies: dict[Op, Op] = {}
        self.adjoints: dict[Value, Value] = {}

    def forward(self) -> list[Value]:
        """Emit the primal ops; return the emitted results of the block."""
        for op in self.body.ops:
            self.scope.span = op.span
            operands = [self.values[v] for v in op.operands]
            needed = any(r in self.active and r in self.relevant for r in op.results)
            if needed and op.name == "for":
                new = reverse_loops.loop_forward(self.scope, op, operands, self.checkpoint)
            elif needed and op.name == "while":
                new = reverse_control.while_forward(self.scope, op, operands)
            else:
                new = self.scope.emit(op.name, operands, dict(op.attrs),
                                      [copy_block(r) for r in op.regions])
            self.copies[op] = new
            self.values.update(zip(op.results, new.results[:len(op.results)], strict=True))
        return [self.values[v] for v in self.body.results]

    def backward(self, seeds: Sequence[Value | None]) -> None:
        """Emit the adjoint ops, given one cotangent (or None) per block result."""
        for value, seed in zip(self.body.results, seeds, strict=True):
            if seed is not None:
                self.accumulate(value, seed)
        for op in reversed(self.body.ops):
            if op.name in self.leaf_ops:
                continue
            new = self.copies[op]
            bars: Bars = [self.adjoints.get(r) for r in op.results]
            bars += [None] * (len(new.results) - len(op.results))
            wants = [v in self.active for v in op.operands]
            if all(b is None for b in bars) or not any(wants):
                continue
            self.scope.span = op.span
            rule = VJP_RULES.lookup(new.name, op.span)
            ctx = RuleContext(self.scope, wants, self.checkpoint, BlockVJP, state_activity)
            for value, want, bar in zip(op.operands, wants, rule(ctx, new, bars), strict=True):
                if want and bar is not None:
                    self.accumulate(value, bar)

    def accumulate(self, value: Value, bar: Value) -> None:
        """Add `bar` to the adjoint of primal `value` (ignored if `value` is not active)."""
        if value not in self.active:
            return
        assert bar.type == value.type, f"adjoint {bar.type} for a value of type {value.type}"
        if value in self.adjoints:
            bar = self.scope.add(self.adjoints[value], bar)
        if value.name and bar.op is not None and bar.name is None:
            bar.name = f"{value.name}_bar"
        self.adjoints[value] = bar

    def adjoint(self, value: Value) -> Value | None:
        """The adjoint of a primal value of the block, if it has one."""
        return self.adjoints.get(value)


# ---------------------------------------------------------------- functions


def check_wrt(fn: Function, wrt: Sequence[int]) -> None:
    """ValueError unless every `wrt` position is a float parameter of `fn`."""
    for i in wrt:
        if not 0 <= i < len(fn.params):
            raise ValueError(f"{fn.name} has no parameter {i}")
        if not fn.params[i].type.is_float:
            raise ValueError(f"cannot differentiate {fn.name} with respect to "
                             f"'{fn.param_names[i]}': it is {fn.params[i].type}, not a float")


def _cotangent_name(fn: Function, index: int) -> str:
    result = fn.body.results[index]
    if result.name:
        return f"{result.name}_bar"
    return "out_bar" if len(fn.body.results) == 1 else f"out{index}_bar"


def _transpose_function(fn: Function, name: str, extra_params: list[Value],
                        seeds: Callable[[Scope, list[Value]], list[Value]],
                        wrt: Sequence[int], checkpoint: bool) -> Function:
    """A function computing `fn`'s results and the adjoints of the `wrt` parameters for the
    cotangents `seeds(scope, results)`, with `extra_params` after `fn`'s parameters."""
    params = [Value(p.type, name=n) for p, n in zip(fn.params, fn.param_names, strict=True)]
    block = Block(params=params + extra_params)
    scope = Scope(block, span=fn.span)
    active = [i in wrt for i in range(len(params))]
    vjp = BlockVJP(scope, fn.body, params, active, [True] * len(fn.body.results), checkpoint)
    results = vjp.forward()
    vjp.backward(seeds(scope, results))
    grads = [vjp.adjoint(fn.params[i]) or scope.zeros(params[i].type) for i in wrt]
    block.results = results + grads
    names = list(fn.param_names) + [p.name or "arg" for p in extra_params]
    out = fn.derive(name, block, names)
    simplify(show_raw(out, "reverse"))
    primal = set(block.results[:len(results)])
    for i, grad in zip(wrt, block.results[len(results):], strict=True):
        if grad.op is not None and grad.name is None and grad not in primal:
            grad.name = f"{fn.param_names[i]}_bar"
    return after_pass(out, "simplify")


def vjp_function(fn: Function, wrt: Sequence[int], *, name: str | None = None,
                 checkpoint: bool = False) -> Function:
    """`fn`'s results and the gradients of ⟨cotangents, results⟩ with respect to `wrt`.

    Parameters: `fn`'s, then one cotangent per result (same type, named `<result>_bar`).
    Results: `fn`'s, then one gradient per `wrt` index (zeros where there is no dependence).
    `checkpoint=True` makes loops keep O(√T) states and recompute the rest.
    """
    check_wrt(fn, wrt)
    cotangents = [Value(v.type, name=_cotangent_name(fn, i))
                  for i, v in enumerate(fn.body.results)]
    return _transpose_function(fn, name or f"{fn.name}_vjp", cotangents,
                               lambda scope, results: cotangents, wrt, checkpoint)


def grad_function(fn: Function, wrt: Sequence[int], *, checkpoint: bool = False) -> Function:
    """`fn`'s value and its gradient with respect to `wrt` (one float result of one
    element: a scalar, or a tensor of literal size 1 such as f64[1, 1], seeded with ones)."""
    check_wrt(fn, wrt)
    if not one_float_element(fn.result_types):
        shown = ", ".join(map(str, fn.result_types))
        raise ValueError(f"grad needs a function with one scalar float result; {fn.name} "
                         f"returns {shown}; use vjp for other results")
    return _transpose_function(fn, f"{fn.name}_grad", [],
                               lambda scope, results: [scope.const(1, results[0].type)],
                               wrt, checkpoint)

"""Reverse mode, forward mode and batching of `scan` (cumsum and cumprod, `ir/ops_scan.py`).

Along the scan's axis, with y = scan(x), "before j" meaning positions the scan has passed
when it reaches j (i <= j for a forward scan, i >= j for a reverse one):

- cumsum is linear: ẏ = cumsum(ẋ), and its transpose is the cumulative sum run the other
  way, x̄ = reverse-cumsum(ȳ) (x̄ᵢ = Σ_{j ≥ i} ȳⱼ);
- cumprod: ∂yⱼ/∂xᵢ = ∏_{m ≤ j, m ≠ i} xₘ for i ≤ j. As for `reduce_prod`
  (`reverse_rules.product_partials`), it is written without dividing by a zero, so it is
  exact when x holds zeros and differentiable again (torch's values, to second order).
  With P = cumprod of x with its zeros replaced by 1, z = the running count of zeros and
  Z = the running sum of the zero factors (0, but it carries their derivatives):

      ∂yⱼ/∂xᵢ = Pⱼ / xᵢ · Fⱼ          (xᵢ ≠ 0)   Fⱼ = 1 if zⱼ = 0, Zⱼ if zⱼ = 1, else 0
      ∂yⱼ/∂xᵢ = Pⱼ · (Gⱼ − xᵢ·Hⱼ)     (xᵢ = 0)   Gⱼ = 1 if zⱼ = 1, Zⱼ if zⱼ = 2, else 0
                                                 Hⱼ = 1 if zⱼ = 2, else 0

  (Fⱼ and Gⱼ are the product of the zero factors up to j other than xᵢ; the −xᵢ·Hⱼ takes
  xᵢ itself out of Zⱼ). Each sum over i or j is one more scan, so the rules cost O(n):

      x̄ᵢ = Σ_{j ≥ i} ȳⱼ ∂yⱼ/∂xᵢ = rcs(ȳPF)ᵢ / xᵢ  or  rcs(ȳPG)ᵢ − xᵢ · rcs(ȳPH)ᵢ
      ẏⱼ = Σ_{i ≤ j} ∂yⱼ/∂xᵢ ẋᵢ = Pⱼ (Fⱼ cs(ẋ/x)ⱼ + Gⱼ cs(ẋ)ⱼ − Hⱼ cs(x ẋ)ⱼ)

  (rcs: the scan run the other way; cs: the same scan; the terms of the cumulative sums
  taken over the non-zero xᵢ, then over the zero xᵢ).

Batching moves the axis past the batch axis.
"""

from __future__ import annotations

from dataclasses import dataclass

from reverie.compiler.ir.core import Op, Value
from reverie.compiler.ir.ops_scan import ScanOp
from reverie.compiler.ir.scope import Scope
from reverie.compiler.transforms.batch_rules import BATCH_RULES, BatchContext, Flags
from reverie.compiler.transforms.forward_rules import JVP_RULES, Dots, JvpContext
from reverie.compiler.transforms.reverse_rules import VJP_RULES, Bars, RuleContext


def scan(s: Scope, x: Value, like: ScanOp, kind: str, backwards: bool = False) -> Value:
    """`kind`-scan of x along `like`'s axis, in its direction (the other way: `backwards`)."""
    reverse = like.reverse != backwards
    return s.op("scan", [x], {"axis": like.axis, "kind": kind, "reverse": reverse})


@dataclass(frozen=True)
class ProductPartials:
    """The factors of ∂yⱼ/∂xᵢ for y = cumprod(x) (the module docstring's P, F, G, H), and
    which xᵢ are zero with x̃ = x where it is not (1 where it is)."""

    is_zero: Value
    nonzero_x: Value
    product: Value
    f: Value
    g: Value
    h: Value

    @staticmethod
    def of(s: Scope, scan_op: ScanOp) -> ProductPartials:
        x = scan_op.op.operands[0]
        zero, one = s.zeros(x.type), s.const(1, x.type)
        is_zero = s.eq(x, zero)
        nonzero_x = s.select(is_zero, one, x)
        count = scan(s, s.select(is_zero, one, zero), scan_op, "sum")
        zero_sum = scan(s, s.select(is_zero, x, zero), scan_op, "sum")

        def when(count_is: float, then: Value, otherwise: Value) -> Value:
            return s.select(s.eq(count, s.const(count_is, x.type)), then, otherwise)

        return ProductPartials(
            is_zero, nonzero_x, scan(s, nonzero_x, scan_op, "prod"),
            f=when(0, one, when(1, zero_sum, zero)),
            g=when(1, one, when(2, zero_sum, zero)),
            h=when(2, one, zero))


# ---------------------------------------------------------------- reverse mode


@VJP_RULES.register("scan")
def _scan_vjp(ctx: RuleContext, op: Op, bars: Bars) -> Bars:
    """cumsum: x̄ᵢ = Σ_{j ≥ i} ȳⱼ; cumprod: x̄ᵢ = Σ_{j ≥ i} ȳⱼ ∏_{m ≤ j, m ≠ i} xₘ"""
    s, view, ybar = ctx.scope, ScanOp(op), bars[0]
    if view.kind == "sum":
        return [scan(s, ybar, view, "sum", backwards=True)]
    p = ProductPartials.of(s, view)
    weighted = s.mul(ybar, p.product)

    def back(factor: Value) -> Value:
        return scan(s, s.mul(weighted, factor), view, "sum", backwards=True)

    at_zero = s.sub(back(p.g), s.mul(op.operands[0], back(p.h)))
    return [s.select(p.is_zero, at_zero, s.div(back(p.f), p.nonzero_x))]


# ---------------------------------------------------------------- forward mode


@JVP_RULES.register("scan")
def _scan_jvp(ctx: JvpContext, op: Op, dots: Dots) -> Dots:
    """cumsum: ẏⱼ = Σ_{i ≤ j} ẋᵢ; cumprod: ẏⱼ = Σ_{i ≤ j} ẋᵢ ∏_{m ≤ j, m ≠ i} xₘ"""
    s, view, dx = ctx.scope, ScanOp(op), dots[0]
    if view.kind == "sum":
        return [scan(s, dx, view, "sum")]
    x = op.operands[0]
    p = ProductPartials.of(s, view)
    zero = s.zeros(x.type)

    def running(term: Value, at_zeros: bool) -> Value:
        kept = s.select(p.is_zero, term, zero) if at_zeros else s.select(p.is_zero, zero, term)
        return scan(s, kept, view, "sum")

    total = s.add(s.mul(p.f, running(s.div(dx, p.nonzero_x), False)),
                  s.sub(s.mul(p.g, running(dx, True)),
                        s.mul(p.h, running(s.mul(x, dx), True))))
    return [s.mul(p.product, total)]


# ---------------------------------------------------------------- batching


@BATCH_RULES.register("scan")
def _scan_batch(ctx: BatchContext, op: Op, xs: list[Value], flags: Flags) -> list[Value]:
    """scan(x: [B, …], axis) = scan(x, axis + 1)"""
    return [ctx.scope.op("scan", xs, {**op.attrs, "axis": op.attrs["axis"] + 1})]

"""What recording and differentiating calls of one kernel derive from the kernel alone.

Consumes a `CompiledKernel` (and, for a VJP, the parameters `wrt` and the dtype of a call);
produces, once per kernel, its `RecordPlan` (which parameters can carry a gradient, which
are declared `float`), kept in the kernel's `autograd_cache`, and in it, once per (wrt,
dtype), a `VjpPlan`: the compiled VJP and what its IR reveals, which primal arguments it
reads and which gradients are provably zero. The tape (`tape.py`) records and runs calls
with them; the interop layers run VJPs with them.

    plan = record_plan(kernel)                 # plan.differentiable == (True, False)
    vjp_plan(kernel, (0,), "f64").reads_any    # does the VJP need the saved arguments?
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from reverie.runtime.native.kernel_protocol import CompiledKernel

if TYPE_CHECKING:
    from reverie.compiler.ir.core import Function, Value

DIFFERENTIABLE = ("f32", "f64", "bf16", "f16", "float")
ZERO_PRESERVING = ("broadcast", "reshape", "cast")

@dataclass(frozen=True)
class VjpPlan:
    """A compiled VJP and what its IR reveals: which primal arguments it reads (and whether
    any), and which gradients are provably zero (the input is then unused)."""

    kernel: CompiledKernel
    fn: Function
    reads_primal: tuple[bool, ...]
    reads_any: bool
    zero: tuple[bool, ...]


def is_zero(value: Value) -> bool:
    """True when `value` is a constant 0 (possibly broadcast, reshaped or cast)."""
    while value.op is not None and value.op.name in ZERO_PRESERVING:
        value = value.op.operands[0]
    return value.op is not None and value.op.name == "const" and value.op.attrs["value"] == 0


RECORD_PLAN = "tape.record"  # where a kernel keeps its RecordPlan (kernel.autograd_cache)


class RecordPlan:
    """What recording a call of one kernel needs, derived once from its signature: whether
    each parameter can carry a gradient, the parameters declared `float` (whose arrays say
    which specialisation ran; `fixed_dtype`, the dtype of every call's VJP when there are
    none, else None), and the kernel's VjpPlans by (wrt, dtype), filled on use."""

    __slots__ = ("differentiable", "fixed_dtype", "float_params", "vjps", "reached_by")

    def __init__(self, declared_dtypes: Sequence[str]) -> None:
        self.differentiable = tuple(d in DIFFERENTIABLE for d in declared_dtypes)
        self.float_params = tuple(i for i, d in enumerate(declared_dtypes) if d == "float")
        self.fixed_dtype = None if self.float_params else "f32"
        self.vjps: dict[tuple[tuple[int, ...], str], VjpPlan] = {}
        self.reached_by: tuple[frozenset[int], ...] | None = None  # `inputs_reaching`

    def float_dtype(self, arrays: Sequence[object]) -> str:
        """What `float` meant for a call that ran on `arrays` (the call checked that they
        agree): the first float array's precision, else f64; f32 without `float` params
        (`Kernel.float_dtype_for`'s rule, without checking again)."""
        for i in self.float_params:
            value = arrays[i]
            if not isinstance(value, PYTHON_NUMBERS):
                kind = value.dtype if isinstance(value, np.ndarray) else np.asarray(value).dtype
                if kind.kind == "f":
                    return "f32" if kind.itemsize <= 4 else "f64"
        return "f64" if self.float_params else "f32"


PYTHON_NUMBERS = (int, float)


_LAST_PLAN: tuple[CompiledKernel | None, RecordPlan | None] = (None, None)


def record_plan(kernel: CompiledKernel) -> RecordPlan:
    """The RecordPlan of `kernel`, derived once (the last one asked for is remembered
    here too: a loop calling one kernel skips the kernel's locked cache)."""
    global _LAST_PLAN
    last_kernel, plan = _LAST_PLAN
    if last_kernel is kernel:
        return plan
    plan = kernel.autograd_cache.get(RECORD_PLAN)
    if plan is None:
        plan = RecordPlan(kernel.declared_dtypes)
        kernel.autograd_cache[RECORD_PLAN] = plan
    _LAST_PLAN = (kernel, plan)
    return plan


def vjp_plan(kernel: CompiledKernel, wrt: tuple[int, ...], dtype: str,
             recorded: RecordPlan | None = None) -> VjpPlan:
    """The VJP of `kernel` for parameters `wrt`, analysed once per dtype (kept in the
    kernel's RecordPlan, `recorded` when the caller has it)."""
    vjps = (recorded or record_plan(kernel)).vjps
    plan = vjps.get((wrt, dtype))
    if plan is None:
        vjp = kernel.vjp(list(wrt))  # the kernel's transform cache keeps it
        fn = vjp.ir_for(dtype)
        read = {v for op in fn.body.ops for v in op.operands} | set(fn.body.results)
        reads = tuple(p in read for p in fn.params[:len(kernel.param_names)])
        plan = VjpPlan(vjp, fn, reads, any(reads), tuple(is_zero(v) for v in fn.body.results))
        vjps[(wrt, dtype)] = plan
    return plan


def inputs_reaching(kernel: CompiledKernel, plan: RecordPlan, dtype: str
                    ) -> tuple[frozenset[int], ...]:
    """For each result of `kernel`, the parameters it may depend on (read from its IR,
    once per kernel; an op with regions depends on everything its regions read). A
    gradient flows from a result only to these: an input no result with a nonzero
    cotangent reaches is unused, as torch's multi-output nodes say."""
    if plan.reached_by is None:
        fn = kernel.ir_for(dtype)
        reaching: dict[int, frozenset[int]] = {id(p): frozenset((i,))
                                               for i, p in enumerate(fn.params)}
        for op in fn.body.ops:
            used = list(op.operands)
            for region in op.regions:
                for inner in region.walk():
                    used.extend(inner.operands)
                used.extend(region.results)
            reached = frozenset().union(*(reaching.get(id(v), frozenset()) for v in used))
            for result in op.results:
                reaching[id(result)] = reached
        plan.reached_by = tuple(reaching.get(id(v), frozenset()) for v in fn.body.results)
    return plan.reached_by

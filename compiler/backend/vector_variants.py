"""Functions with explicit vector versions, which LLVM's loop vectoriser calls in place of
the scalar one: how code that needs a branch per vector (not per lane) still vectorises.

`call_with_variants(builder, symbol, define, args)` emits a call to the scalar function
`symbol`, defined on first use by `define(module, lanes, name)` together with one version
per width of `vector_widths` (named `<symbol>.v<lanes>`). The call carries LLVM's
`vector-function-abi-variant` attribute naming the versions, so the vectoriser replaces it
by a call to the version of its width; every version is listed in `@llvm.compiler.used`
so that it survives until then (the scalar one too, so that its type stays). The vector
versions are `alwaysinline`: nothing calls them before vectorisation, and the always-inliner
that `runtime/native/jit.py` runs after the optimisation pipeline puts their bodies into the
vectorised loop; the scalar one is `noinline`, a call the vectoriser can widen where it
could not widen the branches inside. Users: `trig.py` (sin, cos, tan) and
`storage_conversions.py` (f32 → bf16 rounding by `vcvtneps2bf16`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from llvmlite import ir

from reverie.compiler.backend.irutil import PTR, vector_lanes

Define = Callable[[ir.Module, int, str], ir.Function]


@functools.cache
def vector_widths() -> tuple[int, ...]:
    """The widths given a vector version: a register and half a register of f64 and of f32.

    The loop vectoriser fills a register of f64 (f64 loops) or of f32 (f32 and mixed loops,
    and the width `llvm.py` asks of sums), or half of one on CPUs that LLVM tunes for
    vectors narrower than their registers (256-bit ones on Intel's AVX-512 CPUs, Skylake-X
    to Sapphire Rapids). At a width with no version it would call the scalar function once
    per lane. A version no loop calls costs compile time only."""
    lanes = (vector_lanes("f64"), vector_lanes("f32"))
    return tuple(sorted({n for full in lanes for n in (full // 2, full) if n > 1}))


def call_with_variants(builder: ir.IRBuilder, symbol: str, define: Define,
                       args: Sequence[ir.Value]) -> ir.CallInstr:
    """A call of `symbol(args)` that the vectoriser widens into its vector versions (the
    module docstring); `define(module, lanes, name)` defines a version (lanes 1: scalar)."""
    module = builder.module
    scalar = module.globals.get(symbol)
    if scalar is None:
        scalar = _versioned(define(module, 1, symbol), 1)
        _keep_alive(module, [scalar, *(_versioned(define(module, lanes, f"{symbol}.v{lanes}"),
                                                  lanes) for lanes in vector_widths())])
    instruction = builder.call(scalar, list(args))
    mapping = ",".join(f"_ZGV_LLVM_N{lanes}{'v' * len(args)}_{symbol}({symbol}.v{lanes})"
                       for lanes in vector_widths())
    # llvmlite only accepts a fixed list of attribute names; this one is a string attribute
    set.add(instruction.attributes, f'"vector-function-abi-variant"="{mapping}"')
    return instruction


def every_lane(b: ir.IRBuilder, condition: ir.Value, lanes: int) -> ir.Value:
    """Whether `condition` (an i1, or a vector of `lanes` of them) holds in every lane."""
    if lanes == 1:
        return condition
    mask = ir.IntType(lanes)
    return b.icmp_unsigned("==", b.bitcast(condition, mask), ir.Constant(mask, (1 << lanes) - 1))


def any_lane(b: ir.IRBuilder, condition: ir.Value, lanes: int) -> ir.Value:
    """Whether `condition` (an i1, or a vector of `lanes` of them) holds in some lane."""
    if lanes == 1:
        return condition
    mask = ir.IntType(lanes)
    return b.icmp_unsigned("!=", b.bitcast(condition, mask), ir.Constant(mask, 0))


def phi(b: ir.IRBuilder, incoming: list[tuple[ir.Value, ir.Block]]) -> ir.Value:
    """The value that arrived from whichever block branched here."""
    joined = b.phi(incoming[0][0].type)
    for value, block in incoming:
        joined.add_incoming(value, block)
    return joined


def _versioned(fn: ir.Function, lanes: int) -> ir.Function:
    """`fn`, internal and marked as the module docstring says for its width."""
    fn.linkage = "internal"
    for attribute in ("nounwind", "readnone", "noinline" if lanes == 1 else "alwaysinline"):
        fn.attributes.add(attribute)
    return fn


def _keep_alive(module: ir.Module, functions: list[ir.Function]) -> None:
    """Add `functions` to the module's `@llvm.compiler.used` list (created on first use)."""
    used = module.globals.get("llvm.compiler.used")
    if used is None:
        used = ir.GlobalVariable(module, ir.ArrayType(PTR, 0), "llvm.compiler.used")
        used.linkage, used.section = "appending", "llvm.metadata"
        entries = []
    else:
        entries = list(used.initializer.constant)
    entries += [ir.FormattedConstant(PTR, fn.get_reference()) for fn in functions]
    used.value_type = ir.ArrayType(PTR, len(entries))
    used.initializer = ir.Constant(used.value_type, entries)

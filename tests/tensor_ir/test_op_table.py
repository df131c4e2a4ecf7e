"""The op table is complete: every op has an entry in every per-op table, or says why not.

For each op of `compiler/ir/ops.py` and each concern (reverse mode, forward mode,
batching, fusion class, native loop lowering and scalar code, MLIR export, interpreter),
the table of that concern must hold the op, unless the op's row exempts it with a reason;
an exempt op must then be absent (a stale exemption fails too). Elementwise ops must have
scalar code for every dtype class they accept, at both back ends, and a unary op's VJP and
JVP must both come from its one declared derivative.

A table that loses a rule makes compiling a program that needs it a CompileError naming
the op (before any code runs); every built-in name is reserved against user functions.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.backend import scalar_ops
from reverie.compiler.backend.mathlib import SUPPORTED
from reverie.compiler.export import mlir_scalar
from reverie.compiler.export.mlir import LOWERINGS, export_mlir
from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.compiler.ir.op_defs import (
    BATCH,
    FUSED,
    FUSION_CLASSES,
    JVP,
    ROOT,
    ROOT_WHEN_REDUCING,
    VIEW,
    VJP,
    dtype_class,
)
from reverie.compiler.ir.ops import OPS
from reverie.compiler.lower.builtins import BUILTINS, UNARY_BUILTINS
from reverie.compiler.lower.module_lowering import DTYPE_NAMES, RESERVED
from reverie.compiler.to_loops import emitter
from reverie.compiler.to_loops import lower_blocks as to_loops
from reverie.compiler.transforms.batch import BATCH_RULES
from reverie.compiler.transforms.forward import JVP_RULES
from reverie.compiler.transforms.reverse import VJP_RULES

TABLES = {VJP: VJP_RULES, JVP: JVP_RULES, BATCH: BATCH_RULES}


def native_rules(name: str) -> list[bool]:
    """Whether each native rule the op needs exists (by its fusion class and kind)."""
    op = OPS[name]
    fused = name in emitter.FUSED_RULES
    root = name in to_loops.ROOT_LOWERINGS
    found = {FUSED: [fused], VIEW: [fused, name in emitter.VIEW_RULES], ROOT: [root],
             ROOT_WHEN_REDUCING: [fused, root]}[op.fusion]
    row = op.elementwise
    if row is not None:
        found += [(name, kind) in scalar_ops.RULES for kind in row.operands]
        found += [name in SUPPORTED] if row.math else []
    return found


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_table_has_the_op_or_it_says_why_not(name: str) -> None:
    op = OPS[name]
    assert callable(op.infer) and callable(op.evaluate), "no shape rule or NumPy semantics"
    assert op.fusion in FUSION_CLASSES
    for concern, table in TABLES.items():
        if concern in op.exempt:
            assert op.exempt[concern].strip(), f"exempt from {concern} without a reason"
            assert name not in table, f"exempt from {concern}, but has a rule"
        else:
            assert name in table, f"no {concern} rule"
    assert all(native_rules(name)), "a native rule is missing"
    assert name in LOWERINGS, "no MLIR rule"
    if op.elementwise is not None:
        for kind in op.elementwise.operands:
            assert mlir_scalar.has_rule(name, kind), f"no MLIR scalar code for {kind}"


def test_exemptions_name_known_tables() -> None:
    for name, op in OPS.items():
        assert set(op.exempt) <= set(TABLES), name


@pytest.mark.parametrize("name", sorted(n for n, r in ELEMENTWISE.items() if r.derivative))
def test_both_modes_come_from_the_one_declared_derivative(name: str) -> None:
    maths = ELEMENTWISE[name].derivative.maths
    assert maths in VJP_RULES[name].__doc__ and maths in JVP_RULES[name].__doc__


def test_groups_come_from_the_rows() -> None:
    from reverie.compiler.to_loops.fusion_plan import CHEAP_OPS, VIEW_OPS

    assert VIEW_OPS == {"transpose", "slice", "broadcast", "reshape", "stop_gradient",
                        "dynamic_index"}
    assert CHEAP_OPS == {n for n, op in OPS.items() if op.cheap}


# ---------------------------------------------------------------- missing rules


TANH = "fn f(x: f64[N]) -> f64[N] { return tanh(x) * 2.0; }"


@pytest.mark.usefixtures("uncached")
def test_a_missing_scalar_rule_is_a_compile_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(scalar_ops.RULES, ("tanh", "float"))
    module = rv.compile(TANH)
    with pytest.raises(rv.CompileError, match="native backend.*no rule for 'tanh'"):
        module.f(np.ones(3))


@pytest.mark.usefixtures("uncached")
def test_a_missing_loop_rule_is_a_compile_error_at_the_op(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(emitter.FUSED_RULES, "tanh")
    module = rv.compile(TANH)
    with pytest.raises(rv.CompileError, match="loop lowering has no rule for 'tanh'") as info:
        module.f(np.ones(3))
    assert info.value.diagnostics[0].line == 1


@pytest.mark.usefixtures("uncached")
def test_a_missing_root_rule_is_a_compile_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(to_loops.ROOT_LOWERINGS, "matmul")
    module = rv.compile("fn f(a: f64[N, K], b: f64[K, M]) -> f64[N, M] { return a @ b; }")
    with pytest.raises(rv.CompileError, match="no rule for 'matmul'"):
        module.f(np.ones((2, 3)), np.ones((3, 2)))


@pytest.mark.usefixtures("uncached")
def test_a_missing_mlir_rule_is_a_compile_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(mlir_scalar.COMPOSITES, ("sigmoid", "float"))
    fn = rv.compile("fn f(x: f64[N]) -> f64[N] { return sigmoid(x); }",
                    backend="interp").lowering.specialise("f", "f64")
    with pytest.raises(rv.CompileError, match="MLIR export.*no rule for 'sigmoid'"):
        export_mlir(fn, "f.rv")


# ---------------------------------------------------------------- reserved names


def test_the_reserved_names_are_the_builtins() -> None:
    callable_names = set(BUILTINS) | {"max", "min"}
    assert RESERVED == callable_names | {"bool"}
    assert {"sum", "max", "cumsum", "topk", "float", "f64", "i32", "exp"} <= RESERVED
    builtins = {row.name for row in ELEMENTWISE.values() if row.builtin}
    unary = {row.name for row in ELEMENTWISE.values() if row.builtin and row.arity == 1}
    assert unary == set(UNARY_BUILTINS) and builtins <= RESERVED
    assert {"arctan2", "hypot", "logaddexp", "logaddexp2"} <= builtins - unary


@pytest.mark.parametrize("name", sorted(set(BUILTINS) | {"max", "min"}))
def test_a_user_function_shadows_a_builtin_of_its_name(name: str) -> None:
    """A user function may take any built-in's name but a dtype's (docs/language.md §1):
    calls in its module reach it, as a Python def shadows a built-in."""
    source = (f"fn {name}(x: f32) -> f32 {{ return x + 1.0; }}\n"
              f"fn g(x: f32) -> f32 {{ return {name}(x); }}")
    if name in DTYPE_NAMES:
        with pytest.raises(rv.CompileError, match="names a dtype"):
            rv.compile(source, backend="interp")
    else:
        assert rv.compile(source, backend="interp").g(np.float32(2.0)) == 3.0


def test_dtype_classes() -> None:
    assert [dtype_class(d) for d in ("f32", "i64", "bool")] == ["float", "int", "bool"]

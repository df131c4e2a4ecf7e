"""Dimension expressions emitted as LLVM integers (`backend/irutil.index_value`).

Floor division by a constant must floor for negative numerators too (a dimension
expression such as `(N - 100) // 64` can be negative before `max(..., 0)` applies): by a
power of two it is emitted as an arithmetic shift, otherwise as a division corrected by
the remainder's sign; both are checked here against Python's `//` on the native code.
"""

from __future__ import annotations

import ctypes

import pytest
from llvmlite import ir

from reverie.compiler.backend.irutil import I64, index_value
from reverie.compiler.ir.dims import Dim
from reverie.runtime.native import jit

N = Dim.sym("N")
UNARY = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)


def native(dim: Dim) -> ctypes._CFuncPtr:
    """`dim` compiled as a native function of N."""
    module = ir.Module(name="index_value")
    function = ir.Function(module, ir.FunctionType(I64, [I64]), name="value_of")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    builder.ret(index_value(builder, dim, lambda name: function.args[0]))
    compiled = jit.compile_module(str(module), name="index_value", pipeline=None)
    return UNARY(compiled.address("value_of")), compiled


@pytest.mark.parametrize("denominator", [2, 3, 6, 8, 64, 1024])
def test_floor_division_floors_for_every_sign(denominator: int) -> None:
    dim = (N - 100) // denominator
    value_of, _module = native(dim)
    for n in (-5000, -129, -128, -101, -100, -99, 0, 99, 100, 101, 163, 164, 5000):
        assert value_of(n) == (n - 100) // denominator, (n, denominator)


def test_the_workspace_alignment_is_a_shift() -> None:
    module = ir.Module(name="index_value")
    function = ir.Function(module, ir.FunctionType(I64, [I64]), name="value_of")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    builder.ret(index_value(builder, (8 * N + 63) // 64, lambda name: function.args[0]))
    text = str(module)
    assert "ashr" in text and "sdiv" not in text and "srem" not in text

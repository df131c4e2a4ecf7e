"""The one native call entry of the process and each kernel's small part of it
(`call_boundary/fastcall_entry.py`, `call_boundary/fastcall_bind.py`,
`call_boundary/fastcall_descriptor.py`, `runtime/native/fastcall.py`).

Behaviour through the entry (results, fallbacks, errors, threads, reference counts) is
checked in `tests/backend/test_native_entry.py` and `test_call_boundary.py`; these tests
check the split: a kernel's module holds only its `bind` function (pure integer code),
every kernel's callable runs the same entry, compiled once, and the descriptor in `self`
says what the kernel's signature says.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.call_boundary.abi import CALL_DESCRIPTOR, CALL_ENTRY
from reverie.compiler.call_boundary.fastcall_descriptor import (
    BIND,
    ENTRY_DTYPES,
    FIRST_ARRAY,
    FLAGS,
    HEAVY,
    KERNEL,
    LAYOUT,
    OUTPUTS,
    PARAMETERS,
    SYMBOLS,
    TUPLE_RESULT,
    CallSignature,
)
from reverie.runtime.native import helpers

SOURCE = """
fn sumsq(x: f64[N]) -> f64 { return sum(x * x); }
fn pad1(x: f64[N], y: f64[N + 1], s: f32) -> (f64[N], f32) { return (x + y[1:], s); }
fn steps(u0: f64[N], count: i32) -> f64[N] {
    var u = u0;
    for t in 0..count { u = 0.5 * u; }
    return u;
}
"""


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def functions(llvm_ir: str) -> dict[str, str]:
    """The functions an LLVM module defines: name -> body."""
    return {match.group(1): match.group(2) for match in
            re.finditer(r'^define [^@]*@"?([\w.]+)"?\(.*?\{\n(.*?)^\}', llvm_ir, re.M | re.S)}


def test_a_kernel_module_holds_a_bind_function_and_no_entry(m: rv.Module) -> None:
    llvm_ir = m.ir("llvm-raw", fn="pad1")
    defined = functions(llvm_ir)
    assert {"rv_pad1", "rv_pad1_objects", "rv_pad1_bind"} <= set(defined)
    assert not any("vectorcall" in name for name in defined)
    assert not re.search(r'^declare [^\n]*@"?Py', llvm_ir, re.M)  # no CPython at all
    bind = defined["rv_pad1_bind"]
    called = re.findall(r' call [^@\n]*@"?([\w.]+)', bind)
    assert all(name.startswith("llvm.") for name in called), called  # pure integer: no
    # CPython, no allocation; LLVM's intrinsics only (the sizes' overflow checks)
    assert bind.count("\n") < 60


def entry_of(kernel: rv.Kernel, *args: object) -> object:
    """The native entry in front of `kernel` after one call with `args`."""
    kernel(*args)
    entry = kernel._call
    assert type(entry).__name__ == "builtin_function_or_method"
    return entry


def test_every_kernel_runs_the_one_entry(m: rv.Module) -> None:
    x = np.arange(4.0)
    pad1 = entry_of(m.pad1, x, np.arange(5.0), 2.0)
    steps = entry_of(m.steps, x, 3)
    words = [entry.__self__[CALL_DESCRIPTOR] for entry in (pad1, steps)]
    assert words[0][KERNEL] != words[1][KERNEL] and words[0][BIND] != words[1][BIND]
    assert helpers._call_entry_module.cache_info().currsize == 1
    assert CALL_ENTRY in helpers._call_entry_module().symbols
    np.testing.assert_array_equal(steps(x, 3), x * 0.125)


def test_the_descriptor_is_the_signature(m: rv.Module) -> None:
    pad1 = entry_of(m.pad1, np.arange(4.0), np.arange(5.0), 2.0)
    words = pad1.__self__[CALL_DESCRIPTOR]
    assert (words[PARAMETERS], words[OUTPUTS], words[SYMBOLS]) == (3, 2, 1)
    assert words[LAYOUT] == 1 + 1  # the workspace size, then the one axis of output 0
    assert words[FLAGS] == 0  # no loop, no product; several results: a tuple anyway
    pairs = [(ENTRY_DTYPES[words[k]], int(words[k + 1]))
             for k in range(FIRST_ARRAY, len(words), 2)]
    assert pairs == [("f64", 1), ("f64", 1), ("f32", 0), ("f64", 1), ("f32", 0)]
    steps = entry_of(m.steps, np.arange(4.0), 3)
    assert steps.__self__[CALL_DESCRIPTOR][FLAGS] == HEAVY  # a loop: the GIL is released
    gradients = entry_of(m.sumsq.grad(["x"]), np.arange(4.0))  # a list: always a tuple
    assert gradients.__self__[CALL_DESCRIPTOR][FLAGS] == TUPLE_RESULT
    (gradient,) = gradients(np.arange(4.0))
    np.testing.assert_array_equal(gradient, 2 * np.arange(4.0))


def test_a_signature_read_back_must_be_well_formed() -> None:
    good = CallSignature(params=(("f64", 1),), outputs=(("f64", 0),), symbols=1, heavy=False)
    assert good.well_formed()
    for bad in [good._replace(params=(("c64", 1),)), good._replace(outputs=(("f64", 99),)),
                good._replace(symbols=-1), good._replace(heavy=1),
                good._replace(params=(), outputs=()),
                good._replace(params=(("f64", 1),) * 300)]:
        assert not bad.well_formed(), bad

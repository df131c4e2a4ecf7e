"""Sizes computed from a call's arguments: an overflow or an impossible allocation is a clear
error on every entry, never a crash (issue 30; `compiler/backend/allocation.py`).

An `i64` argument that sizes a temporary, a result or a loop's history can make the bytes a
call needs overflow int64 (`n * n * 8` with n = 2**31) or exceed any machine's memory. Each
hostile call runs in a subprocess, so that a segfault fails its test instead of ending
pytest; the subprocess prints what each call raised. Every kernel is called twice with the
hostile sizes: first through the Python call path (no disk cache, so no native entry yet),
then, after a small call has put the native call entry in front, through that entry.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from llvmlite import ir

import reverie as rv
from reverie.compiler.backend.allocation import MAX_ALLOCATION_BYTES
from reverie.compiler.backend.irutil import I64, Overflow, index_value
from reverie.compiler.call_boundary.abi import WORKSPACE_HEADER, WORKSPACE_SLACK
from reverie.compiler.ir.dims import Dim, ceil_sqrt
from reverie.runtime.native import jit

SOURCE = """
fn f(x: f64[N], steps: i64) -> f64 {        # its gradient stores `steps` rows of N
    var y = x;
    for t in 0..steps { y = sin(y); }
    return sum(y);
}
fn g(x: f64[M], n: i64) -> f64 {            # an n x n temporary (two, differentiated)
    let a[i in 0..n, j in 0..n] = x[0] * f64(i) + f64(j);
    return sum(a @ a);
}
fn h(x: f64[M], n: i64) -> f64[n, n] {      # an n x n result
    let a[i in 0..n, j in 0..n] = x[0] * f64(i) + f64(j);
    return a;
}
"""
PRELUDE = f"""
import json
import numpy as np
import reverie as rv
m = rv.compile({SOURCE!r})
x = np.ones(8)

def attempt(call):
    try:
        call()
    except Exception as error:
        print(json.dumps([type(error).__name__, str(error)]), flush=True)
    else:
        print(json.dumps([None, "no error"]), flush=True)
"""
TIMEOUT_S = 600
OVERFLOWS = "more bytes than a 64-bit size holds"


def outcomes(body: str) -> list[tuple[str | None, str]]:
    """(exception type name, message) of each `attempt(...)` in `body`, run after PRELUDE in
    a fresh process without the disk cache; the process must not crash."""
    env = {**os.environ, "REVERIE_CACHE": "0"}
    done = subprocess.run([sys.executable, "-c", PRELUDE + body], capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=env)
    assert done.returncode == 0, (f"the process ended with status {done.returncode}:\n"
                                  f"{done.stderr[-3000:]}")
    return [tuple(json.loads(line)) for line in done.stdout.splitlines()]


def python_then_native(kernel: str, hostile: str, small: str) -> str:
    """A body calling `kernel` with the hostile arguments through the Python path, then with
    small ones (which installs the native entry), then with the hostile ones again."""
    return (f"kernel = {kernel}\n"
            f"attempt(lambda: kernel({hostile}))\n"
            f"kernel({small})\n"
            f"attempt(lambda: kernel({hostile}))\n")


def assert_refused(found: list[tuple[str | None, str]], error: str, *phrases: str) -> None:
    assert found, "no call was made"
    for kind, message in found:
        assert kind == error, message
        for phrase in phrases:
            assert phrase in message, message


BIG = 2**61
BIG_TEXT = f"n = {BIG} from argument 'n'"
HUGE = 2**23  # an n x n f64 array of 2**49 bytes: below the limit, above any memory

CALLS = {  # what is called, its hostile and its small arguments, what it must raise
    "forward, a temporary overflows": (
        "m.g", f"x, {BIG}", "x, 3", "ValueError", ["g():", "workspace", OVERFLOWS, BIG_TEXT]),
    "forward, a result overflows": (
        "m.h", f"x, {2**31}", "x, 3", "ValueError",
        ["h():", "result 0 (f64[n, n])", OVERFLOWS, f"n = {2**31} from argument 'n'"]),
    "forward, a result beyond any memory": (
        "m.h", f"x, {HUGE}", "x, 3", "MemoryError",
        ["h(): cannot allocate result 0 (f64[n, n])", f"{8 * HUGE**2} bytes"]),
    "forward, a workspace beyond any memory": (
        "m.g", f"x, {HUGE}", "x, 3", "MemoryError",
        ["g(): cannot allocate the call's workspace", f"n = {HUGE} from argument 'n'"]),
    "forward, a workspace above the allocation limit": (
        "m.g", f"x, {2**29}", "x, 3", "MemoryError",
        ["g(): cannot allocate the call's workspace", f"n = {2**29} from argument 'n'"]),
    "grad, a loop's history overflows": (
        "m.f.grad('x')", f"x, {BIG}", "x, 3", "ValueError",
        ["f_grad():", OVERFLOWS, "N = 8 from argument 'x' axis 0",
         f"steps = {BIG} from argument 'steps'"]),
    "grad, a loop's history beyond any memory": (
        "m.f.grad('x')", f"x, {2**45}", "x, 3", "MemoryError",
        ["f_grad(): cannot allocate the call's workspace", f"steps = {2**45}"]),
    "value_and_grad": (
        "m.f.value_and_grad('x')", f"x, {BIG}", "x, 3", "ValueError", [OVERFLOWS, "steps"]),
    "jvp": ("m.g.jvp('x')", f"x, {BIG}, x", "x, 3, x", "ValueError", [OVERFLOWS, BIG_TEXT]),
    "hvp": ("m.g.hvp('x')", f"x, {BIG}, x", "x, 3, x", "ValueError", [OVERFLOWS, BIG_TEXT]),
    "jacobian": ("m.g.jacobian('x')", f"x, {BIG}", "x, 3", "ValueError",
                 [OVERFLOWS, BIG_TEXT]),
    "torch custom op": (
        "rv.torch.function(m.g)", f"torch.ones(8, dtype=torch.float64), {BIG}",
        "torch.ones(8, dtype=torch.float64), 3", "ValueError", ["g():", OVERFLOWS, BIG_TEXT]),
    "recorded Tensor call": (
        "m.g", f"rv.tensor(x, requires_grad=True), {BIG}", "rv.tensor(x, requires_grad=True), 3",
        "ValueError", ["g():", OVERFLOWS, BIG_TEXT]),
}


@pytest.mark.parametrize("case", list(CALLS))
def test_a_hostile_size_is_a_clear_error_on_both_call_paths(case: str) -> None:
    kernel, hostile, small, error, phrases = CALLS[case]
    body = ("import torch\n" if "torch" in kernel else "") + python_then_native(
        kernel, hostile, small)
    found = outcomes(body)
    assert len(found) == 2
    assert_refused(found, error, *phrases)


def test_small_sizes_still_run_after_a_refusal() -> None:
    found = outcomes(f"attempt(lambda: m.g(x, {BIG}))\n"
                     "print(json.dumps([None, str(m.g(x, 3))]))\n")
    assert found[0][0] == "ValueError"
    assert found[1] == (None, str(rv.compile(SOURCE).g([1.0] * 8, 3)))


def test_the_xla_handler_refuses_hostile_sizes() -> None:
    """jax.jit(jax.grad(...)) with a traced loop count: the handler checks the workspace
    it allocates (an overflow, a size above the limit, a failed malloc) and XLA reports it
    (JAX raises ValueError for these codes; JaxRuntimeError is accepted too)."""
    found = outcomes(
        "import jax\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "gradient = jax.jit(jax.grad(rv.jax.function(m.f)))\n"
        "print(json.dumps([None, str(float(gradient(x, 3)[0]))]))\n"
        + "".join(f"attempt(lambda: gradient(x, {steps}).block_until_ready())\n"
                  for steps in (BIG, 2**55, 2**45)))
    assert found[0][0] is None
    overflow, above_limit, unallocated = found[1:]
    for kind, _ in found[1:]:
        assert kind in ("ValueError", "JaxRuntimeError")
    assert "INVALID_ARGUMENT: f_vjp():" in overflow[1] and OVERFLOWS in overflow[1]
    assert f"steps = {BIG} from argument 'steps'" in overflow[1]
    for (_, message), steps in ((above_limit, 2**55), (unallocated, 2**45)):
        assert "RESOURCE_EXHAUSTED: f_vjp(): cannot allocate the call's workspace" in message
        assert f"steps = {steps} from argument 'steps'" in message


@pytest.mark.mlir
def test_the_mlir_backend_refuses_what_its_memrefs_cannot_hold() -> None:
    """MLIR's lowered code sizes memrefs in unchecked int64 and never checks malloc: the
    MLIR kernel checks every value's bytes before it runs (segfault on the old code)."""
    found = outcomes(f"m = rv.compile({SOURCE!r}, backend='mlir')\n"
                     f"attempt(lambda: m.g(x, {BIG}))\n"
                     f"attempt(lambda: m.h(x, {2**31}))\n"
                     f"attempt(lambda: m.f.grad('x')(x, {BIG}))\n"
                     f"attempt(lambda: m.g(x, {HUGE}))\n"
                     "print(json.dumps([None, str(m.g(x, 3))]))\n")
    assert [kind for kind, _ in found] == ["ValueError"] * 3 + ["MemoryError", None]
    assert all(OVERFLOWS in message for _, message in found[:3])
    assert found[3][1].startswith("g(): a f64[8388608, 8388608] value")
    assert float(found[4][1]) == rv.compile(SOURCE).g(np.ones(8), 3)


# ---------------------------------------------------------------- max_iterations

COUNTDOWN = "fn f(x: f64) -> f64 { var u = x; while u > 0.0 { u = u - 1.0; } return u; }"


@pytest.mark.parametrize("backend", ["interp", "native", "mlir"])
@pytest.mark.parametrize("limit", [2**63, 2**64 + 1])
def test_max_iterations_beyond_int64_is_refused(backend: str, limit: int) -> None:
    with pytest.raises(ValueError, match=r"max_iterations must be at most 2\*\*63 - 1"):
        rv.compile(COUNTDOWN, backend=backend, max_iterations=limit)


@pytest.mark.parametrize("backend", ["interp", "native", "mlir"])
def test_the_largest_iteration_limit_runs(backend: str) -> None:
    module = rv.compile(COUNTDOWN, backend=backend, max_iterations=2**63 - 1)
    assert module.f(3.5) == -0.5
    assert module.f.grad()(3.5) == (1.0,)


def test_an_environment_limit_beyond_int64_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_MAX_ITERATIONS", str(2**63))
    with pytest.raises(ValueError, match=r"REVERIE_MAX_ITERATIONS must be at most 2\*\*63"):
        rv.compile(COUNTDOWN)


# ---------------------------------------------------------------- checked size arithmetic

N = Dim.sym("N")
CHECKED = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_bool))


def checked(dim: Dim) -> tuple[ctypes._CFuncPtr, object]:
    """`dim` compiled as a native function of N, computed with overflow checks: it returns
    the value and stores whether a product or sum overflowed."""
    module = ir.Module(name="checked_index_value")
    function = ir.Function(module, ir.FunctionType(I64, [I64, ir.PointerType()]),
                           name="value_of")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    overflow = Overflow()
    value = index_value(builder, dim, lambda name: function.args[0], overflow)
    builder.store(builder.zext(overflow.flag, ir.IntType(8)), function.args[1])
    builder.ret(value)
    compiled = jit.compile_module(str(module), name="checked_index_value", pipeline=None)
    return CHECKED(compiled.address("value_of")), compiled


@pytest.mark.parametrize(("dim", "n", "overflows"), [
    (8 * N * N, 2**29, False), (8 * N * N, 2**30, True), (8 * N * N, 2**31, True),
    (8 * N * N + 63, 2**30 - 1, False), (N * N * N, 2**21 - 1, False), (N * N * N, 2**21, True),
    ((8 * N * N + 63) // 64 * 64, 2**30 - 1, False), ((8 * N * N + 63) // 64 * 64, 2**30, True),
    (N + (2**63 - 2), 1, False), (N + (2**63 - 2), 2, True), (-N * N, 3037000499, False),
    (N * N - 2 * N, 3037000500, True)])  # (an intermediate product overflows: refused too)
def test_checked_sizes_report_every_overflow(dim: Dim, n: int, overflows: bool) -> None:
    value_of, _module = checked(dim)
    overflowed = ctypes.c_bool()
    value = value_of(n, ctypes.byref(overflowed))
    assert overflowed.value == overflows
    if not overflows:
        assert value == dim.evaluate({"N": n})


@pytest.mark.parametrize("x", [2**63 - 1, 3037000499**2, 3037000499**2 + 1, 2**62, 10**18])
def test_ceil_sqrt_is_exact_up_to_the_largest_int64(x: int) -> None:
    module = ir.Module(name="ceil_sqrt")
    function = ir.Function(module, ir.FunctionType(I64, [I64]), name="value_of")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    builder.ret(index_value(builder, ceil_sqrt(N), lambda name: function.args[0]))
    compiled = jit.compile_module(str(module), name="ceil_sqrt", pipeline=None)
    value_of = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(compiled.address("value_of"))
    assert value_of(x) == math.isqrt(x - 1) + 1


def test_the_limit_leaves_room_for_what_the_entries_add() -> None:
    assert MAX_ALLOCATION_BYTES * WORKSPACE_SLACK + WORKSPACE_HEADER < 2**63

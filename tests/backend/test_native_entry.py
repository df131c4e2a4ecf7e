"""The native call entry (`call_boundary/fastcall_entry.py`, `runtime/native/fastcall.py`).

After a kernel's first call, its calls go straight into native code that checks the
arguments, allocates the results and runs the kernel; whatever it does not take goes to
the Python path. These tests check that the entry is really in front, that its results
are exactly the Python path's (values, dtypes, NumPy scalars, tuples), that every kind of
argument it does not take falls back with the Python path's result or error, and that it
keeps reference counts and threads right. `test_call_boundary.py` runs its whole suite of
bad arguments through the entry as well.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import reverie as rv

SOURCE = """
fn sumsq(x: f64[N]) -> f64 { return sum(x * x); }
fn affine(a: f32[N, D], v: f32[D], s: f32) -> f32[N] { return s * (a @ v); }
fn parts(x: f64[N]) -> (f64, f64[N], i64) { return (mean(x), x - mean(x), argmax(x)); }
fn at(x: f64[N], t: i64) -> f64 { return x[t]; }
fn steps(u0: f64[N], count: i32) -> f64[N] {
    var u = u0;
    for t in 0..count { u = 0.5 * u + 0.25 * (roll(u, 1) + roll(u, -1)); }
    return u;
}
fn scale(x: float[N], s: float) -> float[N] { return x * s; }
fn pad1(x: f64[N], y: f64[N + 1]) -> f64 { return sum(x) + sum(y); }
fn flags(x: bool[N]) -> i32 { return sum(i32(x)); }
"""


@pytest.fixture(scope="module")
def m() -> rv.Module:
    return rv.compile(SOURCE)


def native(kernel: rv.Kernel) -> bool:
    """Whether `kernel`'s calls meet a native entry first."""
    return type(kernel._call).__name__ == "builtin_function_or_method"


def python_path(kernel: rv.Kernel, *args: object) -> object:
    """What the Python path returns (or raises) for `args`."""
    return kernel._call_python(*args)


def same(a: object, b: object) -> None:
    """Equal values of the same types (NumPy scalars, arrays and tuples alike)."""
    assert type(a) is type(b)
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            same(x, y)
    else:
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_array_equal(a, b)


def test_the_entry_takes_over_after_the_first_call(m: rv.Module) -> None:
    x = np.linspace(-1, 1, 16)
    first = m.sumsq(x)
    assert native(m.sumsq)
    same(m.sumsq(x), first)
    assert isinstance(m.sumsq(x), np.float64)


@pytest.mark.parametrize("name", ["sumsq", "parts", "at", "steps", "pad1"])
def test_results_are_the_python_paths(m: rv.Module, name: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(9)
    args = {"sumsq": (x,), "parts": (x,), "at": (x, 3), "steps": (x, np.int32(4)),
            "pad1": (x, rng.standard_normal(10))}[name]
    kernel = m[name]
    kernel(*args)
    same(kernel(*args), python_path(kernel, *args))
    assert native(kernel)


def test_gradients_through_the_entry(m: rv.Module) -> None:
    rng = np.random.default_rng(2)
    a, v = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(3, np.float32)
    loss = rv.compile("fn f(a: f32[N, D], v: f32[D]) -> f32 { return sum(a @ v); }").f
    g = loss.grad(["a", "v"])
    first = g(a, v)
    assert native(g)
    same(g(a, v), first)
    assert isinstance(first, tuple) and len(first) == 2
    single = loss.grad(["v"])  # a list: always a tuple, even of one gradient
    single(a, v)
    assert native(single)
    same(single(a, v), python_path(single, a, v))
    assert isinstance(single(a, v), tuple)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # 1e300 as f32: inf
def test_python_scalars_and_zero_d_arrays(m: rv.Module) -> None:
    a, v = np.ones((4, 3), np.float32), np.arange(3, dtype=np.float32)
    m.affine(a, v, 2.0)
    assert native(m.affine)
    for s in (2.0, 2, np.float32(2.0), np.array(2.0, np.float32), True, 1e300, 2**40):
        expected = python_path(m.affine, a, v, s)
        same(m.affine(a, v, s), expected)


@pytest.mark.parametrize("case", ["f64 array", "strided", "fortran", "list", "rank",
                                  "mismatch", "big int", "string"])
def test_what_the_entry_does_not_take_falls_back(m: rv.Module, case: str) -> None:
    a, v = np.ones((4, 3), np.float32), np.arange(3, dtype=np.float32)
    m.affine(a, v, 1.0)
    args = {"f64 array": (a.astype(np.float64), v, 1.0),
            "strided": (np.ones((4, 6), np.float32)[:, ::2], v, 1.0),
            "fortran": (np.asfortranarray(np.ones((4, 3), np.float32)), v, 1.0),
            "list": (a.tolist(), list(v), 1.0),
            "rank": (a, v[None], 1.0),
            "mismatch": (a, np.ones(4, np.float32), 1.0),
            "big int": (a, v, 2**70),
            "string": (a, v, "1.0")}[case]
    try:
        expected = python_path(m.affine, *args)
    except (TypeError, ValueError) as error:
        with pytest.raises(type(error)) as raised:
            m.affine(*args)
        assert str(raised.value) == str(error)
    else:
        same(m.affine(*args), expected)


def test_errors_from_the_kernel_come_from_the_python_path(m: rv.Module) -> None:
    x = np.arange(5.0)
    assert m.at(x, 2) == 2.0
    assert native(m.at)
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0"):
        m.at(x, 7)
    with pytest.raises(rv.ArgumentTypeError):
        m.at(x, 1.5)
    with pytest.raises(rv.ArgumentTypeError, match="takes 2 argument"):
        m.at(x)


def test_float_kernels_keep_an_entry_per_dtype(m: rv.Module) -> None:
    x64, x32 = np.arange(4.0), np.arange(4.0, dtype=np.float32)
    same(m.scale(x64, 2.0), x64 * 2.0)
    same(m.scale(x32, 2.0), x32 * np.float32(2.0))
    for _ in range(3):
        same(m.scale(x64, 2.0), x64 * 2.0)
        same(m.scale(x32, 2.0), x32 * np.float32(2.0))


def test_bool_arrays_and_numbers_for_bool_parameters(m: rv.Module) -> None:
    flags = np.array([True, False, True])
    assert m.flags(flags) == 2 and native(m.flags)
    assert isinstance(m.flags(flags), np.int32)
    with pytest.raises(rv.ArgumentTypeError):
        m.flags(np.array([1.5]))


def test_tensors_are_recorded_not_run_natively(m: rv.Module) -> None:
    x = np.linspace(0, 1, 6)
    m.sumsq(x)
    leaf = rv.tensor(x, requires_grad=True)
    (grad,) = rv.grad(m.sumsq(leaf), leaf)
    np.testing.assert_allclose(np.asarray(grad), 2 * x)


def test_reference_counts_stay_balanced(m: rv.Module) -> None:
    x = np.linspace(0, 1, 8)
    m.parts(x)
    before = sys.getrefcount(x)
    for _ in range(1000):
        result = m.parts(x)
    assert sys.getrefcount(x) == before
    assert all(sys.getrefcount(r) == 3 for r in result)  # the tuple, `r`, the argument
    assert sys.getrefcount(result) == 2


def test_large_calls_run_in_threads_at_once(m: rv.Module) -> None:
    """Calls moving many elements release the GIL: eight threads get the right results."""
    a = np.random.default_rng(3).standard_normal((512, 256)).astype(np.float32)
    v = np.ones(256, np.float32)
    expected = m.affine(a, v, 0.5)
    results: list[np.ndarray] = []

    def work() -> None:
        for _ in range(20):
            results.append(m.affine(a, v, 0.5))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 160
    for r in results:
        np.testing.assert_array_equal(r, expected)

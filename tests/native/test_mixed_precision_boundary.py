"""bf16/f16 at the native call boundary: NumPy `float16` and `ml_dtypes.bfloat16` arrays in
and out, through the native call entry (`fastcall_entry.py`: dtype codes bf16/f16, 0-d
results boxed as NumPy scalars of the dtype) and the Python path (`runtime/native/call.py`),
with the same conversions and errors as f32/f64 parameters: NumPy's same_kind casting (an
f32 or f64 array for a bf16 parameter is rounded, as an f64 array for an f32 one is), a
TypeError naming the parameter otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest
from storage_helpers import BF16, STORAGE

import reverie as rv

SOURCE = """
fn scale(x: T[N], s: T) -> (T[N], T, f32) { return (x * s, sum(x), f32(max(x))); }
fn blend(x: float[N], y: float[N]) -> float { return sum(x * y); }
fn widen(x: T[N, D]) -> f64[N, D] { return f64(x) * 2.0; }
"""


def native(kernel: rv.Kernel) -> bool:
    """Whether `kernel`'s calls meet a native entry first."""
    return type(kernel._call).__name__ == "builtin_function_or_method"


@pytest.fixture(scope="module", params=list(STORAGE))
def dtype(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def m(dtype: str) -> rv.Module:
    return rv.compile(SOURCE.replace("T", dtype))


def same(got: object, want: object) -> None:
    """The same types and dtypes, and the same bits."""
    assert type(got) is type(want)
    if isinstance(got, tuple):
        for g, w in zip(got, want, strict=True):
            same(g, w)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_results_have_the_dtype_and_scalars_its_scalar_type(m: rv.Module, dtype: str) -> None:
    x = np.linspace(-2, 3, 11).astype(STORAGE[dtype])
    first = m.scale(x, np.asarray(1.5, STORAGE[dtype]))  # (the Python path)
    assert native(m.scale)
    through_entry = m.scale(x, np.asarray(1.5, STORAGE[dtype]))
    same(through_entry, first)
    product, total, largest = through_entry
    assert product.dtype == STORAGE[dtype] and type(total) is STORAGE[dtype].type
    assert type(largest) is np.float32
    wide = x.astype(np.float32)
    same(product, (wide * np.float32(1.5)).astype(STORAGE[dtype]))
    assert float(total) == float(wide.sum().astype(STORAGE[dtype])) and largest == 3.0


def test_the_entry_takes_the_call_without_the_python_path(
        m: rv.Module, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.arange(6).astype(STORAGE[dtype]).reshape(2, 3)
    expected = m.widen(x)
    assert native(m.widen)

    def refuse(*args: object) -> object:
        raise AssertionError("the Python path ran")

    monkeypatch.setattr(m.widen, "_call_python", refuse)
    same(m.widen(x), expected)
    np.testing.assert_array_equal(expected, 2.0 * np.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize("case", ["f32 array", "f64 array", "int array", "python float",
                                  "python int", "strided", "fortran", "list"])
def test_other_arguments_convert_as_numpy_does(m: rv.Module, dtype: str, case: str) -> None:
    target = STORAGE[dtype]
    rng = np.random.default_rng(3)
    wide = rng.standard_normal(12)
    base = wide.astype(target)
    m.scale(base, np.asarray(2.0, target))
    arguments, converted = {
        "f32 array": ((wide.astype(np.float32), 2.0), (wide.astype(np.float32).astype(target),)),
        "f64 array": ((wide, 2.0), (wide.astype(target),)),
        "int array": ((np.arange(12), 2.0), (np.arange(12).astype(target),)),
        "python float": ((base, 0.1), (base, np.asarray(0.1, target))),
        "python int": ((base, 3), (base, np.asarray(3, target))),
        "strided": ((np.repeat(base, 2)[::2], 2.0), (base,)),
        "fortran": ((np.asfortranarray(base), 2.0), (base,)),
        "list": ((base.tolist(), 2.0), (base,)),
    }[case]
    converted = (*converted, np.asarray(2.0, target))[:2]
    same(m.scale(*arguments), m.scale(*converted))
    same(m.scale(*arguments), m.scale._call_python(*arguments))


@pytest.mark.parametrize("case", ["string", "complex", "rank"])
def test_errors_name_the_parameter_on_both_paths(m: rv.Module, dtype: str, case: str) -> None:
    target = STORAGE[dtype]
    m.scale(np.ones(3, target), np.asarray(1.0, target))
    x = {"string": np.array(["1.0", "2.0"]), "complex": np.ones(3) + 1j,
         "rank": np.ones((3, 1), target)}[case]
    with pytest.raises((TypeError, ValueError)) as python_path:
        m.scale._call_python(x, 1.0)
    assert "'x'" in str(python_path.value)
    with pytest.raises(type(python_path.value)) as entry:
        m.scale(x, 1.0)
    assert str(entry.value) == str(python_path.value)


def test_float_parameters_take_the_dtype_of_16_bit_arrays(m: rv.Module, dtype: str) -> None:
    x = np.array([0.5, 1.5, 2.25]).astype(STORAGE[dtype])
    total = m.blend(x, x)
    assert type(total) is STORAGE[dtype].type and float(total) == 0.25 + 2.25 + 5.0625
    same(m.blend(x, x), total)  # (through the bf16/f16 entry)
    with pytest.raises(TypeError, match="'float' parameters got .*'x'.*'y'"):
        m.blend(x, x.astype(np.float32))


def test_jax_bf16_arrays_reach_kernels_as_ml_dtypes_arrays() -> None:
    jnp = pytest.importorskip("jax.numpy")
    module = rv.compile(SOURCE.replace("T", "bf16"))
    values = np.array([1.0, -2.5, 3.25])
    product, total, _ = module.scale(jnp.asarray(values, jnp.bfloat16), 2.0)
    assert product.dtype == BF16
    np.testing.assert_array_equal(product.astype(np.float64), 2.0 * values)
    assert float(total) == 1.75

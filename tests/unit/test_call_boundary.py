"""The call boundary (docs/api.md §1–2): arity, dtype conversion, dimension binding, results.

Each test calls compiled functions from Python the way a user would and checks what comes
back or what is raised: `rv.ArgumentTypeError` (a TypeError) for arity and dtype problems,
`rv.ShapeMismatchError` (a ValueError) for ranks and dimensions, `rv.ArgumentValueError`
(a ValueError) for integers that do not fit the declared integer type, `IndexError` for
integer subscripts out of range. Inputs must never be modified, and strided views must work.
Every test runs on the NumPy interpreter, on the native backend, and on the native backend
with every kernel's native call entry (`runtime/native/fastcall.py`) in front from the first call,
so each bad-argument case also goes through the entry and must fall back to the same error.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv

SOURCE = """
fn dot(x: f32[N], y: f32[N]) -> f32 { return sum(x * y); }
fn total(x: i64[N]) -> i64 { return sum(x); }
fn scaled(a: f64, n: i64, x: f64[N]) -> f64[N] { return a * f64(n) * x; }
fn matvec(a: float[N, D], v: float[D]) -> float[N] { return a @ v; }
fn scale_float(x: float[N], s: float) -> float[N] { return x * s; }
fn half(s: float) -> float { return s * 0.5; }
fn tail(x: f64[N]) -> f64[N - 1] { return x[1:]; }
fn middle(x: f64[N]) -> f64[N - 2] { return x[1:N - 1]; }
fn identity(x: f64[N, D]) -> f64[N, D] { return x; }
fn row_sums(x: f64[N, D]) -> f64[N] { return sum(x, axis=1); }
fn grow(x: f64[N], y: f64[N + 1]) -> f64 { return sum(x) + sum(y); }
fn pairs(x: f64[2 * K]) -> f64[K] { return reshape(x, (K, 2))[:, 0]; }
fn stats(x: f64[N]) -> (f64, f64[N], i64) { return (mean(x), x - mean(x), argmax(x)); }
fn at(x: f64[N], t: i64) -> f64 { return x[t]; }
fn smooth(u0: f64[N], steps: i64) -> f64[N] {
    var u = u0;
    for t in 0..steps { u = 0.5 * u + 0.25 * (roll(u, 1) + roll(u, -1)); }
    return u;
}
fn count(x: bool[N]) -> i64 { return sum(i64(x)); }
fn pick(x: f64[N], labels: i32[M]) -> f64[M] { let y[m] = x[labels[m]]; return y; }
fn at32(x: f64[N], t: i32) -> f64 { return x[t]; }
fn total32(x: i32[N]) -> i32 { return sum(x); }
"""


@pytest.fixture(scope="module", params=["interp", "native", "native-entry"])
def m(request: pytest.FixtureRequest) -> rv.Module:
    """The module, once per backend: the boundary must behave the same for all."""
    module = rv.compile(SOURCE, backend=request.param.removesuffix("-entry"))
    if request.param == "native-entry":
        for kernel in module.kernels.values():
            for dtype in ("f32", "f64"):
                kernel.enter_native(kernel.ir_for(dtype))
            if kernel.name != "pairs":  # K is known only by solving 2 * K: Python path
                assert type(kernel._call).__name__ == "builtin_function_or_method", kernel.name
    return module


# ---------------------------------------------------------------- arity


def test_too_few_arguments_is_a_type_error(m: rv.Module) -> None:
    with pytest.raises(rv.ArgumentTypeError, match=r"dot\(\) takes 2 argument") as info:
        m.dot(np.ones(3, np.float32))
    assert isinstance(info.value, TypeError)


def test_too_many_arguments_is_a_type_error(m: rv.Module) -> None:
    with pytest.raises(TypeError, match="got 3"):
        m.dot(np.ones(3), np.ones(3), np.ones(3))


def test_error_classes_are_the_documented_subclasses() -> None:
    assert issubclass(rv.ArgumentTypeError, TypeError)
    assert issubclass(rv.ShapeMismatchError, ValueError)
    assert issubclass(rv.ArgumentValueError, ValueError)


# ---------------------------------------------------------------- dtype conversion


def test_int_array_for_float_param_is_converted(m: rv.Module) -> None:
    result = m.dot(np.arange(3), np.arange(3))
    assert np.asarray(result).dtype == np.float32
    assert result == pytest.approx(5.0)


def test_f64_array_for_f32_param_is_converted(m: rv.Module) -> None:
    x = np.array([0.1, 0.2, 0.3])
    result = m.dot(x, x)
    assert np.asarray(result).dtype == np.float32
    assert result == pytest.approx(np.sum(x * x), rel=1e-6)


def test_float_array_for_int_param_is_a_type_error(m: rv.Module) -> None:
    with pytest.raises(rv.ArgumentTypeError, match="'x'.*float64.*int64"):
        m.total(np.ones(3))


def test_narrower_and_wider_ints_and_bools_for_int_param(m: rv.Module) -> None:
    assert m.total(np.arange(4, dtype=np.int32)) == 6
    assert m.total(np.array([True, True, False])) == 2
    assert np.asarray(m.total(np.arange(4, dtype=np.int8))).dtype == np.int64


@pytest.mark.parametrize("labels", [
    np.array([0, 2**32 + 1]), np.array([-2**31 - 1, 1]), np.array([2**31], np.uint32),
    np.array([0, 2**63], np.uint64), [1, 2**40]])
def test_integers_that_do_not_fit_a_narrower_int_param_are_value_errors(
        m: rv.Module, labels: object) -> None:
    """NumPy's same_kind allows int64 -> int32 but wraps (2**32 + 1 -> 1): never silently."""
    with pytest.raises(rv.ArgumentValueError, match=r"pick\(\): argument 'labels' holds "
                                                    r"-?\d+, which does not fit int32"):
        m.pick(np.arange(3.0), labels)


def test_narrowing_integer_conversions_check_the_values(m: rv.Module) -> None:
    """Values that fit convert (the limits included); one that does not fit raises."""
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(m.pick(x, np.array([2, 0, 1])), [3.0, 1.0, 2.0])
    np.testing.assert_array_equal(m.pick(x, np.array([2, 1], np.uint64)), [3.0, 2.0])
    assert m.total32(np.array([-2**31, 2**31 - 1, 0])) == np.int32(-1)
    assert m.total32(np.array([], np.int64)) == 0
    assert m.total(np.array([2**63 - 1], np.uint64)) == 2**63 - 1
    with pytest.raises(rv.ArgumentValueError, match=f"'x' holds {2**63}.*int64"):
        m.total(np.array([1, 2**63], np.uint64))


@pytest.mark.parametrize(("name", "value"), [
    ("at32", 2**31), ("at32", -2**31 - 1), ("at32", np.int64(2**33)), ("at", 2**63),
    ("at", -2**63 - 1), ("at", 10**40)])
def test_scalar_integers_out_of_range_are_value_errors(m: rv.Module, name: str,
                                                       value: object) -> None:
    with pytest.raises(rv.ArgumentValueError, match=f"{name}\\(\\): argument 't'") as info:
        m[name](np.arange(3.0), value)
    assert not isinstance(info.value, OverflowError)


def test_python_int_too_large_for_a_float_param_is_a_value_error(m: rv.Module) -> None:
    with pytest.raises(rv.ArgumentValueError, match="argument 'a' is an integer of 13288 bits"):
        m.scaled(10**4000, 3, np.arange(3.0))
    np.testing.assert_allclose(m.scaled(2**70, 1, np.ones(2)), [2.0**70] * 2)


def test_complex_and_string_arrays_are_type_errors(m: rv.Module) -> None:
    with pytest.raises(TypeError):
        m.dot(np.ones(3, complex), np.ones(3))
    with pytest.raises(TypeError):
        m.dot(np.array(["a", "b", "c"]), np.ones(3))


def test_numbers_for_bool_param_are_type_errors(m: rv.Module) -> None:
    with pytest.raises(TypeError):
        m.count(np.arange(3))
    assert m.count(np.array([True, False, True])) == 2


def test_lists_are_accepted(m: rv.Module) -> None:
    assert m.dot([1.0, 2.0], [3.0, 4.0]) == pytest.approx(11.0)
    np.testing.assert_allclose(m.row_sums([[1, 2], [3, 4]]), [3.0, 7.0])


def test_python_scalars_for_scalar_params(m: rv.Module) -> None:
    x = np.arange(3.0)
    np.testing.assert_allclose(m.scaled(2.0, 3, x), 6.0 * x)
    np.testing.assert_allclose(m.scaled(2, 3, x), 6.0 * x)
    np.testing.assert_allclose(m.scaled(np.float32(2.0), np.int32(3), x), 6.0 * x)
    np.testing.assert_allclose(m.scaled(np.array(2.0), np.array(3), x), 6.0 * x)


def test_float_scalar_for_int_scalar_param_is_a_type_error(m: rv.Module) -> None:
    with pytest.raises(rv.ArgumentTypeError, match="'n'"):
        m.scaled(2.0, 3.5, np.arange(3.0))


def test_array_for_scalar_param_is_a_rank_error(m: rv.Module) -> None:
    with pytest.raises(rv.ShapeMismatchError, match="'a'"):
        m.scaled(np.ones(1), 3, np.arange(3.0))


# ---------------------------------------------------------------- float specialisation


def test_float_params_follow_f32_arrays(m: rv.Module) -> None:
    a, v = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
    result = m.matvec(a, v)
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, a @ v)


def test_float_params_follow_f64_arrays(m: rv.Module) -> None:
    a, v = np.ones((2, 3)), np.arange(3.0)
    result = m.matvec(a, v)
    assert result.dtype == np.float64
    np.testing.assert_allclose(result, a @ v)


def test_float_params_from_int_arrays_or_lists_default_to_f64(m: rv.Module) -> None:
    assert m.matvec(np.ones((2, 3), np.int64), [1, 2, 3]).dtype == np.float64


def test_python_scalar_does_not_change_the_float_dtype(m: rv.Module) -> None:
    x = np.arange(3, dtype=np.float32)
    result = m.scale_float(x, 2.0)
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, 2 * x)


def test_only_python_scalars_specialise_to_f64(m: rv.Module) -> None:
    result = m.half(3.0)
    assert np.asarray(result).dtype == np.float64
    assert result == 1.5
    assert np.asarray(m.half(np.float32(3.0))).dtype == np.float32


def test_mixed_f32_f64_arrays_for_float_params_is_a_type_error(m: rv.Module) -> None:
    with pytest.raises(rv.ArgumentTypeError, match="float32.*'a'.*float64.*'v'"):
        m.matvec(np.ones((2, 3), np.float32), np.ones(3))


# ---------------------------------------------------------------- shapes and dimensions


def test_inconsistent_dimension_names_dimension_arguments_and_sizes(m: rv.Module) -> None:
    with pytest.raises(rv.ShapeMismatchError) as info:
        m.dot(np.ones(3), np.ones(4))
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    for part in ("dimension N", "'x'", "'y'", "3", "4"):
        assert part in message


def test_inconsistent_dimension_across_axes(m: rv.Module) -> None:
    with pytest.raises(ValueError, match=r"dimension D is 3 in argument 'a'.*2 in argument 'v'"):
        m.matvec(np.ones((2, 3)), np.ones(2))


def test_rank_mismatch_is_a_value_error(m: rv.Module) -> None:
    with pytest.raises(rv.ShapeMismatchError, match=r"'x' must have 1 dimension.*\(3, 1\)"):
        m.dot(np.ones((3, 1)), np.ones(3))


def test_dimension_expressions_are_solved_and_checked(m: rv.Module) -> None:
    assert m.grow(np.ones(2), np.ones(3)) == 5.0
    with pytest.raises(rv.ShapeMismatchError, match="'y'"):
        m.grow(np.ones(2), np.ones(2))
    np.testing.assert_allclose(m.pairs(np.arange(6.0)), [0.0, 2.0, 4.0])
    with pytest.raises(rv.ShapeMismatchError):
        m.pairs(np.arange(5.0))


def test_slice_constraints_are_checked_at_the_call(m: rv.Module) -> None:
    with pytest.raises(rv.ShapeMismatchError, match="N=0"):
        m.tail(np.ones(0))
    assert m.tail(np.ones(1)).shape == (0,)
    with pytest.raises(ValueError, match="N=1"):
        m.middle(np.ones(1))
    np.testing.assert_allclose(m.middle(np.arange(4.0)), [1.0, 2.0])


def test_empty_dimensions_work(m: rv.Module) -> None:
    assert m.row_sums(np.ones((0, 3))).shape == (0,)
    np.testing.assert_allclose(m.row_sums(np.ones((2, 0))), [0.0, 0.0])


def test_integer_subscript_out_of_range_is_an_index_error(m: rv.Module) -> None:
    x = np.arange(4.0)
    assert m.at(x, 3) == 3.0
    with pytest.raises(IndexError, match="4"):
        m.at(x, 4)
    with pytest.raises(IndexError):
        m.at(x, -1)


# ---------------------------------------------------------------- layouts and aliasing


@pytest.mark.parametrize("layout", ["transposed", "strided", "reversed", "fortran", "sliced"])
def test_non_contiguous_inputs(m: rv.Module, layout: str) -> None:
    base = np.arange(48.0).reshape(6, 8)
    x = {"transposed": base.T, "strided": base[::2, ::3], "reversed": base[::-1, ::-1],
         "fortran": np.asfortranarray(base), "sliced": base[1:4, 2:]}[layout]
    np.testing.assert_array_equal(m.row_sums(x), x.sum(axis=1))
    np.testing.assert_array_equal(m.identity(x), x)


def test_non_contiguous_vectors(m: rv.Module) -> None:
    x = np.arange(20, dtype=np.float32)[::4]
    y = np.arange(10, dtype=np.float32)[::-2]
    assert m.dot(x, y) == pytest.approx(np.dot(x, y))


def test_inputs_are_never_modified(m: rv.Module) -> None:
    rng = np.random.default_rng(0)
    u0 = rng.standard_normal(7)
    x = rng.standard_normal((3, 4))
    before = u0.tobytes(), x.tobytes()
    m.smooth(u0, 5)
    m.identity(x)
    result = m.identity(x)
    result[...] = 0.0
    m.stats(u0)
    assert (u0.tobytes(), x.tobytes()) == before


def test_results_never_alias_inputs(m: rv.Module) -> None:
    x = np.arange(6.0).reshape(2, 3)
    result = m.identity(x)
    assert not np.shares_memory(result, x)
    assert result.flags.writeable


def test_readonly_inputs_are_accepted(m: rv.Module) -> None:
    x = np.arange(6.0).reshape(2, 3)
    x.flags.writeable = False
    np.testing.assert_array_equal(m.row_sums(x), [3.0, 12.0])


# ---------------------------------------------------------------- results


def test_scalar_results_are_zero_dimensional(m: rv.Module) -> None:
    for result in (m.dot(np.ones(2), np.ones(2)), m.total(np.arange(3)), m.half(1.0),
                   m.at(np.arange(3.0), 1)):
        assert np.asarray(result).shape == ()


def test_tuple_returns(m: rv.Module) -> None:
    x = np.array([1.0, 4.0, 2.0])
    result = m.stats(x)
    assert isinstance(result, tuple) and len(result) == 3
    mean, centred, peak = result
    assert np.asarray(mean).shape == () and mean == pytest.approx(7 / 3)
    np.testing.assert_allclose(centred, x - x.mean())
    assert np.asarray(peak).dtype == np.int64 and peak == 1


def test_result_dtypes_follow_the_signature(m: rv.Module) -> None:
    assert np.asarray(m.dot(np.ones(2), np.ones(2))).dtype == np.float32
    assert np.asarray(m.total(np.ones(2, np.int32))).dtype == np.int64
    assert m.tail(np.ones(3)).dtype == np.float64


def test_functions_by_attribute_and_by_name(m: rv.Module) -> None:
    assert m["dot"] is m.dot
    with pytest.raises(AttributeError, match="did you mean 'dot'"):
        m.dott  # noqa: B018
    with pytest.raises(KeyError):
        m["nope"]

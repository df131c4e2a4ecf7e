"""`rv.trace` with sizes (docs/api.md §8–9): shapes are symbolic, never the example's numbers.

Each function is traced at one size and called at several others, against the same
Python function run by NumPy on those arrays; gradients at a new size are checked against
torch and rv.gradcheck. Where Python itself decides with a size (`for row in x`, `range`,
`if x.shape[0] > 3`), the kernel keeps that size and refuses others by name.
"""

from __future__ import annotations

import numpy as np
import pytest

import reverie as rv

RNG = np.random.default_rng(30)


def mean_of_rows(x):
    return x.sum(axis=0) / x.shape[0]


def by_len(x):
    return x.sum() / len(x)


def by_size(x):
    return x.sum() / x.size + x.ndim


def last_elements(x):
    return x[-1] * 2.0 + x[-2] + x[len(x) - 1]


def tails(x):
    return x[-2:].sum() + 3.0 * x[:-1].sum() + x[1:].sum()


def halves(x):
    half = x.shape[0] // 2
    return x[:half].sum() - 2.0 * x[half:].sum() + x[half]


def flat(x):
    return (x.reshape(-1) ** 2).sum()


def rows_of(x):
    return x.reshape(x.shape[0], -1).sum(axis=1)


def last_axis(x):
    return x.reshape(-1, x.shape[-1]).max(axis=0)


def size_numbers(x):
    scale = 1.0 / np.sqrt(x.shape[-1])
    return (x @ x.T * scale).sum() / x.shape[1] ** 2 + x.sum() * (len(x) % 3)


def joined(x):
    return np.concatenate([x, x[1:]]).sum() / (2 * len(x) - 1)


def shape_tuple(x):
    n, d = x.shape
    return x.reshape(n * d).sum() + x[n - 1, d - 1]


CASES = [
    (mean_of_rows, (4, 3), [(7, 3), (2, 5), (1, 1)]),
    (by_len, (4,), [(8,), (3,), (1,)]),
    (by_size, (4, 3), [(5, 2), (9, 7)]),
    (last_elements, (4,), [(8,), (2,)]),
    (tails, (5,), [(9,), (2,)]),
    (halves, (6,), [(11,), (4,)]),
    (flat, (3, 4), [(5, 7), (2, 2)]),
    (rows_of, (2, 3, 4), [(5, 2, 7), (3, 3, 3)]),
    (last_axis, (2, 3, 4), [(5, 2, 7)]),
    (size_numbers, (4, 3), [(5, 2), (7, 6)]),
    (joined, (4, 2), [(7, 3)]),
    (shape_tuple, (4, 3), [(6, 5)]),
]


@pytest.mark.parametrize(("fn", "example", "others"), CASES, ids=[c[0].__name__ for c in CASES])
def test_traced_at_one_size_computes_numpy_at_others(fn, example, others) -> None:
    module = rv.trace(fn, RNG.standard_normal(example))
    assert "fixed" not in module.source  # nothing pinned to the example's sizes
    for shape in [example, *others]:
        x = RNG.standard_normal(shape)
        np.testing.assert_allclose(module[fn.__name__](x), fn(x), rtol=1e-12, atol=1e-12,
                                   err_msg=f"{fn.__name__} at {shape}")


def test_sizes_record_dimension_expressions() -> None:
    """The finding of issue 30: `x.shape[0]` was the example's 4 (9.0 at 8 elements)."""
    module = rv.trace(lambda x: x.sum() / x.shape[0], np.arange(4.0))
    assert module.traced(np.arange(8.0)) == 3.5
    assert "t1 / X0" in module.source
    assert "x[X0 - 1]" in rv.trace(lambda x: x[-1], np.arange(4.0)).source
    assert rv.trace(lambda x: x[-1], np.arange(4.0)).traced(np.arange(8.0)) == 7.0
    assert rv.trace(lambda x: x.sum() / len(x), np.arange(4.0)).traced(np.arange(8.0)) == 3.5


def test_gradients_at_a_new_size_against_torch() -> None:
    torch = pytest.importorskip("torch")

    def loss(x, w):
        centred = x - x.sum(axis=0) / x.shape[0]
        return ((centred @ w) ** 2).sum() / len(x) + x[-2:].reshape(-1).sum()

    module = rv.trace(loss, RNG.standard_normal((4, 3)), RNG.standard_normal(3))
    x, w = RNG.standard_normal((9, 5)), RNG.standard_normal(5)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    expected = loss(xt, wt)
    grads = torch.autograd.grad(expected, (xt, wt))
    np.testing.assert_allclose(module.loss(x, w), expected.item(), rtol=1e-12)
    for got, want in zip(module.loss.grad(wrt=(0, 1))(x, w), grads, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("fn", "example"), [
    (mean_of_rows, (4, 3)), (halves, (6,)), (last_axis, (2, 3, 4))], ids=["rows", "halves", "axis"])
def test_gradcheck_at_a_new_size(fn, example) -> None:
    module = rv.trace(fn, RNG.standard_normal(example))
    new = tuple(n + 3 for n in example)
    x = rv.tensor(RNG.standard_normal(new), requires_grad=True)
    assert rv.gradcheck(module[fn.__name__], x)


def rows_by_iteration(x):
    return sum(row.sum() for row in x)


def rows_by_range(x):
    return sum(x[i] * i for i in range(len(x)))


def python_branch(x):
    if x.shape[0] > 3:
        return x.sum()
    return x.max()


def literal_reshape(x):
    return x.reshape(3, 4).sum(axis=0).max()


def clipped_slice(x):
    return x[:10].sum()


HELPER_NAMESPACE = {}  # a helper from another module: Python's own `len`


def through_helper(x):
    count = HELPER_NAMESPACE["helper"](x)
    return x.sum() * count


@pytest.mark.parametrize(("fn", "example", "fixed_line"), [
    (rows_by_iteration, (3, 4), "for row in x"),
    (rows_by_range, (3,), "range(len(x))"),
    (python_branch, (5,), "if x.shape[0] > 3:"),
    (literal_reshape, (12,), "reshape(3, 4)"),
    (clipped_slice, (4,), "x[:10]"),
], ids=lambda c: getattr(c, "__name__", None))
def test_python_decisions_fix_the_size_and_other_sizes_are_refused(fn, example,
                                                                   fixed_line) -> None:
    """Where Python decides with a size, the kernel keeps the example's size on that axis
    (named in the source's header with the Python line); another raises by name."""
    module = rv.trace(fn, RNG.standard_normal(example))
    assert "Sizes fixed by a Python decision" in module.source
    assert fixed_line in module.source.splitlines()[2]
    x = RNG.standard_normal(example)
    np.testing.assert_allclose(module[fn.__name__](x), fn(x), rtol=1e-12)
    other = (example[0] + 2,) + example[1:]
    with pytest.raises(rv.ShapeMismatchError, match=r"argument 'x' axis 0 must have size"):
        module[fn.__name__](RNG.standard_normal(other))
    assert issubclass(rv.ShapeMismatchError, ValueError)


def test_fixing_one_axis_keeps_the_others_symbolic() -> None:
    module = rv.trace(rows_by_iteration, np.ones((3, 4)))
    assert "fn rows_by_iteration(x: f64[3, X1])" in module.source
    x = RNG.standard_normal((3, 9))
    np.testing.assert_allclose(module.rows_by_iteration(x), x.sum(), rtol=1e-12)


def test_len_outside_the_traced_module_fixes_the_axis() -> None:
    """Python's own `len` (a helper with other globals) returns an int: the axis is fixed,
    and `rv.trace` leaves the traced function's module as it found it."""
    HELPER_NAMESPACE["helper"] = eval("lambda x: len(x)", {})  # noqa: S307
    module = rv.trace(through_helper, np.ones(4))
    assert module.through_helper(np.ones(4)) == 16.0
    with pytest.raises(rv.ShapeMismatchError, match="axis 0 must have size 4"):
        module.through_helper(np.ones(5))
    assert "len" not in globals()
    with pytest.raises(rv.TraceError):
        rv.trace(lambda x: float(x.sum()) + len(x), np.ones(3))
    assert "len" not in globals()


def float_or_not(x):
    if x.dtype == np.float64 and np.issubdtype(x.dtype, np.floating):
        return x.sum() * 2.0
    return x.sum()


def test_dtype_is_the_numpy_dtype() -> None:
    """The finding of issue 30: `x.dtype == np.float64` was always False on a stand-in."""
    module = rv.trace(float_or_not, np.ones(3))
    assert module.float_or_not(np.ones(3)) == 6.0
    single = rv.trace(float_or_not, np.ones(3, dtype=np.float32))
    assert single.float_or_not(np.ones(3, dtype=np.float32)) == 3.0
    seen = {}

    def dtypes(x, labels):
        seen.update(x=x.dtype, labels=labels.dtype, cast=x.astype(np.float32).dtype,
                    compared=(x > 0).dtype, argmax=x.argmax().dtype)
        return x.sum()

    rv.trace(dtypes, np.ones(3), np.arange(3))
    assert seen == {"x": np.float64, "labels": np.int64, "cast": np.float32,
                    "compared": np.bool_, "argmax": np.int64}

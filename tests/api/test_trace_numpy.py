"""`rv.trace` on NumPy as people write it (issue 36 item 4).

Most programs are ported from HIPS autograd's tests (its test_numpy.py,
test_scalar_ops.py, test_systematic.py, test_linalg.py, test_scipy.py): each is traced at
one size, checked against NumPy there and at a second size (where its sizes stay
symbolic), and its gradient (of `sum(sin(f(...)))`) against central finite differences in
f64. Refusals are `TraceError`s naming the function and what to write instead; every
NumPy/SciPy name of the tables reaches its built-in, and a name without one (`np.cbrt`) is
a TraceError that says so.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.linalg
import scipy.special

import reverie as rv
from reverie.tracing_contract import LINALG
from reverie.tracing_numpy import ELEMENTWISE_NAMES, builtin_exists
from tests.api.test_trace import finite_difference

RNG = np.random.default_rng(36)


def assignments(x, w):
    """Indexed assignment into arrays the function made, as NumPy code fills them."""
    out = np.zeros((len(x), 3))
    out[:, 0] = x
    out[1:, 1] = x[:-1] * w
    out[0] = 7.0
    y = x.copy()
    y[-1] = w
    y[..., :2] += 1.0  # reads y[..., :2], then assigns
    return out.sum(axis=1) * y


def views_see_assignments(x):
    """A slice taken before an assignment into its array shows it, as NumPy's view."""
    y = x * 1.0
    tail = y[1:]
    y[2] = 3.0
    y += 1.0
    head = y[:2]
    head += tail[:2]  # through the view: y changes too
    return tail * y[0]


def reshape_read_after_assignment(x):
    y = x * 1.0
    column = y.reshape(-1, 1)
    y[0] = 1.0
    return column


def assignment_through_a_view(x):
    y = x.copy()
    row = y[1:]
    row[0] = 1.0
    return y


A564, B464, C32 = RNG.standard_normal((5, 6, 4)), RNG.standard_normal((4, 6, 4)), \
    RNG.standard_normal((3, 2))  # constants of autograd's tests, written into the source
C216 = RNG.standard_normal(216)  # more elements than the parser's nesting limit (200)


def scalar_attributes(x):
    assert x.shape == () and x.ndim == 0 and x.size == 1 and x.dtype == np.float64
    return x ** 2


def with_len(x):
    assert len(x) == 3
    return x


# name -> (function, example shapes, second shapes or None where Python fixed a size,
#          value range of the arguments)
PROGRAMS = {
    # autograd's test_numpy.py
    "dot_matrix_vector": (lambda x, y: np.dot(x, y), [(5, 4), (4,)], [(3, 6), (6,)]),
    "dot_3d": (lambda x, y: np.dot(x, y), [(2, 3, 4), (5, 4, 3)], [(3, 2, 4), (2, 4, 2)]),
    "dot_method": (lambda x, y: x.dot(y), [(3, 4), (4, 2)], [(5, 6), (6, 2)]),
    "outer": (lambda x, y: np.outer(x, y), [(5,), (4,)], [(2,), (7,)]),
    "max_keepdims": (lambda x: np.max(x, axis=1, keepdims=True), [(3, 4, 5)], [(2, 6, 3)]),
    "min_axis": (lambda x: np.min(x, axis=1), [(3, 4, 5)], [(2, 6, 3)]),
    "sum_axes": (lambda x: np.sum(x, axis=(1, 2)), [(3, 4, 5)], [(2, 6, 3)]),
    "sum_keepdims": (lambda x: x.sum(axis=0, keepdims=True), [(3, 4)], [(5, 2)]),
    "flipud": (lambda x: np.flipud(x), [(5, 4)], [(3, 6)]),
    "fliplr": (lambda x: np.fliplr(x), [(5, 4)], [(3, 6)]),
    "rot90": (lambda x: np.rot90(x), [(5, 4)], [(3, 6)]),
    "cumsum_axis": (lambda x: np.cumsum(x, axis=1), [(5, 4)], [(3, 6)]),
    "cumsum_flat": (lambda x: np.cumsum(x), [(5, 4)], [(3, 6)]),
    "cumprod_method": (lambda x: x.cumprod(axis=0), [(3, 4)], [(2, 5)]),
    "sum_of_list": (lambda x, y: sum([x, y]), [(3, 4), (3, 4)], [(2, 5), (2, 5)]),
    "mean_keepdims": (lambda x: np.mean(x, axis=0, keepdims=True), [(5, 4)], [(3, 6)]),
    "index_negative_step": (lambda x: x[::-1, 2:4, :], [(5, 6, 4)], [(3, 7, 2)]),
    "index_step_back": (lambda x: x[-2::-2][:2] + x[4:0:-2], [(9,)], None),
    "index_list": (lambda x: x[[0, 1, 2], :, :], [(5, 6, 4)], [(3, 7, 2)]),
    "index_int_slice_list": (lambda x: x[3, 2:, [1, 3]], [(5, 6, 4)], [(7, 3, 5)]),
    "index_negative_list": (lambda x: x[:, [-1, 0, -1]], [(3, 4)], [(2, 6)]),
    "index_two_lists": (lambda x: x[[0, 2], [1, 3]], [(3, 4)], None),
    "index_mask": (lambda x: x[np.array([True, False, True])], [(3, 2)], None),
    "reshape_merge": (lambda x: x.reshape((5 * 4, 6)), [(5, 4, 6)], None),
    "reshape_crossing": (lambda x: np.reshape(x, (20, 6)).sum(axis=0), [(5, 6, 4)], None),
    "ravel": (lambda x: x.ravel(), [(5, 4, 6)], [(2, 3, 4)]),
    "np_ravel": (lambda x: np.ravel(x), [(5, 4)], [(2, 3)]),
    "flatten": (lambda x: x.flatten(), [(5, 4)], [(2, 3)]),
    "squeeze": (lambda x: x.squeeze() + np.squeeze(x, axis=0)[None], [(1, 4, 1)], [(1, 6, 1)]),
    "expand_dims": (lambda x: np.expand_dims(x, 1) * np.expand_dims(x, -1), [(4,)], [(6,)]),
    "newaxis": (lambda x, y: x[:, None] * y[None, :] + x[:, np.newaxis], [(3,), (4,)],
                [(5,), (2,)]),
    "atleast": (lambda x, y: np.atleast_2d(x) @ np.atleast_2d(y).T + np.atleast_1d(x.sum())
                + np.atleast_3d(x)[0, :, 0], [(4,), (4,)], [(6,), (6,)]),
    "moveaxis": (lambda x: np.moveaxis(x, 0, -1) * 2.0, [(2, 3, 4)], [(3, 5, 2)]),
    "swapaxes": (lambda x: np.swapaxes(x, 0, 2) + x.swapaxes(2, 0), [(2, 3, 4)], [(3, 5, 2)]),
    "transpose_axes": (lambda x: x.transpose(1, 2, 0) + np.transpose(x, (1, 2, 0)),
                       [(2, 3, 4)], [(3, 5, 2)]),
    "dot_of_slices": (lambda x: np.dot(x[:2], x[2:]), [(4, 2)], None),
    "add_of_slices": (lambda x: x[:2] + x[2:], [(4, 3)], None),
    "concatenate": (lambda x, y: np.concatenate([x, y, x], axis=1), [(3, 4), (3, 2)],
                    [(5, 2), (5, 3)]),
    "concatenate_none": (lambda x, y: np.concatenate((x, y), axis=None), [(3, 4), (2,)],
                         [(2, 2), (5,)]),
    "stack": (lambda x, y: np.stack([x, y], axis=1), [(3, 4), (3, 4)], [(2, 5), (2, 5)]),
    "hstack_vstack": (lambda x, y: np.vstack([x, y]).sum() + np.hstack([x[0], y[1]]),
                      [(3, 4), (3, 4)], [(2, 5), (2, 5)]),
    "split": (lambda x: np.split(x, 2)[1] * np.split(x, [1, 3])[0].sum(), [(6, 3)],
              [(4, 2)]),
    "append": (lambda x, y: np.append(x, y), [(3, 2), (4,)], [(2, 2), (3,)]),
    "array_of_traced": (lambda x: np.array([x, 2 * x, x ** 2]), [(4,)], [(6,)]),
    "array_of_scalars": (lambda x: np.array([x.sum(), 1.0, x.max()]) * 2.0, [(4,)], [(6,)]),
    "asarray": (lambda x: np.asarray(x) * 3.0, [(4,)], [(6,)]),
    "mean_of_list": (lambda x, y: np.mean([x, y]) + np.var([x, y], axis=0), [(3,), (3,)],
                     [(5,), (5,)]),
    "repeat": (lambda x: np.repeat(x, 3, axis=1) + 1.0, [(2, 3)], [(4, 2)]),
    "repeat_flat": (lambda x: x.repeat(2), [(2, 3)], [(4, 2)]),
    "tile": (lambda x: np.tile(x, (2, 3)), [(2, 3)], [(4, 2)]),
    "pad": (lambda x: np.pad(x, ((1, 2), (0, 1))), [(3, 4)], [(2, 5)]),
    "pad_constant": (lambda x: np.pad(x, 2, constant_values=1.5), [(4,)], [(6,)]),
    "roll": (lambda x: np.roll(x, 2, axis=1) + np.roll(x, -1), [(3, 4)], [(2, 5)]),
    "flip": (lambda x: np.flip(x) + np.flip(x, axis=0), [(3, 4)], [(2, 5)]),
    "trace": (lambda x: np.trace(x) + x.trace(), [(4, 4)], [(6, 6)]),
    "trace_offset": (lambda x: np.trace(x, offset=1), [(4, 4)], [(6, 6)]),
    "diag_vector": (lambda x: np.diag(x) + np.diag(x[1:], 1) + np.diag(x[:-1], -1), [(4,)], [(6,)]),
    "diag_matrix": (lambda x: np.diag(x) + x.diagonal(), [(4, 4)], [(6, 6)]),
    "diag_rectangular": (lambda x: np.diag(x, -1), [(4, 3)], None),
    "tril_triu": (lambda x: np.tril(x) + np.triu(x, 1) * 2.0 + np.tril(x, -1), [(4, 5)],
                  [(3, 6)]),
    "clip": (lambda x: np.clip(x, -0.5, 0.5) + x.clip(min=0.0), [(3, 4)], [(2, 5)]),
    "fmax_fmin": (lambda x, y: np.fmax(x, y) - np.fmin(x, 0.1), [(3, 4), (4,)],
                  [(2, 5), (5,)]),
    "var_std": (lambda x: np.var(x, axis=0) + np.std(x, ddof=1) + x.var(axis=1, ddof=1).sum(),
                [(5, 4)], [(3, 6)]),
    "diff": (lambda x: np.diff(x) + np.diff(x, n=2, axis=0).sum(), [(5, 4)], [(6, 3)]),
    "sort": (lambda x: np.sort(x, axis=0) * np.sort(x.ravel())[-1], [(5, 4)], [(3, 6)]),
    "argsort_gather": (lambda x: x[np.argsort(x)], [(6,)], [(4,)]),
    "einsum_matmul": (lambda a, b: np.einsum("ij,jk->ik", a, b), [(3, 4), (4, 5)],
                      [(2, 6), (6, 3)]),
    "einsum_batched": (lambda a, b: np.einsum("...ij,...jk->...ik", a, b),
                       [(2, 3, 4), (2, 4, 5)], [(3, 2, 6), (3, 6, 3)]),
    "einsum_implicit": (lambda a, b: np.einsum("ij,ij", a, b) + np.einsum("ii", a[:, :3]),
                        [(3, 4), (3, 4)], None),
    "einsum_outer": (lambda a, b: np.einsum("i,j->ij", a, b), [(3,), (4,)], [(5,), (2,)]),
    "tensordot": (lambda a, b: np.tensordot(a, b, axes=2) + np.tensordot(a, b[0], ([2], [0])
                                                                          ).sum(),
                  [(2, 3, 4), (3, 4, 5)], [(3, 2, 5), (2, 5, 4)]),
    "matmul_batched": (lambda a, b: np.matmul(a, b) + a @ b, [(2, 3, 4), (4, 5)],
                       [(3, 2, 6), (6, 3)]),
    "inner_vdot": (lambda a, b: np.inner(a, b) + np.vdot(a, a), [(3, 4), (2, 4)],
                   [(5, 3), (4, 3)]),
    "kron": (lambda a, b: np.kron(a, b), [(2, 3), (4, 5)], [(3, 2), (5, 4)]),
    "cross": (lambda a, b: np.cross(a, b), [(4, 3), (4, 3)], [(6, 3), (6, 3)]),
    "norm_vector": (lambda x: np.linalg.norm(x) + np.linalg.norm(x, 1) + np.linalg.norm(
        x, np.inf) + np.linalg.norm(x, 3), [(5,)], [(7,)]),
    "norm_matrix": (lambda x: np.linalg.norm(x) + np.linalg.norm(x, "fro") + np.linalg.norm(
        x, 1) + np.linalg.norm(x, -np.inf), [(4, 3)], [(2, 5)]),
    "norm_axis": (lambda x: np.linalg.norm(x, axis=1) + np.linalg.norm(x, ord=1, axis=1,
                                                                       keepdims=True)[:, 0],
                  [(4, 3)], [(2, 5)]),
    # autograd's test_binary_ops.py: counts and masks meet Python numbers
    "comparison_count_plus_float": (lambda x, y: np.sum(x < y) + 0.0 + x * y,
                                    [(3, 4), (3, 4)], [(2, 5), (2, 5)]),
    "masks_times_numbers": (lambda x: (x > 0) * 1.5 * x + (x < 0) * 2 + np.argmax(x) * 0.5
                            + (np.sum(x > 0) < 0.5), [(6,)], [(4,)]),
    # autograd's test_systematic.py: splits along named axes, rollaxis, select
    "hsplit_vsplit_dsplit": (lambda x: np.hsplit(x, 2)[1] * np.vsplit(x, [1])[1].sum()
                             + np.dsplit(x, 3)[2].sum(), [(2, 4, 3)], [(3, 6, 3)]),
    "hsplit_vector": (lambda x: np.hsplit(x, 2)[0] * 2, [(6,)], [(4,)]),
    "rollaxis": (lambda x: np.rollaxis(x, 2) + np.rollaxis(x, 0, 3).transpose(2, 0, 1),
                 [(3, 3, 3)], None),
    "select": (lambda x: np.select([x > 0.5, x < -0.5], [x ** 2, -x], 0.1), [(3, 5)],
               [(2, 4)]),
    "nan_to_num": (lambda x: np.nan_to_num(np.log(x - 0.2)) * x, [(3, 5)], [(2, 4)],
                   (0.5, 2.0)),
    "linspace_between_traced_numbers": (
        lambda x: np.linspace(x[0], x[1], 5) * x[2] + np.linspace(x[1], 2.0, 4,
                                                                  endpoint=False).sum(),
        [(3,)], None),
    # a captured constant of 216 elements (autograd's test_simple_concatenate)
    "captured_constant_216": (lambda x: np.concatenate((x, C216)) * 2.0, [(4,)], [(7,)]),
    # autograd's test_numpy.py, continued
    "concatenate_constant": (lambda x: np.concatenate((A564, x)), [(4, 6, 4)], None),
    "concatenate_constant_axis1": (lambda x: np.concatenate((B464, x, B464), 1), [(4, 6, 4)],
                                   None),
    "trace_wide_offset": (lambda x: np.trace(x, offset=3), [(10, 11)], None),
    "trace_tall_offset": (lambda x: np.trace(x, offset=-4), [(11, 10)], None),
    "trace_extra_axes": (lambda x: np.trace(x, offset=1), [(5, 6, 4, 3)], None),
    "diag_of_matrix": (lambda x: np.diag(x), [(5, 5)], [(3, 3)]),
    "transpose_T": (lambda x: x.T, [(5, 6)], [(2, 3)]),
    "roll_axis": (lambda x: np.roll(x, 2, axis=1), [(3, 4)], [(2, 5)]),
    "triu_k": (lambda x: np.triu(x, k=2), [(5, 5)], [(4, 4)]),
    "tril_k": (lambda x: np.tril(x, k=2), [(5, 5)], [(4, 4)]),
    "clip_keywords": (lambda x: np.clip(x, a_min=0.1, a_max=1.1), [(5, 5)], [(4, 4)]),
    "prod": (lambda x: np.prod(x) + np.prod(x, axis=0, keepdims=True), [(2, 3)], [(3, 2)]),
    "array_1d_of_scalar": (lambda x: np.array([x, x * 1.0, x + 2.5]), [()], None),
    "array_2d_of_scalar": (lambda x: np.array([[x, x * 1.0, x + 2.5], [x ** 2, x, x / 2.0]]),
                           [()], None),
    "array_fanout": (lambda x: (lambda a: a + a)(np.array([x, x * 1.0, x + 2.5])), [()], None),
    "array_from_scalar": (lambda x: np.array(x), [()], None),
    "scalar_attributes": (scalar_attributes, [()], None),
    "array_from_arrays": (lambda x: np.array([[2 * x, x + 1], [x, x]]), [(3, 2)], [(4, 5)]),
    "len": (with_len, [(3, 2)], None),
    "r_": (lambda x: np.r_[x, x] + np.r_[x, C32], [(3, 2)], None),
    "c_": (lambda x: np.c_[x, C32, x], [(3, 2)], None),
    "reduction_options": (lambda x: np.sum(x, where=x > 0.0) + np.max(x, initial=0.5)
                          + np.mean(x, axis=0, where=x < 0.5) + np.prod(x, initial=2.0),
                          [(3, 4)], [(2, 5)]),
    "counting_masks": (lambda x: (x > 0).sum(axis=0) * x + (x > 0).mean() + np.all(x > -2.0)
                       + np.any(x > 0.5, axis=1, keepdims=True) + (x > 0).astype(int) ** 2
                       + divmod(x, 0.3)[0] + divmod(x, 0.3)[1], [(3, 4)], [(2, 5)]),
    "infinities": (lambda x: scipy.special.logsumexp(np.where(x > 0.0, x, -np.inf), axis=1)
                   + np.maximum(x, -np.inf).sum(axis=1) + np.minimum(x, np.inf).max(axis=1)
                   + np.clip(x, -np.inf, 0.5).sum(axis=1), [(3, 4)], [(2, 5)]),
    "gathers_broadcasts": (lambda x: np.take(x, [0, 2], axis=1).sum(axis=1)
                           + np.take_along_axis(x, np.argsort(x, axis=1), axis=1)[:, -1]
                           + np.broadcast_to(x[:, :1], (2,) + x.shape).sum(axis=(0, 2))
                           + np.meshgrid(x[0], x[:, 0])[1].sum(axis=1), [(3, 4)], [(2, 5)]),
    "ufunc_methods": (lambda x: np.multiply.outer(x[0], x[:, 1]).sum(axis=1) + np.add.reduce(x)
                      + np.maximum.reduce(x, axis=0) + np.add.accumulate(x, axis=0)[-1]
                      + np.multiply.accumulate(x, axis=0)[0], [(3, 4)], [(2, 5)]),
    "more_reductions": (lambda x: np.ptp(x, axis=0) + np.count_nonzero(x > 0.0, axis=0)
                        + np.trapezoid(x, axis=0) + np.trapezoid(x[:, 0], dx=0.5)
                        + np.cumulative_sum(x, axis=0)[-1] + np.heaviside(x[0], 0.5),
                        [(3, 4)], [(2, 5)]),
    "matrix_products": (lambda x: np.linalg.multi_dot([x, x.T, x])
                        + np.linalg.matrix_power(x @ x.T, 3) @ x
                        + np.linalg.matrix_power(x @ x.T, 0) @ x, [(3, 4)], [(2, 5)]),
    "assignments": (assignments, [(5,), ()], [(7,), ()]),
    "views_see_assignments": (views_see_assignments, [(5,)], [(7,)]),
    "factories": (lambda x: (np.zeros((len(x), 3)) + np.ones(x.shape[0])[:, None]
                             + np.eye(len(x))[:, :3] + np.full((len(x), 1), 2.0)).T @ x
                  + (np.arange(len(x)) * x).sum() + np.identity(x.shape[0]).sum()
                  + (np.arange(1, len(x) + 1) * x).sum() + np.zeros_like(x).sum()
                  + np.full_like(x, 0.5) @ x, [(5,)], [(7,)]),
    # autograd's test_scalar_ops.py, test_scipy.py: elementwise names
    "operators": (lambda x, y: x % 1.5 + y // 0.7 + 2.0 ** x + abs(y) + (-x) + (+y)
                  + np.pi * x - 1.0 / (2.0 + y * y) + (3 - x) % 2.0, [(4,), (4,)],
                  [(6,), (6,)]),
    "ufuncs": (lambda x: np.square(x) + np.reciprocal(x + 3.0) + np.negative(x)
               + np.log2(x + 3.0) + np.log10(x + 3.0) + np.exp2(x) + np.deg2rad(x)
               + np.rad2deg(x) + np.logaddexp(x, 0.5 * x) + np.absolute(x), [(5,)], [(3,)]),
    "special": (lambda x: scipy.special.gammaln(x) + scipy.special.psi(x)
                + scipy.special.digamma(x) + scipy.special.expit(x)
                + scipy.special.logit(x / (1.0 + x)) + scipy.special.erf(x)
                + scipy.special.polygamma(0, x), [(5,)], [(3,)], (0.5, 3.0)),
    "special_reductions": (lambda x: scipy.special.logsumexp(x, axis=1)
                           + scipy.special.softmax(x, axis=1)[:, 0]
                           + scipy.special.multigammaln(x[:, 0] + 3.0, 3), [(3, 4)],
                           [(2, 5)], (0.5, 3.0)),
    "methods": (lambda x: x.T.mean(axis=0) + x.mean(axis=1) * x.std() + x.var()
                + x.max(axis=1) - x.min(axis=1) + x.prod(axis=1) + x.reshape(-1)[:4]
                + x.transpose().sum(axis=1) + x.astype(np.float64).sum(), [(4, 4)],
                [(4, 4)]),
}


def _arguments(shapes, low_high=(-1.0, 1.0)):
    return [RNG.uniform(*low_high, size=shape) for shape in shapes]


def _case(name):
    fn, shapes, second, *domain = PROGRAMS[name]
    return fn, shapes, second, tuple(domain[0]) if domain else (-1.0, 1.0)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_numpy_program_values_at_two_sizes_and_gradients(name: str) -> None:
    fn, shapes, second, domain = _case(name)
    args = _arguments(shapes, domain)

    def loss(*values):
        return np.sum(np.sin(fn(*values)))

    module = rv.trace(fn, *args)
    np.testing.assert_allclose(module.kernel(*args), fn(*args), rtol=1e-10, atol=1e-12)
    if second is not None:
        other = _arguments(second, domain)
        np.testing.assert_allclose(module.kernel(*other), fn(*other), rtol=1e-10, atol=1e-12)
    scalar = rv.trace(loss, *args).kernel
    grads = scalar.grad(wrt=list(range(len(args))))(*args)
    grads = grads if isinstance(grads, tuple) else (grads,)
    for index, grad in enumerate(grads):
        np.testing.assert_allclose(grad, finite_difference(loss, args, index), rtol=1e-5,
                                   atol=1e-6)


def test_integers_and_booleans_meeting_python_numbers_take_numpy_dtypes() -> None:
    """NumPy's promotion: an integer or bool array with a Python float is float64, a bool
    array with a Python int is int64 (the language refuses both without a cast)."""
    x = RNG.standard_normal(5)
    for fn in (lambda x: np.sum(x < 0) + 0.0, lambda x: (x > 0) * 2, lambda x: (x > 0) * 1.5,
               lambda x: np.argmax(x) < 2.5, lambda x: (x > 0) - 1, lambda x: 2.0 ** (x > 0)):
        got, want = np.asarray(rv.trace(fn, x).kernel(x)), np.asarray(fn(x))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_the_recorded_source_of_an_einsum_is_index_notation() -> None:
    a, b = np.ones((3, 4)), np.ones((4, 5))
    source = rv.trace(lambda a, b: np.einsum("ij,jk->ik", a, b), a, b).source
    assert "let t1[i, k] = sum[j](a[i, j] * b[j, k]);" in source


def test_a_fixed_size_is_reported_not_miscomputed() -> None:
    """`x[:2] + x[2:]` of 4 rows: `2` and `X0 - 2` agree at 4 only, so X0 is fixed."""
    module = rv.trace(lambda x: x[:2] + x[2:], np.ones((4, 3)))
    assert "X0 = 4" in module.source
    with pytest.raises(rv.ShapeMismatchError):
        module.kernel(np.ones((6, 3)))
    np.testing.assert_allclose(module.kernel(np.ones((4, 5))), 2 * np.ones((2, 5)))


def test_traced_integer_index_on_any_axis_against_torch() -> None:
    torch = pytest.importorskip("torch")
    x, idx = RNG.standard_normal((3, 5, 2)), np.array([[4, 0], [1, 1]])
    module = rv.trace(lambda x, idx: np.sum(np.sin(x[:, idx] * 2.0)), x, idx)
    xt = torch.tensor(x, requires_grad=True)
    expected = torch.sin(xt[:, torch.tensor(idx)] * 2.0).sum()
    (grad,) = torch.autograd.grad(expected, xt)
    assert module.kernel(x, idx) == pytest.approx(expected.item(), rel=1e-12)
    np.testing.assert_allclose(module.kernel.grad("x")(x, idx), grad.numpy(), rtol=1e-12)


def test_scipy_names_are_restored_after_tracing() -> None:
    original = scipy.special.polygamma, np.array, np.mean
    rv.trace(lambda x: scipy.special.polygamma(0, np.array([x, x])).sum(), np.ones(3))
    assert (scipy.special.polygamma, np.array, np.mean) == original


BOUND_EARLY = functools.partial(scipy.special.logsumexp, axis=0)  # the original, kept


def captured(x):
    return x.sum() * np.ones((30, 30))


@pytest.mark.parametrize(("fn", "message"), [
    (lambda x: np.pad(x, 1, mode="edge"), r"np.pad\(mode='edge'\).*mode='constant'"),
    (lambda x: np.linalg.eig(x[:, None] * x), r"np.linalg.eig cannot be traced"),
    (lambda x: np.linalg.norm(x[:, None] * x, 3), r"norm\(ord=3\) of a matrix.*'fro'"),
    (lambda x: np.einsum("ij", x), r"einsum\('ij'\): 'ij' for shape \(X0,\)"),
    (lambda x: np.repeat(x, [1, 2, 1, 2]), r"np.repeat with counts per element.*one Python"),
    (lambda x: np.cross(x[:2], x[2:]), r"np.cross.*3-vectors"),
    (lambda x: np.frexp(x)[0], r"np.frexp has no Reverie counterpart"),
    (lambda x: np.median(x), r"np.median cannot be traced"),
    (lambda x: np.nancumsum(x), r"np.nancumsum cannot be traced.*nearest traceable.*"
                                r"np.(nansum|cumsum)"),
    (lambda x: np.add.at(x, [0], 1.0), r"np.add.at cannot be traced"),
    (lambda x: x[x > 0], r"array subscript must hold integers.*np.where"),
    (lambda x: ~x, r"~ of the f64 value.*no bitwise operators"),
    (lambda x: x.reshape((2, 2), order="F"), r"order='F'.*C order"),
    (lambda x: scipy.special.polygamma(x, x), r"polygamma needs a non-negative Python "
                                             r"integer order"),
    (lambda x: np.fft.fft(x).real, r"np.fft.fft cannot be traced"),
    (lambda x: np.interp(x, x, x), r"np.interp cannot be traced"),
    (lambda x: BOUND_EARLY(x), r"np.result_type cannot be traced .*inside a library function "
                               r"called at test_trace_numpy.py:\d+: .*BOUND_EARLY.*bound before"),
    (lambda x: x[[0, 7]], r"index \[0, 7\] is out of range for size 4"),
    (captured, r"constant array of shape \(30, 30\) cannot be written.*argument"),
    (lambda x: x * np.random.rand(4), r"np.random.rand in a traced function would draw once.*"
                                      r"pass the random numbers as an argument"),
    (lambda x: x.flat[0], r"x.flat of a traced value cannot be traced.*nearest.*x.flatten"),
    (lambda x: x.item(), r"cannot trace .item\(\) of a traced value"),
    (lambda x: np.sum(x, out=np.zeros(())), r"np.sum\(out=...\) cannot be traced"),
    (lambda x: np.einsum("i,i", x, x, dtype=np.float32), r"np.einsum\(dtype=...\)"),
    (reshape_read_after_assignment, r"a reshape or transpose of an array that was assigned "
                                    r"into afterwards \(test_trace_numpy.py:\d+: y\[0\] = 1.0"
                                    r"\) is read at test_trace_numpy.py"),
    (assignment_through_a_view, r"assignment into t\d+, a view .*NumPy would change that"),
    (lambda x: x.__setitem__(x > 0.5, 0.0), r"assignment with the subscript.*np.where"),
    (lambda x: scipy.special.kl_div(x, x), r"(np|scipy).*kl_div has no Reverie counterpart"),
])
def test_refusals_are_trace_errors_with_what_to_write(fn, message) -> None:
    with pytest.raises(rv.TraceError, match=message):
        rv.trace(fn, np.linspace(0.1, 0.9, 4))


def test_a_library_function_without_recorder_names_the_users_line() -> None:
    with pytest.raises(rv.TraceError, match=r"test_trace_numpy.py:\d+:.*percentile"):
        rv.trace(lambda x: np.percentile(np.array([x, x]).T, 50.0), np.ones(3))


# ---------------------------------------------------------------- built-ins other changes add

PENDING_UNARY = {  # NumPy/SciPy function -> (its name in the table, a domain)
    np.sinh: ("sinh", (-1, 1)), np.cosh: ("cosh", (-1, 1)), np.arcsin: ("arcsin", (-0.9, 0.9)),
    np.arccos: ("arccos", (-0.9, 0.9)), np.arctan: ("arctan", (-2, 2)),
    np.arcsinh: ("arcsinh", (-2, 2)), np.arccosh: ("arccosh", (1.1, 3)),
    np.arctanh: ("arctanh", (-0.9, 0.9)),
    scipy.special.gamma: ("gamma", (0.5, 3)), scipy.special.erfc: ("erfc", (-2, 2)),
    scipy.special.erfinv: ("erfinv", (-0.9, 0.9)), scipy.special.erfcinv: ("erfcinv", (0.1, 1.9)),
    scipy.special.j0: ("j0", (0.1, 5)), scipy.special.j1: ("j1", (0.1, 5)),
    scipy.special.y0: ("y0", (0.1, 5)), scipy.special.y1: ("y1", (0.1, 5)),
    scipy.special.i0: ("i0", (0.1, 3)), scipy.special.i1: ("i1", (0.1, 3)),
    np.i0: ("i0", (0.1, 3)),
}
PENDING_BINARY = {
    np.arctan2: ("arctan2", (-2, 2)), np.hypot: ("hypot", (-2, 2)),
    scipy.special.beta: ("beta", (0.5, 3)), scipy.special.betaln: ("betaln", (0.5, 3)),
    scipy.special.gammainc: ("gammainc", (0.5, 3)),
    scipy.special.gammaincc: ("gammaincc", (0.5, 3)),
}


def _available(name: str) -> bool:
    return any(builtin_exists(b) for b in ELEMENTWISE_NAMES[name])


def test_a_name_without_a_builtin_is_a_trace_error() -> None:
    """np.cbrt has no built-in yet: refused by name, not a Python error."""
    assert not _available("cbrt")
    with pytest.raises(rv.TraceError, match="cbrt is not a built-in"):
        rv.trace(lambda x: np.cbrt(x), np.ones(3))


@pytest.mark.parametrize("fn", list(PENDING_UNARY), ids=[n for n, _ in PENDING_UNARY.values()])
def test_unary_names_map_to_the_languages_builtin(fn) -> None:
    name, domain = PENDING_UNARY[fn]
    x = RNG.uniform(*domain, size=5)
    assert _available(name)
    module = rv.trace(lambda x: fn(x), x)
    np.testing.assert_allclose(module.kernel(x), fn(x), rtol=1e-12)


@pytest.mark.parametrize("fn", list(PENDING_BINARY), ids=[n for n, _ in PENDING_BINARY.values()])
def test_binary_names_map_to_the_languages_builtin(fn) -> None:
    name, domain = PENDING_BINARY[fn]
    x, y = RNG.uniform(*domain, size=5), RNG.uniform(*domain, size=(2, 5))
    assert _available(name)
    module = rv.trace(lambda x, y: fn(x, y), x, y)
    np.testing.assert_allclose(module.kernel(x, y), fn(x, y), rtol=1e-12)


def _spd(n: int) -> np.ndarray:
    a = RNG.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


LINALG_PROGRAMS = {
    "inv": lambda a, b: np.linalg.inv(a),
    "cholesky": lambda a, b: np.linalg.cholesky(a) + scipy.linalg.cholesky(a, lower=True),
    "det": lambda a, b: np.linalg.det(a) + scipy.linalg.det(a),
    "slogdet": lambda a, b: np.linalg.slogdet(a)[1],
    "solve": lambda a, b: np.linalg.solve(a, b) + scipy.linalg.solve(a, b),
    "pinv": lambda a, b: np.linalg.pinv(b),
    "eigh": lambda a, b: np.linalg.eigh(a)[0] + np.abs(np.linalg.eigh(a)[1]).sum(),
    "svd": lambda a, b: np.linalg.svd(b, full_matrices=False)[1]
    + np.abs(np.linalg.svd(a)[0]).sum(),
    "qr": lambda a, b: np.abs(np.linalg.qr(b)[1]) + np.linalg.qr(b)[0].T @ b,
    "solve_triangular": lambda a, b: scipy.linalg.solve_triangular(np.tril(a), b, lower=True)
    + scipy.linalg.solve_triangular(np.triu(a), b) + scipy.linalg.cholesky(a).sum(),
    "norm": lambda a, b: np.linalg.norm(a, 2) + np.linalg.norm(b, "nuc"),
}


@pytest.mark.parametrize("name", list(LINALG_PROGRAMS))
def test_linear_algebra_names_map_to_the_languages_builtin(name: str) -> None:
    fn = LINALG_PROGRAMS[name]
    a, b = _spd(4), RNG.standard_normal((4, 2))
    assert any(builtin_exists(c) for c in LINALG.get(name, ((name,),))[0])
    module = rv.trace(fn, a, b)
    np.testing.assert_allclose(module.kernel(a, b), fn(a, b), rtol=1e-10)


# ---------------------------------------------------------------- autograd's test_systematic

def R(*shape):  # noqa: N802 (autograd's name)
    return RNG.standard_normal(shape)


def combos(fn, argument_choices, **keyword_choices):
    """(label, function of the arrays, arrays) for each combination NumPy accepts
    (autograd's `combo_check`)."""
    import itertools

    keys = list(keyword_choices)
    for args in itertools.product(*argument_choices):
        for values in itertools.product(*(keyword_choices[k] for k in keys)):
            kwargs = dict(zip(keys, values, strict=True))
            arrays = [np.asarray(a, dtype=np.float64) for a in args if not isinstance(a, str)]
            specs = [a for a in args if isinstance(a, str)]  # einsum's: closed over

            def bound(*a, _fn=fn, _kw=kwargs, _specs=tuple(specs)):
                return _fn(*_specs, *a, **_kw)

            try:
                bound(*arrays)
            except (ValueError, TypeError, IndexError):
                continue
            shapes = "x".join(str(a.shape) for a in arrays)
            yield f"{fn.__name__}-{'-'.join(specs)}{shapes}-{kwargs}", bound, arrays


SYSTEMATIC = [
    *combos(np.transpose, [[R(2, 3, 4)]], axes=[None, [0, 2, 1], [2, 0, 1], [1, 2, 0]]),
    *combos(np.moveaxis, [[R(2, 3, 4)]], source=[0, 2], destination=[0, 1, 2]),
    *combos(np.repeat, [[R(2, 3, 4), R(3, 1)]], repeats=[1, 2], axis=[None, 0, 1]),
    *combos(np.diff, [[R(5, 5), R(5, 5, 5)]], n=[1, 2], axis=[0, 1]),
    *combos(np.tile, [[R(2, 1, 3, 1)]], reps=[(1, 4, 1, 2)]),
    *combos(np.tile, [[R(1, 2)]], reps=[(1, 2), (2, 3), (3, 2, 1)]),
    *combos(np.tile, [[R(1)]], reps=[(2,), 2]),
    *combos(np.kron, [[R(5, 5), R(5), R(5, 1), R(1, 5)], [R(3, 3), R(3), R(1, 3)]]),
    *combos(np.inner, [[1.5, R(3), R(2, 3)], [0.3, R(3), R(4, 3)]]),
    *combos(np.dot, [[1.5, R(3), R(2, 3), R(2, 2, 3)], [0.3, R(3), R(3, 4), R(2, 3, 4)]]),
    *combos(np.outer, [[R(3)], [R(3)]]),
    *combos(np.matmul, [[R(3), R(2, 3), R(2, 2, 3)], [R(3), R(3, 4), R(2, 3, 4)]]),
    *combos(np.matmul, [[R(1, 2, 2)], [R(3, 2, 1)]]),
    *combos(np.tensordot, [[R(1, 3), R(2, 3, 2)], [R(3), R(3, 1), R(3, 4, 2)]],
            axes=[[(1,), (0,)]]),
    *combos(np.tensordot, [[R(2, 3), R(2, 3, 4)], [R(1, 2, 3), R(2, 2, 3, 4)]],
            axes=[[(0, 1), (1, 2)], [(1, 0), (2, 1)]]),
    *combos(np.tensordot, [[R(2, 2), R(4, 2, 2)], [R(2, 2), R(2, 2, 4)]], axes=[1, 2]),
    *combos(np.tensordot, [[R(4)], [R()]], axes=[0]),
    *combos(np.tensordot, [[R(2, 6)], [R(6, 3)]], axes=[[[-1], [0]], [-1, 0]]),
    *combos(np.maximum, [[R(1), R(1, 4), R(3, 4)], [R(1), R(1, 4), R(3, 4)]]),
    *combos(np.fmin, [[R(1), R(3, 4)], [R(1, 4), R(3, 4)]]),
    *combos(np.sort, [[R(1), R(7)]]),
    *combos(np.atleast_1d, [[1.2, R(1), R(7), R(1, 4)]]),
    *combos(np.atleast_2d, [[1.2, R(7), R(2, 4), R(2, 4, 5)]]),
    *combos(np.atleast_3d, [[1.2, R(7), R(2, 4), R(2, 4, 5)]]),
    *combos(np.einsum, [["ij->ji"], [R(1, 1), R(4, 4), R(3, 4)]]),
    *combos(np.einsum, [["ij,jk->ik"], [R(2, 3)], [R(3, 4)]]),
    *combos(np.einsum, [["ijk,lmjn->iklmn"], [R(2, 3, 4)], [R(5, 6, 3, 7)]]),
    *combos(np.einsum, [["...j,...jk->...k"], [R(2, 3)], [R(3, 4)]]),
    *combos(np.einsum, [["i,i", "i,i->"], [R(3)], [R(3)]]),
    # autograd's test_scipy.py
    *combos(lambda a, **kw: scipy.special.logsumexp(a, **kw),
            [[np.array([1.1]), R(4), R(3, 4)]], axis=[None, 0], keepdims=[True, False]),
    *combos(lambda a, **kw: scipy.special.logsumexp(a, **kw), [[R(4, 5, 6), R(1, 5)]],
            axis=[None, 0, 1], keepdims=[True, False]),
    *combos(lambda a, b, **kw: scipy.special.logsumexp(a, b=np.exp(b), **kw),
            [[R(3, 4)], [R(3, 4)]], axis=[None, 0, 1], keepdims=[True, False]),
]


@pytest.mark.parametrize(("label", "fn", "arrays"), SYSTEMATIC,
                         ids=[label for label, _, _ in SYSTEMATIC])
def test_autograd_systematic_combinations(label, fn, arrays) -> None:
    wrt = list(range(len(arrays)))
    traced_args = list(arrays)
    module = rv.trace(fn, *traced_args)
    np.testing.assert_allclose(module.kernel(*traced_args), fn(*traced_args), rtol=1e-10,
                               atol=1e-12)

    def loss(*values):
        return np.sum(np.sin(fn(*values)))

    grads = rv.trace(loss, *traced_args).kernel.grad(wrt=wrt)(*traced_args)
    grads = grads if isinstance(grads, tuple) else (grads,)
    for index, grad in zip(wrt, grads, strict=True):
        np.testing.assert_allclose(grad, finite_difference(loss, traced_args, index),
                                   rtol=1e-5, atol=1e-6)


# The programs recorded in index notation (flips, diagonals, pads, repeats, einsum,
# gathers, small constants), at the other stages: the NumPy reference interpreter and MLIR.
STAGED = ["index_negative_step", "diag_vector", "diag_matrix", "tril_triu", "pad_constant",
          "repeat", "tile", "einsum_batched", "kron", "argsort_gather", "array_of_scalars",
          "index_two_lists"]


@pytest.mark.parametrize("backend", ["interp", "mlir"])
@pytest.mark.parametrize("name", STAGED)
def test_recorded_programs_at_every_stage(name: str, backend: str) -> None:
    fn, shapes, _, domain = _case(name)
    args = _arguments(shapes, domain)

    def loss(*values):
        return np.sum(np.sin(fn(*values)))

    traced = rv.trace(loss, *args)
    staged = rv.compile(traced.source, backend=backend)[traced.kernel.name]
    assert staged(*args) == pytest.approx(loss(*args), rel=1e-10)
    wrt = list(range(len(args)))
    native, got_all = traced.kernel.grad(wrt=wrt)(*args), staged.grad(wrt=wrt)(*args)
    if len(args) == 1:
        native, got_all = (native,), (got_all,)
    for got, expected in zip(got_all, native, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["inv", "det", "slogdet", "solve", "solve_triangular"])
def test_linear_algebra_gradients_against_finite_differences(name: str) -> None:
    """(Not Cholesky's: its gradient is the symmetric one, docs/language.md, while finite
    differences of NumPy's read one triangle.)"""
    fn = LINALG_PROGRAMS[name] if name != "solve_triangular" else (
        lambda a, b: scipy.linalg.solve_triangular(np.tril(a), b, lower=True)
        + scipy.linalg.solve_triangular(np.triu(a), b, trans=1))
    a, b = _spd(4), RNG.standard_normal((4, 2))
    assert any(builtin_exists(c) for c in LINALG[name][0])

    def loss(a, b):
        return np.sum(np.sin(fn(a, b)))

    grads = rv.trace(loss, a, b).kernel.grad(wrt=[0, 1])(a, b)
    for index, grad in enumerate(grads):
        np.testing.assert_allclose(grad, finite_difference(loss, [a, b], index), rtol=1e-5,
                                   atol=1e-6)


def test_integer_arguments_promote_as_numpy() -> None:
    """Integers meet floats and float-only built-ins as in NumPy: computed in f64."""
    def mixed(x, k):
        return (np.sqrt(k) * x + np.exp(k) + np.maximum(k, 2) + np.abs(k) + np.arctan2(k, x)
                + np.maximum(k, x) + k / 2 + k // 2 + k % 3 + np.fmin(x.astype(np.float32), 0.5))

    x, k = np.linspace(0.1, 1.0, 4), np.arange(4)
    module = rv.trace(mixed, x, k)
    np.testing.assert_allclose(module.kernel(x, k), mixed(x, k), rtol=1e-7)
    np.testing.assert_allclose(module.kernel(x[:3], k[:3]), mixed(x[:3], k[:3]), rtol=1e-7)


# autograd's test_scipy.py: scipy.special functions (their built-ins may come later)
SPECIAL = {
    "gammaln": (scipy.special.gammaln, ("lgamma",), (0.3, 2.0)),
    "psi": (scipy.special.psi, ("digamma",), (0.3, 2.0)),
    "digamma": (scipy.special.digamma, ("digamma",), (0.3, 2.0)),
    "polygamma0": (lambda x: scipy.special.polygamma(0, x), ("digamma",), (0.3, 2.0)),
    "polygamma2": (lambda x: scipy.special.polygamma(2, x), ("polygamma",), (0.3, 2.0)),
    "gamma": (scipy.special.gamma, ("gamma",), (0.3, 2.0)),
    "expit": (scipy.special.expit, ("sigmoid",), (-2.0, 2.0)),
    "logit": (scipy.special.logit, (), (0.1, 0.9)),
    "erf": (scipy.special.erf, ("erf",), (-2.0, 2.0)),
    "erfc": (scipy.special.erfc, ("erfc",), (-2.0, 2.0)),
    "erfinv": (scipy.special.erfinv, ("erfinv",), (-0.9, 0.9)),
    "erfcinv": (scipy.special.erfcinv, ("erfcinv",), (0.1, 1.9)),
    "jn": (lambda x: scipy.special.jn(2, x), ("jv", "jn"), (1.3, 5.0)),
    "yn": (lambda x: scipy.special.yn(2, x), ("yn",), (1.3, 5.0)),
    "gammainc": (lambda x: scipy.special.gammainc(1.5, x), ("gammainc",), (1.3, 5.0)),
    "gammaincc": (lambda x: scipy.special.gammaincc(1.5, x), ("gammaincc",), (1.3, 5.0)),
    "beta": (lambda x: scipy.special.beta(x, x[::-1] + 1.0), ("beta",), (1.1, 3.0)),
    "betaln": (lambda x: scipy.special.betaln(x, 2.5), ("betaln",), (1.1, 3.0)),
    "multigammaln": (lambda x: scipy.special.multigammaln(x + 2.0, 3), ("lgamma",), (0.3, 2.0)),
}


@pytest.mark.parametrize("name", list(SPECIAL))
def test_scipy_special_functions(name: str) -> None:
    fn, builtins, domain = SPECIAL[name]
    x = RNG.uniform(*domain, size=4)
    assert not builtins or any(builtin_exists(b) for b in builtins)

    def loss(x):
        return np.sum(np.sin(fn(x)))

    np.testing.assert_allclose(rv.trace(fn, x).kernel(x), fn(x), rtol=1e-10)
    grad = rv.trace(loss, x).kernel.grad("x")(x)
    np.testing.assert_allclose(grad, finite_difference(loss, [x], 0), rtol=1e-5, atol=1e-6)


def test_entry_points_record_on_the_tracing_thread_only() -> None:
    """Another thread calling NumPy while a function is traced meets NumPy's own."""
    import threading

    seen = {}

    def other_thread():
        seen["array"] = np.array([1.0, 2.0]) * 2
        seen["rand"] = np.random.rand(2).shape

    def traced(x):
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        return np.array([x, x]).sum(axis=0)

    module = rv.trace(traced, np.ones(3))
    np.testing.assert_allclose(seen["array"], [2.0, 4.0])
    assert seen["rand"] == (2,)
    np.testing.assert_allclose(module.kernel(np.arange(3.0)), 2 * np.arange(3.0))


def test_nan_reductions_skip_nan() -> None:
    def skipping(x):
        return (np.nansum(x, axis=0) + np.nanmax(x, axis=0) + np.nanmin(x, axis=0)
                + np.nanmean(x, axis=0) + np.nanprod(x, axis=0))

    x = RNG.standard_normal((4, 3))
    x[1, 2] = x[3, 0] = np.nan
    module = rv.trace(skipping, x)
    np.testing.assert_allclose(module.kernel(x), skipping(x), rtol=1e-12)

"""`scipy.stats` distributions in `rv.trace` (`reverie/tracing_stats.py`), ported from the
distribution tests of HIPS autograd's test_scipy.py: each density, probability or
distribution function traced with its data and parameters as arguments, its value
against SciPy's and its gradient in every argument against finite differences; frozen
distributions and the distributions' objects bound before tracing; a constant matrix
beside a traced one in a linear-algebra call (autograd's test_linalg `solve` cases)."""

from __future__ import annotations

import numpy as np
import pytest

stats = pytest.importorskip("scipy.stats")

import reverie as rv  # noqa: E402
from tests.api.test_trace import finite_difference  # noqa: E402

RNG = np.random.default_rng(37)
X = RNG.uniform(0.1, 0.9, 5)
A, B = np.array(1.7), np.array(0.6)  # parameters, as 0-d arrays (traced numbers)
COV = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, 0.2], [0.1, 0.2, 1.0]])
norm = stats.norm  # bound before tracing, as a user's `from scipy.stats import norm`

CASES = {
    "norm.logpdf": lambda x, a, b: norm.logpdf(x, a, b),
    "norm.pdf by keyword": lambda x, a, b: norm.pdf(x, loc=a, scale=b),
    "norm.cdf logcdf sf logsf": lambda x, a, b: (
        stats.norm.cdf(x, a, b) + stats.norm.logcdf(x, b) + stats.norm.sf(x, a)
        + stats.norm.logsf(x, a, b)),
    "frozen norm": lambda x, a, b: stats.norm(a, b).logpdf(x) + norm(a).cdf(x),
    "t": lambda x, a, b: stats.t.logpdf(x, a + 2.0, b, a) + stats.t.pdf(x, 3.0)
    + stats.t.cdf(x - 0.5, 3.0, b) + stats.t.logcdf(x * a, 2.5),
    "gamma": lambda x, a, b: stats.gamma.logpdf(x, a, scale=b) + stats.gamma.cdf(x, 2.5, b),
    "chi2": lambda x, a, b: stats.chi2.logpdf(x, a + 1) + stats.chi2.pdf(x * b, 3.0),
    "beta": lambda x, a, b: stats.beta.logpdf(x, a, b + 1) + stats.beta.cdf(x * b, 2.0, 3.0),
    "expon laplace": lambda x, a, b: stats.expon.logpdf(x, b - 1, a) + stats.laplace.pdf(x, b, a),
    "poisson": lambda x, a, b: stats.poisson.logpmf(np.array([0.0, 1.0, 2.0, 5.0]), a * x[:4])
    + stats.poisson(b).pmf(np.array([1.0, 3.0])).sum()
    + stats.poisson.cdf(np.array([-1.0, 0.0, 2.5, 4.0]), a * x[1:5]),
    "multivariate_normal": lambda x, a, b: stats.multivariate_normal.logpdf(
        np.stack([x[:3], x[1:4]]), x[2:5] * a, COV * b),
    "multivariate_normal constant cov": lambda x, a, b: stats.multivariate_normal.pdf(
        x[:3] * a, None, COV),
    "dirichlet": lambda x, a, b: stats.dirichlet.logpdf(x[:3] / np.sum(x[:3]),
                                                         np.array([1.5, 2.0, 3.0]) * b),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_distribution_values_and_gradients(case: str) -> None:
    fn = CASES[case]
    args = [X, A, B]
    np.testing.assert_allclose(rv.trace(fn, *args).kernel(*args), fn(*args), rtol=1e-10,
                               atol=1e-12)

    def loss(*values):
        return np.sum(fn(*values))

    grads = rv.trace(loss, *args).kernel.grad(wrt=[0, 1, 2])(*args)
    for index, grad in enumerate(grads):
        np.testing.assert_allclose(grad, finite_difference(loss, args, index), rtol=1e-5,
                                   atol=1e-6)


def test_outside_the_support_a_density_is_zero_as_scipys() -> None:
    x = np.array([-0.5, 0.3, 1.5])
    for fn in (lambda x: stats.gamma.logpdf(x, 2.0), lambda x: stats.beta.pdf(x, 2.0, 3.0),
               lambda x: stats.expon.logpdf(x)):
        np.testing.assert_allclose(rv.trace(fn, x).kernel(x), fn(x), rtol=1e-12)


def test_methods_are_scipys_again_after_tracing() -> None:
    rv.trace(lambda x: norm.logpdf(x), X)
    assert "logpdf" not in vars(norm) and "logpdf" not in vars(stats.multivariate_normal)
    assert norm.logpdf(0.0) == pytest.approx(-0.5 * np.log(2 * np.pi))


def test_what_is_not_traced_is_refused_by_name() -> None:
    with pytest.raises(rv.TraceError, match="allow_singular"):
        rv.trace(lambda x: stats.multivariate_normal.logpdf(x, None, COV, allow_singular=True),
                 X[:3])
    with pytest.raises(rv.TraceError, match="shape parameters"):
        rv.trace(lambda x: stats.gamma.logpdf(x), X)


@pytest.mark.parametrize("traced", [0, 1])
def test_a_constant_matrix_beside_a_traced_one_in_linear_algebra(traced: int) -> None:
    matrix, rhs = COV, X[:3]

    def fn(*values):
        operands = [matrix, rhs]
        operands[traced] = values[0]
        return np.linalg.solve(*operands)

    arg = [matrix, rhs][traced]
    np.testing.assert_allclose(rv.trace(fn, arg).kernel(arg), fn(arg), rtol=1e-12)
    grad = rv.trace(lambda v: np.sum(np.sin(fn(v))), arg).kernel.grad(0)(arg)
    np.testing.assert_allclose(grad, finite_difference(lambda v: np.sum(np.sin(fn(v))), [arg],
                                                       0), rtol=1e-5, atol=1e-7)

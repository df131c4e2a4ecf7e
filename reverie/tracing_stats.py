"""`scipy.stats` distributions for `rv.trace`: the densities, probabilities and
distribution functions of the common distributions, written with NumPy and SciPy
functions that trace (so every one is differentiable in its data and its parameters).

SciPy's distribution objects (`scipy.stats.norm`, ...) are instances whose methods NumPy
never dispatches on; while a function is traced those methods are bound to these
recorders (`ENTRY_POINTS` of `reverie.tracing_numpy`, keyed `scipy.stats.norm.logpdf`),
so `norm.logpdf(x, mu, sigma)`, a frozen `norm(mu, sigma).logpdf(x)` (which calls the
former) and `stats.multivariate_normal.logpdf(x, mean, cov)` record. With z = (x − loc) /
scale, a location-scale density is f(z) / scale:

    norm            log f = −z²/2 − ½ log 2π;  cdf ½ erfc(−z/√2), sf ½ erfc(z/√2)
    t (df)          log f = lgamma((df+1)/2) − lgamma(df/2) − ½ log(df π)
                            − (df+1)/2 log1p(z²/df);  cdf from betainc(df/2, ½, df/(df+z²))
    gamma (a)       log f = (a−1) log z − z − lgamma(a) (z > 0);  cdf gammainc(a, z)
    chi2 (df)       gamma(df/2) of z/2, divided by 2
    beta (a, b)     log f = (a−1) log z + (b−1) log1p(−z) − betaln(a, b) (0 < z < 1);
                    cdf betainc(a, b, z)
    expon           log f = −z (z ≥ 0);  laplace: log f = −|z| − log 2
    poisson (mu)    log pmf = k log mu − mu − lgamma(k + 1);  cdf gammaincc(⌊k⌋ + 1, mu)
    multivariate_normal   −½ |L⁻¹(x − mean)|² − Σ log diag L − (n/2) log 2π, L L⊤ = cov
    dirichlet (alpha)     Σ (alpha−1) log x + lgamma(Σ alpha) − Σ lgamma(alpha), x's
                          components along its first axis (SciPy's)

Outside its support a log-density is −inf (a density 0), as SciPy's. Options SciPy has
and these do not (`allow_singular=True`, a `random_state`) are refused by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from reverie.tracing_base import RECORDER_FILES, TraceError, user_line
from reverie.tracing_contract import RECORDERS
from reverie.tracing_numpy import ENTRY_POINTS, ENTRY_TRIGGERS, _holds_traced

RECORDER_FILES.add(__file__)


class _SciPySpecial:
    """`scipy.special`, imported when a recorder first uses it (SciPy is optional, and
    these recorders run only where a program calls scipy.stats)."""

    def __getattr__(self, name: str) -> Any:
        import scipy.special  # noqa: PLC0415

        return getattr(scipy.special, name)


special = _SciPySpecial()

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
Density = Callable[..., Any]  # (z, *shape parameters) -> log f(z)


def _norm(z: Any) -> Any:
    return -0.5 * z * z - LOG_SQRT_2PI


def _t(z: Any, df: Any) -> Any:
    return (special.gammaln((df + 1) / 2) - special.gammaln(df / 2)
            - 0.5 * np.log(df * math.pi) - (df + 1) / 2 * np.log1p(z * z / df))


def _gamma(z: Any, a: Any) -> Any:
    inside = np.where(z > 0, z, 1.0)  # a log that is finite where the value is not used
    return np.where(z > 0, (a - 1) * np.log(inside) - z - special.gammaln(a), -np.inf)


def _chi2(z: Any, df: Any) -> Any:
    return _gamma(z / 2, df / 2) - math.log(2)


def _beta(z: Any, a: Any, b: Any) -> Any:
    inside = (z > 0) & (z < 1)
    safe = np.where(inside, z, 0.5)
    return np.where(inside, (a - 1) * np.log(safe) + (b - 1) * np.log1p(-safe)
                    - special.betaln(a, b), -np.inf)


def _expon(z: Any) -> Any:
    return np.where(z >= 0, -z, -np.inf)


def _laplace(z: Any) -> Any:
    return -np.abs(z) - math.log(2)


def _split(name: str, shapes: int, args: tuple, kwargs: dict[str, Any]
           ) -> tuple[list[Any], Any, Any]:
    """(shape parameters, loc, scale) of `dist.method(x, *args, **kwargs)`, as SciPy
    takes them: the shapes first, then loc and scale, by position or keyword."""
    values = list(args)
    loc = kwargs.pop("loc", values.pop(shapes) if len(values) > shapes else 0.0)
    scale = kwargs.pop("scale", values.pop(shapes) if len(values) > shapes else 1.0)
    if len(values) != shapes or kwargs:
        raise TraceError(f"scipy.stats.{name} with arguments {args}, {sorted(kwargs)} "
                         f"({user_line()}): {shapes} shape parameters, then loc and scale")
    return values, loc, scale


def _standardised(name: str, shapes: int, form: Callable[..., Any], density: bool
                  ) -> Callable[..., Any]:
    """`dist.method(x, *shapes, loc, scale)` as form(z, *shapes) at z = (x − loc) / scale,
    less log scale for a log-density."""
    def method(x: Any, *args: Any, **kwargs: Any) -> Any:
        parameters, loc, scale = _split(name, shapes, args, dict(kwargs))
        value = form((x - loc) / scale, *parameters)
        return value - np.log(scale) if density else value

    return method


def _exp(log_form: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *args, **kwargs: np.exp(log_form(*args, **kwargs))


def _log(form: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *args, **kwargs: np.log(form(*args, **kwargs))


CONTINUOUS: dict[str, tuple[int, Density]] = {
    "norm": (0, _norm), "t": (1, _t), "gamma": (1, _gamma), "chi2": (1, _chi2),
    "beta": (2, _beta), "expon": (0, _expon), "laplace": (0, _laplace),
}
CUMULATIVE: dict[str, Callable[..., Any]] = {
    "norm": lambda z: 0.5 * special.erfc(-z / math.sqrt(2)),
    "gamma": lambda z, a: special.gammainc(a, np.maximum(z, 0.0)),
    "chi2": lambda z, df: CUMULATIVE["gamma"](z / 2, df / 2),
    "beta": lambda z, a, b: special.betainc(a, b, np.clip(z, 0.0, 1.0)),
    "t": lambda z, df: _t_cdf(z, df),
}
SURVIVAL: dict[str, Callable[..., Any]] = {
    "norm": lambda z: 0.5 * special.erfc(z / math.sqrt(2)),
}


def _t_cdf(z: Any, df: Any) -> Any:
    """½ I(df/(df+z²); df/2, ½) below 0, one less that above (the regularised beta)."""
    tail = 0.5 * special.betainc(df / 2, 0.5, df / (df + z * z))
    return np.where(z < 0, tail, 1 - tail)


def poisson_cdf(k: Any, mu: Any, loc: Any = 0) -> Any:
    """P(K ≤ k) = Q(⌊k⌋ + 1, mu), the regularised upper incomplete gamma (0 below 0)."""
    count = np.floor(k - loc)
    return np.where(count < 0, 0.0, special.gammaincc(np.maximum(count, 0.0) + 1, mu))


def poisson_logpmf(k: Any, mu: Any, loc: Any = 0) -> Any:
    k = k - loc
    return special.xlogy(k, mu) - mu - special.gammaln(k + 1)


def multivariate_normal_logpdf(x: Any, mean: Any = None, cov: Any = 1,
                               allow_singular: bool = False) -> Any:
    """The log-density of N(mean, cov) at each vector of x's last axis."""
    if allow_singular:
        raise TraceError(f"scipy.stats.multivariate_normal(allow_singular=True) "
                         f"({user_line()}): a positive definite cov is traced")
    difference = x if mean is None else x - mean
    size = np.shape(difference)[-1]
    factor = np.linalg.cholesky(np.eye(size) * cov if np.ndim(cov) == 0 else cov)
    columns = np.expand_dims(difference, -1)  # each vector a column: L⁻¹ of all at once
    whitened = RECORDERS["solve_triangular"](factor, columns, lower=True)[..., 0]
    log_det = np.sum(np.log(np.diagonal(factor, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * np.sum(whitened * whitened, axis=-1) - log_det - size * LOG_SQRT_2PI


def dirichlet_logpdf(x: Any, alpha: Any) -> Any:
    """SciPy's: x's components along its first axis, alpha a vector."""
    alpha_column = np.reshape(alpha, (-1,) + (1,) * (np.ndim(x) - 1))
    return (np.sum((alpha_column - 1) * np.log(x), axis=0)
            + special.gammaln(np.sum(alpha)) - np.sum(special.gammaln(alpha)))


def _frozen(method: str) -> Callable[..., Any]:
    """`norm(mu, sigma).logpdf(x)`: a frozen distribution's method, the distribution's
    own with the parameters it holds."""
    def record(frozen: Any, x: Any) -> Any:
        recorder = ENTRY_POINTS.get(f"scipy.stats.{frozen.dist.name}.{method}")
        if recorder is None:
            raise TraceError(f"scipy.stats.{frozen.dist.name}.{method} cannot be traced "
                             f"({user_line()}); docs/api.md §8 lists the distributions")
        return recorder(x, *frozen.args, **frozen.kwds)

    return record


def _holds_parameters(value: Any) -> bool:
    """A traced value, or a frozen distribution holding one among its parameters."""
    parameters = [*getattr(value, "args", ()), *getattr(value, "kwds", {}).values()] \
        if hasattr(value, "dist") else []
    return _holds_traced(value) or _holds_traced(parameters)


FROZEN = {"rv_continuous_frozen": ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"),
          "rv_discrete_frozen": ("logpmf", "pmf")}

def _location_scale_methods() -> dict[str, Callable[..., Any]]:
    """The recorders of the location-scale distributions' methods, by entry point: each
    log-density and its density, each distribution function (and survival function) and
    its log."""
    recorders = {}
    for name, (shapes, log_density) in CONTINUOUS.items():
        logpdf = _standardised(name, shapes, log_density, density=True)
        recorders |= {f"scipy.stats.{name}.logpdf": logpdf,
                      f"scipy.stats.{name}.pdf": _exp(logpdf)}
        for method, forms in (("cdf", CUMULATIVE), ("sf", SURVIVAL)):
            if name in forms:
                value = _standardised(name, shapes, forms[name], density=False)
                recorders |= {f"scipy.stats.{name}.{method}": value,
                              f"scipy.stats.{name}.log{method}": _log(value)}
    return recorders


ENTRY_POINTS.update({
    **_location_scale_methods(),
    "scipy.stats.poisson.logpmf": poisson_logpmf,
    "scipy.stats.poisson.pmf": _exp(poisson_logpmf),
    "scipy.stats.poisson.cdf": poisson_cdf,
    "scipy.stats.multivariate_normal.logpdf": multivariate_normal_logpdf,
    "scipy.stats.multivariate_normal.pdf": _exp(multivariate_normal_logpdf),
    "scipy.stats.dirichlet.logpdf": dirichlet_logpdf,
    "scipy.stats.dirichlet.pdf": _exp(dirichlet_logpdf),
})
ENTRY_POINTS.update({f"scipy.stats._distn_infrastructure.{kind}.{method}": _frozen(method)
                     for kind, methods in FROZEN.items() for method in methods})
ENTRY_TRIGGERS.update({f"scipy.stats._distn_infrastructure.{kind}.{method}": _holds_parameters
                       for kind, methods in FROZEN.items() for method in methods})

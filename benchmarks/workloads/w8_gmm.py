"""W8: the negative log-likelihood of a Gaussian mixture with full covariances, x: f64[1000, 64],
100 components; grads wrt the means, log-diagonals, lower factors and weight logits.

Component k has mean mu_k and precision Q_k^T Q_k, with Q_k = diag(exp(s_k)) + L_k ⊙ tril
(tril: the strictly lower triangle, ones below the diagonal), so log det Q_k = sum_j s_kj:

    log N(x | mu_k, (Q_k^T Q_k)^-1) = log det Q_k - |Q_k (x - mu_k)|^2 / 2 - D log(2 pi) / 2
    loss = -mean_n logsumexp_k(log_softmax(logits)_k + log N(x_n | mu_k, ...))

The contraction y[n, k, j] = sum_i Q[k, j, i] xc[n, k, i] (409 M multiply-adds at the
reference size) dominates the forward pass; its adjoints with respect to Q and xc
dominate the gradient (issue 11).
"""

from __future__ import annotations

import numpy as np

from .core import (
    Thunk,
    Variant,
    Workload,
    import_jax,
    jax_grad,
    random_generator,
    reverie_module,
    torch_variants,
)

SOURCE = """
fn w8(x: f64[N, D], mu: f64[K, D], s: f64[K, D], L: f64[K, D, D], tril: f64[D, D],
      logits: f64[K]) -> f64 {
    let xc[n, k, i] = x[n, i] - mu[k, i];
    let y[n, k, j] = exp(s[k, j]) * xc[n, k, j] + sum[i](L[k, j, i] * tril[j, i] * xc[n, k, i]);
    let maha[n, k] = sum[j](y[n, k, j] ** 2);
    let log_det[k] = sum[j](s[k, j]);
    let log_comp = log_softmax(logits) + log_det - 0.5 * maha;
    return 0.5 * D * 1.8378770664093453 - mean(logsumexp(log_comp, axis=1));  # log(2 pi)
}
"""

PARAMETERS = ("mu", "s", "L", "logits")
LOG_2PI = 1.8378770664093453


def _factor(xp: object, s: object, L: object, tril: object) -> object:
    """Q[k] = diag(exp(s[k])) + L[k] * tril, for NumPy, torch or jax.numpy."""
    eye = xp.eye(s.shape[1], dtype=s.dtype)
    return xp.exp(s)[:, :, None] * eye + L * tril


def numpy_grad(x: np.ndarray, mu: np.ndarray, s: np.ndarray, L: np.ndarray,
               tril: np.ndarray, logits: np.ndarray) -> tuple[np.ndarray, ...]:
    """(dmu, ds, dL, dlogits) by hand, with the points laid out [K, N, D] for matmul."""
    n = x.shape[0]
    q = _factor(np, s, L, tril)
    xc = x[None, :, :] - mu[:, None, :]                        # [K, N, D]
    y = xc @ q.transpose(0, 2, 1)                               # y[k, n, j]
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    log_comp = np.log(weights)[:, None] + s.sum(axis=1)[:, None] - 0.5 * (y * y).sum(axis=2)
    resp = np.exp(log_comp - log_comp.max(axis=0))
    resp /= resp.sum(axis=0)                                    # responsibilities [K, N]
    g = -resp / n                                               # d loss / d log_comp
    g_k = g.sum(axis=1)
    dy = -g[:, :, None] * y                                     # d loss / d y
    dq = dy.transpose(0, 2, 1) @ xc                             # dq[k, j, i]
    dmu = -(dy @ q).sum(axis=1)
    ds = g_k[:, None] + np.diagonal(dq, axis1=1, axis2=2) * np.exp(s)
    return dmu, ds, dq * tril, g_k - weights * g_k.sum()


def torch_loss(torch: object) -> object:
    """The loss written with torch."""

    def loss(x: object, mu: object, s: object, L: object, tril: object,
             logits: object) -> object:
        xc = x[:, None, :] - mu[None, :, :]
        y = torch.einsum("kji,nki->nkj", _factor(torch, s, L, tril), xc)
        log_comp = (torch.log_softmax(logits, dim=0) + s.sum(dim=1)
                    - 0.5 * (y * y).sum(dim=2))
        return 0.5 * x.shape[1] * LOG_2PI - torch.logsumexp(log_comp, dim=1).mean()

    return loss


def jax_loss(x: object, mu: object, s: object, L: object, tril: object,
             logits: object) -> object:
    """The loss written with jax.numpy."""
    jax = import_jax()
    jnp = jax.numpy
    xc = x[:, None, :] - mu[None, :, :]
    y = jnp.einsum("kji,nki->nkj", _factor(jnp, s, L, tril), xc)
    log_comp = jax.nn.log_softmax(logits) + s.sum(axis=1) - 0.5 * (y * y).sum(axis=2)
    return 0.5 * x.shape[1] * LOG_2PI - jax.scipy.special.logsumexp(log_comp, axis=1).mean()


def make(tiny: bool = False) -> Workload:
    """W8 at the reference size or a tiny one (N=20, D=4, K=3) for tests."""
    n, d, k = (20, 4, 3) if tiny else (1000, 64, 100)
    rng = random_generator("W8")
    x = rng.standard_normal((n, d))
    mu = 0.5 * rng.standard_normal((k, d))
    s = 0.1 * rng.standard_normal((k, d))
    L = 0.3 * rng.standard_normal((k, d, d)) / np.sqrt(d)
    tril = np.tril(np.ones((d, d)), -1)
    logits = rng.standard_normal(k)
    args = [x, mu, s, L, tril, logits]
    wrt = [1, 2, 3, 5]

    def reverie() -> Thunk:
        grad = reverie_module(SOURCE).w8.grad(PARAMETERS)
        return lambda: grad(*args)

    def forward() -> Thunk:
        kernel = reverie_module(SOURCE).w8
        return lambda: kernel(*args)

    def numpy() -> Thunk:
        return lambda: numpy_grad(*args)

    def jax() -> Thunk:
        return jax_grad(jax_loss, args, wrt)

    return Workload("W8", "full-covariance GMM, x: f64[1000, 64], 100 components", "ms", 1e-9,
                    forward, [
                        Variant("reverie", "reverie", reverie),
                        Variant("numpy", "numpy (hand-written)", numpy),
                        *torch_variants(torch_loss, args, wrt),
                        Variant("jax", "jax jit", jax),
                    ])

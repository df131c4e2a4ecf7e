"""The dot-product test ⟨u, J v⟩ = ⟨Jᵀ u, v⟩ on larger inputs, for random u and v.

⟨u, J v⟩ comes from a central difference along v, ⟨Jᵀ u, v⟩ from the adjoint IR.
"""

from __future__ import annotations

import numpy as np
import pytest
from grad_helpers import dot_product_test, specialise

RNG = np.random.default_rng(13)

PROGRAMS = {
    "mlp": ("""fn f(x: f64[N, D], W1: f64[D, H], b1: f64[H], W2: f64[H, O]) -> f64[N, O] {
                   return softmax(relu(x @ W1 + b1) @ W2, axis=1); }""",
            {"N": 64, "D": 32, "H": 48, "O": 10}),
    "conv2d": ("""fn f(x: f64[B, C, H, W], w: f64[F, C, 3, 3]) -> f64[B, F, H, W] {
                      let y[b, f, i in 0..H, j in 0..W] =
                          sum[c, p, q](x[b, c, i + p - 1, j + q - 1] * w[f, c, p, q]);
                      return tanh(y); }""",
               {"B": 2, "C": 3, "H": 10, "W": 9, "F": 4}),
    "attention": ("""fn f(q: f64[S, D], k: f64[S, D], v: f64[S, D]) -> f64[S, D] {
                         let scores[s, t] = sum[d](q[s, d] * k[t, d]) / sqrt(f64(D));
                         let allowed[s in 0..S, t in 0..S] = t <= s;
                         return softmax(where(allowed, scores, -1e9), axis=1) @ v; }""",
                  {"S": 24, "D": 16}),
    "gather": ("""fn f(table: f64[V, D], ids: i64[N], w: f64[D]) -> f64[N] {
                      let rows[n, d] = table[ids[n], d];
                      return logsumexp(rows * w, axis=1); }""",
               {"V": 30, "D": 8, "N": 200}),
    "rnn": ("""fn f(W: f64[H, H], U: f64[H, I], xs: f64[T, I], h0: f64[H]) -> f64[H] {
                   var h = h0;
                   for t in 0..T { h = tanh(W @ h + U @ xs[t]); }
                   return h; }""",
            {"H": 16, "I": 8, "T": 40}),
    "heat": ("""fn f(u0: f64[N], alpha: f64, steps: i64) -> f64[N] {
                    var u = u0;
                    for t in 0..steps { u = u + alpha * (roll(u, 1) - 2.0 * u + roll(u, -1)); }
                    return u * u; }""",
             {"N": 64}),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_dot_product(name: str) -> None:
    source, dims = PROGRAMS[name]
    fn = specialise(source)
    args: list[object] = []
    for p, param in zip(fn.params, fn.param_names, strict=True):
        shape = tuple(d.evaluate(dims) for d in p.type.shape)
        if param == "ids":
            args.append(RNG.integers(0, dims["V"], shape))
        elif param == "steps":
            args.append(np.int64(30))
        elif param == "alpha":
            args.append(np.float64(0.2))
        else:
            args.append(0.4 * RNG.standard_normal(shape))
    forward, backward = dot_product_test(fn, args, dims)
    assert abs(forward - backward) <= 1e-7 * (1 + abs(forward)), (forward, backward)

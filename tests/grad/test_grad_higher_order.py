"""Higher derivatives: the adjoint IR is ordinary IR, so it can be differentiated again.

Hessian-vector products (the VJP of a gradient function) and gradients of gradient
entries are compared with torch; the third derivative of sin is −cos.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from grad_helpers import run, specialise

from reverie.compiler.ir.core import Block, Function
from reverie.compiler.ir.tensor_verifier import verify_function
from reverie.compiler.transforms.reverse import grad_function, vjp_function

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(9)


def keep_result(fn: Function, index: int) -> Function:
    """`fn` returning only its result `index` (the ops are shared, not copied)."""
    body = Block(params=fn.params, ops=fn.body.ops, results=[fn.body.results[index]])
    return Function(f"{fn.name}_{index}", body, fn.param_names, fn.dim_names, fn.span)


def test_third_derivative_of_sin() -> None:
    fn = specialise("fn f(x: f64) -> f64 { return sin(x); }")
    first = grad_function(fn, [0])
    second = grad_function(keep_result(first, 1), [0])
    third = grad_function(keep_result(second, 1), [0])
    x = np.float64(0.7)
    values = [run(g, [x], {}) for g in (first, second, third)]
    np.testing.assert_allclose([v[1] for v in values], [np.cos(x), -np.sin(x), -np.cos(x)],
                               rtol=1e-15)


def test_gradient_of_a_gradient_entry() -> None:
    fn = specialise("fn f(s: f64, y: f64[N]) -> f64 { return sum(exp(s * y) * y); }")
    entry = keep_result(grad_function(fn, [0]), 1)  # df/ds, a scalar
    s, y = np.float64(0.3), RNG.standard_normal(4)
    dss, dsy = run(grad_function(entry, [0, 1]), [s, y], {"N": 4})[1:]
    st, yt = torch.tensor(s, requires_grad=True), torch.tensor(y, requires_grad=True)
    (ds,) = torch.autograd.grad((torch.exp(st * yt) * yt).sum(), st, create_graph=True)
    want = torch.autograd.grad(ds, [st, yt])
    np.testing.assert_allclose(dss, want[0].numpy(), rtol=1e-12)
    np.testing.assert_allclose(dsy, want[1].numpy(), rtol=1e-12)


def hvp(source: str, args: list[np.ndarray], dims: dict[str, int], wrt: int,
        checkpoint: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(H v, v) for a random v: the VJP of the gradient with cotangent (0, v)."""
    fn = specialise(source)
    second = vjp_function(grad_function(fn, [wrt], checkpoint=checkpoint), [wrt],
                          checkpoint=checkpoint)
    verify_function(second)
    v = RNG.standard_normal(np.shape(args[wrt]))
    return run(second, list(args) + [np.float64(0.0), v], dims)[-1], v


def torch_hvp(reference: Callable, args: list[np.ndarray], wrt: int,
              v: np.ndarray) -> np.ndarray:
    tensors = [torch.tensor(a) for a in args]
    tensors[wrt].requires_grad_(True)
    (g,) = torch.autograd.grad(reference(*tensors), tensors[wrt], create_graph=True)
    (hv,) = torch.autograd.grad(g, tensors[wrt], torch.tensor(v))
    return hv.numpy()


def _rnn(W, xs, h0):
    h = h0
    for t in range(xs.shape[0]):
        h = torch.tanh(W @ h + xs[t])
    return (h * h).sum()


CASES = {
    "mlp": ("""fn f(x: f64[N, D], W1: f64[D, H], W2: f64[H]) -> f64 {
                   return mean((tanh(x @ W1) @ W2) ** 2); }""",
            [(4, 3), (3, 5), (5,)], {"N": 4, "D": 3, "H": 5}, 1,
            lambda x, W1, W2: ((torch.tanh(x @ W1) @ W2) ** 2).mean()),
    "cross_entropy": ("""fn f(z: f64[N, C], labels: i64[N]) -> f64 {
                             let lp = log_softmax(z, axis=1);
                             let picked[n] = lp[n, labels[n]];
                             return -mean(picked); }""",
                      [(4, 3), np.array([1, 0, 2, 2])], {"N": 4, "C": 3}, 0,
                      lambda z, labels: F.cross_entropy(z, labels)),
    "conv1d": ("""fn f(x: f64[B, L], k: f64[K]) -> f64 {
                      let y[b, i in 0..L] = sum[j](x[b, i + j - K // 2] * k[j]);
                      return sum(tanh(y)); }""",
               [(2, 6), (3,)], {"B": 2, "L": 6, "K": 3}, 1,
               lambda x, k: torch.tanh(F.conv1d(x[:, None], k[None, None], padding=1)).sum()),
    "gather_input": ("""fn f(x: f64[C], labels: i64[N]) -> f64 {
                            let p[n] = x[labels[n]]; return sum(exp(p) * p); }""",
                     [(3,), np.array([2, 0, 2])], {"C": 3, "N": 3}, 0,
                     lambda x, labels: (torch.exp(x[labels]) * x[labels]).sum()),
    "max_prod_kernels": ("""fn f(A: f64[N, M]) -> f64 {
                                let p[i] = prod[j](A[i, j]);
                                let m[i] = max[j](A[i, j] * p[i]);
                                return sum(m * m) + logsumexp(A); }""",
                         [(3, 4)], {"N": 3, "M": 4}, 0,
                         lambda A: ((A * A.prod(1, keepdim=True)).amax(1) ** 2).sum()
                         + torch.logsumexp(A, (0, 1))),
    "rnn": ("""fn f(W: f64[H, H], xs: f64[T, H], h0: f64[H]) -> f64 {
                   var h = h0;
                   for t in 0..T { h = tanh(W @ h + xs[t]); }
                   return sum(h * h); }""",
            [(3, 3), (5, 3), (3,)], {"H": 3, "T": 5}, 0, _rnn),
}


def _case_args(shapes: list) -> list[np.ndarray]:
    return [0.7 * RNG.standard_normal(s) if isinstance(s, tuple) else s for s in shapes]


@pytest.mark.parametrize("case", sorted(CASES))
def test_hessian_vector_product_matches_torch(case: str) -> None:
    source, shapes, dims, wrt, reference = CASES[case]
    args = _case_args(shapes)
    ours, v = hvp(source, args, dims, wrt)
    np.testing.assert_allclose(ours, torch_hvp(reference, args, wrt, v), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", ["rnn", "rnn_runtime_trip"])
def test_checkpointed_second_derivatives_match(case: str) -> None:
    source, shapes, dims, wrt, reference = CASES["rnn"]
    if case == "rnn_runtime_trip":
        source = source.replace("h0: f64[H])", "h0: f64[H], n: i64)").replace("0..T", "0..n")
        shapes = shapes + [np.int64(5)]

        def reference(W, xs, h0, n):  # noqa: F811
            return _rnn(W, xs, h0)

    args = _case_args(shapes)
    stored, v = hvp(source, args, dims, wrt)
    fn = specialise(source)
    second = vjp_function(grad_function(fn, [wrt], checkpoint=True), [wrt], checkpoint=True)
    checkpointed = run(second, list(args) + [np.float64(0.0), v], dims)[-1]
    # Equal up to the order contributions are summed in (first derivatives are bitwise equal).
    np.testing.assert_allclose(stored, checkpointed, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(stored, torch_hvp(reference, args, wrt, v), rtol=1e-9)

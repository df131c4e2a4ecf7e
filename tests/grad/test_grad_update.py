"""Indexed updates `h[t] = e;` and tuple destructuring: values, derivatives, every stage.

An update is functional (docs/language.md): the new `h` equals `e` on the subscripted window and
the old `h` elsewhere, so h̄ = ḡ with the window zeroed and ē = ḡ[window]. Checked against
NumPy for values, central differences and torch for reverse mode, central differences for
forward mode, a loop for batching, and the native and MLIR back ends for the same values;
an integer subscript out of range is an IndexError at run time, as for a read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from forward_helpers import batch_error, jvp_error
from grad_helpers import fd_jacobian, grad, run, specialise, vjp_jacobian

import reverie as rv

DIMS = {"T": 4, "N": 3}
RNG = np.random.default_rng(12)

# (source, NumPy reference) pairs; every function is f(h: f64[T, N], e: f64[N], k: i64).
UPDATES = {
    "row": ("fn f(h: f64[T, N], e: f64[N], k: i64) -> f64[T, N] "
            "{ var y = h; y[k] = e * e; return y; }",
            lambda h, e, k: _put(h, k, e * e)),
    "column_slice": ("fn f(h: f64[T, N], e: f64[N], k: i64) -> f64[T, N] "
                     "{ var y = h; y[1:, k % N] = sin(e[0]); return y * h; }",
                     lambda h, e, k: _put(h, (slice(1, None), k % 3), np.sin(e[0])) * h),
    "strided_rows": ("fn f(h: f64[T, N], e: f64[N], k: i64) -> f64[T, N] "
                     "{ var y = h; y[::2, :] = e; return exp(y); }",
                     lambda h, e, k: np.exp(_put(h, slice(None, None, 2), e))),
    "element_then_overwrite": ("fn f(h: f64[T, N], e: f64[N], k: i64) -> f64[T, N] "
                               "{ var y = h; y[k, 0] = e[1]; y[k] = y[0] + e; return y; }",
                               lambda h, e, k: _put(_put(h, (k, 0), e[1]), k,
                                                    _put(h, (k, 0), e[1])[0] + e)),
    "in_a_loop": ("fn f(h: f64[T, N], e: f64[N], k: i64) -> f64[T, N] { var y = h; "
                  "var s = e; for t in 0..T { s = tanh(s + y[t]); y[t] = s * y[T - 1 - t]; } "
                  "return y; }",
                  lambda h, e, k: _loop_reference(h, e)),
}


def _put(h: np.ndarray, where: object, value: object) -> np.ndarray:
    """A copy of `h` with `h[where] = value`."""
    out = np.array(h, dtype=np.float64)
    out[where] = value
    return out


def _loop_reference(h: np.ndarray, e: np.ndarray) -> np.ndarray:
    y, s = np.array(h), np.array(e)
    for t in range(len(y)):
        s = np.tanh(s + y[t])
        y[t] = s * y[len(y) - 1 - t]
    return y


def _args(k: int = 2) -> list[object]:
    return [RNG.standard_normal((4, 3)), RNG.standard_normal(3), np.int64(k)]


@pytest.mark.parametrize("case", UPDATES)
def test_update_values_match_numpy(case: str) -> None:
    source, reference = UPDATES[case]
    args = _args()
    (got,) = run(specialise(source), args, DIMS)
    np.testing.assert_allclose(got, reference(*args), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("case", UPDATES)
def test_update_reverse_mode_matches_finite_differences(case: str) -> None:
    fn = specialise(UPDATES[case][0])
    args = _args()
    jacobians = vjp_jacobian(fn, args, DIMS, [0, 1])
    for index, jacobian in zip([0, 1], jacobians, strict=True):
        np.testing.assert_allclose(jacobian, fd_jacobian(fn, args, DIMS, index),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("case", UPDATES)
def test_update_forward_mode_matches_finite_differences(case: str) -> None:
    for tangent, central in jvp_error(specialise(UPDATES[case][0]), _args(), DIMS):
        np.testing.assert_allclose(tangent, central, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("case", UPDATES)
def test_update_batched_over_every_parameter_matches_a_loop(case: str) -> None:
    arg_sets = [_args(k) for k in (0, 3, 1)]
    for got, want in batch_error(specialise(UPDATES[case][0]), arg_sets, DIMS, [0, 1, 2]):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


def test_update_gradient_zeroes_the_window_and_routes_it_to_the_value() -> None:
    source = ("fn f(h: f64[T, N], e: f64[N], w: f64[T, N], k: i64) -> f64 "
              "{ var y = h; y[k] = e; return sum(y * w); }")
    h, e, _ = _args()
    w = RNG.standard_normal((4, 3))
    h_bar, e_bar, w_bar = grad(specialise(source), [0, 1, 2], [h, e, w, np.int64(1)], DIMS)
    np.testing.assert_array_equal(h_bar, _put(w, 1, 0.0))
    np.testing.assert_array_equal(e_bar, w[1])
    np.testing.assert_array_equal(w_bar, _put(h, 1, e))


def test_lstm_example_gradient_matches_torch() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "lstm_update.rv"
    fn = specialise(path.read_text(), "lstm_loss")
    sizes = {"T": 5, "D": 4, "H": 3}
    shapes = [(5, 4), (3,), (3,), (4, 12), (3, 12), (12,), (3,), (5,)]
    args = [RNG.standard_normal(s) for s in shapes]

    def reference(xs, h, c, wx, wh, b, wo, targets):  # noqa: ANN001, ANN202
        hs = []
        for x in xs:
            i, f, g, o = torch.split(x @ wx + h @ wh + b, 3)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
        return (((torch.stack(hs) @ wo - targets) ** 2).sum() + 0.1 * (c * c).sum())

    tensors = [torch.tensor(a, requires_grad=True) for a in args]
    theirs = torch.autograd.grad(reference(*tensors), tensors)
    ours = grad(fn, list(range(8)), args, sizes)
    for name, a, b in zip(fn.param_names, ours, theirs, strict=True):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


BACKENDS = ["interp", "native", "mlir"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_update_runs_alike_on_every_backend_and_checks_bounds(backend: str) -> None:
    source, reference = UPDATES["column_slice"]
    module = rv.compile(source + "\n" + UPDATES["in_a_loop"][0].replace("fn f", "fn g"),
                        backend=backend)
    args = _args()
    np.testing.assert_allclose(module.f(*args), reference(*args), rtol=1e-13)
    np.testing.assert_allclose(module.g(*args), _loop_reference(*args[:2]), rtol=1e-13)
    row = rv.compile(UPDATES["row"][0], backend=backend)
    with pytest.raises(IndexError, match="out of bounds for axis 0 of 'y' with size 4"):
        row.f(*_args(k=4))
    with pytest.raises(IndexError, match="index -1 is out of bounds"):
        row.f(*_args(k=-1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_update_gradient_runs_alike_on_every_backend(backend: str) -> None:
    source = ("fn f(h: f64[T, N], e: f64[N], k: i64) -> f64 { var y = h; "
              "for t in 0..T { y[t, 1:] = y[t, 1:] * e[1:] + y[(t + k) % T, :N - 1]; } "
              "return sum(y * y); }")
    args = _args()
    want = grad(specialise(source), [0, 1], args, DIMS)
    got = rv.compile(source, backend=backend).f.grad(wrt=[0, 1])(*args)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_destructuring_binds_declares_and_reassigns() -> None:
    source = """
    fn pair(x: f64[N]) -> (f64[N], f64) { return (x * 2.0, sum(x)); }
    fn f(x: f64[N]) -> (f64[N], f64) {
        let (a, s) = pair(x);
        var (u, v) = (a, s);
        for t in 0..3 { (u, v) = (u * v, v + 1.0); }
        return (u, v);
    }"""
    x = RNG.standard_normal(3)
    u, v = rv.compile(source, backend="interp").f(x)
    want_u, want_v = x * 2.0, x.sum()
    for _ in range(3):
        want_u, want_v = want_u * want_v, want_v + 1.0
    np.testing.assert_allclose(u, want_u, rtol=1e-13)
    np.testing.assert_allclose(v, want_v, rtol=1e-13)

"""Index ranges bounded by a `for` variable (issue 36 item 5):

    for j in 0..N { let s = sum[k in 0..j](x[k]); ... }

The reduction index ranges over the box of its bounds as j runs over the loop's range
(0..N - 1 here) and is masked by the value of j at run time (compiler/lower/index_notation.py
`_loop_ranges`, compiler/lower/triangular.py). Values at every stage (the NumPy reference
interpreter, native code, the MLIR backend) against Python loops; gradients against torch
and central differences. A bound that is any other run-time value is a CompileError whose
caret is on it and which says what to write.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reverie as rv

SOURCE = """
fn prefix(x: f64[N]) -> f64 {
    var t = 0.0;
    for j in 0..N {
        let s = sum[k in 0..j](x[k] * x[k]);
        t = t + s * f64(j + 1);
    }
    return t;
}
fn window(x: f64[N]) -> f64 {
    var t = 0.0;
    for j in 1..N + 1 {
        t = t + max[k in j - 1..j + 1](x[k]);
    }
    return t;
}
fn rows(a: f64[N, N]) -> f64[N] {
    var out = a[0, :] * 0.0;
    for i in 0..N {
        let r[c] = sum[k in i..N](a[k, c]);
        out = out + tanh(r) * f64(i);
    }
    return out;
}
"""
X = np.array([0.7, -1.3, 2.1, 0.4, -0.2])
A = np.random.default_rng(36).standard_normal((4, 4))


def torch_prefix(x: torch.Tensor) -> torch.Tensor:
    return sum((x[:j] * x[:j]).sum() * (j + 1) for j in range(len(x)))


def torch_window(x: torch.Tensor) -> torch.Tensor:
    padded = torch.cat([x, torch.zeros(1, dtype=x.dtype)])  # reads past the end are 0
    return sum(padded[j - 1:j + 1].max() for j in range(1, len(x) + 1))


def torch_rows(a: torch.Tensor) -> torch.Tensor:
    return sum(torch.tanh(a[i:].sum(0)) * i for i in range(a.shape[0]))


CASES = {"prefix": (torch_prefix, X), "window": (torch_window, X), "rows": (torch_rows, A)}


@pytest.mark.parametrize("backend", ["interp", "native", "mlir"])
@pytest.mark.parametrize("name", list(CASES))
def test_values_and_gradients_as_torch(backend: str, name: str) -> None:
    reference, data = CASES[name]
    kernel = rv.compile(SOURCE, backend=backend)[name]
    t = torch.tensor(data, requires_grad=True)
    expected = reference(t)
    np.testing.assert_allclose(kernel(data), expected.detach().numpy(), rtol=1e-12)
    cotangent = np.linspace(0.5, 1.5, expected.numel()).reshape(expected.shape)
    (expected_grad,) = torch.autograd.grad(expected, t, torch.tensor(cotangent))
    np.testing.assert_allclose(kernel.vjp(0)(data, cotangent), expected_grad.numpy(),
                               rtol=1e-12, atol=1e-14)


def test_gradient_against_central_differences() -> None:
    kernel = rv.compile(SOURCE)["prefix"]
    eps = 1e-6
    fd = [(kernel(X + eps * e) - kernel(X - eps * e)) / (2 * eps) for e in np.eye(len(X))]
    np.testing.assert_allclose(kernel.grad(0)(X), fd, rtol=1e-7, atol=1e-9)


def test_one_kernel_at_two_sizes() -> None:
    kernel = rv.compile(SOURCE)["prefix"]
    for n in (1, 3, 8):
        x = np.linspace(-1.0, 1.0, n)
        np.testing.assert_allclose(kernel(x), torch_prefix(torch.tensor(x)).numpy(),
                                   rtol=1e-12)


def test_a_run_time_value_as_a_bound_says_what_to_write() -> None:
    source = ("fn f(x: f64[N], n: f64) -> f64 {\n"
              "    let m = i64(n);\n"
              "    let s = sum[k in 0..m](x[k]);\n"
              "    return s;\n"
              "}\n")
    with pytest.raises(rv.TypeCheckError) as info:
        rv.compile(source, name="bound.rv")
    diagnostic = info.value.diagnostics[0]
    assert (diagnostic.line, diagnostic.column) == (3, 25)
    assert diagnostic.message.startswith("'m' is a value known only at run time, not a "
                                         "dimension")
    assert "sum[k](where(k < m, x[k], 0.0))" in diagnostic.message
    assert "sum[k in 0..i + 1]" in diagnostic.message
    caret = str(info.value).splitlines()[2]
    assert caret.index("^") - 4 == 24


def test_a_loop_over_a_run_time_range_cannot_bound_a_range() -> None:
    source = ("fn f(x: f64[N], n: f64) -> f64 {\n"
              "    var t = 0.0;\n"
              "    for j in 0..i64(n) {\n"
              "        t = t + sum[k in 0..j](x[k]);\n"
              "    }\n"
              "    return t;\n"
              "}\n")
    with pytest.raises(rv.TypeCheckError) as info:
        rv.compile(source)
    diagnostic = info.value.diagnostics[0]
    assert (diagnostic.line, diagnostic.column) == (4, 29)
    assert "'j' is a value known only at run time" in diagnostic.message

"""Reverse mode through index notation (`generic`): reads become accumulating writes.

Whole-axis permutations (matmul) come back as plain `generic` ops, gathers and stencils as
`generic_scatter`; both are checked against central differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from grad_helpers import assert_jacobians_match, grad, run, specialise

from reverie.compiler.transforms.reverse import grad_function, vjp_function

RNG = np.random.default_rng(11)

CASES = {
    "matmul": ("fn f(A: f64[N, K], B: f64[K, M]) -> f64[N, M] "
               "{ let C[i, j] = sum[k](A[i, k] * B[k, j]); return C; }",
               {"N": 2, "K": 3, "M": 2}),
    "stencil": ("fn f(x: f64[B, N], k: f64[K]) -> f64[B, N] "
                "{ let y[b, i in 0..N] = sum[j](x[b, i + j - K // 2] * k[j]); return y; }",
                {"B": 2, "N": 5, "K": 3}),
    "offset_range": ("fn f(x: f64[N]) -> f64[N - 1] "
                     "{ let d[i in 1..N] = x[i] * x[i] - x[i - 1]; return d; }", {"N": 5}),
    "diagonal": ("fn f(A: f64[N, N]) -> f64[N] { let d[i] = A[i, i] * A[i, i]; return d; }",
                 {"N": 3}),
    "two_reads": ("fn f(x: f64[N]) -> f64[N] { let y[i] = x[i] * x[i + 1]; return y; }",
                  {"N": 4}),
    "scalar_operand": ("fn f(x: f64[N], s: f64) -> f64[N] "
                       "{ let y[i] = x[i] * s * s; return y; }", {"N": 3}),
    "nested_reduction": ("fn f(A: f64[N, M], x: f64[N]) -> f64[N] "
                         "{ let y[i] = x[i] * sum[j](A[i, j]); return y; }", {"N": 3, "M": 2}),
    "full_reduction": ("fn f(A: f64[N, M], B: f64[N, M]) -> f64 "
                       "{ return sum[i, j](A[i, j] * exp(B[i, j])); }", {"N": 2, "M": 3}),
    "max": ("fn f(A: f64[N, M]) -> f64[N] { let y[i] = max[j](A[i, j] * A[i, j]); return y; }",
            {"N": 3, "M": 4}),
    "min": ("fn f(A: f64[N, M]) -> f64[M] { let y[j] = min[i](A[i, j] + 1.0); return y; }",
            {"N": 3, "M": 2}),
    "prod": ("fn f(A: f64[N, M]) -> f64[N] { let y[i] = prod[j](A[i, j]); return y; }",
             {"N": 2, "M": 3}),
    "box_blur": ("fn f(img: f64[H, W]) -> f64[H, W] { let y[i in 0..H, j in 0..W] = "
                 "sum[p in 0..3, q in 0..3](img[i + p - 1, j + q - 1]) / 9.0; return y; }",
                 {"H": 3, "W": 4}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_index_notation(case: str) -> None:
    source, dims = CASES[case]
    fn = specialise(source)
    args = []
    for p in fn.params:
        shape = tuple(d.evaluate(dims) for d in p.type.shape)
        args.append(RNG.standard_normal(shape))
    assert_jacobians_match(fn, args, dims)


def test_product_reduction_with_zeros() -> None:
    fn = specialise(CASES["prod"][0])
    A = RNG.standard_normal((3, 4))
    A[1, 2] = 0.0
    A[2, 0] = A[2, 3] = 0.0
    assert_jacobians_match(fn, [A], {"N": 3, "M": 4})


GATHER = """
fn f(z: f64[N, C], labels: i64[N]) -> f64 {
    let lp = log_softmax(z, axis=1);
    let picked[n] = lp[n, labels[n]];
    return -mean(picked);
}
"""


def test_gather_becomes_a_scatter_add() -> None:
    fn = specialise(GATHER)
    g = vjp_function(fn, [0])
    assert any(op.name == "generic_scatter" for op in g.body.ops)
    labels = np.array([0, 2, 2, 1])
    assert_jacobians_match(fn, [RNG.standard_normal((4, 3)), labels], {"N": 4, "C": 3}, wrt=[0])


def test_repeated_labels_accumulate() -> None:
    fn = specialise("fn f(x: f64[C], labels: i64[N]) -> f64 "
                    "{ let p[n] = x[labels[n]]; return sum(p * p); }")
    x = np.array([1.0, 2.0, 3.0])
    (gx,) = grad(fn, [0], [x, np.array([2, 0, 2, 2])], {"C": 3, "N": 4})
    np.testing.assert_array_equal(gx, [2.0, 0.0, 18.0])


def test_out_of_range_gather_still_raises_in_the_gradient() -> None:
    fn = specialise(GATHER)
    g = grad_function(fn, [0])
    with pytest.raises(IndexError, match="out of bounds"):
        run(g, [np.zeros((2, 3)), np.array([0, 3])], {"N": 2, "C": 3})


def test_matmul_adjoint_is_a_plain_generic() -> None:
    fn = specialise(CASES["matmul"][0])
    names = [op.name for op in vjp_function(fn, [0, 1]).body.ops]
    assert names.count("generic") == 3 and "generic_scatter" not in names

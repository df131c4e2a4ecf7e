"""Programs and data shared by the Dask tests: losses over rows, and their inputs.

Every loss is a sum or mean over the rows of its batch parameters (`x`, `y`, `labels`), so
its value and gradients on the concatenated rows are what the data-parallel call must
reproduce. `split(array, chunks)` cuts an array into a dask array with uneven row chunks;
`kernels_and_arguments` gives one kernel of every kind (for the pickling tests).
"""

from __future__ import annotations

import dask.array as da
import numpy as np

import reverie as rv
from reverie.kernel import Kernel
from reverie.kernel_transforms import rebuild

SOURCE = """
fn mse(x: float[N, D], y: float[N], w: float[D], b: float) -> float {
    return mean((tanh(x @ w + b) - y) ** 2);
}

fn squared_sum(x: float[N, D], y: float[N], w: float[D], b: float) -> float {
    return sum((x @ w + b - y) ** 2);
}

fn recurrent(x: f64[N, D], w: f64[D], a: f64, steps: i64) -> f64 {
    var h = x @ w;
    for t in 0..steps {
        h = tanh(a * h + x @ w);
    }
    return sum(h * h);
}

fn xent(x: f64[N, D], labels: i64[N], w: f64[D, C]) -> f64 {
    let lp = log_softmax(x @ w, axis=1);
    let picked[n] = lp[n, labels[n]];
    return -mean(picked);
}

fn predict(x: float[N, D], w: float[D]) -> float[N] {
    return tanh(x @ w);
}

fn score(x: float[N, D], w: float[D]) -> float {
    return sum(x @ w);
}
"""

UNEVEN = (7, 13, 1, 20, 9)  # 50 rows in five uneven chunks


def rows(n: int = 50, d: int = 4, dtype: type = np.float64,
         seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Inputs `x, y, w, b` of `mse` and `squared_sum` with `n` rows."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)).astype(dtype), rng.standard_normal(n).astype(dtype),
            rng.standard_normal(d).astype(dtype), 0.3)


def split(array: np.ndarray, chunks: tuple[int, ...] = UNEVEN) -> da.Array:
    """`array` as a dask array with row chunks `chunks` (other axes whole)."""
    return da.from_array(array, chunks=(chunks, *array.shape[1:]))


def kernels_and_arguments(m: rv.Module) -> dict[str, tuple[Kernel, tuple]]:
    """Every kind of kernel, each with arguments to call it on."""
    x, y, w, b = rows(n=6, d=3)
    m.predict.batched_vjp([1], (x, w), [np.ones((2, 6))])  # made, then found by its key
    return {
        "function": (m.mse, (x, y, w, b)),
        "grad": (m.mse.grad("w"), (x, y, w, b)),
        "grad (default wrt)": (m.mse.grad(), (x, y, w, b)),
        "value_and_grad": (m.mse.value_and_grad(("w", "b"), checkpoint=True), (x, y, w, b)),
        "vjp": (m.predict.vjp("w"), (x, w, y)),
        "jvp": (m.predict.jvp(("x", "w")), (x, w, (x, w))),
        "hvp": (m.mse.hvp("w"), (x, y, w, b, w)),
        "jacobian": (m.predict.jacobian("w"), (x, w)),
        "hessian": (m.mse.hessian("w"), (x, y, w, b)),
        "grad of grad": (m.score.grad("x").vjp("w"), (x, w, x)),
        "batched_vjp": (rebuild(m.predict, ("batched_vjp", (1,), (True,), "f64")),
                        (x, w, np.ones((2, 6)))),
    }

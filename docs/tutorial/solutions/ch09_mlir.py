"""Chapter 9: the second back end as a cross-check.

Exercise 1: `mse` (f64, a matrix product) gives the same value and gradient natively and
through upstream MLIR.

Exercise 2: every elementwise chain and every reduction is one `linalg.generic`; the
adjoint has more of them than the program (the seed's broadcast, 1 - tanh², the two
products), which the count shows.
"""

from __future__ import annotations

import numpy as np

import reverie as rv


def backends_agree(path: str = "docs/tutorial/kernels/linear.rv") -> bool:
    """Whether native and MLIR agree on `mse` and its gradient on random data."""
    source = open(path).read()
    native, upstream = rv.compile(source), rv.compile(source, backend="mlir")
    rng = np.random.default_rng(0)
    args = (rng.normal(size=(20, 3)), rng.normal(size=3), 0.5, rng.normal(size=20))
    value = np.isclose(native.mse(*args), upstream.mse(*args))
    grads = zip(native.mse.grad()(*args), upstream.mse.grad()(*args), strict=True)
    return bool(value and all(np.allclose(a, b) for a, b in grads))


def generic_count(path: str = "docs/tutorial/kernels/loss.rv") -> dict[str, int]:
    """`linalg.generic` ops per function of the module's MLIR (program, then adjoint)."""
    counts: dict[str, int] = {}
    name = None
    for line in rv.load(path).ir("mlir").splitlines():
        if line.lstrip().startswith("func.func"):
            name = line.split("@")[1].split("(")[0]
            counts[name] = 0
        elif name is not None and "linalg.generic" in line:
            counts[name] += 1
    return counts

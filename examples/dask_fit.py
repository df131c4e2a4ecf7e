"""Fit a logistic regression to more data than a worker can hold, on a Dask cluster.

The dataset is generated chunk by chunk on the workers (each chunk from its own seed, so
every step sees the same rows) and never exists as a whole anywhere: it is larger than the
memory limit this script gives each worker. Each step of gradient descent is one
`rv.dask.value_and_grad` call: every chunk's compiled gradient runs where the chunk is made,
and the partial gradients are summed by a tree of tasks (docs/api.md §10, docs/scaling.md).

    pip install -e ".[dask]"
    python examples/dask_fit.py                        # 2 workers, 1 GB of data, 8 steps
    python examples/dask_fit.py --rows 400000 --steps 3   # a quick look

It prints the loss going down, the rows per second of each step, and the peak memory of
each worker process (below its limit although the data is not).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import dask
import dask.array as da
import numpy as np
from distributed import Client, LocalCluster
from tqdm import tqdm

import reverie as rv

MODEL = """
# Mean logistic loss of labels y in {0, 1} under the model P(y = 1) = sigmoid(x @ w + b).
fn logistic_loss(x: f32[N, D], y: f32[N], w: f32[D], b: f32) -> f32 {
    let z = x @ w + b;
    return mean(softplus(z) - y * z);
}
"""


def make_chunk(index: int, rows: int, features: int, seed: int) -> tuple[np.ndarray, ...]:
    """Rows `x` (standard normal) and labels `y` drawn from a fixed true model, for chunk
    `index` (its own random stream, so a recomputed chunk is the same chunk)."""
    truth = np.random.default_rng(seed)
    w_true = truth.standard_normal(features, dtype=np.float32) / np.sqrt(features) * 3
    rng = np.random.default_rng([seed, index])
    x = rng.standard_normal((rows, features), dtype=np.float32)
    p = 1 / (1 + np.exp(-(x @ w_true + 0.5)))
    return x, (rng.random(rows, dtype=np.float32) < p).astype(np.float32)


def dataset(rows: int, chunk_rows: int, features: int,
            seed: int = 0) -> tuple[da.Array, da.Array]:
    """The lazy dataset `(x, y)`: `rows` rows in chunks of `chunk_rows`, made on demand."""
    sizes = [min(chunk_rows, rows - start) for start in range(0, rows, chunk_rows)]
    chunks = [dask.delayed(make_chunk, pure=True, nout=2)(i, n, features, seed)
              for i, n in enumerate(sizes)]
    x = da.concatenate([da.from_delayed(c[0], (n, features), np.float32)
                        for c, n in zip(chunks, sizes, strict=True)])
    y = da.concatenate([da.from_delayed(c[1], (n,), np.float32)
                        for c, n in zip(chunks, sizes, strict=True)])
    return x, y


def fit(rows: int, chunk_rows: int, features: int, steps: int,
        learning_rate: float = 2.0) -> list[float]:
    """Gradient descent on the logistic loss over the whole dataset, on the current Dask
    scheduler; the loss before each step."""
    loss = rv.compile(MODEL, name="dask_fit.rv").logistic_loss
    value_and_grad = rv.dask.value_and_grad(loss, ("w", "b"), batch=("x", "y"),
                                            reduce="mean")
    x, y = dataset(rows, chunk_rows, features)
    w, b = np.zeros(features, dtype=np.float32), 0.0
    losses = []
    bar = tqdm(range(1, steps + 1), desc="fitting", unit="step",
               disable=not sys.stderr.isatty())
    for step in bar:
        start = time.perf_counter()
        value, (dw, db) = value_and_grad(x, y, w, b)
        seconds = time.perf_counter() - start
        w, b = w - learning_rate * dw, b - learning_rate * float(db)
        losses.append(float(value))
        bar.set_postfix(loss=f"{float(value):.4f}")
        tqdm.write(f"step {step}/{steps}: loss {float(value):.5f}, "
                   f"{rows / seconds:,.0f} rows/s ({seconds:.2f} s)")
    return losses


def peak_memory_bytes() -> int:
    """Run on a worker: the peak resident memory of its process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--chunk-rows", type=int, default=250_000)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="600MiB", help="per worker process")
    args = parser.parse_args(argv)
    os.environ.setdefault("REVERIE_NUM_THREADS", "1")  # one thread per worker, inherited
    data_bytes = args.rows * (args.features + 1) * 4
    with LocalCluster(n_workers=args.workers, threads_per_worker=1,
                      memory_limit=args.memory_limit, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        limit = dask.utils.parse_bytes(args.memory_limit)
        print(f"{args.rows:,} rows x {args.features} features: {data_bytes / 2**20:,.0f} MiB "
              f"of data, generated chunk by chunk on {args.workers} workers of "
              f"{limit / 2**20:,.0f} MiB each")
        start = time.perf_counter()
        losses = fit(args.rows, args.chunk_rows, args.features, args.steps)
        seconds = time.perf_counter() - start
        peaks = client.run(peak_memory_bytes).values()
    print(f"loss: {losses[0]:.5f} -> {losses[-1]:.5f}; {args.rows * args.steps / seconds:,.0f} "
          f"rows/s over all steps (first step includes compiling)")
    print("peak worker memory: " + ", ".join(f"{p / 2**20:,.0f} MiB" for p in peaks))
    return 0 if losses[-1] < losses[0] else 1


if __name__ == "__main__":
    sys.exit(main())

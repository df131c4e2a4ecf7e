"""Instructions per recorded-path iteration, counted by valgrind: the load-free measure.

    python benchmarks/instructions.py [--parameters 1 4 8] [--few 500] [--many 20500]
                                      [--forward]

The recorded path of benchmarks/latency.py (`rv.tensor` → a recorded call of
`sum(x0*x0 + ...)` on `f64[16]` parameters → `rv.grad`) runs in a child under
`valgrind --tool=cachegrind --cache-sim=no`, once `--few` and once `--many` times; the
difference of the two instruction counts over the difference of the iterations is the cost
of one iteration, whatever the machine's load (start-up, imports and compiling cancel out,
but for their own scatter of a few million instructions, hence the 20,000 iterations
between the two runs: 3,000 left ±1-3k per iteration).
The child compiles its kernel first in a run of its own (the disk cache then holds it), and
freezes the heap before the loop (`gc.freeze`): a full collection of every object of the
process would otherwise land in one of the two runs and not the other; it runs with one
thread everywhere (`child_environment`). The two native calls
take ~5.4k of an iteration's instructions (valgrind on the forward and `f.grad` calls alone).
`--forward` counts a plain forward call (`kernel(*args)` on arrays) instead.
Needs valgrind on the PATH.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import overhead_source  # noqa: E402 -- the same kernel as latency.py's

CHILD = """
import gc, sys
import numpy as np
import reverie as rv
source, count, iterations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
forward = sys.argv[4] == "forward"
args = [np.random.default_rng(10).standard_normal(16) for _ in range(count)]
kernel, first, rest = rv.compile(source).f, args[0], args[1:]
tensor, grad = rv.tensor, rv.grad
for _ in range(20):
    kernel(*args)
    leaf = tensor(first, requires_grad=True)
    grad(kernel(leaf, *rest), leaf)
gc.collect()
gc.freeze()
if forward:  # (the loops written out: a function per iteration would count its frame)
    for _ in range(iterations):
        kernel(*args)
else:
    for _ in range(iterations):
        leaf = tensor(first, requires_grad=True)
        grad(kernel(leaf, *rest), leaf)
"""


def child_environment(cache: str) -> dict[str, str]:
    """The child's environment: the disk cache in `cache`, and one thread for OpenBLAS,
    OpenMP and Reverie's pool (idle workers spinning under valgrind add instructions that
    vary from run to run)."""
    threads = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                      "MKL_NUM_THREADS", "REVERIE_NUM_THREADS")}
    return {**os.environ, **threads, "REVERIE_CACHE_DIR": cache}


def instructions(parameters: int, iterations: int, cache: str, path: str) -> int:
    """Instructions of one child running `iterations` iterations of `path` ("recorded"
    or "forward")."""
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no",
               "--cachegrind-out-file=/dev/null", sys.executable, "-c", CHILD,
               overhead_source(parameters), str(parameters), str(iterations), path]
    result = subprocess.run(command, capture_output=True, text=True, check=True,
                            env=child_environment(cache))
    found = re.search(r"I\s+refs:\s+([\d,]+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{result.stderr}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parameters", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--few", type=int, default=500)
    parser.add_argument("--many", type=int, default=20500)
    parser.add_argument("--forward", action="store_true",
                        help="a plain forward call instead of the recorded path")
    options = parser.parse_args()
    path = "forward" if options.forward else "recorded"
    with tempfile.TemporaryDirectory(prefix="reverie-instructions-") as cache:
        for count in options.parameters:
            subprocess.run([sys.executable, "-c", CHILD, overhead_source(count), str(count),
                            "1", path], check=True, env=child_environment(cache))
            few = instructions(count, options.few, cache, path)
            many = instructions(count, options.many, cache, path)
            per = (many - few) / (options.many - options.few)
            print(f"{count} parameters: {per:,.0f} instructions per {path} iteration", flush=True)


if __name__ == "__main__":
    main()

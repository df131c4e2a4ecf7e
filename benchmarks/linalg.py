"""Linear algebra (issue 36 item 6): Reverie's `cholesky` and `solve` against `np.linalg` on
matrices of 100 to 1000 rows, and the gradient of a Gaussian-process negative
log-likelihood against JAX (`jax.jit(jax.grad(...))`), each framework in a process of its own.

    python benchmarks/linalg.py                       # every case, 7 rounds
    python benchmarks/linalg.py --sizes 100 400 --rounds 3 --cases cholesky gp

The cases (f64):
- `cholesky n`: L of an n×n SPD matrix (Reverie `cholesky(a)`, NumPy `np.linalg.cholesky`);
- `solve n`: x of A x = b, b a vector (`solve(a, b)`, `np.linalg.solve`);
- `gp`: the gradient with respect to the log length scale, log signal and log noise of
  0.5·yᵀK⁻¹y + Σ log diag(L), L = cholesky(K), K a squared-exponential kernel of N = 400
  points in 3 dimensions plus noise on the diagonal (Reverie `nll.grad(wrt=(0, 1, 2))`,
  JAX `jax.jit(jax.grad(nll, argnums=(0, 1, 2)))` with x64 enabled).

The method is `run.py`'s (`variant_process.py`): one child process per (case, framework),
all alive while a case is measured; each child builds its variant, checks its result (the
NumPy cases against NumPy in the child, the GP gradients against each other here), then
answers sample requests; before each request the parent waits until no thread of any child
is running; rounds alternate the frameworks so that a change in the machine's load hits
both alike. Reverie runs twice, with its default threads and with REVERIE_NUM_THREADS=1
(which OpenBLAS's LAPACK then follows too). The table gives the median milliseconds per call,
the fastest-slowest rounds, and Reverie / peer (below 1: Reverie is faster). Timings are
meant for a quiet machine: on a loaded one, Reverie's pool and OpenBLAS's threads compete.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variant_process import (  # noqa: E402
    ChildSpec,
    VariantProcess,
    calls_per_sample,
    sample,
    wait_quiet,
)

GP_POINTS, GP_DIMENSIONS = 400, 3
GP_PARAMETERS = (0.1, 0.2, -1.0)   # log length scale, log signal scale, log noise
SIZES = (100, 200, 400, 1000)
SAMPLE_SECONDS = 0.02
QUIET_LIMIT = 2.0

GP_SOURCE = """
fn nll(log_ls: f64, log_sf: f64, log_noise: f64, x: f64[N, D], y: f64[N]) -> f64 {
    let sq[i, j] = sum[d]((x[i, d] - x[j, d]) ** 2);
    let noise[i in 0..N, j in 0..N] = where(i == j, exp(2.0 * log_noise), 0.0);
    let k = exp(2.0 * log_sf) * exp(-0.5 * sq / exp(2.0 * log_ls)) + noise;
    let l = cholesky(k);
    let z = triangular_solve(l, y);
    let diagonal[i] = l[i, i];
    return 0.5 * sum(z * z) + sum(log(diagonal));
}
"""
LINALG_SOURCE = """
fn factor(a: f64[N, N]) -> f64[N, N] { return cholesky(a); }
fn linear(a: f64[N, N], b: f64[N]) -> f64[N] { return solve(a, b); }
"""
# each case's variants; "reverie 1 thread" runs with REVERIE_NUM_THREADS=1 (OpenBLAS too)
FRAMEWORKS = {"cholesky": ("reverie", "reverie 1 thread", "numpy"),
              "solve": ("reverie", "reverie 1 thread", "numpy"),
              "gp": ("reverie", "reverie 1 thread", "jax")}


# ---------------------------------------------------------------- the variants (in a child)


def spd_system(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A well-conditioned SPD matrix of n rows and a right-hand side (seeded)."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, n))
    return x @ x.T / n + np.eye(n), rng.standard_normal(n)


def gp_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((GP_POINTS, GP_DIMENSIONS)), rng.standard_normal(GP_POINTS)


def build(case: str, framework: str) -> tuple[Callable[[], object], object]:
    """The timed thunk of one variant, and what the parent checks: the relative error
    against NumPy (cholesky, solve) or the gradient (gp)."""
    name, _, size = case.partition(" ")
    if name == "gp":
        x, y = gp_data()
        if framework.startswith("reverie"):
            import reverie as rv
            gradient = rv.compile(GP_SOURCE).nll.grad(wrt=(0, 1, 2))
            thunk = lambda: gradient(*GP_PARAMETERS, x, y)  # noqa: E731
        else:
            thunk = _jax_gp(x, y)
        return thunk, [float(g) for g in thunk()]
    a, b = spd_system(int(size))
    if framework.startswith("reverie"):
        import reverie as rv
        module = rv.compile(LINALG_SOURCE)
        thunk = (lambda: module.factor(a)) if name == "cholesky" else \
            (lambda: module.linear(a, b))
    else:
        thunk = (lambda: np.linalg.cholesky(a)) if name == "cholesky" else \
            (lambda: np.linalg.solve(a, b))
    want = np.linalg.cholesky(a) if name == "cholesky" else np.linalg.solve(a, b)
    got = np.asarray(thunk())
    return thunk, float(np.abs(got - want).max() / np.abs(want).max())


def _jax_gp(x: np.ndarray, y: np.ndarray) -> Callable[[], object]:
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax.scipy.linalg import solve_triangular

    def nll(log_ls, log_sf, log_noise, x, y):  # noqa: ANN001, ANN202
        sq = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
        k = jnp.exp(2 * log_sf) * jnp.exp(-0.5 * sq / jnp.exp(2 * log_ls)) \
            + jnp.exp(2 * log_noise) * jnp.eye(x.shape[0])
        low = jnp.linalg.cholesky(k)
        z = solve_triangular(low, y, lower=True)
        return 0.5 * (z * z).sum() + jnp.log(jnp.diag(low)).sum()

    gradient = jax.jit(jax.grad(nll, argnums=(0, 1, 2)))
    xs, ys = jnp.asarray(x), jnp.asarray(y)
    return lambda: jax.block_until_ready(gradient(*GP_PARAMETERS, xs, ys))


def serve(case: str, framework: str) -> None:
    """A child: build, answer {"ready": check, "first": s}, then one sample per line read."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    start = time.perf_counter()
    try:
        thunk, check = build(case, framework)
    except Exception as error:  # reported by the parent as this variant's failure
        protocol.write(json.dumps({"failure": f"{type(error).__name__}: {error}"[:200]}) + "\n")
        return
    protocol.write(json.dumps({"ready": check, "first": time.perf_counter() - start}) + "\n")
    calls = None
    for _ in sys.stdin:
        calls = calls or calls_per_sample(thunk, SAMPLE_SECONDS)
        protocol.write(json.dumps({"seconds": sample(thunk, calls)}) + "\n")


# ---------------------------------------------------------------- the parent


def measure(case: str, rounds: int) -> dict[str, list[float] | str]:
    """Seconds per call of each framework over `rounds` alternated rounds (or a failure)."""
    script = str(Path(__file__).resolve())
    children = {}
    for framework in FRAMEWORKS[case.split()[0]]:
        spec = ChildSpec(case, framework, framework)
        folder = Path(os.environ.get("TMPDIR", "/tmp"))
        log = folder / f"linalg-{case.replace(' ', '-')}-{framework.replace(' ', '-')}.log"
        environment = dict(os.environ)
        if framework == "reverie 1 thread":
            environment["REVERIE_NUM_THREADS"] = "1"
        children[framework] = VariantProcess(spec, [sys.executable, script, "--child", case,
                                                    framework], environment, log)
    results: dict[str, list[float] | str] = {}
    checks = {}
    for framework, child in children.items():
        answer = child.receive(600)
        if "failure" in answer:
            results[framework] = str(answer["failure"])
        else:
            checks[framework] = answer["ready"]
            results[framework] = []
    _report_checks(case, checks)
    live = {f: c for f, c in children.items() if isinstance(results[f], list)}
    for _ in range(rounds):
        for framework, child in live.items():
            wait_quiet([c.pid for c in live.values()], QUIET_LIMIT)
            answer = child.request({"sample": True}, 600)
            results[framework].append(answer.get("seconds", float("nan")))
    for child in children.values():
        child.close()
    return results


def _report_checks(case: str, checks: dict[str, object]) -> None:
    """Print each variant's error: against NumPy (in the child), or the GP gradient's
    against JAX's."""
    for framework, check in checks.items():
        if case != "gp":
            print(f"  {case} {framework}: relative error against NumPy {check:.1e}", flush=True)
        elif framework != "jax" and "jax" in checks:
            ours, theirs = np.asarray(check), np.asarray(checks["jax"])
            error = np.abs(ours - theirs).max() / np.abs(theirs).max()
            print(f"  gp {framework}: gradient's relative difference from JAX's {error:.1e}",
                  flush=True)


def table(measured: dict[str, dict[str, list[float] | str]]) -> str:
    """Median ms per call (fastest–slowest round) of each variant, and Reverie / peer."""
    lines = ["| case | Reverie | Reverie, 1 thread | peer | Reverie / peer (1 thread) |",
             "|---|---|---|---|---|"]

    def cell(values: list[float] | str) -> str:
        if isinstance(values, str):
            return values
        return (f"{statistics.median(values) * 1e3:.3f} ms "
                f"({min(values) * 1e3:.3f}–{max(values) * 1e3:.3f})")

    def ratio(ours: list[float] | str, theirs: list[float] | str) -> str:
        if isinstance(ours, str) or isinstance(theirs, str):
            return "—"
        return f"{statistics.median(ours) / statistics.median(theirs):.2f}"

    for case, results in measured.items():
        peer = next(name for name in results if not name.startswith("reverie"))
        ours, single, theirs = results["reverie"], results["reverie 1 thread"], results[peer]
        lines.append(f"| {case} | {cell(ours)} | {cell(single)} | {peer}: {cell(theirs)} | "
                     f"{ratio(ours, theirs)} ({ratio(single, theirs)}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cases", nargs="+", default=["cholesky", "solve", "gp"],
                        choices=["cholesky", "solve", "gp"])
    parser.add_argument("--child", nargs=2, metavar=("CASE", "FRAMEWORK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        serve(*args.child)
        return
    cases = [f"{name} {n}" for name in args.cases if name != "gp" for n in args.sizes]
    cases += ["gp"] if "gp" in args.cases else []
    measured = {}
    for case in cases:
        print(f"measuring {case} ...", flush=True)
        measured[case] = measure(case, args.rounds)
    print(table(measured))


if __name__ == "__main__":
    main()

"""The MLIR export (`compiler/export/mlir.py`) and `backend="mlir"`
(`runtime/native/mlir_backend.py`).

Every function checked here is exported, lowered by the real `mlir-opt` and
`mlir-translate` (a failing exit code fails the test), JIT-compiled and run on small random
inputs in f32 and f64; its results must equal the reference interpreter's. The functions:
the small programs in `PROGRAMS` (together they use every op of the table), every function
of `examples/*.rv` and `tests/golden/ast/*.rv`, and the reverse-mode adjoint (`vjp`) of
each, which adds the ops only reverse mode creates. Functions are batched into one MLIR
module per source and dtype, so the tools run a few dozen times in all.

Golden files: `tests/golden/mlir/*.rv` export (f32) as the matching `.mlir`; regenerate
with `REVERIE_UPDATE_GOLDEN=1 python -m pytest tests/backend/test_mlir.py`.

Skipped, with the reason, where `mlir-opt-19` is not installed (CI installs it).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.export.mlir import export_mlir, export_mlir_module
from reverie.compiler.export.mlir_linalg import NOT_LOWERED
from reverie.compiler.export.mlir_ops import LOWERINGS
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.ops import OPS
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.compiler.transforms.reverse import grad_function, vjp_function
from reverie.dsl.diagnostics import CompileError
from reverie.runtime.native.call import BoundCall, bind_arguments
from reverie.runtime.native.mlir_backend import MlirKernel, MlirProgram
from reverie.runtime.native.mlir_to_llvm import MlirToolError, mlir_to_llvm_ir, mlir_tools
from tests.unit.test_examples import make_args

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.rv"))

def type_checks(path: Path) -> bool:
    """Whether a `.rv` file compiles (some parser golden files are not meant to)."""
    try:
        rv.compile(path.read_text(encoding="utf-8"), backend="interp")
    except CompileError:
        return False
    return True


GOLDEN_AST = [p for p in sorted((ROOT / "tests" / "golden" / "ast").glob("*.rv")) if type_checks(p)]
GOLDEN_DIR = ROOT / "tests" / "golden" / "mlir"
GOLDEN = sorted(GOLDEN_DIR.glob("*.rv"))

needs_tools = pytest.mark.skipif(
    mlir_tools() is None,
    reason="mlir-opt-19/mlir-translate-19 not installed (apt-get install mlir-19-tools)")

SIZES = {"N": 5, "M": 3, "K": 3, "C": 4, "T": 4, "D": 3, "B": 2, "L": 7, "H": 3, "O": 2}

PROGRAMS = {
    "unary": """fn f(x: float[N], p: float[N]) -> (float[N], float[N], float[N], float[N]) {
        return (-x + abs(x) * sign(x) + exp(x) + expm1(x) + sin(x) + cos(x) + tan(x),
                log(p) + log1p(p) + sqrt(p) + rsqrt(p) + tanh(x) + sigmoid(x),
                relu(x) + softplus(x) + erf(x) + floor(x) + ceil(x),
                sigmoid(x * 30.0) + softplus(x * 40.0));
    }""",
    "special": """fn f(x: float[N], p: float[N]) -> (float[N], float[N]) {
        return (lgamma(x) + digamma(p) * x, lgamma(p) * digamma(x));
    }""",
    "numpy_maths": """fn f(x: float[N], p: float[N]) -> (float[N], float[N], float[N]) {
        let u = 0.9 * tanh(x);
        return (sinh(x) + cosh(x) + arctan(x) + arcsinh(x) + exp2(x) + sinc(x) + deg2rad(x)
                    + rad2deg(x),
                arcsin(u) + arccos(u) + arctanh(u) + arccosh(p + 1.0) + log2(p) + log10(p),
                arctan2(x, u) + hypot(x, p) + logaddexp(x, u) + logaddexp2(p, x));
    }""",
    "special_numpy": """fn f(x: float[N], p: float[N]) -> (float[N], float[N]) {
        return (gamma(x) + erfc(x) + logit(p / (p + 1.0)) + erfinv(tanh(x)),
                beta(p, p + 0.5) + betaln(p, x * x) + erfcinv(p / (p + 1.0))
                    + multigammaln(p + 1.0, 3) + i0(x) * i1(p)
                    + j0(x * 5.0) + j1(x * 9.0) + y0(p * 6.0) + y1(p)
                    + jn(3, x * 7.0) + yn(2, p * 4.0) + jn(-2, p)
                    + iv(0.5, p) + ive(-1.5, p * 3.0) + jv(2.5, p * 7.0)
                    + gammainc(stop_gradient(p), x * x)
                    + gammaincc(stop_gradient(p) + 0.5, p + x * x)
                    + betainc(stop_gradient(p), 2.5, p / (p + 1.0)));
    }""",
    "binary": """fn f(a: float[N, M], b: float[N, M], p: float[N, M])
            -> (float[N, M], float[N, M], float[N, M]) {
        return (a + b - a * b / p, a // b + a % b + pow(p, b) + p ** 2.5, max(a, b) - min(a, b));
    }""",
    "compare": """fn f(a: float[N], b: float[N], m: bool[N]) -> (bool[N], bool[N], float[N]) {
        let c = (a < b) or (a <= 0.0) and not (a > b) or (a >= 1.0);
        let d = (a == b) != m;
        return (c, d, where(c, a, b));
    }""",
    "integers": """fn f(i: i64[N], j: i64[N], k: i32[N]) -> (i64[N], i64[N], i32[N], bool[N], i64) {
        return (i // j + i % j - abs(i) * sign(j), max(i, j) - min(i, -j),
                k // i32(3) + k % i32(4) + abs(k) - k, (i < j) == (k > i32(0)), sum(i * j));
    }""",
    "casts": """fn f(x: f64[N], i: i64[N], m: bool[N])
            -> (f32[N], i32[N], f64[N], bool[N], i64[N], f64[N]) {
        return (f32(x), i32(x * 3.0), f64(i) + f64(m), x != 0.0, i64(i32(i)), f64(f32(x)));
    }""",
    "reductions": """fn f(x: float[N, M, K])
            -> (float[M], float[N, K], float, float[N], float[N, 1, K], i64[N, K], i64) {
        return (sum(x, axis=(0, 2)), prod(x, axis=1), max(x), min(x, axis=(1, 2)),
                mean(x, axis=1, keepdims=true), argmax(x, axis=1), argmin(x));
    }""",
    "scans": """fn f(x: float[N, M]) -> (float[N, M], float[N, M]) {
        return (cumsum(x, axis=0), cumprod(x, axis=1));
    }""",
    "orderings": """fn f(x: float[N, M], i: i64[N])
            -> (i64[N, M], float[N, M], float[N, 2], i64[N]) {
        return (argsort(x, axis=0), sort(x, descending=true), topk(x, 2),
                argsort(i, descending=true));
    }""",
    "linalg": """fn f(a: float[N, N], b: float[N, M])
            -> (float[N, N], float[N, M], float[N, M], float, float) {
        let eye[i in 0..N, j in 0..N] = where(i == j, 1.0, 0.0);
        let spd = a @ a.T + 5.0 * eye;
        let (s, l) = slogdet(spd);
        return (cholesky(spd), triangular_solve(spd, b, lower=false, transpose=true),
                solve(spd, b) + inv(spd) @ b, det(stop_gradient(spd)), s * l);
    }""",
    "softmax": """fn f(x: float[N, M]) -> (float[N, M], float[N, M], float[N]) {
        return (softmax(x, axis=1), log_softmax(x, axis=0), logsumexp(x, axis=1));
    }""",
    "linear_algebra": """fn f(a: float[N, K], b: float[K, M], v: float[K], w: float[K])
            -> (float[N, M], float[N], float, float[M, N]) {
        return (a @ b, a @ v, v @ w, (a @ b).T);
    }""",
    "shapes": """fn f(x: float[N, M], y: float[N, K]) -> (float[M, N], float[N * M],
            float[N - 1, M], float[N, M + K], float[N, M], float[N], float[M]) {
        return (transpose(x, (1, 0)), reshape(x, (N * M,)), x[1:, :], concat((x, y), axis=1),
                roll(x, 2, axis=1) + roll(x, -1, axis=0), x[:, 0], x[0]);
    }""",
    "strided_slices": """fn f(x: float[N]) -> (float[N - 2], float[N]) {
        return (x[2:] * x[:N - 2], roll(x, 1) - x);
    }""",
    "index_notation": """fn f(a: float[N, K], b: float[K, M], x: float[N], k: float[K])
            -> (float[N, M], float[N], float[N], float[N], float) {
        let c[i, j] = sum[kk](a[i, kk] * b[kk, j]);
        let s[i in 0..N] = sum[j](x[i + j - K // 2] * k[j]);
        let p[i] = prod[j](a[i, j]);
        let m[i] = max[j](a[i, j]) - min[jj in 0..K](a[i, jj]);
        let total = sum[i in 0..N, j](a[i, j] * a[i, j]);
        return (c, s, p, m, total);
    }""",
    "gather": """fn f(z: float[N, C], labels: i64[N]) -> (float[N], float) {
        let picked[n] = z[n, labels[n]];
        return (picked, sum(picked));
    }""",
    "loop": """fn f(xs: float[T, D], h0: float[D], w: float[D, D], steps: i64)
            -> (float[D], float, i64) {
        var h = h0;
        var total = 0.0;
        var count = 0;
        for t in 0..T {
            h = tanh(xs[t] + h @ w);
            total = total + sum(h);
        }
        for s in 0..steps {
            count = count + 1;
        }
        return (h, total, count);
    }""",
    "loop_loss": """fn f(x: float[N], n: i32) -> float {
        var u = x;
        for t in 0..n {
            u = sin(u) * 2.0 + u[0];
        }
        return sum(u);
    }""",
    "swap_loop": """fn f(a: float[N], b: float[N]) -> (float[N], float[N]) {
        var u = a;
        var v = b;
        for t in 0..3 {
            let w = u;
            u = v;
            v = w * 2.0;
        }
        return (u, v);
    }""",
    "scalars": """fn f(x: float, y: float, n: i64, flag: bool) -> (float, float, i64) {
        return (where(flag, x * y, x - y), x ** 2 + sqrt(abs(y)), n * 3 + 1);
    }""",
    "broadcast": """fn f(x: float[N, M], r: float[M], c: float[N, 1], s: float) -> float[N, M] {
        return x * r + c - s;
    }""",
    "control_flow": """fn f(x: float[N], w: float[N]) -> (float[N], float, i64) {
        var u = x;
        var r = max(abs(x));
        if r > 1.0 { u = x / r; r = 1.0; } else { u = u * w; }
        var k = 0;
        while r > 0.01 and k < 50 { u = tanh(u * w) + 0.1; r = r * 0.5; k = k + 1; }
        return (u, r, k);
    }""",
}


# ---------------------------------------------------------------- inputs and checks


def program_args(fn: Function, rng: np.random.Generator,
                 sizes: dict[str, int] = SIZES) -> list[np.ndarray]:
    """Inputs for a PROGRAMS function: `p*` positive, `labels` valid, ints with zeros."""
    args = []
    for value, name in zip(fn.params, fn.param_names, strict=True):
        shape = tuple(d.evaluate(sizes) for d in value.type.shape)
        dtype = NUMPY_DTYPES[value.type.dtype]
        if name == "labels":
            arg = rng.integers(0, sizes["C"], shape)
        elif name in ("steps", "n"):
            arg = np.array(3)
        elif value.type.dtype == "bool":
            arg = rng.random(shape) < 0.5
        elif value.type.is_int:
            arg = rng.integers(-4, 5, shape)
        elif name.startswith("p"):
            arg = rng.uniform(0.1, 2.0, shape)
        else:
            arg = rng.standard_normal(shape)
        args.append(np.asarray(arg).astype(dtype))
    return args


def with_adjoint(fn: Function, args: list[np.ndarray],
                 rng: np.random.Generator) -> Iterator[tuple[Function, list[np.ndarray]]]:
    """`fn` with `args`, then its vjp with respect to every float parameter (if any), and
    for a scalar loss with a loop, its checkpointed gradient."""
    yield fn, args
    wrt = [i for i, p in enumerate(fn.params) if p.type.is_float]
    if not wrt:
        return
    scalar_loss = [(t.rank, t.is_float) for t in fn.result_types] == [(0, True)]
    if scalar_loss and any(op.name == "for" for op in fn.body.ops):
        yield grad_function(fn, wrt, checkpoint=True), args
    vjp = vjp_function(fn, wrt)
    dims = bind_arguments(fn, args).dims
    cotangents = [rng.standard_normal(tuple(d.evaluate(dims) for d in p.type.shape))
                  .astype(NUMPY_DTYPES[p.type.dtype]) for p in vjp.params[len(fn.params):]]
    yield vjp, args + cotangents


def assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal dtype and shape; floats equal up to their precision, others exactly."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    tol = 2e-4 if got.dtype == np.float32 else 1e-10
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=what)


def run_both(fn: Function, kernel: MlirKernel, args: list[np.ndarray]) -> None:
    """The kernel's results equal the interpreter's, or both raise the same IndexError."""
    bound = bind_arguments(fn, args)
    try:
        want = interpret(fn, bound.arrays, bound.dims)
    except IndexError as error:
        with pytest.raises(IndexError) as compiled:
            kernel(bound)
        assert str(compiled.value) == str(error)
        return
    got = kernel(bound)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_same(g, np.asarray(w), f"{fn.name} result {k}")


def check_against_interpreter(cases: list[tuple[Function, list[np.ndarray]]]) -> set[str]:
    """Compile all `cases` as one MLIR program, compare each with the interpreter, and
    return the names of the ops they use."""
    program = MlirProgram([fn for fn, _ in cases])
    used: set[str] = set()
    for (fn, args), kernel in zip(cases, program.kernels, strict=True):
        run_both(fn, kernel, args)
        used |= {op.name for op in fn.body.walk()}
    return used


def program_cases(dtype: str, sizes: dict[str, int]) -> list[tuple[Function, list[np.ndarray]]]:
    """Every PROGRAMS function whose slices fit `sizes`, and its adjoint, with inputs."""
    rng = np.random.default_rng(7)
    cases = []
    for source in PROGRAMS.values():
        fn = compiled(source).lowering.specialise("f", dtype)
        if all(bound.evaluate(sizes) >= 0 for bound, _ in fn.constraints
               if bound.symbols() <= set(sizes)):
            cases += with_adjoint(fn, program_args(fn, rng, sizes), rng)
    return cases


@functools.cache
def compiled(source: str) -> rv.Module:
    return rv.compile(source, backend="interp")


# ---------------------------------------------------------------- tests


@pytest.fixture(autouse=True)
def _run_the_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bypass the disk cache of lowered LLVM IR, so every test runs mlir-opt itself."""
    monkeypatch.setenv("REVERIE_CACHE", "0")


def test_every_op_has_an_mlir_rule() -> None:
    assert set(OPS) <= set(LOWERINGS), sorted(set(OPS) - set(LOWERINGS))


@needs_tools
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_programs_match_the_interpreter(dtype: str) -> None:
    used = check_against_interpreter(program_cases(dtype, SIZES))
    if dtype == "f64":   # (the export refuses eigh, svd and qr: test_linalg_native.py)
        exercised = set(OPS) - set(NOT_LOWERED)
        assert exercised <= used, f"ops no program exercises: {sorted(exercised - used)}"


@needs_tools
def test_empty_dimensions_match_the_interpreter() -> None:
    """N = 0: no buffer is read or written out of bounds, errors match the interpreter."""
    check_against_interpreter(program_cases("f64", {**SIZES, "N": 0}))


def _source_cases(path: Path, dtype: str) -> list[tuple[Function, list[np.ndarray]]]:
    """Every function of a `.rv` file and its adjoint, with inputs: those of
    `test_examples.py` for examples, `program_args` otherwise."""
    module = rv.compile(path.read_text(), backend="interp", name=path.name)
    rng = np.random.default_rng(3)
    cases = []
    for name in module.kernels:
        fn = module.lowering.specialise(name, dtype)
        args = make_args(module, name, dtype) if path in EXAMPLES else program_args(fn, rng)
        cases += with_adjoint(fn, args, rng)
    return cases


@needs_tools
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_match_the_interpreter(path: Path, dtype: str) -> None:
    check_against_interpreter(_source_cases(path, dtype))


@needs_tools
@pytest.mark.parametrize("path", GOLDEN_AST, ids=lambda p: p.stem)
def test_golden_ast_programs_lower_through_mlir(path: Path) -> None:
    check_against_interpreter(_source_cases(path, "f64"))


@needs_tools
def test_strided_inputs_are_read_through_their_strides() -> None:
    fn = rv.compile("fn f(x: f64[N, M]) -> f64[N] { return sum(x * x, axis=1); }",
                    backend="interp").lowering.specialise("f", "f64")
    base = np.arange(60.0).reshape(6, 10)
    view = base[1::2, 7:1:-3]
    (got,) = MlirKernel(fn)(BoundCall([view], {"N": 3, "M": 2}))
    np.testing.assert_array_equal(got, (view * view).sum(axis=1))


@needs_tools
@pytest.mark.parametrize("source, args, message", [
    ("fn f(z: f64[N, C], labels: i64[N]) -> f64[N] {\n"
     "    let picked[n] = z[n, labels[n]];\n    return picked;\n}",
     [np.ones((3, 4)), np.array([0, 4, 1])],
     "index 4 is out of bounds for axis 1 of 'z' with size 4"),
    ("fn f(xs: f64[T, D], t: i64) -> f64[D] { return xs[t]; }",
     [np.ones((3, 2)), -1], "index -1 is out of bounds for axis 0 of 'xs' with size 3"),
    ("fn f(x: f64[N]) -> i64 { return argmax(x); }", [np.ones(0)], "empty tensor"),
])
def test_out_of_range_subscripts_raise_index_error(source: str, args: list, message: str) -> None:
    fn = rv.compile(source, backend="interp").lowering.specialise("f", "f64")
    bound = bind_arguments(fn, args)
    with pytest.raises(IndexError) as interpreted:
        interpret(fn, bound.arrays, bound.dims)
    with pytest.raises(IndexError, match=message) as compiled:
        MlirKernel(fn)(bound)
    assert str(compiled.value) == str(interpreted.value)


def test_locations_point_at_the_source() -> None:
    source = "fn f(x: f32[N]) -> f32 {\n    let y = exp(x);\n    return sum(y);\n}"
    fn = rv.compile(source, backend="interp").lowering.specialise("f", "f32")
    text = export_mlir(fn, "prog.rv")
    exp_line = next(line for line in text.splitlines() if "math.exp" in line)
    assert exp_line.endswith('loc("prog.rv":2:13)')
    assert "llvm.emit_c_interface" in text


@needs_tools
def test_tool_errors_are_reported() -> None:
    with pytest.raises(MlirToolError, match="mlir-opt failed"):
        mlir_to_llvm_ir("func.func @broken( {")


@pytest.mark.parametrize("program", GOLDEN, ids=lambda p: p.stem)
def test_mlir_matches_golden_file(program: Path, golden) -> None:  # noqa: ANN001
    module = rv.compile(program.read_text(encoding="utf-8"), backend="interp")
    functions = [module.lowering.specialise(name, "f32") for name in module.kernels]
    text = export_mlir_module(functions, program.name)
    golden(text, program.with_suffix(".mlir"))


@needs_tools
@pytest.mark.parametrize("program", GOLDEN, ids=lambda p: p.stem)
def test_golden_mlir_lowers_to_llvm(program: Path) -> None:
    assert "define void @_mlir_ciface_" in mlir_to_llvm_ir(
        program.with_suffix(".mlir").read_text(encoding="utf-8"))

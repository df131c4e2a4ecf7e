"""The hoisting pass (compiler/transforms/hoist.py): which body values move into generics
of their own and over which indices (printed IR), that the hoisted function gives bitwise
the results of the original at every level (tensor-IR and loop-IR interpreters, native
code, each against the unhoisted program), that the pipeline runs it for every back end,
and that gradients through it are right (finite differences, the W8 mixture model)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.tensor_printer import format_function
from reverie.compiler.loops.loop_interpreter import run_program
from reverie.compiler.pipeline import Request, compile_function
from reverie.compiler.print_ir import capture
from reverie.compiler.transforms.hoist import hoist_function
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel
from tests.unit.benchmark_scripts import benchmark_module
from tests.unit.level_helpers import every_level, ladder_without, loop_program

SIZES = {"N": 7, "K": 3, "D": 5, "M": 4}

# exp(s[k, j]) in a nest over [n, k, j]: the W8 pattern (forward, and three times in its
# gradient: the forward again, ds reduced over n, dx)
MIXTURE = """
fn f(x: f64[N, D], s: f64[K, D]) -> f64 {
    let y[n, k, j] = exp(s[k, j]) * x[n, j];
    return sum(y ** 2);
}
"""
PROGRAMS = {
    "map": "fn f(x: f64[N, D], s: f64[K, D]) -> f64[N, K, D] {"
           " let y[n, k, j] = exp(s[k, j]) * x[n, j]; return y; }",
    # over a reduction index too: tanh(s[k, j]) reads no n
    "reduction": "fn f(x: f64[N, D], s: f64[K, D]) -> f64[K] {"
                 " let z[k] = sum[n, j](tanh(s[k, j]) * x[n, j]); return z; }",
    # the logarithm moves to [k, j], then the exponential out of it to [k]
    "nested": "fn f(x: f64[N, D], a: f64[K], b: f64[D]) -> f64[N, K, D] {"
              " let y[n, k, j] = log(exp(a[k]) * b[j] + 2.0) * x[n, j]; return y; }",
    # a range that does not start at 0: the body reads exp at i - 1
    "offset": "fn f(a: f64[N], b: f64[M]) -> f64[N - 1, M] {"
              " let y[i in 1..N, j] = exp(a[i]) * b[j] + sin(b[j]); return y; }",
    "loop": """fn f(x: f64[N, K], s: f64[K], steps: i64) -> f64[N, K] {
        var u = x;
        for t in 0..steps {
            let v[n, k] = u[n, k] * exp(s[k]) + pow(s[k], 2.0);
            u = v;
        }
        return u;
    }""",
}
# nothing to hoist: the expensive value reads every index; the cheap one is not worth a
# nest; the gathered read is `checked` (it may raise, so it stays where it was)
UNCHANGED = {
    "every index": "fn f(x: f64[N, K], s: f64[K]) -> f64[N, K] {"
                   " let y[n, k] = exp(x[n, k]) + s[k] * 2.0; return y; }",
    "checked read": "fn f(x: f64[N, K], s: f64[M], idx: i64[K]) -> f64[N, K] {"
                    " let y[n, k] = exp(s[idx[k]]) * x[n, k]; return y; }",
}


def lowered(source: str) -> Function:
    """The f64 tensor IR of `f`, as a function of its own (no cache key: nothing compiled
    for it before is reused)."""
    fn = rv.compile(source, backend="interp").lowering.specialise("f", "f64")
    return fn.derive(fn.name, fn.body)


def adjoint(source: str) -> Function:
    fn = rv.compile(source, backend="interp").adjoint("f", "f64")
    return fn.derive(fn.name, fn.body)


def arguments(fn: Function, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    args = []
    for p in fn.params:
        shape = tuple(d.evaluate(SIZES) for d in p.type.shape)
        if p.type.is_int:
            args.append(np.int64(3) if not shape else rng.integers(0, SIZES["M"], shape))
        else:
            args.append(0.5 * rng.standard_normal(shape))
    return args


def generics(fn: Function) -> list[str]:
    """The header line of every generic of the printed function (regions included)."""
    return [line.strip() for line in format_function(fn).splitlines()
            if re.match(r"\s*%\S+ = generic ", line)]


def count(fn: Function, op_name: str) -> int:
    """How many `op_name` ops the printed function holds."""
    return len(re.findall(rf"= {op_name} ", format_function(fn)))


# ---------------------------------------------------------------- the printed IR


def test_the_mixture_gradient_shares_its_exp_nests() -> None:
    fn = adjoint(MIXTURE)
    assert count(fn, "exp") == 3  # the forward nest, ds reduced over n, dx reduced over k
    hoisted = hoist_function(fn)
    assert count(hoisted, "exp") == 2
    heads = generics(hoisted)
    nests = [g for g in heads if g.startswith("%exp")]
    assert [re.search(r"indices = \[([^\]]*)\]", g).group(1) for g in nests] == [
        "k in 0..K, j in 0..D", "j in 0..D, k in 0..K"]  # each in its readers' loop order
    readers = [g for g in heads if not g.startswith("%exp")]
    assert [len(re.findall(r"%exp(_3)?\b", g.split(" {")[0])) for g in readers] == [1, 1, 1]
    assert format_function(hoist_function(fn)) == format_function(hoisted)  # deterministic


def test_hoisting_leaves_its_input_as_it_was() -> None:
    fn = adjoint(MIXTURE)
    before = format_function(fn)
    hoist_function(fn)
    assert format_function(fn) == before


@pytest.mark.parametrize("name, indices", [
    ("map", ["k in 0..K, j in 0..D"]),
    ("reduction", ["k in 0..K, j in 0..D"]),
    ("nested", ["k in 0..K", "k in 0..K, j in 0..D"]),
    ("offset", ["i in 1..N", "j in 0..M"]),
    ("loop", ["k in 0..K", "k in 0..K"]),
])
def test_each_expensive_value_gets_a_nest_over_the_indices_it_reads(
        name: str, indices: list[str]) -> None:
    fn = lowered(PROGRAMS[name])
    hoisted = hoist_function(fn)
    new = [g for g in generics(hoisted) if g not in generics(fn)]
    nests = sorted(re.search(r"indices = \[([^\]]*)\]", g).group(1) for g in new
                   if "reduce" not in g and re.match(r"%(exp|tanh|log|sin|pow)\b", g))
    assert nests == sorted(indices)
    for op_name in ("exp", "tanh", "log", "sin", "pow"):
        assert count(hoisted, op_name) == count(fn, op_name)  # moved, never duplicated


def test_an_offset_range_is_read_back_less_its_start() -> None:
    text = format_function(hoist_function(lowered(PROGRAMS["offset"])))
    assert re.search(r"%(\d+) = dim \{dim = 1\} : i64\n\s+%(\d+) = sub %i_1, %\1 : i64\n"
                     r"\s+%\d+ = read %exp_1, %\2 ", text), text


@pytest.mark.parametrize("name", UNCHANGED)
def test_nothing_is_hoisted_without_an_expensive_partial_value(name: str) -> None:
    fn = lowered(UNCHANGED[name])
    assert hoist_function(fn) is fn


def test_the_pass_prints_under_its_name() -> None:
    with capture("hoist") as texts:
        compile_function(lowered(PROGRAMS["map"]), "fuse")
    (text,) = texts
    assert "%exp = generic" in text


# ---------------------------------------------------------------- the same bits everywhere


def unhoisted_native(fn: Function, args: list[np.ndarray]) -> list[np.ndarray]:
    """Native code of `fn` compiled with the pipeline's hoisting switched off."""
    with ladder_without("hoist"):
        kernel = native_kernel(fn.derive(fn.name, fn.body))
    return kernel(bind_arguments(fn, args))


@pytest.mark.parametrize("name", [*PROGRAMS, "mixture gradient"])
def test_every_level_gives_the_unhoisted_bits(
        name: str, uncached: None) -> None:
    fn = adjoint(MIXTURE) if name == "mixture gradient" else lowered(PROGRAMS[name])
    args = arguments(fn)
    hoisted = hoist_function(fn)
    assert hoisted is not fn
    bound = bind_arguments(fn, args)
    reference = interpret(fn, bound.arrays, bound.dims)
    looped = run_program(loop_program(fn, without=("hoist",)), bound.arrays, bound.dims)
    native = unhoisted_native(fn, args)
    if name == "mixture gradient":  # every result: the loss and its gradient
        for got, want in zip(interpret(hoisted, bound.arrays, bound.dims), reference,
                             strict=True):
            np.testing.assert_array_equal(got, want)
        for got, want in zip(native_kernel(hoisted)(bound), native, strict=True):
            np.testing.assert_array_equal(got, want)
        return
    interpreted, hoisted_loops, hoisted_native = every_level(hoisted, args)
    np.testing.assert_array_equal(interpreted, reference[0])
    np.testing.assert_array_equal(hoisted_loops, looped[0])
    if name == "reduction":  # LLVM picks a reassociable sum's vector interleave from the
        # loop body, which hoisting changes: the same terms, summed in another order
        np.testing.assert_allclose(hoisted_native, native[0], rtol=1e-14, atol=1e-14)
    else:
        np.testing.assert_array_equal(hoisted_native, native[0])


@pytest.mark.parametrize("backend", ["native", "interp"])
def test_kernels_run_the_hoisted_program(backend: str, uncached: None) -> None:
    module = rv.compile(PROGRAMS["map"], backend=backend)
    fn = lowered(PROGRAMS["map"])
    args = arguments(fn)
    with capture("hoist") as texts:
        got = module.f(*args)
    assert any("%exp = generic" in text for text in texts)
    bound = bind_arguments(fn, args)
    (want,) = (interpret(fn, bound.arrays, bound.dims) if backend == "interp" else
               unhoisted_native(fn, args))
    np.testing.assert_array_equal(got, want)


def test_the_mlir_export_sees_the_hoisted_program() -> None:
    fn = adjoint(MIXTURE)
    export = compile_function(fn, "mlir", Request(backend="mlir"))
    assert count(fn, "exp") == 3 and export.text.count("math.exp") == 2  # as hoisted


# ---------------------------------------------------------------- gradients


def finite_difference(f: rv.Kernel, args: list[np.ndarray], which: int,
                      step: float = 1e-6) -> np.ndarray:
    """Central differences of scalar `f` with respect to argument `which`."""
    grad = np.zeros_like(args[which])
    for index in np.ndindex(grad.shape):
        plus, minus = [a.copy() for a in args], [a.copy() for a in args]
        plus[which][index] += step
        minus[which][index] -= step
        grad[index] = (float(f(*plus)) - float(f(*minus))) / (2 * step)
    return grad


@pytest.mark.parametrize("backend", ["native", "interp"])
def test_gradients_through_hoisted_nests_match_finite_differences(backend: str) -> None:
    source = """
    fn f(x: f64[N, D], s: f64[K, D], a: f64[K]) -> f64 {
        let y[n, k, j] = exp(s[k, j]) * x[n, j] + tanh(a[k]) * sin(x[n, j]);
        let z[k] = sum[n, j](log(exp(a[k]) + 1.0) * y[n, k, j]);
        return sum(z ** 2);
    }
    """
    module = rv.compile(source, backend=backend)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((4, 3)), 0.3 * rng.standard_normal((2, 3)),
            rng.standard_normal(2)]
    grads = module.f.grad(("x", "s", "a"))(*args)
    for which, got in enumerate(grads):
        np.testing.assert_allclose(got, finite_difference(module.f, args, which),
                                   rtol=1e-6, atol=1e-7)


def test_the_w8_mixture_gradient_still_matches_numpy() -> None:
    w8 = benchmark_module("workloads").w8_gmm
    module = rv.compile(w8.SOURCE)
    fn = module.adjoint("w8", "f64", w8.PARAMETERS)
    assert count(fn, "exp") == 5 and count(hoist_function(fn), "exp") == 3  # one for s
    rng = np.random.default_rng(2)
    n, d, k = 20, 4, 3
    args = [rng.standard_normal((n, d)), 0.5 * rng.standard_normal((k, d)),
            0.1 * rng.standard_normal((k, d)), 0.3 * rng.standard_normal((k, d, d)),
            np.tril(np.ones((d, d)), -1), rng.standard_normal(k)]
    grads = module.w8.grad(w8.PARAMETERS)(*args)
    for got, want in zip(grads, w8.numpy_grad(*args), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)

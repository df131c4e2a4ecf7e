"""Accuracy, special values and vectorisation of the IR math library (compiler/backend/mathlib).

For each dtype one module holds a loop kernel per function,
`void k_<name>(ptr in, [ptr in2,] ptr out, i64 n)`, compiled by `runtime/native/jit.py` and
called through ctypes. Results are compared in ulps with a more precise NumPy reference: f64
for f32 kernels, long double (x86's 80-bit format) for f64 kernels, `math.erf` for erf. Sin,
cos and tan are sampled over the whole float range, including floats closer to multiples of
pi/2 than random ones (Payne-Hanek reduction).
"""

from __future__ import annotations

import ctypes
import functools
import math
import re

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

import reverie as rv
from reverie.compiler.backend import (
    mathlib_bessel,
    mathlib_bessel_real,
    mathlib_error_function,
    mathlib_exponential,
    mathlib_gamma,
    mathlib_incomplete_beta,
    mathlib_incomplete_gamma,
    mathlib_inverse,
    trig,
)
from reverie.compiler.backend.mathlib import BINARY, SUPPORTED, TERNARY, MathLib
from reverie.compiler.backend.payne_hanek import two_over_pi_bits
from reverie.runtime.native.jit import JitModule, compile_module, host_target
from reverie.runtime.native.jit_module import KERNEL_PIPELINE

DTYPES = {"f32": np.float32, "f64": np.float64}
IR_TYPES = {"f32": ir.FloatType(), "f64": ir.DoubleType()}
REFERENCE_DTYPES = {"f32": np.float64, "f64": np.longdouble}
# the gamma family is checked against SciPy and mpmath in test_special_functions.py
GAMMA = {"lgamma", "digamma", "polygamma"}
# NumPy's sinh, arctan2, ... are checked in test_numpy_maths.py, SciPy's gamma, erfc,
# erfinv, erfcinv, beta, betaln in test_special_numpy.py (against mpmath), gammainc and
# gammaincc and betainc in test_incomplete_gamma.py, iv, ive, jv in
# test_bessel_real_order.py
NUMPY_MATHS = (set(mathlib_exponential.BODIES) | set(mathlib_inverse.BODIES)
               | set(mathlib_gamma.BODIES) | set(mathlib_error_function.BODIES)
               | set(mathlib_bessel.BODIES) | set(mathlib_incomplete_gamma.BODIES)
               | set(mathlib_incomplete_beta.BODIES) | set(mathlib_bessel_real.BODIES))
TRANSCENDENTAL = sorted(SUPPORTED - {"sqrt", "floor", "ceil", "abs"} - GAMMA - NUMPY_MATHS)
# the kernel built for a function with attributes
ATTRIBUTES = {"polygamma": {"order": 2}, "multigammaln": {"d": 3}, "jn": {"order": 5},
              "yn": {"order": 3}, "iv": {"order": -1.5}, "ive": {"order": 3.25},
              "jv": {"order": 2.5}}
# Where long double is no wider than double, f64 references carry their own rounding error.
F64_REFERENCE_SLACK = 0.0 if np.finfo(np.longdouble).nmant >= 63 else 1.0

# Error bounds in ulps over the domains below: measured maxima plus headroom (docs/mathlib.md).
ULP_BOUNDS = {
    "f32": {"exp": 1.5, "expm1": 2, "log": 1.5, "log1p": 1.5, "sin": 2, "cos": 2, "tan": 3.5,
            "tanh": 3, "erf": 1.5, "pow": 1, "sigmoid": 3, "softplus": 2},
    "f64": {"exp": 1.5, "expm1": 2.5, "log": 1.5, "log1p": 1.5, "sin": 2, "cos": 2, "tan": 3.5,
            "tanh": 3, "erf": 1.5, "pow": 2, "sigmoid": 3, "softplus": 2},
}


def bound(name: str, dtype: str) -> float:
    """The error bound asserted for `name` in `dtype`."""
    return ULP_BOUNDS[dtype][name] + (F64_REFERENCE_SLACK if dtype == "f64" else 0.0)


def _build_kernels(dtype: str) -> str:
    """IR text of one module with a loop kernel `k_<name>` per supported function."""
    module = ir.Module(name=f"mathlib_{dtype}")
    math_lib = MathLib(module)
    fty, i64, ptr = IR_TYPES[dtype], ir.IntType(64), ir.PointerType()
    for name in sorted(SUPPORTED):
        arity = 3 if name in TERNARY else 2 if name in BINARY else 1
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * (arity + 1) + [i64]),
                         name=f"k_{name}")
        *inputs, out, n = fn.args
        entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
        b = ir.IRBuilder(entry)
        b.cbranch(b.icmp_signed(">", n, i64(0)), loop, done)
        b.position_at_end(loop)
        i = b.phi(i64)
        i.add_incoming(i64(0), entry)
        args = [b.load(b.gep(p, [i], inbounds=True, source_etype=fty), typ=fty) for p in inputs]
        value = math_lib.call(b, name, args, **ATTRIBUTES.get(name, {}))
        b.store(value, b.gep(out, [i], inbounds=True, source_etype=fty))
        following = b.add(i, i64(1))
        i.add_incoming(following, loop)
        b.cbranch(b.icmp_signed("<", following, n), loop, done)
        b.position_at_end(done)
        b.ret_void()
    return str(module)


@functools.cache
def compiled(dtype: str) -> JitModule:
    """The kernels module for `dtype`, compiled once per test session."""
    return compile_module(_build_kernels(dtype), name=f"test_mathlib_{dtype}")


def run(name: str, *inputs: np.ndarray) -> np.ndarray:
    """Apply the compiled kernel `name` elementwise to contiguous arrays of one dtype."""
    dtype = "f32" if inputs[0].dtype == np.float32 else "f64"
    arrays = [np.ascontiguousarray(a) for a in inputs]
    out = np.empty_like(arrays[0])
    signature = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(arrays) + 1), ctypes.c_int64)
    kernel = signature(compiled(dtype).address(f"k_{name}"))
    kernel(*[a.ctypes.data for a in arrays], out.ctypes.data, out.size)
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


REFERENCES = {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "erf": _erf, "pow": np.power,
    "sigmoid": _sigmoid, "softplus": lambda x: np.logaddexp(0, x),
}


def reference(name: str, dtype: str, *inputs: np.ndarray) -> np.ndarray:
    """The function evaluated in a wider type than `dtype` (not rounded back)."""
    wide = REFERENCE_DTYPES[dtype]
    with np.errstate(all="ignore"):
        return REFERENCES[name](*[a.astype(wide) for a in inputs])


def ulp_errors(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the last place of `exact` rounded to got's dtype.

    Where the rounded reference is inf or NaN, the result must be the same: error 0 or inf.
    """
    rounded = exact.astype(got.dtype)
    finite = np.isfinite(rounded)
    with np.errstate(all="ignore"):
        errors = np.abs(got.astype(exact.dtype) - exact) / np.spacing(np.abs(rounded))
    same_special = (got == rounded) | (np.isnan(got) & np.isnan(rounded))
    return np.where(finite, errors, np.where(same_special, 0.0, np.inf)).astype(np.float64)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    """Positive values spread evenly in magnitude between 10**lo and 10**hi."""
    return 10.0 ** rng.uniform(lo, hi, n)


PIO2_LONG = np.longdouble("1.570796326794896619231321691639751442")  # as precise as the type


def near_multiples_of_pio2(dtype: str) -> np.ndarray:
    """Floats q 2**e (q < 2**digits) with q 2**e 2/pi within about 2**-digits of an integer.

    For each e, q is the largest continued-fraction denominator below 2**digits of
    (2**e 2/pi) mod 1, so sin or cos of these floats is tiny and needs every bit of 2/pi.
    """
    digits, exponents = (24, range(-10, 105)) if dtype == "f32" else (53, range(-20, 971, 3))
    values = []
    for e in exponents:
        precision = max(e, 0) + 3 * digits + 64
        denominator = 1 << (precision - e)    # 2**e 2/pi = bits / denominator
        numerator = two_over_pi_bits(precision) % denominator
        q_prev, q = 0, 1
        while numerator and q < 1 << digits:
            whole, remainder = divmod(denominator, numerator)
            denominator, numerator = numerator, remainder
            q_prev, q = q, whole * q + q_prev
        values.append(math.ldexp(q_prev if q >= 1 << digits else q, e))
    x = np.array(values)
    return np.concatenate([x, -x]).astype(DTYPES[dtype])


def _trig_domain(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    """Magnitudes spread from the smallest normal to the largest float, and hard cases."""
    f32 = dtype == "f32"
    signs = rng.choice([-1.0, 1.0], n)
    every_size = _log_uniform(rng, -44 if f32 else -300, 38.53 if f32 else 308.25, n) * signs
    multiples = (rng.integers(1, 2**30, n) * PIO2_LONG).astype(np.float64)
    return np.concatenate([every_size, multiples * signs]).astype(DTYPES[dtype])


def domain(name: str, dtype: str, n: int = 60_000) -> tuple[np.ndarray, ...]:
    """Random and edge inputs covering the function's domain for `dtype`."""
    rng = np.random.default_rng(sum(map(ord, name + dtype)))
    f32 = dtype == "f32"
    tiny = _log_uniform(rng, -44 if f32 else -320, -3, n // 6)
    signed_tiny = np.concatenate([tiny, -tiny])
    if name == "pow":
        x = _log_uniform(rng, -8, 8, n)
        y = rng.uniform(-25, 25, n)
        near_limits = rng.uniform(-103 if f32 else -744, 88.7 if f32 else 709.7, n)
        x_edge = rng.uniform(0.3, 3.0, n)
        y_edge = near_limits / np.log(x_edge)
        ints = rng.integers(-12, 13, n).astype(float)
        x_neg = -rng.uniform(0.1, 8.0, n)
        dt = DTYPES[dtype]
        return (np.concatenate([x, x_edge, x_neg]).astype(dt),
                np.concatenate([y, y_edge, ints]).astype(dt))
    limit = {"exp": (-105, 90) if f32 else (-746, 711),
             "expm1": (-40, 90) if f32 else (-70, 711),
             "sin": (-1e5, 1e5), "cos": (-1e5, 1e5), "tan": (-1e5, 1e5),
             "tanh": (-12, 12) if f32 else (-25, 25), "erf": (-7, 7),
             "sigmoid": (-110, 110) if f32 else (-750, 750),
             "softplus": (-110, 110) if f32 else (-750, 750)}
    if name in ("log", "log1p"):
        positive = _log_uniform(rng, -45 if f32 else -323, 38 if f32 else 308, n)
        near_one = 1 + rng.uniform(-0.3, 0.3, n)
        parts = [positive, near_one, tiny]
        if name == "log1p":
            parts += [-rng.uniform(0, 1, n), -tiny, -1 + tiny]
        values = np.concatenate(parts)
    else:
        lo, hi = limit[name]
        parts = [rng.uniform(lo, hi, n), rng.uniform(-3, 3, n), signed_tiny]
        if name in trig.NAMES:
            parts += [_trig_domain(rng, dtype, n), near_multiples_of_pio2(dtype)]
        values = np.concatenate(parts)
    return (values.astype(DTYPES[dtype]),)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", TRANSCENDENTAL)
def test_accuracy_against_numpy(name: str, dtype: str) -> None:
    inputs = domain(name, dtype)
    errors = ulp_errors(run(name, *inputs), reference(name, dtype, *inputs))
    worst = int(np.argmax(errors))
    assert errors[worst] <= bound(name, dtype), (
        f"{name} {dtype}: {errors[worst]:.2f} ulp at {[a[worst] for a in inputs]}")


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_trig_reduction_for_large_arguments_and_near_poles(dtype: str) -> None:
    rng = np.random.default_rng(7)
    n = 20_000
    large = rng.uniform(1e5, 1e8, n) * rng.choice([-1, 1], n)
    odd_multiples = (2 * rng.integers(-60_000, 60_000, n) + 1) * (np.pi / 2)
    near_poles = odd_multiples + 10.0 ** rng.uniform(-12, -2, n) * rng.choice([-1, 1], n)
    values = np.concatenate([large, near_poles]).astype(DTYPES[dtype])
    for name in ("sin", "cos", "tan"):
        errors = ulp_errors(run(name, values), reference(name, dtype, values))
        assert errors.max() <= bound(name, dtype), f"{name} {dtype}: {errors.max():.2f} ulp"


SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0,
           1e-30, -1e-30, 1e30, -1e30, 88.0, 89.0, -88.0, -104.0, 709.0, 710.0, -745.0, -746.0,
           1e300, -1e300, 5e-324, -5e-324, 1.5e-45, -1.5e-45, 1e-310, -1e-310]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", TRANSCENDENTAL)
def test_special_values_match_numpy(name: str, dtype: str) -> None:
    dt = DTYPES[dtype]
    with np.errstate(all="ignore"):
        values = np.array(SPECIAL, dtype=dt)
    if name == "pow":
        x, y = (a.ravel() for a in np.meshgrid(values, values))
        inputs = (x, y)
    else:
        inputs = (values,)
    got = run(name, *inputs)
    exact = reference(name, dtype, *inputs).astype(dt)
    special = ~np.isfinite(exact) | (exact == 0)
    np.testing.assert_array_equal(got[special], exact[special])
    infinite_or_zero = special & ~np.isnan(exact)
    np.testing.assert_array_equal(np.signbit(got[infinite_or_zero]),
                                  np.signbit(exact[infinite_or_zero]))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_pow_negative_bases_and_integer_exponents(dtype: str) -> None:
    dt = DTYPES[dtype]
    x = np.array([-2.0, -2.0, -2.0, -0.5, -8.0, -1.0, -3.0, 2.0], dtype=dt)
    y = np.array([3.0, 2.0, 0.5, -3.0, 1 / 3, 1e10, 0.0, 10.0], dtype=dt)
    np.testing.assert_array_equal(run("pow", x, y), np.power(x, y))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", ["sqrt", "floor", "ceil", "abs"])
def test_native_intrinsics_are_exact(name: str, dtype: str) -> None:
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.uniform(-1e3, 1e3, 1000), SPECIAL]).astype(DTYPES[dtype])
    numpy_fn = {"sqrt": np.sqrt, "floor": np.floor, "ceil": np.ceil, "abs": np.abs}[name]
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(run(name, values), numpy_fn(values))


def _function_bodies(llvm_ir: str) -> dict[str, str]:
    """Optimised IR split into function bodies by name."""
    pieces = re.split(r"^define [^@]*@\"?([\w.]+)\"?\(", llvm_ir, flags=re.MULTILINE)
    return {pieces[k]: pieces[k + 1] for k in range(1, len(pieces) - 1, 2)}


# Library calls, and intrinsics the backend expands into one library call per lane (calls to
# the module's own `rv.*` functions are fine: the trig functions and their vector versions).
SCALARISED_CALL = re.compile(
    r"call [^@]*@\"?((?!llvm\.|rv\.)[\w.]+|llvm\.(exp|exp2|exp10|log|log2|log10|sin|cos|tan"
    r"|sinh|cosh|tanh|asin|acos|atan|pow|powi)\.)")
# A symbol that machine code reaches through the GOT or PLT: outside the module unless rv.*
ASM_SYMBOL = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)@(?:GOT|GOTOFF|GOTPCREL|PLT|PLTOFF)\b")
ASM_FUNCTION = re.compile(r"^\"?([A-Za-z_][\w.]*)\"?:", re.MULTILINE)


def _without_avx512(features: str) -> str:
    """An LLVM feature string with every AVX-512 (and AVX10) feature turned off."""
    return ",".join("-" + f[1:] if "avx512" in f or f[1:].startswith("avx10") else f
                    for f in features.split(","))


def _targets() -> dict[str, tuple[str, str]]:
    """CPU name and features of each target the kernels are checked on: the host, and on
    x86-64 two no wider than any AVX-512 host: Skylake-X (AVX-512, which LLVM tunes for
    256-bit vectors) and Haswell (AVX2, FMA), with the host's features otherwise."""
    host = host_target()
    targets = {"host": (host.cpu_name, host.features)}
    if host.triple.startswith("x86_64"):
        targets["skylake-avx512"] = ("skylake-avx512", host.features)
        targets["avx2"] = ("haswell", _without_avx512(host.features))
    return targets


@functools.cache
def optimised_for(dtype: str, target: str) -> tuple[str, str]:
    """(optimised IR, assembly) of the kernels module for `target`: the JIT's for the host,
    else optimised and compiled as `runtime/native/jit.py` does (KERNEL_PIPELINE,
    always-inliner)."""
    if target == "host":
        return compiled(dtype).llvm_ir, compiled(dtype).asm
    cpu, features = _targets()[target]
    host = host_target()
    machine = llvm.Target.from_triple(host.triple).create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="pic")
    context = llvm.create_context()
    module = llvm.parse_assembly(_build_kernels(dtype), context)
    module.triple, module.data_layout = host.triple, str(machine.target_data)
    tuning = llvm.create_pipeline_tuning_options(speed_level=KERNEL_PIPELINE.speed_level)
    tuning.loop_vectorization = tuning.loop_interleaving = True
    tuning.slp_vectorization = KERNEL_PIPELINE.slp_vectorization
    tuning.loop_unrolling = KERNEL_PIPELINE.loop_unrolling
    pass_builder = llvm.create_pass_builder(machine, tuning)
    pass_builder.getModulePassManager().run(module, pass_builder)
    inliner = llvm.create_new_module_pass_manager()
    inliner.add_always_inliner_pass()
    inliner.run(module, pass_builder)
    optimised, assembly = str(module), machine.emit_assembly(module)
    module.close()
    context.close()
    return optimised, assembly


def _calls_per_lane(body: str, function: str) -> list[str]:
    """Calls of the scalar `function` on one lane of a vector (an extractelement)."""
    lanes = set(re.findall(r"(%[\w.]+) = extractelement", body))
    calls = re.findall(rf"call [^@]*@\"?{re.escape(function)}\"?\((?:\w+ )+(%[\w.]+)\)", body)
    return [argument for argument in calls if argument in lanes]


@pytest.mark.parametrize("target", list(_targets()))
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_kernels_vectorise_without_library_calls(dtype: str, target: str) -> None:
    """Every built-in, on every target: vector code, no call per lane, no library call.

    Widths are not asserted (they are the vectoriser's choice for the target); sin, cos and
    tan must use the vector version of sincos of the loop's width, inlined."""
    llvm_ir, assembly = optimised_for(dtype, target)
    bodies = _function_bodies(llvm_ir)
    element = "float" if dtype == "f32" else "double"
    for name in sorted(SUPPORTED):
        body = bodies[f"k_{name}"]
        where = f"{name} {dtype} on {target}"
        assert re.search(rf"<\d+ x {element}>", body), f"{where}: not vectorised"
        if name in trig.NAMES:  # sin, cos and tan: a vector version of sincos, inlined
            pair = rf"\{{ <(\d+) x {element}>, <\1 x {element}> \}}"
            assert re.search(rf"insertvalue {pair}", body), f"{where}: no vector sincos"
            assert not re.search(rf"call {pair} @rv\.sincos", body), f"{where}: a call"
            assert not _calls_per_lane(body, f"rv.sincos.{dtype}"), f"{where}: once per lane"
    for function, body in bodies.items():
        calls = SCALARISED_CALL.search(body)
        assert calls is None, f"{function} ({dtype}, {target}) calls {calls.group(0)}"
    functions = ASM_FUNCTION.split(assembly)
    for function, code in zip(functions[1::2], functions[2::2], strict=True):
        outside = {s for s in ASM_SYMBOL.findall(code) if not s.startswith(("rv.", "_GLOBAL_"))}
        assert not outside, f"{function} ({dtype}, {target}) machine code calls {outside}"


def test_two_over_pi_bits_match_fdlibm_and_extend_consistently() -> None:
    fdlibm_ipio2 = 0xA2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163  # 9 x 24 bits
    assert two_over_pi_bits(216) == fdlibm_ipio2
    assert two_over_pi_bits(1216) >> 1000 == fdlibm_ipio2


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_compiled_kernels_reduce_huge_arguments(dtype: str) -> None:
    """Through the whole compiler: elementwise loops and a sum (another vector width)."""
    rng = np.random.default_rng(3)
    x = np.concatenate([_trig_domain(rng, dtype, 3000), near_multiples_of_pio2(dtype),
                        rng.uniform(-10, 10, 3000).astype(DTYPES[dtype])])
    rng.shuffle(x)
    module = rv.compile(f"fn f(x: {dtype}[N]) -> ({dtype}[N], {dtype}[N], {dtype}[N], {dtype}) "
                        "{ return (sin(x), cos(x), tan(x), sum(sin(x))); }")
    *values, total = module.f(x)
    for name, got in zip(("sin", "cos", "tan"), values, strict=True):
        errors = ulp_errors(got, reference(name, dtype, x))
        assert errors.max() <= bound(name, dtype), f"{name} {dtype}: {errors.max():.2f} ulp"
    exact_total = reference("sin", dtype, x).sum()
    assert abs(float(total) - float(exact_total)) <= 4 * x.size * np.finfo(x.dtype).eps


def test_unknown_function_and_bad_arguments_are_rejected() -> None:
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.FloatType()]), name="f")
    b = ir.IRBuilder(fn.append_basic_block())
    with pytest.raises(ValueError, match="unknown math function"):
        MathLib(module).call(b, "no_such_function", [fn.args[0]])
    with pytest.raises(ValueError, match="takes 2"):
        MathLib(module).call(b, "pow", [fn.args[0]])
    with pytest.raises(TypeError):
        MathLib(module).call(b, "exp", [ir.Constant(ir.IntType(32), 1)])


def test_each_function_is_emitted_once_per_module() -> None:
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.FloatType()]), name="f")
    b = ir.IRBuilder(fn.append_basic_block())
    math_lib = MathLib(module)
    math_lib.call(b, "exp", [fn.args[0]])
    math_lib.call(b, "exp", [fn.args[0]])
    MathLib(module).call(b, "exp", [fn.args[0]])
    assert str(module).count('define internal float @"rv.exp.f32"') == 1

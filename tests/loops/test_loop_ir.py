"""The loop IR as a level of its own: golden files, the verifier, and three-level agreement.

- Each `examples/NAME.rv` lowers (f32, no JIT) to `tests/golden/loops/NAME.txt`: every
  function, each followed by its adjoint (gradient or VJP w.r.t. every float parameter)
  when it has float parameters. Regenerate with
  `REVERIE_UPDATE_GOLDEN=1 python -m pytest tests/loops/test_loop_ir.py`.
- Every such program, in f32 and f64, passes the verifier after each loop pass (lowering,
  then loop splitting), and the tensor-IR interpreter, the loop-IR interpreter and the
  native kernel agree on random inputs; the split program equals the unsplit one bit for bit.
- The verifier and the interpreter reject hand-built broken programs.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import reverie as rv
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dims import Dim
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.compiler.loops import ir as loop_ir
from reverie.compiler.loops.ir import (
    MATMUL_PACK_ELEMENTS,
    Accumulate,
    Accumulator,
    Buffer,
    Check,
    Const,
    ErrorSite,
    ForLoop,
    Let,
    Load,
    Loop,
    LoopState,
    Matmul,
    Program,
    Stmt,
    Store,
    Var,
    View,
)
from reverie.compiler.loops.loop_interpreter import LoopMemoryError, run_program
from reverie.compiler.loops.loop_printer import format_program
from reverie.compiler.loops.loop_verifier import LoopVerifyError, verify_program
from reverie.runtime.native.call import bind_arguments
from reverie.runtime.native.native_kernel import native_kernel
from tests.unit.level_helpers import loop_program
from tests.unit.test_examples import EXAMPLE_FILES, SIZES, make_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
from native_helpers import assert_same  # noqa: E402

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "loops"


def compiled(path: Path) -> rv.Module:
    return rv.compile(path.read_text(encoding="utf-8"), name=path.name, backend="interp")


def level_functions(module: rv.Module, name: str, dtype: str) -> list[Function]:
    """Function `name` specialised to `dtype`, then its adjoint when it has float
    parameters (what the golden files show)."""
    primal = module.lowering.specialise(name, dtype)
    if not any(p.type.is_float for p in primal.params):
        return [primal]
    return [primal, module.adjoint(name, dtype)]


def lower_unsplit(fn: Function) -> Program:
    """The program without the loop passes `split_wrapping_loops` and
    `split_guarded_loops`."""
    return loop_program(fn, without=("split_wrapping_loops", "split_guarded_loops"))


def loop_ir_text(path: Path) -> str:
    module = compiled(path)
    functions = [f for name in module.kernels for f in level_functions(module, name, "f32")]
    return "\n\n".join(format_program(loop_program(f)) for f in functions) + "\n"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_loop_ir_matches_golden_file(path: Path, golden) -> None:  # noqa: ANN001
    golden(loop_ir_text(path), GOLDEN_DIR / f"{path.stem}.txt")


def test_every_example_has_a_golden_file_and_no_other() -> None:
    assert sorted(p.stem for p in GOLDEN_DIR.glob("*.txt")) == [p.stem for p in EXAMPLE_FILES]


def test_the_loop_ir_docstring_shows_real_output() -> None:
    module = rv.compile("fn loss(x: f32[N]) -> f32 { return sum(tanh(x)); }", backend="interp")
    printed = format_program(loop_program(module.lowering.specialise("loss", "f32")))
    assert textwrap.indent(printed, "    ") in loop_ir.__doc__


# ---------------------------------------------------------------- three levels agree


def arguments(module: rv.Module, name: str, fn: Function, dtype: str) -> list[object]:
    """Random arguments of `fn`: those of the example function, then random normal
    cotangents for the extra parameters of a VJP."""
    args = make_args(module, name, dtype)
    rng = np.random.default_rng(1)
    for param in fn.params[len(args):]:
        shape = tuple(d.evaluate(SIZES) for d in param.type.shape)
        args.append(rng.standard_normal(shape).astype(NUMPY_DTYPES[param.type.dtype]))
    return args


CASES = [(path, name) for path in EXAMPLE_FILES for name in compiled(path).kernels]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize(("path", "name"), CASES, ids=[f"{p.stem}.{n}" for p, n in CASES])
def test_tensor_loop_and_native_levels_agree(path: Path, name: str, dtype: str) -> None:
    module = compiled(path)
    for scale, fn in zip((30, 300), level_functions(module, name, dtype), strict=False):
        bound = bind_arguments(fn, arguments(module, name, fn, dtype))
        unsplit, program = lower_unsplit(fn), loop_program(fn)
        verify_program(unsplit)
        verify_program(program)
        loops = run_program(program, bound.arrays, bound.dims)
        for split, whole in zip(loops, run_program(unsplit, bound.arrays, bound.dims),
                                strict=True):
            np.testing.assert_array_equal(split, whole)
        assert_same(loops, interpret(fn, bound.arrays, bound.dims), scale)
        assert_same(native_kernel(fn)(bound), loops, scale)


EDGE_CASES = [
    ("fn f(x: f64[N]) -> (i64, i64) { return (argmax(x), argmin(x)); }",
     [np.array([1.0, np.nan, 3.0, np.nan, -2.0])]),
    ("fn f(x: f64[N, M]) -> i64[N] { return argmax(x, axis=1); }",
     [np.array([[1.0, 5.0, 5.0], [-1.0, -1.0, -3.0]])]),
    ("fn f(a: i64[N], b: i64[N]) -> (i64[N], i64[N]) { return (a // b, a % b); }",
     [np.array([7, -7, 7, -7, 3]), np.array([2, 2, -2, 0, -1])]),
    ("fn f(x: f32[N]) -> (i32[N], f32[N]) { return (i32(x), x // 0.5); }",
     [np.array([np.nan, np.inf, -3.7, 2.5e10, 1.25], np.float32)]),
    ("fn f(u: f64[N], steps: i64) -> f64[N] { var v = u; "
     "for t in 0..steps { v = roll(v, 2) * 0.5 + v; } return v; }",
     [np.arange(5.0), 0]),
    ("fn f(x: f64[N, M], i: i64) -> f64[M] { return x[i] * x[N - 1 - i]; }",
     [np.arange(6.0).reshape(3, 2), 2]),
]


@pytest.mark.parametrize(("source", "args"), EDGE_CASES, ids=range(len(EDGE_CASES)))
def test_levels_agree_on_edge_cases(source: str, args: list[object]) -> None:
    fn = rv.compile(source, backend="interp").lowering.specialise("f", "f64")
    bound = bind_arguments(fn, args)
    program = loop_program(fn)
    verify_program(program)
    loops = run_program(program, bound.arrays, bound.dims)
    for got, want in zip(loops, interpret(fn, bound.arrays, bound.dims), strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(native_kernel(fn)(bound), loops, strict=True):
        np.testing.assert_array_equal(got, want)


def test_failed_checks_raise_the_native_index_error() -> None:
    source = "fn f(z: f64[N, C], labels: i64[N]) -> f64 { let p[n] = z[n, labels[n]]; " \
             "return sum(p); }"
    fn = rv.compile(source, backend="interp").lowering.specialise("f", "f64")
    bound = bind_arguments(fn, [np.zeros((4, 3)), np.array([0, 2, -1, 7])])
    with pytest.raises(IndexError) as native_error:
        native_kernel(fn)(bound)
    with pytest.raises(IndexError) as loop_error:
        run_program(loop_program(fn), bound.arrays, bound.dims)
    assert str(loop_error.value) == str(native_error.value) == \
        "index -1 is out of bounds for axis 1 of 'z' with size 3"


# ---------------------------------------------------------------- broken programs

N = Dim.sym("N")
I0 = Dim.sym("%i0")
X = Buffer("x", "f32", (N,), "input", 0)
OUT = Buffer("out0", "f32", (N,), "output", 0)
T0 = Buffer("t0", "f32", (N,), "temp", 0)
V0, V1 = Var("%0", "f32"), Var("%1", "f32")


def load(var: Var = V0, buffer: Buffer = X, index: tuple[Dim, ...] = (I0,)) -> Load:
    return Load(var, View.of(buffer), index)


def store(value: object = V1, buffer: Buffer = OUT, index: tuple[Dim, ...] = (I0,)) -> Store:
    return Store(View.of(buffer), index, value)


def kernel(*body: Stmt, temps: tuple[Buffer, ...] = (), sites: tuple[ErrorSite, ...] = (),
           inputs: tuple[Buffer, ...] = (X,), outputs: tuple[Buffer, ...] = (OUT,)) -> Program:
    """`out0[i] = f(x[i])`-shaped programs: `body` is what the loop over N holds."""
    return Program("f", ["N"], list(inputs), list(outputs), list(temps),
                   [Loop("%i0", Dim.const(0), N, list(body))], list(sites))


def tanh_kernel() -> Program:
    return kernel(load(), Let(V1, "tanh", (V0,)), store())


def matmul(a_shape: tuple[Dim, ...], out: Buffer) -> Program:
    a = Buffer("a", "f64", a_shape, "input", 0)
    pack = Buffer("pack", "f64", (Dim.const(MATMUL_PACK_ELEMENTS),), "temp", 0)
    return Program("f", ["N"], [a], [out], [pack],
                   [Matmul(View.of(out), View.of(a), View.of(a), pack)], [])


SQUARE = Buffer("out0", "f64", (N, N), "output", 0)
S_CUR, S_NEXT = Buffer("s0.cur", "f32", (N,), "state"), Buffer("s0.next", "f32", (N,), "state")
T1 = Buffer("t1", "f32", (N,), "temp", 1)

BROKEN: dict[str, tuple[Callable[[], Program], str]] = {
    "use before definition": (lambda: kernel(Let(V1, "tanh", (V0,)), load(), store()),
                              "%0 is used before it is defined"),
    "use outside the defining body": (
        lambda: Program("f", ["N"], [X], [OUT], [], [
            Loop("%i0", Dim.const(0), N, [load(), store(V0)]),
            Loop("%i1", Dim.const(0), N, [store(V0, index=(Dim.sym("%i1"),))])], []),
        "%0 is used before it is defined (or outside its body)"),
    "defined twice": (lambda: kernel(load(), load(), store(V0)), "%0 is defined twice"),
    "wrong rank": (lambda: kernel(load(index=(I0, I0)), store(V0)),
                   "x is accessed with 2 indices and 1 strides for a view of rank 1"),
    "wrong result dtype": (lambda: kernel(load(), Let(Var("%1", "f64"), "tanh", (V0,)),
                                          store()), "tanh of ['f32'] gives f32"),
    "mixed operand dtypes": (lambda: kernel(load(), Let(V1, "add", (V0, Const(1.0, "f64"))),
                                            store()), "different dtypes f32 and f64"),
    "float op on bools": (lambda: kernel(load(), Let(Var("%1", "bool"), "not", (V0,)),
                                         store()), "'not' needs bool operands, got f32"),
    "variable used with another dtype": (lambda: kernel(load(), store(Var("%0", "f64"))),
                                         "%0 is used as f64 but defined as f32"),
    "store of another dtype": (lambda: kernel(store(Const(1.0, "f64"))),
                               "stores a f64 value into f32 buffer out0[%i0]"),
    "load into another dtype": (lambda: kernel(load(Var("%0", "i64")), store(V0)),
                                "%0 is i64 but loads from f32 buffer x"),
    "undeclared buffer": (lambda: kernel(load(buffer=T0), store(V0)),
                          "buffer t0 is not declared"),
    "unknown dimension symbol": (lambda: kernel(load(index=(Dim.sym("M"),)), store(V0)),
                                 "uses M, which is not a dimension symbol"),
    "index from a float": (lambda: kernel(load(), load(V1, index=(Dim.sym("%0"),)), store()),
                           "uses %0, which is f32, not i64"),
    "not an elementwise op": (lambda: kernel(load(), Let(V1, "reduce_sum", (V0,)), store()),
                              "'reduce_sum' is not an elementwise op"),
    "accumulate without accumulator": (
        lambda: kernel(load(), Accumulate(Var("%acc0", "f32"), "sum", V0), store(V0)),
        "%acc0 is not a f32 accumulator declared here"),
    "accumulator and plain variable": (
        lambda: Program("f", ["N"], [X], [OUT], [], [
            Loop("%i0", Dim.const(0), N, [Accumulator(V0, Const(0.0, "f32")), store(V0)]),
            Loop("%i0", Dim.const(0), N, [load(), store(V0)])], []),
        "%0 names both an accumulator and a plain variable"),
    "missing error site": (lambda: kernel(Check(I0, N, 0), load(), store(V0)),
                           "error site 0 does not exist"),
    "input written": (lambda: kernel(load(), store(V0, buffer=X), store(V0)),
                      "input x is written"),
    "output never written": (lambda: kernel(load()), "output out0 is never written"),
    "temporary sized by a variable": (
        lambda: kernel(load(), store(V0), temps=(Buffer("t0", "f32", (Dim.sym("%0"),), "temp"),)),
        "shape %0 uses the variable %0"),
    "outputs out of slot order": (
        lambda: kernel(load(), store(V0), outputs=(Buffer("out0", "f32", (N,), "output", 1),)),
        "out0 is declared as output 1 in place of output 0"),
    "state read before its loop": (
        lambda: Program("f", ["N"], [X], [OUT], [T0, T1], [
            Loop("%i0", Dim.const(0), N, [load(buffer=S_CUR), store(V0)]),
            ForLoop("%i1", Dim.const(0), N, [LoopState(S_CUR, S_NEXT, T0, T1)], [])], []),
        "buffer s0.cur is not declared (or its loop state is not visible here)"),
    "matmul shapes": (lambda: matmul((N, Dim.const(2)), SQUARE),
                      "matmul shapes do not fit: [N, 2] @ [N, 2] into [N, N]"),
}


def test_the_hand_built_programs_are_valid_when_not_broken() -> None:
    verify_program(tanh_kernel())
    verify_program(matmul((N, N), SQUARE))
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    (out,) = run_program(tanh_kernel(), [x], {"N": 5})
    np.testing.assert_array_equal(out, np.tanh(x))


def test_parameter_names_may_repeat_or_match_generated_names() -> None:
    """Input names come from the user (and from reverse mode, which can repeat them);
    code generation never looks buffers up by name."""
    source = "fn f(t0: f64[N], out0: f64[N, N]) -> f64[N] { return t0 @ out0 + t0; }"
    program = loop_program(rv.compile(source, backend="interp").lowering.specialise("f", "f64"))
    program.inputs[1].name = "t0"
    verify_program(program)


@pytest.mark.parametrize("case", BROKEN)
def test_verifier_rejects_broken_programs(case: str) -> None:
    build, message = BROKEN[case]
    with pytest.raises(LoopVerifyError) as error:
        verify_program(build())
    assert message in str(error.value)
    assert str(error.value).startswith("kernel @f: ")


@pytest.mark.parametrize(("program", "message"), [
    (kernel(load(buffer=T0), store(V0), temps=(T0,)), "reads t0 at 0 before writing it"),
    (kernel(load(index=(I0 + 1,)), store(V0)), "reads x at 5, outside its 5 elements"),
    (Program("f", ["N"], [X], [OUT], [], [
        Loop("%i0", Dim.const(0), N - 1, [load(), store(V0)])], []),
     "output out0 is not completely written"),
], ids=["unwritten temporary", "outside a buffer", "output left unwritten"])
def test_interpreter_rejects_bad_memory_accesses(program: Program, message: str) -> None:
    verify_program(program)
    with pytest.raises(LoopMemoryError, match=message):
        run_program(program, [np.zeros(5, np.float32)], {"N": 5})

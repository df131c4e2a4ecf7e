"""The ladder (`compiler/pipeline.py`), the printing hook (`compiler/print_ir.py`) and the
stages of `module.ir` / `reverie emit` built on them (docs/api.md §11)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import reverie as rv
from reverie.__main__ import main
from reverie.compiler import pipeline, print_ir
from reverie.compiler.ir.core import Function
from reverie.compiler.ir.tensor_interpreter import interpret
from reverie.compiler.loops.ir import Program
from reverie.compiler.loops.loop_printer import format_program as print_loops
from reverie.compiler.pipeline import (
    IR_NAMES,
    IR_VIEWS,
    LADDERS,
    Fused,
    MlirExport,
    Request,
    climb,
    compile_function,
    compile_source,
)
from reverie.dsl import ast
from reverie.dsl.diagnostics import CompileError
from reverie.runtime.native import jit
from reverie.runtime.native.jit import JitModule, LlvmModule

ROOT = Path(__file__).resolve().parents[2]
SOURCE = """
fn loss(x: f32[N], w: f32[N]) -> f32 {
    return sum(tanh(x * w));
}
"""
HEADER = re.compile(r"^// ---- after (\S+) \(([^)]+)\): (.+)$", re.MULTILINE)


def unique_source(tag: str) -> str:
    """SOURCE with a constant no other test uses, so no compiled kernel or cache entry of
    another test can stand in for this one's."""
    return SOURCE.replace("x * w", f"x * w + {abs(hash(tag)) % 1000}.25")


def headers(text: str) -> list[tuple[str, str]]:
    """(pass, level) of every REVERIE_PRINT_IR header in `text`."""
    return [(name, level) for name, level, _ in HEADER.findall(text)]


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty disk cache, so every compile runs LLVM's optimiser."""
    monkeypatch.setenv("REVERIE_CACHE_DIR", str(tmp_path / "cache"))


# ---------------------------------------------------------------- the ladder


EXPECTED_KINDS = {"parse": ast.Module, "lower": Function, "fuse": Fused, "to_loops": Program,
                  "codegen": str, "llvm-opt": LlvmModule, "jit": JitModule}


@pytest.mark.parametrize("stop", list(EXPECTED_KINDS))
def test_stopping_after_each_stage_returns_its_result(stop: str) -> None:
    result = compile_source(SOURCE, stop)
    assert isinstance(result, EXPECTED_KINDS[stop])


@pytest.mark.parametrize(("transform", "suffix", "results"),
                         [("reverse", "_grad", 2), ("forward", "_jvp", 2),
                          ("batch", "_batched", 1)])
def test_each_transform_stage_returns_a_tensor_function(transform: str, suffix: str,
                                                         results: int) -> None:
    fn = compile_source(SOURCE, transform, Request(transform=transform, wrt=["x"]))
    assert isinstance(fn, Function) and fn.name == "loss" + suffix
    assert len(fn.result_types) == results


def test_climb_returns_every_stage_in_ladder_order_and_skips_other_transforms() -> None:
    stages = climb(SOURCE, Request(transform="reverse"), stop="jit")
    assert list(stages) == ["parse", "lower", "reverse", "fuse", "to_loops", "codegen",
                            "llvm-opt", "jit"]
    entry = stages["jit"].address("rv_loss_grad")
    assert entry and stages["to_loops"].name == "loss_grad"
    assert stages["codegen"] == stages["llvm-opt"].source_ir


def test_climb_stops_after_and_starts_at_any_pass() -> None:
    fn = compile_source(SOURCE, "reverse", Request(transform="reverse"))
    stages = climb(fn, start="fuse", stop="split_wrapping_loops")
    assert list(stages) == ["fuse", "split_wrapping_loops"]
    rest = climb(stages["split_wrapping_loops"], start="split_guarded_loops", stop="to_loops")
    assert list(rest) == ["to_loops"]
    assert print_loops(rest["to_loops"]) == print_loops(compile_function(fn, "to_loops"))
    with pytest.raises(ValueError, match="comes before"):
        climb(fn, start="interchange", stop="fuse_loops")


def test_a_name_means_one_thing_to_climb_and_to_module_ir() -> None:
    """A stage is named after no pass of another meaning: where a pass has the stage's
    name it is the stage's last pass, so stopping after either is the same."""
    passes = {p.name for ladder in LADDERS.values() for s in ladder for p in s.passes}
    for ladder in LADDERS.values():
        for s in ladder:
            assert s.name not in passes or s.passes[-1].name == s.name, s.name
    fn = compile_source(SOURCE, "lower")
    program = climb(fn, start="fuse", stop="to_loops")["to_loops"]
    with print_ir.capture("dead_code") as texts:
        compile_function(fn, "to_loops")
    assert texts[-1] == print_loops(program)
    with print_ir.capture("loop_nests") as texts:
        lowered = climb(fn, start="fuse", stop="loop_nests")["loop_nests"]
    assert texts[-1] == print_loops(lowered)


def test_the_select_stage_keeps_the_results_or_the_vjp_half_asked_for() -> None:
    fn = compile_source(SOURCE, "lower")
    request = Request(transform="reverse", wrt=[1], results=[1], name="loss_dw")
    with print_ir.capture("keep_results") as kept, print_ir.capture("simplify") as simplified:
        grad = pipeline.transform(fn, request)
    assert grad.name == "loss_dw" and [str(t) for t in grad.result_types] == ["f32[N]"]
    assert "reduce_sum" in kept[-1] and "reduce_sum" not in simplified[-1]  # (dead code)
    vjp = pipeline.transform(fn, Request(transform="reverse", wrt=[0, 1], vjp=True))
    halves = [climb(vjp, Request(wrt=[0, 1], vjp_half=half), start="select",
                    stop="select")["select"] for half in ("forward", "backward")]
    assert [h.name for h in halves] == ["loss_vjp_forward", "loss_vjp_backward"]
    residuals = halves[0].result_types[1:]
    assert [p.type for p in halves[1].params[2:2 + len(residuals)]] == list(residuals)
    with pytest.raises(ValueError, match=r"runs only when asked for: Request\(vjp_half"):
        climb(fn, Request(), start="select", stop="select")
    with pytest.raises(ValueError, match="vjp_half must be one of None, forward, backward"):
        Request(vjp_half="middle")


def test_the_stage_rows_are_the_passes_that_print_in_order(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("REVERIE_PRINT_IR", "1")
    compile_source(SOURCE, "to_loops")
    printed = [name for name, _ in headers(capsys.readouterr().err)]
    rows = [name for s in LADDERS["native"] if s.name in ("fuse", "to_loops")
            for p in s.passes for name in p.printed]
    assert printed[-len(rows):] == rows


def test_the_native_kernel_runs_what_the_ladder_builds() -> None:
    module = rv.compile(SOURCE)
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    kernel = module.executable(module.lowering.specialise("loss", "f32"))
    assert kernel.source_ir == compile_source(SOURCE, "codegen")
    np.testing.assert_allclose(module.loss(x, x), np.tanh(x * x).sum(), rtol=1e-6)


def test_the_mlir_ladder_exports_program_and_adjoint_in_one_module() -> None:
    fn = compile_source(SOURCE, "lower")
    grad = compile_source(SOURCE, "reverse", Request(transform="reverse"))
    export = climb([fn, grad], Request(backend="mlir"), start="mlir", stop="mlir")["mlir"]
    assert isinstance(export, MlirExport)
    assert [part.symbol for part in export.parts] == ["loss", "loss_grad"]
    assert "func.func @loss_grad(" in export.text


def test_the_jacobian_stage_builds_both_modes() -> None:
    fn = compile_source(SOURCE, "lower", Request(function="loss"))
    requests = [Request(transform="jacobian", wrt=["w"], mode=mode, name="loss_jacobian")
                for mode in ("forward", "reverse")]
    blocks = [pipeline.transform(fn, request) for request in requests]
    assert [b.name for b in blocks] == ["loss_jacobian", "loss_jacobian"]
    x, w = np.linspace(0, 1, 4, dtype=np.float32), np.ones(4, np.float32)
    expected = rv.compile(SOURCE).loss.jacobian("w")(x, w)
    for block in blocks:
        (value,) = interpret(block, [x, w], {"N": 4})
        np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_bad_requests_are_value_errors_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="its stages: parse, lower, reverse"):
        compile_source(SOURCE, "llvm")
    with pytest.raises(ValueError, match="comes before"):
        climb(SOURCE, start="codegen", stop="lower")
    with pytest.raises(ValueError, match=r"Request\(transform='reverse'\)"):
        compile_source(SOURCE, "reverse")
    with pytest.raises(ValueError, match="transform must be one of None, reverse, forward, "
                       "batch, jacobian"):
        Request(transform="hessian")
    with pytest.raises(ValueError, match="no function 'los'.*loss"):
        compile_source(SOURCE, "lower", Request(function="los"))
    with pytest.raises(ValueError, match="2 functions .*name one"):
        compile_source(SOURCE + "fn g(y: f32) -> f32 { return y; }", "lower")
    with pytest.raises(ValueError, match="no parameter 'v'"):
        compile_source(SOURCE, "reverse", Request(transform="reverse", wrt=["v"]))
    with pytest.raises(CompileError):
        compile_source("fn f(x: f32) -> f32 { return y; }", "lower")


def test_fusion_plan_marks_every_body_op() -> None:
    fused = compile_source(SOURCE, "fuse", Request(transform="reverse"))
    lines = pipeline.format_fusion(fused).splitlines()
    marked = [line for line in lines if "  // " in line]
    assert len(marked) == len(fused.function.body.ops)
    assert any(line.endswith("// root, sibling nest 0") for line in marked)
    assert {line.rsplit("// ", 1)[1].split(",")[0] for line in marked} <= \
        {"scalar", "view", "root", "inline", "dead"}


def test_every_pass_of_the_ladder_is_documented_and_printable() -> None:
    run_by_stages = {name for ladder in LADDERS.values() for s in ladder for p in s.passes
                     for name in p.printed}
    assert run_by_stages == set(print_ir.PASSES)
    docs = (ROOT / "docs/pipeline.md").read_text()
    for name in print_ir.PASSES:
        assert re.search(rf"^\s+{re.escape(name)}\s", print_ir.__doc__, re.MULTILINE), name
        assert f"`{name}`" in docs, name
    for ladder in LADDERS.values():
        for s in ladder:
            assert f"`{s.name}`" in docs, s.name


# ---------------------------------------------------------------- module.ir and emit


def test_every_ir_stage_prints_its_level() -> None:
    module = rv.compile(SOURCE, name="loss.rv")
    printed = {stage: module.ir(stage) for stage in IR_VIEWS}
    assert printed["ast"].startswith("fn loss(")
    assert printed["tensor"].startswith("func @loss(") and "_bar" not in printed["tensor"]
    assert printed["grad"].startswith("func @loss_grad(") and "%w_bar" in printed["grad"]
    raw, simplified = printed["grad-raw"], printed["grad"]
    assert raw.startswith("func @loss_grad(") and raw.count(" = ") > simplified.count(" = ")
    assert printed["loops"].startswith("kernel @loss(")
    assert "func.func @loss(" in printed["mlir"] and "func.func @loss_grad(" in printed["mlir"]
    assert 'define i32 @"rv_loss"' in printed["llvm-raw"]
    assert 'target datalayout = ""' in printed["llvm-raw"]
    assert re.search(r"^define [^\n]*i32 @rv_loss\([^\n]*local_unnamed_addr", printed["llvm"],
                     re.M)  # optimised: LLVM's inferred attributes
    assert " x float>" in printed["llvm"] and " x float>" not in printed["llvm-raw"]
    assert "rv_loss:" in printed["asm"]
    assert module.ir("llvm-raw", wrt="x").count("define i32 @\"rv_loss_grad\"") == 1


@pytest.mark.parametrize("stage", ["grad-raw", "loops", "mlir", "llvm-raw"])
def test_each_ir_stage_is_what_its_pass_prints(stage: str) -> None:
    module = rv.compile(SOURCE)
    with print_ir.capture(print_ir.VIEWS[stage]) as texts:
        printed = module.ir(stage)
    assert texts and texts[-1] + "\n" == printed


def test_one_vocabulary_names_the_views_and_the_passes() -> None:
    """module.ir and emit take every view and every pass a module's IR goes through; the
    views are those REVERIE_PRINT_IR knows, each after a pass."""
    assert list(IR_VIEWS) == list(print_ir.VIEWS)
    assert set(print_ir.VIEWS.values()) <= set(print_ir.PASSES)
    assert set(IR_NAMES) == set(IR_VIEWS) | set(print_ir.PASSES) - set(pipeline.TRANSFORM_PASSES)
    with pytest.raises(ValueError, match="llvm, asm, parse, lower, reverse"):
        rv.compile(SOURCE).ir("forward")


@pytest.mark.parametrize("name", ["lower", "reverse", "contract", "hoist", "fuse",
                                  "loop_nests", "interchange", "dead_code", "codegen"])
def test_a_pass_name_shows_what_that_pass_prints(name: str) -> None:
    module = rv.compile(SOURCE)
    wrt = None if name == "lower" else "x"  # after the tensor level: the adjoint
    with print_ir.capture(name) as texts:
        printed = module.ir(name, wrt=wrt)
    assert texts[-1] + "\n" == printed
    assert "_grad" in printed or name == "lower"


def test_a_view_name_prints_its_pass(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("REVERIE_PRINT_IR", "grad-raw, loops")
    rv.compile(unique_source("print views")).ir("loops", wrt="x")
    assert headers(capsys.readouterr().err) == [("reverse", "tensor IR"),
                                                ("dead_code", "loop IR")]


def test_grad_raw_simplifies_to_grad() -> None:
    """The raw adjoint is what simplify receives: simplifying it gives stage "grad"."""
    module = rv.compile(SOURCE)
    with print_ir.capture("simplify") as simplified:
        raw = module.ir("grad-raw", wrt="w")
    assert raw.count("\n") > module.ir("grad", wrt="w").count("\n")
    assert simplified[-1] + "\n" == module.ir("grad", wrt="w")


def test_loops_and_llvm_stages_load_no_native_code(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_jit(*args: object, **kwargs: object) -> None:
        raise AssertionError("the stage compiled to machine code")

    monkeypatch.setattr(jit, "compile_module", no_jit)
    module = rv.compile(unique_source("loops"))
    libraries = jit.live_library_count()
    with print_ir.capture("codegen") as generated, print_ir.capture("llvm-opt") as optimised:
        assert module.ir("loops").startswith("kernel @loss(")
    assert generated == [] and optimised == []  # "loops": no LLVM IR at all
    assert module.ir("llvm").startswith("; ModuleID = 'rv_loss'")
    assert jit.live_library_count() <= libraries  # none loaded (an old one may be freed)


def test_cli_emit_accepts_every_stage(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "loss.rv"
    path.write_text(SOURCE)
    for stage in ("grad-raw", "llvm-raw", "interchange"):
        assert main(["emit", str(path), "--stage", stage, "--wrt", "x"]) == 0
        assert capsys.readouterr().out == rv.load(path).ir(stage, wrt=["x"])
    with pytest.raises(SystemExit):
        main(["emit", str(path), "--stage", "raw"])
    assert "grad-raw" in capsys.readouterr().err


def test_unknown_ir_stage_lists_the_stages() -> None:
    with pytest.raises(ValueError, match="grad-raw, grad, loops, mlir, llvm-raw, llvm, asm"):
        rv.compile(SOURCE).ir("optimised")


# ---------------------------------------------------------------- REVERIE_PRINT_IR


def test_print_ir_1_prints_every_pass_of_every_level(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
        private_cache: None) -> None:
    monkeypatch.setenv("REVERIE_PRINT_IR", "1")
    module = rv.compile(unique_source("print all"), name="loss.rv")
    x = np.ones(4, np.float32)
    module.loss.grad()(x, x)
    printed = headers(capsys.readouterr().err)
    assert [name for name, _ in printed] == [
        "parse", "lower", "simplify", "reverse", "simplify", "keep_results", "simplify",
        "widen_storage", "scatter_contract", "contract", "hoist", "fuse", "loop_nests",
        "outer_products", "fuse_loops", "split_wrapping_loops", "split_guarded_loops",
        "interchange", "bf16_products", "tabulate", "dead_code", "codegen", "llvm-opt"]
    assert {level for _, level in printed} == {"AST", "tensor IR", "fusion plan", "loop IR",
                                               "LLVM IR"}
    compile_source(SOURCE, "forward", Request(transform="forward"))
    compile_source(SOURCE, "batch", Request(transform="batch"))
    names = [name for name, _ in headers(capsys.readouterr().err)]
    assert "forward" in names and "batch" in names


def test_print_ir_prints_an_llvm_opt_header_on_a_cache_hit(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
        private_cache: None) -> None:
    llvm_ir = compile_source(unique_source("cache hit"), "codegen")
    jit.compile_module(llvm_ir, name="first")
    monkeypatch.setenv("REVERIE_PRINT_IR", "llvm-opt")
    assert jit.compile_module(llvm_ir, name="second").from_cache
    err = capsys.readouterr().err
    assert "// ---- after llvm-opt (LLVM IR): second (object code from the disk cache)" in err
    assert re.search(r"^define [^\n]*local_unnamed_addr", err, re.M)  # the optimised IR


def test_print_ir_prints_only_the_passes_named(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("REVERIE_PRINT_IR", "reverse, fuse")
    module = rv.compile(unique_source("print some"))
    module.loss.grad()(np.ones(3, np.float32), np.ones(3, np.float32))
    err = capsys.readouterr().err
    assert headers(err) == [("reverse", "tensor IR"), ("fuse", "fusion plan")]
    assert "func @loss_grad(" in err and "// inline" in err


def test_print_ir_warns_about_unknown_passes_and_prints_the_known_ones(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("REVERIE_PRINT_IR", "revrese,parse")
    with pytest.warns(print_ir.PrintIrWarning, match="unknown pass.*revrese.*reverse"):
        rv.compile(SOURCE)
    assert headers(capsys.readouterr().err) == [("parse", "AST")]


def test_without_print_ir_nothing_is_printed_or_formatted(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("REVERIE_PRINT_IR", raising=False)
    rendered = []
    print_ir.show("fuse", "@f", lambda: rendered.append(1) or "text")
    monkeypatch.setenv("REVERIE_PRINT_IR", "0")
    print_ir.show("fuse", "@f", lambda: rendered.append(1) or "text")
    assert rendered == [] and capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="unknown pass 'grad'"):
        with print_ir.capture("grad"):
            pass

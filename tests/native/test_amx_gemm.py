"""bf16 matrix products on AMX tiles (`runtime_library/gemm_amx.py`, chosen by
`backend/matrix_tiles.py`).

Every host runs the kernel: REVERIE_AMX=emulate builds it with LLVM's scalar lowering of the
tile instructions, in a child process (the setting is read once per process), and its
products and the W10 gradient are checked as test_bf16_gemm.py checks the `vdpbf16ps` ones:
against f64 within a few f32 roundings of each row's sum of |products|. The code the
hardware runs is the same IR but for the casts between tiles and vectors; it is compiled
here for an AMX CPU and its instructions checked. Where the host has AMX (and Linux grants
the tiles), every bf16 product of the suite runs on them, and the tests below that need the
instructions run; elsewhere they skip, saying so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest
from native_helpers import code_setting
from storage_helpers import BF16, assert_close_in_ulps
from test_bf16_gemm import (
    LAYOUTS,
    PRODUCT,
    SHAPES,
    W10,
    assert_product,
    operands,
    w10_arguments,
)

import reverie as rv
from reverie.compiler.backend.bf16_products import bf16_products
from reverie.compiler.backend.matrix_tiles import (
    TILE_FEATURES,
    TILES_VARIABLE,
    matrix_tiles,
    requested_tiles,
    tile_refusal,
)

ROOT = Path(__file__).parents[2]
HOST_TILES = matrix_tiles(llvm.get_host_cpu_features())
WHY_NOT = ("this host has no AMX (amx-tile, amx-bf16)" if not all(
    llvm.get_host_cpu_features().get(name) for name in TILE_FEATURES) else
    f"Linux refused this process the tiles ({tile_refusal()})" if tile_refusal() else
    "the tiles are switched off (REVERIE_AMX, or 256-bit vectors)")
needs_the_tiles = pytest.mark.skipif(
    HOST_TILES != "hardware", reason=f"{WHY_NOT}: the emulated kernel's tests check the "
    "same code, but for the casts between tiles and vectors")

CHILD = """
import json, sys
import numpy as np
sys.path.insert(0, "tests/native")
from test_bf16_gemm import LAYOUTS, SHAPES, W10, loop_products, operands, w10_arguments
import reverie as rv
from reverie.runtime.native.remembered import host_description
report = {"host": host_description(), "products": {}}
for layout, (source, arrange) in LAYOUTS.items():
    module = rv.compile(source)
    for shape in SHAPES:
        result = module.f(*arrange(*operands(*shape)))
        report["products"][f"{layout} {shape}"] = np.asarray(result).tolist()
module = rv.compile(W10)
report["w10 products"] = loop_products(module, ["W1", "b1", "W2", "b2"])
gradient = module.w3.grad(["W1", "b1", "W2", "b2"])(*w10_arguments())
report["w10"] = [np.asarray(g).astype(np.float32).tolist() for g in gradient]
print(json.dumps(report))
"""


def run_child(setting: str) -> dict:
    environment = {**os.environ, TILES_VARIABLE: setting}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=600, env=environment, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# "off" on a host with AMX: the vdpbf16ps kernel, which the in-process tests then do not run
SETTINGS = ["emulate", *(["off"] if HOST_TILES == "hardware" else [])]


@pytest.mark.parametrize("setting", SETTINGS)
def test_products_in_a_child(setting: str) -> None:
    """Every shape and layout of test_bf16_gemm (edges of the 32 x 32 micro-tile, K past a
    block and not a multiple of 32, products split over the worker pool) against f64, and
    against this process's products (the host's own path) within twice that."""
    report = run_child(setting)
    assert f"matrix tiles {setting}" in report["host"], report["host"]
    module = rv.compile(PRODUCT)
    for layout, (source, arrange) in LAYOUTS.items():
        here = rv.compile(source) if source != PRODUCT else module
        for shape in SHAPES:
            a, b = operands(*shape)
            got = np.asarray(report["products"][f"{layout} {shape}"], np.float32)
            assert_product(got, a, b)
            assert_product(got, a, b, want=np.asarray(here.f(*arrange(a, b))))
    # the W10 gradient: all five products on bf16 operands, the interpreter's values
    assert len(report["w10 products"]) == 5
    interpreted = rv.compile(W10, backend="interp").w3.grad(["W1", "b1", "W2", "b2"])(
        *w10_arguments())
    for got, want in zip(report["w10"], interpreted, strict=True):
        want = np.asarray(want)
        assert_close_in_ulps(np.asarray(got, np.float32).astype(BF16).reshape(want.shape),
                             want, 1)


CHECK_ASM = """
import re, json
import llvmlite.binding as llvm
from reverie.compiler.runtime_library.gemm_bf16 import helper_module
from reverie.runtime.native.jit import host_target
host_target()  # LLVM initialised as for every module
module = llvm.parse_assembly(helper_module(tiles="hardware"))
module.verify()
machine = llvm.Target.from_default_triple().create_target_machine(
    cpu="sapphirerapids", opt=2, reloc="pic", codemodel="large")
builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=2))
builder.getModulePassManager().run(module, builder)
asm = machine.emit_assembly(module)
start = asm.index("rv_gemm_bf16_serial:")
serial = asm[start:asm.index(".Lfunc_end", start)]
counts = {name: len(re.findall(r"\\b" + name + r"\\b", serial)) for name in
          ("ldtilecfg", "tileloadd", "tdpbf16ps", "tilestored", "tilerelease", "tilezero")}
counts["on the stack"] = len(re.findall(r"tile(?:loadd|stored)[^\\n]*\\(%rsp", serial))
print(json.dumps(counts))
"""


def test_the_hardware_build_is_tile_instructions() -> None:
    """The hardware build compiled for an AMX CPU (Sapphire Rapids; in a child: LLVM aborts
    the process on tile IR it cannot compile): the serial kernel configures the tiles once
    (and once more after the one `memset` call left, in B's packing: a call may change the
    configuration), keeps the accumulators in tile registers across the loop over K (4
    `tdpbf16ps` per 32 terms; 4 loads and 4 stores of C per copy of the loop, none of a tile
    spilled to the stack) and releases the tiles on return."""
    done = subprocess.run([sys.executable, "-c", CHECK_ASM], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert 1 <= counts["ldtilecfg"] <= 2 and counts["tilerelease"] == 1, counts
    assert counts["tdpbf16ps"] % 4 == 0 and counts["tdpbf16ps"] >= 4, counts
    assert counts["tilestored"] % 4 == 0 and counts["tilestored"] >= 4, counts
    assert counts["tileloadd"] == counts["tilestored"] + counts["tdpbf16ps"], counts
    assert counts["tilezero"] == 0 and counts["on the stack"] == 0, counts


def test_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """REVERIE_AMX takes auto, off and emulate; "auto" needs all of AMX-TILE, AMX-BF16 and
    AVX512_BF16 (and the tiles granted); anything else is refused, naming the variable."""
    amx = {"amx-tile": True, "amx-bf16": True, "avx512bf16": True, "avx512f": True}
    with code_setting(monkeypatch, TILES_VARIABLE, requested_tiles) as use:
        for setting in ("off", "emulate"):
            use(setting)
            assert matrix_tiles(amx) == setting and matrix_tiles({}) == setting
        use("auto")
        assert matrix_tiles({**amx, "amx-bf16": False}) == "off"
        assert matrix_tiles({**amx, "avx512bf16": False}) == "off"
        use("on")
        with pytest.raises(ValueError, match=TILES_VARIABLE):
            requested_tiles()


@needs_the_tiles
def test_the_host_runs_the_tiles() -> None:
    """On an AMX host the suite's bf16 products run on tiles: the helper's code holds them,
    and a product past a block of K is the f64 one within f32 roundings."""
    from reverie.compiler.runtime_library.gemm_bf16 import helper_module
    from reverie.runtime.native.helpers import HELPER_PIPELINE
    from reverie.runtime.native.jit import LlvmModule

    asm = LlvmModule(helper_module(), name="rv_gemm_bf16", pipeline=HELPER_PIPELINE).asm
    assert re.search(r"tdpbf16ps\s+%tmm", asm) and "vdpbf16ps" not in asm
    a, b = operands(100, 300, 70)
    assert_product(rv.compile(PRODUCT).f(a, b), a, b)


def test_a_kernel_with_wrong_products_is_refused() -> None:
    """Loading the bf16 product kernel checks it on one small product with exact sums: a
    kernel computing nothing is refused with an error naming the way out (REVERIE_AMX=off);
    the host's kernel, where it has one, passes (it is checked as every process loads it)."""
    from reverie.compiler.call_boundary.abi import BF16_GEMM_HELPER, HELPERS
    from reverie.compiler.runtime_library.gemm_bf16_blocking import PACK_PER_TASK
    from reverie.runtime.native.helpers import (
        BF16_CHECK_SCRATCH,
        HELPER_PIPELINE,
        check_bf16_products,
        load_helpers,
    )
    from reverie.runtime.native.jit import LlvmModule

    assert PACK_PER_TASK <= BF16_CHECK_SCRATCH
    arguments = ", ".join(["i64"] * 4 + ["ptr", "i64", "i64", "i64"] * 3 + ["ptr", "i64", "i64"])
    idle = LlvmModule(f"define void @idle({arguments}) {{ ret void }}", name="idle",
                      pipeline=HELPER_PIPELINE).load()
    with pytest.raises(RuntimeError, match="REVERIE_AMX=off"):
        check_bf16_products(idle.address("idle"))
    if bf16_products(llvm.get_host_cpu_features()):  # (none at 256 bits, or on AVX2)
        table = load_helpers(frozenset({BF16_GEMM_HELPER}))
        check_bf16_products(int(table[HELPERS.index(BF16_GEMM_HELPER)]))

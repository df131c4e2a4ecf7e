"""The ladder's stage `mlir-to-llvm`: MLIR text becomes LLVM IR through the upstream tools.

`mlir_to_llvm_ir(text)` runs `mlir-opt` with `MLIR_PIPELINE` (to the LLVM dialect; the
transcendentals become libm calls, resolved in the running process; `arith-expand` with
`include-bf16` writes bf16 conversions as integer operations, since LLVM's `bfloat`
truncation needs AVX512_BF16 or the libcall `__truncsfbf2`: LLVM still calls that one for
`bfloat` values it carries between blocks, and `libcalls.py` defines it) and then
`mlir-translate --mlir-to-llvmir`, and keeps the result in the disk cache
(`runtime/native/cache.py`), so the tools run once per text. The ladder
(`compiler/pipeline.py`) calls it; `runtime/native/mlir_backend.py` climbs that ladder and
runs the code. `mlir_tools()` says whether the tools are installed:

    if mlir_tools() is not None:
        llvm_ir = mlir_to_llvm_ir(export.text)    # MlirToolError if a tool rejects it
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
from collections.abc import Sequence

from reverie.runtime.native import cache

TOOL_VERSIONS = ("19", "22")
TOOL_TIMEOUT_S = 300
MLIR_PIPELINE = (
    "--convert-linalg-to-loops",
    "--convert-math-to-libm",
    "--convert-scf-to-cf",
    "--arith-expand=include-bf16=true",
    "--expand-strided-metadata",
    "--lower-affine",
    "--convert-to-llvm",
    "--reconcile-unrealized-casts",
)


class MlirToolError(RuntimeError):
    """The MLIR tools are missing, or rejected the exported text."""


@functools.cache
def mlir_tools() -> tuple[str, str] | None:
    """Paths of (`mlir-opt`, `mlir-translate`) of one installed version, or None."""
    for version in TOOL_VERSIONS:
        opt = shutil.which(f"mlir-opt-{version}")
        translate = shutil.which(f"mlir-translate-{version}")
        if opt and translate:
            return opt, translate
    return None


def _run(command: Sequence[str], text: str, what: str) -> str:
    """The standard output of `command` fed `text` (MlirToolError if it fails or hangs)."""
    try:
        result = subprocess.run(list(command), input=text, capture_output=True, text=True,
                                check=False, timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired as timeout:
        raise MlirToolError(f"{what} did not finish in {TOOL_TIMEOUT_S} s") from timeout
    if result.returncode != 0:
        raise MlirToolError(f"{what} failed (exit {result.returncode}):\n{result.stderr}")
    return result.stdout


def mlir_to_llvm_ir(mlir_text: str) -> str:
    """Lower MLIR text to LLVM IR with `mlir-opt` and `mlir-translate` (MlirToolError if
    either fails)."""
    tools = mlir_tools()
    if tools is None:
        raise MlirToolError("backend='mlir' needs mlir-opt-19 and mlir-translate-19 "
                            "(Debian/Ubuntu: apt-get install mlir-19-tools)")
    opt, translate = tools
    key = "mlir-llvm\0" + "\0".join((opt, *MLIR_PIPELINE)) + "\0" + mlir_text
    key = hashlib.sha256(key.encode()).hexdigest()
    cached = cache.load(key)
    if cached is not None:
        return cached.decode()
    lowered = _run([opt, *MLIR_PIPELINE], mlir_text, "mlir-opt")
    llvm_ir = _run([translate, "--mlir-to-llvmir"], lowered, "mlir-translate")
    cache.store(key, llvm_ir.encode())
    return llvm_ir


"""Conversions of bf16/f16 in native code (`compiler/backend/storage_conversions.py`), bit for
bit against ml_dtypes' and NumPy's, on both paths: the host's instructions (`vcvtneps2bf16`
with AVX512_BF16, F16C's `vcvtps2ph`) where it has them, and the integer emulation
(`REVERIE_STORAGE_CONVERSION=emulate`, and AVX2 code: `REVERIE_VECTOR_BITS=256`, whose
target has no AVX512_BF16). Every float32 class is covered: normals at every exponent,
subnormals (which `vcvtneps2bf16` flushes: its lanes take the integer rounding), ties,
overflow, infinities and NaNs (bf16: ±0x7FC0 as ml_dtypes; f16: NumPy's payload, but a
signalling NaN comes back quiet, as F16C gives it).

The emulation and AVX2 runs are child processes (the settings are read once per process)
with disk caches of their own, so nothing compiled for the other path is loaded; the
emulation's also runs every op family of `test_mixed_precision_native.py` against the
interpreter.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np
import pytest
from native_helpers import code_setting

import reverie as rv
from reverie.compiler.backend.storage_hardware import (
    STORAGE_CONVERSION_VARIABLE,
    bf16_hardware,
    f16_hardware,
    requested_conversion,
)
from reverie.compiler.backend.vector_width import vector_bits

BF16 = np.dtype(ml_dtypes.bfloat16)
TIMEOUT_S = 300
SOURCE = """
fn from_f32(x: f32[N]) -> (bf16[N], f16[N]) { return (bf16(x), f16(x)); }
fn from_f64(x: f64[N]) -> (bf16[N], f16[N]) { return (bf16(x), f16(x)); }
fn from_i64(x: i64[N]) -> (bf16[N], f16[N]) { return (bf16(x), f16(x)); }
fn from_i32(x: i32[N]) -> (bf16[N], f16[N]) { return (bf16(x), f16(x)); }
fn from_bool(x: bool[N]) -> (bf16[N], f16[N]) { return (bf16(x), f16(x)); }
fn from_bf16(x: bf16[N]) -> (f32[N], f64[N], f16[N], i32[N], i64[N], bool[N]) {
    return (f32(x), f64(x), f16(x), i32(x), i64(x), x != 0.0); }
fn from_f16(x: f16[N]) -> (f32[N], f64[N], bf16[N], i32[N], i64[N], bool[N]) {
    return (f32(x), f64(x), bf16(x), i32(x), i64(x), x != 0.0); }
"""
F32_SPECIALS = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FC12345,
                0x7F812345, 0x7F7FFFFF, 0x00800000, 0x007FFFFF, 0x807FFFFF, 0x00000001,
                0x00008000, 0x00018000, 0x3F808000, 0x3F818000, 0x3F807FFF, 0x477FEFFF,
                0x477FF000, 0x477FF001, 0x33000000, 0x33000001, 0x387FC000, 0x38800000]
F64_SPECIALS = [1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40), 1 + 2**-8, 1 + 2**-11 + 2**-40,
                1 + 2**-11, 1e300, -1e300, 3.4028235e38 * (1 + 2**-30), 2**-149 * 0.75,
                2**-149 * 0.25, 2**-149 * 0.5, 65520.0, 65520.0 - 2**-30, 2**-25 * 1.5,
                float("inf"), float("nan"), -0.0]
I64_SPECIALS = [2**60 + 2**52 + 1, 2**60 + 2**52, -(2**60 + 2**52 + 1), 2**63 - 1, -2**63,
                65519, 65520, -65520, 2**24 + 2**16 + 1, 2**53 + 1, 0, -1]


def f32_sample(seed: int = 0) -> np.ndarray:
    """float32 values of every class: random bits, the f16 range, subnormals, specials."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, 60000, dtype=np.uint64).astype(np.uint32)
    exponents = rng.integers(0x60, 0x90, 20000).astype(np.uint32) << 23
    bits[:20000] = (bits[:20000] & 0x807FFFFF) | exponents  # around the f16 range
    bits[20000:25000] &= 0x807FFFFF  # subnormal
    bits[25000:30000] = (bits[25000:30000] & 0xFFFF0000) | 0x8000  # bf16 ties
    return np.concatenate([bits, np.array(F32_SPECIALS, np.uint32)]).view(np.float32)


def samples() -> dict[str, np.ndarray]:
    """The inputs of each conversion kernel."""
    x = f32_sample()
    rng = np.random.default_rng(1)
    n = rng.integers(-2**63, 2**63 - 1, 20000, dtype=np.int64)
    n[:5000] >>= 40
    n = np.concatenate([n, np.array(I64_SPECIALS, np.int64)])
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64) * (1 + rng.standard_normal(x.size) * 2.0**-30)
        return {"from_f32": x, "from_f64": np.concatenate([wide, F64_SPECIALS]),
                "from_i64": n, "from_i32": n.astype(np.int32),
                "from_bool": np.array([True, False, True]),
                "from_bf16": x.astype(BF16), "from_f16": x.astype(np.float16)}


def mismatches(module: rv.Module) -> dict[str, list[int]]:
    """Per kernel, per result, how many elements differ from NumPy's/ml_dtypes' conversion
    in their bits (NaNs: f16 NaNs only in being NaN, the quiet bit and payload aside)."""
    report = {}
    for name, x in samples().items():
        got = module[name](x)
        with np.errstate(all="ignore"):
            wide = x.astype(np.float32) if x.dtype.itemsize == 2 else x
            want = ([x.astype(BF16), x.astype(np.float16)] if x.dtype.itemsize != 2 else
                    [wide, wide.astype(np.float64), wide.astype(np.float16 if x.dtype == BF16
                                                                else BF16),
                     wide.astype(np.int32), wide.astype(np.int64), wide != 0])
        half = x.dtype == np.float16
        report[name] = [count_differences(g, w, half or w.dtype == np.float16)
                        for g, w in zip(got, want, strict=True)]
    return report


def count_differences(got: np.ndarray, want: np.ndarray, half: bool) -> int:
    """Elements of `got` whose bits differ from `want`'s; NaNs only in being NaN where
    an f16 is involved (`half`: F16C quietens a signalling NaN either way)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f" or want.dtype == BF16:
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
        differ = got.view(bits) != want.view(bits)
        if half:
            with np.errstate(invalid="ignore"):
                nan = np.isnan(want.astype(np.float64))
                differ = np.where(nan, ~np.isnan(got.astype(np.float64)), differ)
        return int(differ.sum())
    return int((got != want).sum())


@pytest.fixture(scope="module")
def module() -> rv.Module:
    return rv.compile(SOURCE)


def test_every_conversion_is_numpys_bit_for_bit(module: rv.Module) -> None:
    report = mismatches(module)
    assert all(count == 0 for counts in report.values() for count in counts), report


def test_bf16_nans_are_ml_dtypes_canonical_and_f16_nans_keep_numpys_payload(
        module: rv.Module) -> None:
    nans = np.array([0x7FC12345, 0xFFC12345, 0x7F812345, 0xFFFFFFFF], np.uint32)
    bf16, f16 = module.from_f32(nans.view(np.float32))
    assert [hex(b) for b in bf16.view(np.uint16)] == ["0x7fc0", "0xffc0", "0x7fc0", "0xffc0"]
    assert [hex(b) for b in f16.view(np.uint16)] == ["0x7e09", "0xfe09", "0x7e09", "0xffff"]


def host_features() -> dict[str, bool]:
    llvm.initialize_native_target()
    return dict(llvm.get_host_cpu_features())


def instructions(module: rv.Module, name: str) -> set[str]:
    return set(re.findall(r"^\s+(v?cvt\w+)", module.ir("asm", name), re.M))


def test_the_hosts_instructions_where_it_has_them(module: rv.Module) -> None:
    features = host_features()
    used = instructions(module, "from_f32")
    assert ("vcvtneps2bf16" in used) == bf16_hardware(features)
    assert ("vcvtps2ph" in used) == f16_hardware(features)
    if bf16_hardware(features):  # vectorised: 16 (or 8) lanes at a time, one vfpclassps
        asm = module.ir("asm", "from_f32")  # sending a vector with a NaN or subnormal aside
        assert re.search(r"vcvtneps2bf16\s+%[yz]mm", asm)
        assert re.search(r"vfpclassps\s+\$161, %[yz]mm", asm)
    if not features.get("avx512bf16"):
        pytest.skip("this host has no AVX512_BF16: only the emulation ran (tested here too)")


def test_only_loops_that_vectorise_call_the_vector_versions() -> None:
    """A contiguous loop rounds through `rv.bf16_bits`, whose vector versions branch once
    per vector; a strided one (a transpose) stays scalar in LLVM, where a call per
    element would cost more than the inline rounding it gets instead (W10 took 1.4× as
    long with the calls), with the same bits."""
    if not bf16_hardware(host_features()):
        pytest.skip("this host has no AVX512_BF16 at 512 bits: all rounding is inline")
    module = rv.compile("fn t(x: f32[N, M]) -> bf16[M, N] { let y[j, i] = bf16(x[i, j]);"
                        " return y; }\nfn c(x: f32[N]) -> bf16[N] { return bf16(x); }")
    assert "bf16_bits" in module.ir("asm", "c")
    assert "bf16_bits" not in module.ir("asm", "t")
    x = f32_sample(3)[:60000].reshape(200, 300)
    np.testing.assert_array_equal(np.asarray(module.t(x)).view(np.uint16),
                                  x.T.astype(BF16).view(np.uint16))


def test_the_setting_takes_two_values(monkeypatch: pytest.MonkeyPatch) -> None:
    host = {"avx512f": True, "avx512bf16": True, "f16c": True, "avx": True}
    with code_setting(monkeypatch, STORAGE_CONVERSION_VARIABLE, requested_conversion) as use:
        use("emulate")
        assert not bf16_hardware(host) and not f16_hardware(host)
        use("hardware")
        # (at 512-bit vectors: a run imitating an AVX2 host asks for 256 and gets none)
        assert bf16_hardware(host) == (vector_bits(host) >= 512) and f16_hardware(host)
        assert not bf16_hardware({**host, "avx512bf16": False})
        use("fast")
        with pytest.raises(ValueError, match=STORAGE_CONVERSION_VARIABLE):
            requested_conversion()


CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np
import reverie as rv
from test_storage_conversions_native import SOURCE, instructions, mismatches

module = rv.compile(SOURCE)
families = []
if {families!r}:  # every op family against the interpreter, as test_mixed_precision_native
    import test_mixed_precision_native as ops
    for name in ops.CASES:
        for dtype in ops.STORAGE:
            ops.test_native_equals_the_interpreter(name, dtype)
            families.append(name + " " + dtype)
print(json.dumps({{"mismatches": mismatches(module),
                   "instructions": sorted(instructions(module, "from_f32")),
                   "zmm": "zmm" in module.ir("asm", "from_f32"), "families": families}}))
"""


def run_child(tmp_path: Path, settings: dict[str, str], families: bool) -> dict:
    """CHILD's report in a process with `settings` in its environment (with `families`,
    after checking every op family of test_mixed_precision_native.py there)."""
    environment = {**os.environ, **settings, "REVERIE_CACHE_DIR": str(tmp_path)}
    code = CHILD.format(tests=str(Path(__file__).parent), families=families)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=environment, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("settings", [{STORAGE_CONVERSION_VARIABLE: "emulate"},
                                      {"REVERIE_VECTOR_BITS": "256"}],
                         ids=["emulated", "avx2"])
def test_the_emulation_is_numpys_bit_for_bit(tmp_path: Path, settings: dict[str, str]) -> None:
    emulated = STORAGE_CONVERSION_VARIABLE in settings
    report = run_child(tmp_path, settings, families=emulated)
    counts = report["mismatches"]
    assert all(count == 0 for kernel in counts.values() for count in kernel), counts
    assert "vcvtneps2bf16" not in report["instructions"]  # (nor a libcall: it would not link)
    if emulated:
        assert not {"vcvtps2ph", "vcvtph2ps"} & set(report["instructions"])
        assert len(report["families"]) == 24
        assert report["zmm"] == (vector_bits(host_features()) >= 512)
    else:
        assert not report["zmm"]

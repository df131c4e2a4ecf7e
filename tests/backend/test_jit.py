"""The JIT (runtime/native/jit.py) and its disk cache (runtime/native/cache.py)."""

from __future__ import annotations

import ctypes
import struct
import threading
from pathlib import Path

import pytest

from reverie.runtime.native import cache, jit

BINARY = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double)


def affine_ir(scale: float) -> str:
    """A module exporting `affine(x, y) = scale * x + y` next to an internal helper."""
    return f"""
define internal double @helper(double %x) {{
  %r = fmul double %x, {scale:.17e}
  ret double %r
}}

define double @affine(double %x, double %y) {{
  %s = call double @helper(double %x)
  %r = fadd double %s, %y
  ret double %r
}}
"""


def call_affine(module: jit.JitModule, x: float, y: float) -> float:
    """Call the compiled `affine`."""
    return BINARY(module.address("affine"))(x, y)


def cache_files(root: Path) -> list[Path]:
    """The cache entries under `root`."""
    return sorted(root.rglob("*.bin"))


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, enabled cache directory for one test."""
    monkeypatch.setenv("REVERIE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("REVERIE_CACHE", raising=False)
    return tmp_path / "cache"


def test_compile_and_call(cache_root: Path) -> None:
    module = jit.compile_module(affine_ir(3.0), name="affine")
    assert call_affine(module, 2.0, 0.5) == 6.5
    assert module.symbols == ("affine",)
    assert "define double @affine" in module.llvm_ir
    assert "affine" in module.asm


def test_unknown_symbol_is_a_key_error(cache_root: Path) -> None:
    module = jit.compile_module(affine_ir(1.0), name="affine")
    with pytest.raises(KeyError, match="helper"):
        module.address("helper")


def test_second_compile_loads_object_code_from_disk(cache_root: Path) -> None:
    first = jit.compile_module(affine_ir(5.0), name="affine")
    assert not first.from_cache
    assert len(cache_files(cache_root)) == 1
    second = jit.compile_module(affine_ir(5.0), name="affine")
    assert second.from_cache
    assert call_affine(second, 1.0, 1.0) == 6.0
    assert "fmul double" in second.llvm_ir
    other = jit.compile_module(affine_ir(7.0), name="affine")
    assert not other.from_cache
    assert len(cache_files(cache_root)) == 2


@pytest.mark.parametrize("damage", [b"", b"RVC1 not a checksum", b"\x7fELF" + b"\0" * 100])
def test_damaged_cache_entry_is_rebuilt(cache_root: Path, damage: bytes) -> None:
    jit.compile_module(affine_ir(2.0), name="affine")
    (entry,) = cache_files(cache_root)
    entry.write_bytes(damage)
    rebuilt = jit.compile_module(affine_ir(2.0), name="affine")
    assert not rebuilt.from_cache
    assert call_affine(rebuilt, 3.0, 1.0) == 7.0
    assert jit.compile_module(affine_ir(2.0), name="affine").from_cache


def test_each_pipeline_has_its_own_cache_entry(cache_root: Path) -> None:
    ir_text = affine_ir(3.5)
    pipelines = [jit.KERNEL_PIPELINE, jit.Pipeline(speed_level=1, slp_vectorization=False), None]
    assert len({jit.object_cache_key(ir_text, pipeline) for pipeline in pipelines}) == 3
    for count, pipeline in enumerate(pipelines, start=1):
        module = jit.compile_module(ir_text, name="affine", pipeline=pipeline)
        assert not module.from_cache
        assert module.pipeline == pipeline
        assert call_affine(module, 2.0, 1.0) == 8.0
        assert len(cache_files(cache_root)) == count
    reloaded = jit.compile_module(ir_text, name="affine", pipeline=None)
    assert reloaded.from_cache
    assert "call double @helper" in reloaded.llvm_ir  # unoptimised: nothing inlined


def test_a_pipeline_is_an_immutable_value() -> None:
    pipeline = jit.Pipeline(speed_level=2, slp_vectorization=False)
    assert pipeline == jit.Pipeline(2, False) and hash(pipeline) == hash(jit.Pipeline(2, False))
    assert pipeline != jit.KERNEL_PIPELINE and pipeline != (2, False, False, True)
    assert repr(pipeline) == ("Pipeline(speed_level=2, slp_vectorization=False, "
                              "loop_unrolling=False, strength_reduction=True)")
    with pytest.raises(AttributeError, match="immutable"):
        pipeline.speed_level = 3


UNLOADABLE_OBJECTS = {
    "not ELF": lambda object_code: b"not an object file",
    "host ELF header, truncated": lambda object_code: object_code[:300],
}


@pytest.mark.parametrize("damage", sorted(UNLOADABLE_OBJECTS))
def test_valid_entry_with_unloadable_object_code_is_rebuilt(cache_root: Path, damage: str) -> None:
    ir_text = affine_ir(4.0)
    key = jit.object_cache_key(ir_text)
    jit.compile_module(ir_text, name="affine")
    genuine = cache.load(key)
    cache.store(key, UNLOADABLE_OBJECTS[damage](genuine))
    module = jit.compile_module(ir_text, name="affine")
    assert not module.from_cache
    assert call_affine(module, 1.0, 0.0) == 4.0
    assert cache.load(key) == genuine


def test_disabled_cache_writes_nothing(cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_CACHE", "0")
    for _ in range(2):
        module = jit.compile_module(affine_ir(6.0), name="affine")
        assert not module.from_cache
        assert call_affine(module, 1.0, 1.0) == 7.0
    assert not cache_root.exists()


def test_compiling_from_threads(cache_root: Path) -> None:
    results: dict[int, float] = {}

    def work(k: int) -> None:
        module = jit.compile_module(affine_ir(float(k)), name=f"affine{k}")
        results[k] = call_affine(module, 2.0, 1.0)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {k: 2.0 * k + 1.0 for k in range(4)}


def test_cache_key_depends_on_the_ir_text() -> None:
    assert jit.object_cache_key(affine_ir(1.0)) == jit.object_cache_key(affine_ir(1.0))
    assert jit.object_cache_key(affine_ir(1.0)) != jit.object_cache_key(affine_ir(2.0))


def test_exported_symbols_skip_local_definitions() -> None:
    text = affine_ir(1.0) + 'define private void @"p"() {\n  ret void\n}\n'
    text += 'define dso_local void @"quoted.name"() {\n  ret void\n}\n'
    assert jit.exported_symbols(text) == ("affine", "quoted.name")


def test_cache_store_and_load(cache_root: Path) -> None:
    assert cache.load("key") is None
    assert cache.store("key", b"\x00payload")
    assert cache.load("key") == b"\x00payload"
    assert cache.load("other key") is None
    assert not list(cache_root.rglob(".tmp-*"))


def test_cache_store_survives_an_unusable_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("REVERIE_CACHE_DIR", str(blocker))
    with pytest.warns(cache.CacheBypassWarning, match="not a usable directory"):
        assert not cache.store("key", b"data")
    assert cache.load("key") is None


def test_cache_dir_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("REVERIE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "reverie"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == Path.home() / ".cache" / "reverie"
    monkeypatch.setenv("REVERIE_CACHE", "0")
    assert not cache.cache_enabled()


def test_llvm_rejection_is_an_internal_compiler_error_without_llvm_text(
        cache_root: Path) -> None:
    duplicate = ("define i32 @f() {\nentry:\n  %v = add i32 1, 2\n  %v = add i32 3, 4\n"
                 "  ret i32 %v\n}\n")
    with pytest.raises(jit.InternalCompilerError) as caught:
        jit.compile_module(duplicate, name="broken")
    message = str(caught.value)
    assert "'broken'" in message and "bug in Reverie" in message
    assert "multiple definition" not in message
    assert "multiple definition" in caught.value.llvm_message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def relocation_types(object_code: bytes) -> set[int]:
    """The x86-64 relocation types of an ELF64 relocatable object (its SHT_RELA sections)."""
    section_offset, = struct.unpack_from("<Q", object_code, 0x28)
    entry_size, count = struct.unpack_from("<HH", object_code, 0x3A)
    types = set()
    for index in range(count):
        header = section_offset + index * entry_size
        kind, = struct.unpack_from("<I", object_code, header + 4)
        offset, size, _, _, _, rela_size = struct.unpack_from("<QQIIQQ", object_code,
                                                              header + 0x18)
        if kind == 4:  # SHT_RELA: r_offset, r_info (type in the low 32 bits), r_addend
            types |= {struct.unpack_from("<Q", object_code, offset + at + 8)[0] & 0xFFFFFFFF
                      for at in range(0, size, rela_size)}
    return types


def test_object_code_reaches_its_sections_from_anywhere(cache_root: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The JIT (RuntimeDyld) maps a module's code, constants and data in separate blocks,
    which may lie more than 2 GB apart in a process with large mappings (the suite once
    aborted on `isInt<32>(RealOffset)`): objects use the large code model, so no reference
    is a 32-bit PC-relative one (R_X86_64_PC32 = 2, PLT32 = 4, GOTPCREL = 9, 32 = 10,
    32S = 11, GOTPCRELX = 41, REX_GOTPCRELX = 42)."""
    objects = []
    link = jit._link
    monkeypatch.setattr(jit, "_link", lambda name, code, symbols:
                        objects.append(code) or link(name, code, symbols))
    module = jit.compile_module(VECTOR_CONSTANTS_IR, name="constants")
    assert ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(module.address("scaled"))(2.0) \
        == 2.0 * 1.5 + 2.0 * 2.5
    assert objects and relocation_types(objects[0])
    assert not relocation_types(objects[0]) & {2, 4, 9, 10, 11, 41, 42}


VECTOR_CONSTANTS_IR = """
@bias = internal global double 0.0

define double @scaled(double %x) {
  %v = insertelement <2 x double> undef, double %x, i32 0
  %w = shufflevector <2 x double> %v, <2 x double> undef, <2 x i32> zeroinitializer
  %m = fmul <2 x double> %w, <double 1.5, double 2.5>
  %a = extractelement <2 x double> %m, i32 0
  %b = extractelement <2 x double> %m, i32 1
  %s = fadd double %a, %b
  %bias = load volatile double, ptr @bias
  %r = fadd double %s, %bias
  ret double %r
}
"""

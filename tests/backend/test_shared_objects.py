"""Remembered modules as shared objects (runtime/native/shared_objects.py,
runtime/native/remembered.py).

A module compiled under a remembered key is linked into a shared object on the background
thread; a later load under that key opens it with `dlopen` instead of linking object code
into LLVM's JIT (these tests need a C compiler driver on PATH). Only bytes the disk cache
verified are ever opened: a damaged, foreign or unloadable shared object falls back to the
object code, with the same results.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from reverie.runtime.native import cache, jit, remembered, shared_objects

BINARY = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double)
IR = """
define double @affine(double %x, double %y) {
  %s = fmul double %x, 3.0
  %r = fadd double %s, %y
  ret double %r
}
"""
KEY = "test remembered affine"


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, enabled cache directory for one test."""
    monkeypatch.setenv("REVERIE_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("REVERIE_CACHE", "REVERIE_SHARED_OBJECTS", "REVERIE_PIPELINE_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cache"


def counting_ir() -> tuple[Callable[[], str], list[int]]:
    """A `make_ir` for IR, and the list it appends to on each call."""
    calls: list[int] = []

    def make_ir() -> str:
        calls.append(1)
        return IR

    return make_ir, calls


def load_again() -> tuple[jit.JitModule, list[int]]:
    """The module loaded under KEY as a new process would (no live module shared)."""
    make_ir, calls = counting_ir()
    return remembered._remembered(KEY, make_ir, "affine", jit.KERNEL_PIPELINE), calls


def compile_and_link() -> bytes:
    """Compile IR under KEY, wait for its shared object; the image remembered with it."""
    make_ir, _ = counting_ir()
    first = remembered._remembered(KEY, make_ir, "affine", jit.KERNEL_PIPELINE)
    assert BINARY(first.address("affine"))(2.0, 0.5) == 6.5
    shared_objects.wait_for_links()
    return remembered_image()


def remembered_image() -> bytes:
    """The shared object's image in the note under KEY (empty: none linked)."""
    note = remembered.read_note(KEY)
    assert note is not None and note[0] == jit.object_cache_key(IR) and note[1] == ("affine",)
    return note[2]


def store_image(image: bytes) -> None:
    """Remember `image` as the shared object of the module under KEY (this user's entry)."""
    cache.store(KEY, remembered._note(jit.object_cache_key(IR), ("affine",), image))


def is_shared_object(module: jit.JitModule) -> bool:
    return isinstance(module._library, shared_objects.SharedLibrary)


def test_a_second_load_opens_the_shared_object(cache_root: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    image = compile_and_link()
    assert image[:4] == b"\x7fELF"
    assert int.from_bytes(image[16:18], "little") == 3  # ET_DYN: a shared object
    reads: list[str] = []
    monkeypatch.setattr(cache, "load", lambda key, load=cache.load, **options: (
        reads.append(key), load(key, **options))[1])
    module, calls = load_again()
    assert reads == [KEY]  # the note and the shared object: one entry, one read
    assert is_shared_object(module) and module.from_cache
    assert BINARY(module.address("affine"))(2.0, 0.5) == 6.5
    assert calls == []  # the IR is made only when asked for
    assert "define double @affine" in module.source_ir and calls == [1]


@pytest.mark.parametrize("damage", ["flip", "foreign", "not an object", "other symbols"])
def test_an_unverified_or_unloadable_shared_object_is_never_opened(
        cache_root: Path, damage: str) -> None:
    compile_and_link()
    path = cache.entry_path(KEY)
    if damage == "flip":  # changed on disk: its tag no longer verifies
        data = bytearray(path.read_bytes())
        data[-100] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "foreign":  # another key's (authentic) entry copied onto its path
        cache.store("other", b"\x7fELF" + bytes(100))
        os.replace(cache.entry_path("other"), path)
    elif damage == "not an object":  # an entry this user wrote that dlopen rejects
        store_image(b"\x7fELF not really")
    else:  # a loadable shared object lacking the module's functions
        other_ir = IR.replace("@affine", "@other")
        jit.compile_module(other_ir, name="other")
        other = shared_objects.link(cache.load(jit.object_cache_key(other_ir)))
        assert other is not None
        store_image(other)
    module, _ = load_again()
    assert not is_shared_object(module)
    assert BINARY(module.address("affine"))(2.0, 0.5) == 6.5
    shared_objects.wait_for_links()  # linked again for the next process
    assert is_shared_object(load_again()[0])


def test_shared_objects_can_be_turned_off(cache_root: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_SHARED_OBJECTS", "0")
    assert compile_and_link() == b""
    module, _ = load_again()
    assert not is_shared_object(module)
    assert BINARY(module.address("affine"))(2.0, 0.5) == 6.5


def test_a_symbol_the_shared_object_lacks_is_an_attribute_error(cache_root: Path) -> None:
    library = shared_objects.SharedLibrary(compile_and_link())
    assert BINARY(library["affine"])(2.0, 0.5) == 6.5
    with pytest.raises(AttributeError, match="defines no 'missing'"):
        library["missing"]


def test_linking_failure_is_not_an_error() -> None:
    assert shared_objects.link(b"not object code") is None


def test_host_description_is_remembered_without_llvm(cache_root: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    expected = remembered.host_description()
    remembered.host_description.cache_clear()
    try:
        expected_fresh = remembered.host_description()  # computed and stored under the CPU identity
        remembered.host_description.cache_clear()
        monkeypatch.setattr(jit, "host_target", lambda: pytest.fail("asked LLVM again"))
        assert remembered.host_description() == expected_fresh == expected
    finally:
        remembered.host_description.cache_clear()


def test_another_llvmlite_is_asked_again(cache_root: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import llvmlite

    asked = []
    real_host_target = jit.host_target
    monkeypatch.setattr(jit, "host_target", lambda: asked.append(1) or real_host_target())
    identity = remembered._llvmlite_identity()
    assert identity and "libllvmlite" in identity  # the installed LLVM library counts
    remembered.host_description.cache_clear()
    try:
        first = remembered.host_description()
        assert f"llvmlite {llvmlite.__version__} LLVM " in first  # what keys every artifact
        remembered.host_description.cache_clear()
        assert remembered.host_description() == first and len(asked) == 1
        remembered.host_description.cache_clear()
        monkeypatch.setattr(remembered, "_llvmlite_identity", lambda: f"{identity} upgraded")
        assert remembered.host_description() == first and len(asked) == 2
    finally:
        remembered.host_description.cache_clear()


def test_the_linking_queue_drops_jobs_beyond_its_bound() -> None:
    started, release, ran = threading.Event(), threading.Event(), []

    def busy() -> None:
        started.set()
        release.wait()

    shared_objects.link_later(busy)
    assert started.wait(10)  # the worker is busy with this one
    for number in range(shared_objects.MAX_PENDING_LINKS + 3):
        shared_objects.link_later(lambda number=number: ran.append(number))
    release.set()
    shared_objects.wait_for_links()
    assert ran == list(range(shared_objects.MAX_PENDING_LINKS))


FORK_WHILE_THE_LOCK_IS_HELD = """
import json, os, threading
from reverie.runtime.native import shared_objects
held, release = threading.Event(), threading.Event()

def hold_the_queue() -> None:
    with shared_objects._jobs_lock:  # as the linking thread does, taking its next job
        held.set()
        release.wait()

threading.Thread(target=hold_the_queue).start()
held.wait()
pid = os.fork()
if pid == 0:
    ran = []
    shared_objects.link_later(lambda: ran.append("linked"))
    shared_objects.wait_for_links()
    os._exit(0 if ran == ["linked"] else 1)
release.set()
print(json.dumps(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])))
"""


def test_a_child_forked_while_the_queue_is_held_links_its_own_modules() -> None:
    # the child of a fork gets a copy of the lock, held by a thread it does not have
    result = subprocess.run([sys.executable, "-c", FORK_WHILE_THE_LOCK_IS_HELD], timeout=60,
                            capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == 0

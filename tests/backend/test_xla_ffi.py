"""The XLA FFI handler (`call_boundary/xla_ffi.py`) called directly with hand-built call frames:
it answers XLA's metadata query with its API version and ignores stages other than execute;
each error site's message becomes a printf format. (Calls through XLA are in
tests/api/test_interop_jax_transforms.py.)"""

from __future__ import annotations

import ctypes

import pytest

import reverie as rv
from reverie.compiler.call_boundary.xla_ffi import (
    FFI_API_VERSION,
    error_format,
    handler_module,
    handler_symbol,
)
from reverie.compiler.loops.ir import ErrorSite
from reverie.runtime.native.jit import compile_module


class Extension(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int),
                ("next", ctypes.c_void_p), ("metadata", ctypes.c_void_p)]


class Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version_size", ctypes.c_size_t),
                ("version_extension", ctypes.c_void_p), ("major", ctypes.c_int),
                ("minor", ctypes.c_int), ("traits", ctypes.c_uint32),
                ("state_type_id", ctypes.c_int64)]


class Frame(ctypes.Structure):  # XLA_FFI_CallFrame up to its stage; the rest zeroed
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension", ctypes.c_void_p),
                ("api", ctypes.c_void_p), ("ctx", ctypes.c_void_p), ("stage", ctypes.c_int),
                ("rest", ctypes.c_byte * 160)]


@pytest.fixture(scope="module")
def handler() -> ctypes.CFUNCTYPE:
    kernel = rv.compile("fn f(x: f64[N], i: i64[K]) -> f64[K] { let y[k] = x[i[k]]; "
                        "return y; }").f
    program = kernel.module.executable(kernel.ir_for("f64")).program
    symbol = handler_symbol(program)
    module = compile_module(handler_module(program, program.boundary, (False,) * 3),
                            name=symbol)
    function = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(module.address(symbol))
    function.keep_alive = module
    return function


def test_metadata_query_gets_the_api_version(handler: ctypes.CFUNCTYPE) -> None:
    metadata = Metadata(struct_size=ctypes.sizeof(Metadata), major=-1, minor=-1, traits=7)
    extension = Extension(ctypes.sizeof(Extension), 1, None, ctypes.addressof(metadata))
    frame = Frame(ctypes.sizeof(Frame), ctypes.addressof(extension))
    assert handler(ctypes.addressof(frame)) is None
    assert (metadata.major, metadata.minor) == FFI_API_VERSION
    assert metadata.traits == 0 and metadata.version_size == 28


def test_other_stages_do_nothing(handler: ctypes.CFUNCTYPE) -> None:
    for stage in (0, 1, 2):  # instantiate, prepare, initialize: no buffers are read
        frame = Frame(ctypes.sizeof(Frame), None, stage=stage)
        assert handler(ctypes.addressof(frame)) is None


@pytest.mark.parametrize(("site", "expected"), [
    (ErrorSite("index", "x%", 1), ("index %lld is out of bounds for axis 1 of 'x%%' with "
                                   "size %lld", (1, 2))),
    (ErrorSite("rows"), ("for_history needs more than its %lld rows", (2,))),
    (ErrorSite("empty"), ("argmax/argmin of an empty tensor", ())),
])
def test_error_formats(site: ErrorSite, expected: tuple[str, tuple[int, ...]]) -> None:
    assert error_format(site) == expected

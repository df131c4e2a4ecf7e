"""The first tier of a cold kernel: its IR compiled without LLVM's optimiser, run at once,
and the optimised module swapped in when the LLVM thread has made it.

Consumes a kernel's LLVM IR text (as `jit.compile_module` does); produces a `FirstTier`: a
loaded module whose exported functions keep their addresses for the life of the kernel.
Each exported function `f` is renamed `f.first`, and a new `f` jumps (a `musttail` call)
through the pointer `f.impl`, which starts at `f.first`; `swap_in(optimised)` points every
`f.impl` at the optimised module's `f`. So every address handed out before the swap (the
kernel's ctypes entries, the native call entry, `c_entry`) runs the optimised code after
it, and a call already running in the first tier finishes there (both modules stay
loaded for the life of the kernel).

The first tier skips the optimisation pipeline and generates code at level 3 from the IR
as generated (the disk cache never holds it: only the optimised module is stored, keyed
as before). It is only for IR whose results the optimiser may not change (`exact`): no
fast-math flag but `contract`, which both tiers' code generators honour alike (a
reduction marked `reassoc`, which the vectoriser reorders, gives other bits unoptimised:
such a kernel is optimised before its first call, as without tiers).

    tier = FirstTier(llvm_ir, name="rv_f",
                     optimise=lambda: jit.compile_module(llvm_ir, name="rv_f"))
    tier.address("rv_f")            # stable: the first tier now, the optimised code later
    tier.tier_up()                  # (on the LLVM thread: `native_kernel.py`)
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from reverie.runtime.native import cache, jit
from reverie.runtime.native.jit_module import KERNEL_PIPELINE, JitModule, Pipeline

if TYPE_CHECKING:
    from llvmlite.binding import ContextRef, ModuleRef

# fast-math flags with which the optimiser may change a result (all but `contract`)
_VALUE_CHANGING_FLAGS = re.compile(r"\b(?:fast|reassoc|afn|arcp|nsz|nnan|ninf)\b")
FIRST_SUFFIX = ".first"  # the first tier's own definition of an exported function
SLOT_SUFFIX = ".impl"  # the pointer an exported function jumps through


def exact(llvm_ir: str) -> bool:
    """Whether the first tier of `llvm_ir` computes the optimised module's bits: no
    fast-math flag lets the optimiser change a result."""
    return _VALUE_CHANGING_FLAGS.search(llvm_ir) is None


def _split_types(types: str) -> list[str]:
    """The comma-separated LLVM types in `types`, commas inside `{}`, `<>` or `[]` kept."""
    parts, depth, current = [], 0, []
    for character in types:
        depth += (character in "{<[") - (character in "}>]")
        if character == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(character)
    last = "".join(current).strip()
    return [*parts, last] if last else parts


def _trampoline(symbol: str, function_type: str) -> str:
    """IR text of `symbol`: a jump through `symbol.impl` (initially `symbol.first`), for a
    function of `function_type` as LLVM prints it (`i32 (ptr, ptr)`)."""
    result, _, parameters = function_type.partition(" (")
    types = _split_types(parameters.removesuffix(")"))
    arguments = ", ".join(f"{t} %a{k}" for k, t in enumerate(types))
    call = f'musttail call {result} %target({arguments})'
    body = (f"  {call}\n  ret void" if result == "void" else
            f"  %r = {call}\n  ret {result} %r")
    return (f'declare {result} @"{symbol}{FIRST_SUFFIX}"({", ".join(types)})\n'
            f'@"{symbol}{SLOT_SUFFIX}" = global ptr @"{symbol}{FIRST_SUFFIX}", align 8\n'
            f'define {result} @"{symbol}"({arguments}) {{\n'
            f'  %target = load atomic ptr, ptr @"{symbol}{SLOT_SUFFIX}" monotonic, align 8\n'
            f"{body}\n}}\n")


@contextlib.contextmanager
def _fresh_module(llvm_ir: str, name: str) -> Iterator[tuple[ModuleRef, ContextRef]]:
    """`jit.parsed_in_context` with LLVM's lock taken for the parse only (the caller takes
    it per phase after that); module and context freed on exit."""
    with contextlib.ExitStack() as stack:
        with jit._LLVM_LOCK:
            parsed = stack.enter_context(jit.parsed_in_context(llvm_ir, name))
        yield parsed


def _first_tier_object(llvm_ir: str, name: str, symbols: tuple[str, ...]) -> bytes:
    """Object code of `llvm_ir` unoptimised, each exported function behind its jump."""
    with _fresh_module(llvm_ir, name) as (module, context), jit._LLVM_LOCK:
        trampolines = []
        for symbol in symbols:
            function = module.get_function(symbol)
            trampolines.append(_trampoline(symbol, str(function.global_value_type)))
            function.name = symbol + FIRST_SUFFIX
        module.link_in(jit.llvm.parse_assembly("\n".join(trampolines), context))
        module.verify()
        jit._set_strength_reduction(KERNEL_PIPELINE)
        return jit.host_target().target_machine.emit_object(module)


def store_optimised(llvm_ir: str, name: str, pipeline: Pipeline = KERNEL_PIPELINE) -> None:
    """Optimise and emit `llvm_ir` as `jit.compile_module` does on a miss and put the
    object code in the disk cache under its key (so that `compile_module` then links it),
    taking LLVM's lock for each phase only: a first tier compiled meanwhile waits for one
    phase, not for the whole module."""
    key = jit.object_cache_key(llvm_ir, pipeline)
    if not cache.cache_enabled() or cache.load(key) is not None:
        return
    with _fresh_module(llvm_ir, name) as (module, _):
        with jit._LLVM_LOCK:
            jit._optimize_module(module, pipeline)
        with jit._LLVM_LOCK:
            jit._set_strength_reduction(pipeline)
            object_code = jit._code_generator(str(module)).emit_object(module)
    cache.store(key, object_code)


class FirstTier:
    """A kernel's first-tier module: `address(symbol)` of each exported function, stable
    across `swap_in`; `optimised` is the module swapped in (None until then), which
    `optimise` makes (`tier_up` makes and swaps it in)."""

    def __init__(self, llvm_ir: str, *, name: str,
                 optimise: Callable[[], JitModule]) -> None:
        self.symbols = jit.exported_symbols(llvm_ir)
        try:
            object_code = _first_tier_object(llvm_ir, name, self.symbols)
            slots = tuple(symbol + SLOT_SUFFIX for symbol in self.symbols)
            self._library = jit._link(name, object_code, self.symbols + slots)
        except RuntimeError as error:  # LLVM rejected what codegen produced: Reverie's bug
            raise jit.InternalCompilerError(name, str(error)) from None
        self.optimised: JitModule | None = None
        self._optimise = optimise

    def address(self, symbol: str) -> int:
        """The native address of the exported function `symbol` (its jump)."""
        if symbol not in self.symbols:
            raise KeyError(f"the first tier exports no function {symbol!r}")
        return self._library[symbol]

    def tier_up(self) -> None:
        """Make the optimised module and swap it in, unless that was done."""
        if self.optimised is None:
            self.swap_in(self._optimise())

    def swap_in(self, optimised: JitModule) -> None:
        """Point every exported function at `optimised`'s (same IR, same symbols): calls
        from now on run it; it stays loaded as long as this tier."""
        self.optimised = optimised
        for symbol in self.symbols:
            slot = ctypes.c_void_p.from_address(self._library[symbol + SLOT_SUFFIX])
            slot.value = optimised.address(symbol)


def tier_up_job(tier: FirstTier) -> Callable[[], None]:
    """The LLVM thread's job for `tier`, which holds it weakly: it makes the optimised
    module and swaps it in; for a tier gone by then (its kernels freed) or at interpreter
    exit it still makes the module when the disk cache keeps it for the next process, and
    else does nothing."""
    tier_ref, optimise = weakref.ref(tier), tier._optimise

    def job() -> None:
        in_use = tier_ref() is not None and threading.main_thread().is_alive()
        if not in_use and not cache.cache_enabled():
            return
        optimised = optimise()
        live = tier_ref()
        if live is not None and live.optimised is None:
            live.swap_in(optimised)

    return job

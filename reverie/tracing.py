"""`rv.trace`: record a NumPy-style Python function as a Reverie module (docs/api.md §8–9).

(The module is `tracing`, not `trace`: a submodule of that name would shadow the function
`rv.trace` once imported.)

    def loss(x, w):
        return np.sum(np.tanh(x @ w) ** 2)

    m = rv.trace(loss, np.ones((8, 3)), np.ones(3))
    m.loss.grad()(x, w)           # every transform of docs/api.md §3 applies
    print(m.ir("ast"))            # the recorded program, as Reverie source

The function runs once on `Traced` stand-ins. Each operation on a stand-in appends one
`let` statement to the recording, so the result is ordinary Reverie source (kept as
`module.source`, each line commented with the Python line that made it), compiled by
`rv.compile`: tracing adds no second compiler, only a second way to write the input.

Sizes are symbolic. Each example axis gets a dimension (`X0, X1` for `x`'s axes): axes
of equal size share one name, so `x @ w` type-checks; an axis of size 1 stays the literal
`1` so that it broadcasts. `x.shape[i]`, `len(x)` and `x.size` read those dimensions
(`reverie.tracing_sizes.Size`: `x.sum() / x.shape[0]` records `t1 / X0`), `x[-1]` is
`x[X0 - 1]`, and `x[-2:]`, `x[1:]`, `reshape(-1)` keep their meaning at every size: the
kernel called at other sizes computes what NumPy computes on those arrays. `x.ndim` and
`x.dtype` (the NumPy dtype, so `x.dtype == np.float64` and `np.issubdtype` work) are
the example's.

Where Python itself decides with a size, the decision holds at the example's size only:
`for row in x` (Python unrolls the loop over the example's rows), `range(len(x))`,
`if x.shape[0] > 3:`, `int(n)`, a slice bound that NumPy clips, a `reshape` to literal
sizes. The recording then fixes each dimension the decision read at its example size
(`x: f64[4, X1]`; the source's header lists each, with the Python line), and a call at
another size raises `rv.ShapeMismatchError` (a ValueError) naming the argument and the
axis, never a number computed for the wrong size. Write the size arithmetic on
`x.shape`/`len(x)` instead to keep the kernel size-generic. (`len(x)` is symbolic in the
traced function's own module, where `trace` binds the name `len` while it runs the
function; Python's `len` elsewhere returns an int, which fixes the axis.)

Names: the kernel is called `fn.__name__` and its parameters keep their Python names,
except that a keyword of the language (`fn`, `let`, `var`, `true`, ...) gets a trailing
`_` (a parameter `let` is `let_`: `grad(wrt="let_")`, or by position), so does a kernel
named like a built-in (`sum_`, `exp_`: the language keeps those names for its functions),
and a lambda's kernel is `traced`. The module finds the kernel by the Python name too
(`module["<lambda>"]`, `getattr(module, "exp")`) and as `module.kernel`. Temporaries
(`t1, t2, ...`), dimensions and index names skip every name already taken, so no
generated name clashes with a parameter or with another.

What cannot be recorded gets a `TraceError` naming the Python line: a Python `if`,
`while`, `bool()`, `float()` or `int()` of a traced value (the recording has no value to
decide with: use `rv.where` for an elementwise choice, or write the kernel in the Reverie
language, whose `if`/`while` are recorded as control flow).

NumPy as written (`reverie.tracing_numpy`): the NumPy and SciPy functions whose meaning
the language has map to it by a table of names (`np.arcsin` is the built-in `arcsin` or
`asin`, `scipy.special.gammaln` is `lgamma`), checked against the language's built-ins
when traced, so a built-in added to the language is reached without editing the tracer;
a name without one raises `TraceError` naming it. `np.einsum`, `tensordot`, flips,
`diag`, `trace`, `tril`/`triu`, `pad`, `repeat` and `tile` are recorded in index notation
(docs/language.md §10). While `trace` runs, `np.array`/`np.asarray` and the NumPy
functions of the table accept lists of traced values (`np.array([x, 2 * x])` is a
stack), as do the SciPy functions that are not NumPy-dispatched (`scipy.linalg.*`,
`scipy.special.polygamma`, `logsumexp`): those names are bound to tracing versions in
their modules and in the traced function's globals for the duration of the call, and
behave as before for any argument that holds no traced value. Any other NumPy function
that converts a traced value to an array raises `TraceError` naming the Python line.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from reverie import (  # noqa: F401 (they register their recorders)
    tracing_contract,
    tracing_factories,
    tracing_shapes,
    tracing_stats,
)
from reverie.compiler.lower.module_lowering import RESERVED
from reverie.dsl.check import KEYWORDS
from reverie.module import Module
from reverie.runtime.tensors import tensor_ops, torch_functions
from reverie.tracing_base import FLOAT_NAMES, RECORDER_FILES, Axis, TraceError
from reverie.tracing_numpy import numpy_entry_points
from reverie.tracing_record import (
    HOST_INPUTS,
    NAME,
    UNARY_BUILTINS,
    Recording,
    Traced,
    concatenate,
    host_input,
    operand,
    where,
)
from reverie.tracing_sizes import Size

if TYPE_CHECKING:
    from reverie.kernel import Kernel

__all__ = ["FLOAT_NAMES", "HOST_INPUTS", "RECORDER_FILES", "UNARY_BUILTINS", "Axis",
           "Recording", "TraceError", "Traced", "TracedModule", "compile_recording",
           "concatenate", "host_input", "trace", "where"]

RECORDER_FILES.add(__file__)
# rv.where, rv.exp, ... on a traced value pass through the Tensor functions' modules:
# the line a recorded op names is the user's call, not theirs.
RECORDER_FILES.update((tensor_ops.__file__, torch_functions.__file__))

# Names the language keeps: its keywords for every name, its built-ins for functions too.
FUNCTION_NAMES_RESERVED = KEYWORDS | RESERVED


def trace(fn: Callable[..., Any], *example_args: Any) -> TracedModule:
    """The Reverie module recorded from `fn` run on stand-ins shaped like `example_args`
    (docs/api.md §8–9); its kernel is named `fn.__name__` (see the module docstring)."""
    recording = Recording()
    names = _parameter_names(fn, len(example_args))
    stand_ins = recording.params_for(names, example_args)
    with symbolic_len(fn), numpy_entry_points(fn):
        result = fn(*stand_ins)
    outputs = list(result) if isinstance(result, tuple) else [result]
    traced_name = getattr(fn, "__name__", "traced")
    return compile_recording(recording, kernel_name(traced_name), outputs,
                             tuple_return=isinstance(result, tuple), traced_name=traced_name)


def kernel_name(python_name: str) -> str:
    """The kernel's name for a Python function's: `traced` for a lambda (or any name that
    is not a Reverie name), `_` appended to a keyword or built-in (`sum_`)."""
    name = python_name if NAME.fullmatch(python_name) else "traced"
    while name in FUNCTION_NAMES_RESERVED:
        name += "_"
    return name


def _symbolic_len(value: Any) -> Any:
    """`len` while a function is traced: a traced value's first size, symbolic."""
    if isinstance(value, Traced) and value.axes:
        return value.shape[0]
    return builtins.len(value)


@contextmanager
def symbolic_len(fn: Callable[..., Any]) -> Iterator[None]:
    """While `fn` runs, the name `len` in its module is `_symbolic_len` (unless the module
    defines its own `len`); Python's `len` must return an int, which would fix the axis."""
    namespace = getattr(fn, "__globals__", None)
    bind = isinstance(namespace, dict) and "len" not in namespace
    if bind:
        namespace["len"] = _symbolic_len
    try:
        yield
    finally:
        if bind:
            del namespace["len"]


def _parameter_names(fn: Callable[..., Any], count: int) -> list[str]:
    """The Python parameter names of `fn` (`x`, `w`), or `a0, a1, ...` for `*args`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:count]
    names += [f"a{i}" for i in range(len(names), count)]
    return names


class TracedModule(Module):
    """A module recorded by `trace`: stage "ast" prints the recorded Reverie source, and
    its kernel is also found by the Python function's name (`module["<lambda>"]`,
    `getattr(module, "exp")` for the kernel `exp_`) and as `module.kernel`."""

    def __init__(self, source: str, name: str, traced_name: str | None = None) -> None:
        super().__init__(source, name=name)
        self.traced_name = traced_name or name

    @property
    def kernel(self) -> Kernel:
        """The recorded function's kernel, whatever its name."""
        return self.kernels[self.name]

    def __getattr__(self, name: str) -> Kernel:
        if name == self.__dict__.get("traced_name"):
            return self.kernel
        return super().__getattr__(name)

    def __getitem__(self, name: str) -> Kernel:
        return self.kernel if name == self.traced_name else super().__getitem__(name)

    def ir(self, stage: str, *args: Any, **kwargs: Any) -> str:
        if stage == "ast":
            return self.source
        return super().ir(stage, *args, **kwargs)


def compile_recording(recording: Recording, name: str, outputs: Sequence[Any],
                      tuple_return: bool = False,
                      traced_name: str | None = None) -> TracedModule:
    """The module of one function `name` holding `recording` and returning `outputs`."""
    returned = [_returned(recording, r) for r in outputs]
    if any(r.name in ("true", "false") or not r.name.isidentifier() for r in returned):
        raise TraceError(f"{name} returns a constant, not a value computed from its "
                         f"arguments")
    value = ", ".join(r.name for r in returned)
    source = "\n".join([*recording.header(traced_name or name),
                        f"fn {name}({', '.join(map(recording.fixed_text, recording.params))})"
                        " {",
                        *map(recording.fixed_text, recording.lines),
                        f"    return {f'({value})' if tuple_return else value};",
                        "}", ""])
    return TracedModule(source, name, traced_name)


def _returned(recording: Recording, value: Any) -> Traced:
    """A returned value as a traced one: a size is computed by a statement of its own."""
    if isinstance(value, Size):
        element = "f64" if isinstance(value.value, float) else "i64"
        return recording.let(value.expr, (), element)
    return operand(recording, value, "f64")

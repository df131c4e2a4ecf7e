"""The recording behind `rv.trace` and `rv.fx`: `Recording` (the statements so far) and
`Traced` (a stand-in whose every operation appends one `let`), with NumPy's operators,
indexing, reshapes and reductions (the module docstring of `reverie.tracing` says what a
recording means; `reverie.tracing_numpy` adds the NumPy and SciPy functions,
`reverie.tracing_index` and `reverie.tracing_slices` write the subscripts and reshapes).
"""

from __future__ import annotations

import difflib
import functools
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from reverie.compiler.ir.dtypes import FLOAT_DTYPES
from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.dsl.check import KEYWORDS
from reverie.tracing_base import (
    DTYPE_NAMES,
    FLOAT_NAMES,
    NUMPY_DTYPES,
    RECORDER_FILES,
    Axis,
    TraceError,
    element_name,
    element_of,
    factor_split,
    ignored,
    shape_text,
    user_line,
)
from reverie.tracing_index import basic_parts, full_key, subscript
from reverie.tracing_sizes import Size, atom, combine, product_text
from reverie.tracing_slices import (
    CONSTANT_LIMIT,
)
from reverie.tracing_slices import reshape as reshape_to

RECORDER_FILES.add(__file__)

# The elementwise built-ins of §2.3, read from the op table: the language name of each
# (`relu`), and the NumPy ufuncs that mean the same (`np.exp` is `exp`).
UNARY_BUILTINS = tuple(sorted(name for name, row in ELEMENTWISE.items()
                              if row.builtin and row.arity == 1))
NUMPY_UNARY = {"absolute": "abs", "fabs": "abs", "negative": "neg", "positive": None,
               "reciprocal": None, "square": None,
               **{name: name for name in UNARY_BUILTINS}}
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
REDUCTIONS = ("sum", "mean", "prod", "max", "min", "logsumexp", "argmax", "argmin")

# The NumPy functions (`"mean"`, `"linalg.norm"`: the name in `numpy`) and ufuncs (by
# `ufunc.__name__`) that a traced value takes, each with its recorder; filled by
# `reverie.tracing_numpy`, which `reverie.tracing` imports.
ARRAY_FUNCTIONS: dict[str, Callable[..., Any]] = {}
UFUNCS: dict[str, Callable[..., Any]] = {}
UFUNC_METHODS: dict[str, Callable[..., Any]] = {}  # "add.reduce", or "outer" for any

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


class Recording:
    """The statements recorded so far, the names they bind and the dimensions fixed."""

    def __init__(self, literal_dims: bool = False, promotion: str = "numpy",
                 default_float: str = "f64") -> None:
        self.literal_dims = literal_dims  # every dimension its example size (rv.fx)
        self.promotion = promotion  # how mixed operand types promote: "numpy" or "torch"
        # what an integer or bool value meeting a Python float becomes: NumPy's float64,
        # torch's default dtype
        self.default_float = default_float
        self.params: list[str] = []
        self.lines: list[str] = []
        self.dims: dict[int, str] = {}  # example size -> the dimension named for it
        self.fixed: dict[str, tuple[int, str]] = {}  # dimension -> (size, the line fixing it)
        self.taken: set[str] = set()
        self.origin: Callable[[], str] = user_line  # what each statement's comment names
        self.writes: list[tuple[Traced, Traced]] = []  # in-place writes, see `write`
        self._count = 0

    # ------------------------------------------------------------ names
    def claim(self, wanted: str) -> str:
        """`wanted` as a new name of the source: a valid name (other characters become
        `_`), with `_` appended while it is a keyword of the language or taken."""
        name = re.sub(r"\W", "_", wanted, flags=re.ASCII)
        while name in KEYWORDS or name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def temporary(self) -> str:
        """The next free name `t1`, `t2`, ... for a recorded value."""
        self._count += 1
        while f"t{self._count}" in self.taken:
            self._count += 1
        return self.claim(f"t{self._count}")

    # ------------------------------------------------------------ dimensions
    def dim_for(self, size: int, name: str) -> str:
        """The dimension of an example axis: `1` for size 1 (it broadcasts) and every size
        with `literal_dims`, else the name given to the first axis of that size."""
        if size == 1 or self.literal_dims:
            return str(size)
        if size not in self.dims:
            self.dims[size] = self.claim(name)
        return self.dims[size]

    def size_of(self, axis: Axis) -> int | Size:
        """What `x.shape[i]` reads: an int for a literal dimension, else a symbolic size."""
        return int(axis.dim) if axis.dim.isdigit() else Size(self, axis.dim, axis.size, True)

    def fix(self, expr: str) -> None:
        """Python decided something with a size reading `expr`: keep each dimension in it
        at its example size (the first decision's line is the one reported)."""
        sizes = {name: size for size, name in self.dims.items()}
        for name in IDENTIFIER.findall(expr):
            if name in sizes and name not in self.fixed:
                self.fixed[name] = (sizes[name], self.origin())

    def same(self, a: Axis, b: Axis, what: str) -> Axis:
        """The axis two operands share (`what` names the operation): their dimensions are
        the same expression, or the same size only in the example (`x[:2] + x[2:]` of
        4 rows: `2` and `X0 - 2`), which fixes the dimensions both read."""
        if a.size != b.size:
            raise TraceError(f"{what}: sizes {a.size} and {b.size} differ ({user_line()})")
        if a.dim != b.dim:
            self.fix(f"{a.dim} {b.dim}")
            return Axis(a.size, str(a.size))
        return a

    def size_ufunc(self, ufunc: np.ufunc, size: Size) -> Size:
        """`np.sqrt(n)` of a size: the built-in of the same meaning, still a size."""
        builtin = NUMPY_UNARY.get(ufunc.__name__)
        if builtin is None:
            raise TraceError(f"np.{ufunc.__name__} of the size {size.expr} cannot be traced "
                             f"({user_line()})")
        return Size(self, f"{builtin}({size.expr})", ufunc(size.value).item(), False)

    # ------------------------------------------------------------ parameters, statements
    def params_for(self, names: Sequence[str], examples: Sequence[Any]) -> list[Traced]:
        """Parameters shaped like the `examples` (arrays or numbers); their names are
        claimed before any dimension is named, so the Python names win."""
        arrays = [np.asarray(value) for value in examples]
        elements = [element_of(name, a.dtype) for name, a in zip(names, arrays, strict=True)]
        claimed = [self.claim(name) for name in names]
        return [self._parameter(name, a.shape, element)
                for name, a, element in zip(claimed, arrays, elements, strict=True)]

    def param_like(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Traced:
        """A parameter of this shape and NumPy dtype: `x: f64[X0, X1]`."""
        element = element_of(name, dtype)
        return self._parameter(self.claim(name), shape, element)

    def _parameter(self, name: str, shape: tuple[int, ...], element: str) -> Traced:
        axes = tuple(Axis(n, self.dim_for(n, f"{name.upper()}{i}"))
                     for i, n in enumerate(shape))
        self.params.append(f"{name}: {element}{shape_text(axes)}")
        return Traced(self, name, axes, element)

    def let(self, expr: str, axes: tuple[Axis, ...], dtype: str | np.dtype,
            index: str = "") -> Traced:
        """Bind `expr` to a fresh name: `let t3 = exp(t2);  # model.py:14: ...` (with
        `index`, an index-notation statement: `let t4[g0] = x[idx[g0]];`)."""
        name = self.temporary()
        self.lines.append(f"    let {name}{index} = {expr};  # {self.origin()}")
        return Traced(self, name, axes, element_name(dtype))

    def index_let(self, indices: Sequence[tuple[str, str | None]], body: Callable[..., str],
                  axes: tuple[Axis, ...], dtype: str | np.dtype) -> Traced:
        """An index-notation statement (docs/language.md §10): `indices` are the output
        indices' wanted names with their ranges (None where an operand's subscript gives
        it), `body` makes the element's expression from the claimed names:
        `let t4[i in 0..N, j] = x[N - 1 - i, j];`."""
        names = [self.claim(name) for name, _ in indices]
        declared = ", ".join(name if extent is None else f"{name} in 0..{extent}"
                             for name, (_, extent) in zip(names, indices, strict=True))
        return self.let(body(*names), axes, dtype, index=f"[{declared}]" if names else "")

    def write(self, target: Traced, value: Traced) -> None:
        """Record that `target`, a parameter, is written in place with `value` (rv.fx
        returns the value from the kernel and writes it into the tensor after the call)."""
        self.writes.append((target, value))

    # ------------------------------------------------------------ the source
    def fixed_text(self, line: str) -> str:
        """`line` with each fixed dimension written as its size (its comment unchanged)."""
        if not self.fixed:
            return line
        code, mark, comment = line.partition("  #")
        pattern = r"\b(" + "|".join(map(re.escape, self.fixed)) + r")\b"
        code = re.sub(pattern, lambda m: str(self.fixed[m.group(1)][0]), code)
        return code + mark + comment

    def header(self, traced_name: str) -> list[str]:
        """The source's first comment lines: what was traced, and each fixed dimension."""
        lines = [f"# Traced from {traced_name} by rv.trace."]
        if self.fixed:
            lines.append("# Sizes fixed by a Python decision (another size raises "
                         "rv.ShapeMismatchError):")
            lines += [f"#   {dim} = {size} by {line}" for dim, (size, line) in self.fixed.items()]
        return lines


# Makes the parameters whose value the host makes at every call (rv.fx sets it while it
# records a node: PyTorch draws dropout masks and makes factories' tensors); None elsewhere.
HOST_INPUTS: ContextVar[Callable[..., Traced] | None] = ContextVar("HOST_INPUTS", default=None)


def host_input(make: Callable[[Any], Any], like: Traced | None = None) -> Traced:
    """A new parameter of the recording in progress whose value at every call is
    `make(template)`, `template` an empty host array laid out as the host's value of `like`
    (None without one): a random draw of the host's stream, a factory's array. The host
    finds its shape and dtype by running `make` on a template without data, whose sizes
    are symbolic where `like`'s are (so a mask laid out as `x` has `x`'s dimensions)."""
    maker = HOST_INPUTS.get()
    if maker is None:
        raise TraceError(f"a value made at every call (a random draw, a factory) is recorded "
                         f"by rv.fx only ({user_line()})")
    return maker(make, like)


def broadcast(a: tuple[Axis, ...], b: tuple[Axis, ...],
              recording: Recording | None = None) -> tuple[Axis, ...]:
    """NumPy broadcasting of two shapes, keeping the non-1 axis of each pair (with the
    `recording`, two equal sizes of different dimensions share one, `Recording.same`)."""
    width = max(len(a), len(b))
    a = (Axis(1, "1"),) * (width - len(a)) + a
    b = (Axis(1, "1"),) * (width - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x.size != y.size and 1 not in (x.size, y.size):
            raise TraceError(f"shapes do not broadcast: {x.size} against {y.size} "
                             f"at {user_line()}")
        if recording is not None and x.size == y.size != 1:
            x = recording.same(x, y, "broadcasting")
        out.append(y if x.size == 1 else x)
    return tuple(out)


def normal_axes(axis: Any, rank: int) -> tuple[int, ...]:
    """`axis` (None, an int or a sequence, negative from the end) as sorted axes."""
    axes = range(rank) if axis is None else (axis,) if isinstance(axis, int | np.integer) \
        else tuple(axis)
    if any(not -rank <= a < rank for a in axes):
        raise TraceError(f"axis {axis} is out of range for {rank} axes ({user_line()})")
    return tuple(sorted(int(a) % rank for a in axes))


class Traced:
    """A symbolic stand-in for an array argument or intermediate of a traced function."""

    __array_priority__ = 1000  # NumPy defers binary operators to this class

    def __init__(self, recording: Recording, name: str, axes: tuple[Axis, ...],
                 element: str) -> None:
        self.recording = recording
        self._name = name
        self.axes = axes
        self.element = element  # the Reverie element type: "f64", "i64", "bool", ...
        self.is_var = False  # assigned into (`x[0] = v`): `name` is a `var` of the source
        self.view_of: Traced | None = None  # NumPy would share memory with this value
        self.views: list[Traced] = []  # ... and these with this one
        self.view_key: Any = None  # the subscript of a sliced view, as Python gave it
        self.stale_by = ""  # the line of an assignment into the value this one views

    @property
    def name(self) -> str:
        """The source name of the value. A slice read after an assignment into the array
        it views is read again from that array (NumPy's view shows the assignment); a
        reshape or transpose so read is refused."""
        if self.stale_by and self.view_key is not None and self.view_of is not None:
            base, keys = self.view_of, self.view_key
            self.stale_by = ""
            fresh = subscript(base, keys if isinstance(keys, tuple) else (keys,))
            self._name = fresh.name
            base.views.append(self)
        if self.stale_by:
            raise TraceError(
                f"a reshape or transpose of an array that was assigned into "
                f"afterwards ({self.stale_by}) is read at {user_line()}: NumPy's view shows "
                f"the assignment; take it after assigning, or copy it before")
        return self._name

    # ------------------------------------------------------------ what NumPy users read
    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype (`x.dtype == np.float64`, `np.issubdtype(x.dtype, np.floating)`);
        the Reverie name is `element`."""
        return NUMPY_DTYPES[self.element]

    @property
    def shape(self) -> tuple[int | Size, ...]:
        """Each axis's size: an int where the dimension is a literal, else a `Size`."""
        return tuple(self.recording.size_of(a) for a in self.axes)

    @property
    def size(self) -> int | Size:
        """The element count: the product of the dimensions."""
        coefficient, factors = factor_split(a.dim for a in self.axes)
        if not factors:
            return coefficient
        return Size(self.recording, product_text(coefficient, factors),
                    math.prod(a.size for a in self.axes), True)

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def T(self) -> Traced:  # noqa: N802 (NumPy's name)
        return self._view(self.recording.let(f"{self.name}.T", self.axes[::-1], self.element))

    def __repr__(self) -> str:
        return f"Traced({self.name}: {self.element}{shape_text(self.axes)})"

    # ------------------------------------------------------------ refusals
    def _refuse(self, what: str) -> TraceError:
        return TraceError(
            f"cannot trace {what} of a traced value at {user_line()}: the recording has "
            f"no value to decide with. Use rv.where(cond, a, b) for an elementwise choice, "
            f"or write the kernel in the Reverie language, whose `if`/`while` are compiled "
            f"as control flow (docs/language.md §11.1).")

    def __bool__(self) -> bool:
        raise self._refuse("a Python `if`, `while`, `and`/`or` or bool()")

    def __float__(self) -> float:
        raise self._refuse("float()")

    def __int__(self) -> int:
        raise self._refuse("int()")

    def item(self, *_: Any) -> Any:
        raise self._refuse(".item()")

    def tolist(self) -> Any:
        raise self._refuse(".tolist()")

    def __getattr__(self, name: str) -> Any:
        """A NumPy array attribute that has no recorder: a TraceError naming it (other
        names, and every `__dunder__`, are an AttributeError as usual)."""
        if not name.startswith("__") and hasattr(np.ndarray, name):
            raise UntracedAttribute(f"x.{name} of a traced value cannot be traced "
                                    f"({user_line()}); "
                                    f"{nearest_spelling(name, dir(Traced), 'x.')}")
        raise AttributeError(f"'Traced' object has no attribute '{name}'")

    @property
    def real(self) -> Traced:
        return self

    @property
    def imag(self) -> Traced:
        return self * 0

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> Any:
        return self.size * self.itemsize

    def __index__(self) -> int:
        raise self._refuse("use as a Python integer")

    # ------------------------------------------------------------ Python's view of sizes
    def __len__(self) -> int:
        """Python's `len` must return an int: the example's, with the first axis fixed at
        it (in the traced function's module `len(x)` is a symbolic size instead)."""
        if not self.axes:
            raise TraceError(f"len() of a 0-d traced value at {user_line()}")
        return operator.index(self.recording.size_of(self.axes[0]))

    def __iter__(self) -> Iterator[Traced]:
        """Iteration over the first axis, as NumPy's: `for row in x` records `x[0]`,
        `x[1]`, ... for the example's rows, so the first axis is fixed at its size."""
        count = len(self)
        return (self[i] for i in range(count))

    # ------------------------------------------------------------ operators
    def _binary(self, op: str, other: Any, reverse: bool = False) -> Traced:
        if op not in ("and", "or"):
            return self._meeting(other)._binary_of(op, other, reverse)
        return self._binary_of(op, other, reverse)

    def _meeting(self, number: Any) -> Traced:
        """This value as NumPy and torch promote it against a Python number: an integer or
        bool one meeting a float becomes the library's default float (`np.sum(x < y) +
        0.0` is float64), a bool one meeting an integer becomes int64 (`mask * 2`); the
        language would refuse both rather than guess."""
        if isinstance(number, bool | np.bool_) or not isinstance(
                number, int | float | np.integer | np.floating):
            return self
        if isinstance(number, float | np.floating) and self.element not in FLOAT_DTYPES:
            return self.astype(self.recording.default_float)
        return self.astype("i64") if self.element == "bool" else self

    def _binary_of(self, op: str, other: Any, reverse: bool) -> Traced:
        other = operand(self.recording, other, self.element)
        left, right = (other, self) if reverse else (self, other)
        if left.element != right.element and op not in ("and", "or"):
            left, right = _promoted(left, right)
        if op == "/" and left.element not in FLOAT_NAMES:  # NumPy's true division
            left, right = left.astype(np.float64), right.astype(np.float64)
        if op == "**" and left.element not in FLOAT_NAMES:  # the language's ** takes floats
            power = left.astype(np.float64)._binary("**", right.astype(np.float64))
            return power.astype(left.dtype)
        if op == "@":
            return _matmul(left, right)
        element = "bool" if op in COMPARISONS or op in ("and", "or") else left.element
        axes = broadcast(left.axes, right.axes, self.recording)
        expr = (f"{op}({left.name}, {right.name})" if op in ("max", "min")
                else f"{left.name} {op} {right.name}")
        return self.recording.let(expr, axes, element)

    def __add__(self, o): return self._binary("+", o)
    def __radd__(self, o): return self._binary("+", o, True)
    def __sub__(self, o): return self._binary("-", o)
    def __rsub__(self, o): return self._binary("-", o, True)
    def __mul__(self, o): return self._binary("*", o)
    def __rmul__(self, o): return self._binary("*", o, True)
    def __truediv__(self, o): return self._binary("/", o)
    def __rtruediv__(self, o): return self._binary("/", o, True)
    def __pow__(self, o): return self._binary("**", o)
    def __rpow__(self, o): return self._binary("**", o, True)
    def __matmul__(self, o): return self._binary("@", o)
    def __rmatmul__(self, o): return self._binary("@", o, True)
    def __lt__(self, o): return self._binary("<", o)
    def __le__(self, o): return self._binary("<=", o)
    def __gt__(self, o): return self._binary(">", o)
    def __ge__(self, o): return self._binary(">=", o)
    def __eq__(self, o): return self._binary("==", o)  # type: ignore[override]
    def __ne__(self, o): return self._binary("!=", o)  # type: ignore[override]
    def __floordiv__(self, o): return self._binary("//", o)
    def __rfloordiv__(self, o): return self._binary("//", o, True)
    def __mod__(self, o): return self._binary("%", o)
    def __rmod__(self, o): return self._binary("%", o, True)
    def __divmod__(self, o): return self // o, self % o
    def __rdivmod__(self, o): return self._binary("//", o, True), self._binary("%", o, True)
    def __and__(self, o): return self._binary("and", o)
    def __rand__(self, o): return self._binary("and", o, True)
    def __or__(self, o): return self._binary("or", o)
    def __ror__(self, o): return self._binary("or", o, True)
    __hash__ = object.__hash__

    def __neg__(self) -> Traced:
        return self.recording.let(f"-{self.name}", self.axes, self.element)

    def __pos__(self) -> Traced:
        return self.copy()

    def copy(self, order: str = "K") -> Traced:
        """A value of its own (NumPy's copy: an assignment into it changes only it)."""
        if self.is_var:  # a snapshot of the value assigned into so far
            return self.recording.let(self.name, self.axes, self.element)
        return Traced(self.recording, self.name, self.axes, self.element)

    def __invert__(self) -> Traced:
        if self.element != "bool":
            raise TraceError(f"~ of the {self.element} value {self.name} cannot be traced "
                             f"({user_line()}): the language has no bitwise operators; "
                             f"~ negates a bool mask")
        return self.recording.let(f"not {self.name}", self.axes, self.element)

    def __abs__(self) -> Traced:
        return self._call("abs")

    def _call(self, builtin: str) -> Traced:
        return self.recording.let(f"{builtin}({self.name})", self.axes, self.element)

    __reverie_builtin__ = _call  # `rv.exp(t)` on a stand-in records `exp(t)`

    # ------------------------------------------------------------ shapes
    def __getitem__(self, key: Any) -> Traced:
        keys = key if isinstance(key, tuple) else (key,)
        result = subscript(self, keys)
        if any(isinstance(k, Traced | list | tuple | np.ndarray) for k in keys) or (
                not result.ndim and all(isinstance(k, int | np.integer | Size) for k in keys)):
            return result  # a copy in NumPy: advanced indexing, or one element
        return self._view(result, key)

    def _view(self, result: Traced, key: Any = None) -> Traced:
        """`result`, which NumPy makes a view of this value (a slice by `key`, a reshape,
        a transpose): see `__setitem__` and `_in_place`."""
        if result is not self:
            result.view_of, result.view_key = self, key
            self.views.append(result)
        return result

    def __setitem__(self, key: Any, value: Any) -> None:
        """`x[1:, 0] = v`: an indexed update of the source (docs/language.md §9.1): the
        value becomes a `var` (`var t5 = x; t5[1:, 0] = v;`), and this stand-in names it
        from now on, as NumPy's array changes in place."""
        if isinstance(value, Traced) and value.view_of is self and value.view_key is key:
            return  # `x[k] += v`: `_in_place` assigned the window already
        if self.view_of is not None:
            raise TraceError(
                f"assignment into {self.name}, a view (a slice, reshape or transpose) of "
                f"another array, cannot be traced ({user_line()}): NumPy would change that "
                f"array too; assign into the array itself (x[1:][0] = v is x[1] = v), or "
                f"into a copy (v = x[1:].copy())")
        key = key if isinstance(key, tuple) else (key,)
        if any(k is None or isinstance(k, Traced | list | np.ndarray) or (
                isinstance(k, slice) and k.step is not None and operator.index(k.step) < 0)
               for k in key):
            raise TraceError(
                f"assignment with the subscript {key!r} cannot be traced ({user_line()}): "
                f"integers and slices of positive step can be assigned; for a mask write "
                f"x = np.where(mask, v, x)")
        parts, window = basic_parts(self, full_key(self, key))
        value = operand(self.recording, value, self.element)
        if value.element != self.element:
            value = value.astype(self.dtype)
        if broadcast(window, value.axes, self.recording) != window:
            raise TraceError(f"assignment of shape {value.shape} into a window of "
                             f"{len(window)} axes {[a.size for a in window]} ({user_line()})")
        if not self.is_var:
            name = self.recording.temporary()
            self.recording.lines.append(f"    var {name} = {self.name};  "
                                        f"# {self.recording.origin()}")
            self._name, self.is_var = name, True
        target = f"{self.name}[{', '.join(parts)}]" if parts else self.name
        self.recording.lines.append(f"    {target} = {value.name};  # {self.recording.origin()}")
        self._stale_views(self.recording.origin())

    def _in_place(self, op: str, other: Any) -> Traced:
        """`x += v` and the like change NumPy's array in place: this stand-in names the
        new value, views of it go stale (`name`); on a slice `x[k]`, the array it views is
        assigned at `k` (`x[k] += v`)."""
        value = self._binary(op, other)
        if value.element != self.element:
            value = value.astype(self.dtype)
        if tuple(a.size for a in value.axes) != tuple(a.size for a in self.axes):
            raise TraceError(f"{op}= of shape {self.shape} with shape {value.shape} "
                             f"({user_line()}): the result must keep the shape")
        if self.view_of is not None:
            if self.view_key is None:
                raise TraceError(f"{op}= into a reshape or transpose of another array "
                                 f"({user_line()}): NumPy changes that array too; write "
                                 f"x = x {op} v on the array itself")
            base = self.view_of
            base[self.view_key] = value
            return base._view(value, self.view_key)
        self._name, self.is_var = value.name, False
        self._stale_views(self.recording.origin())
        return self

    def __iadd__(self, o): return self._in_place("+", o)
    def __isub__(self, o): return self._in_place("-", o)
    def __imul__(self, o): return self._in_place("*", o)
    def __itruediv__(self, o): return self._in_place("/", o)
    def __ifloordiv__(self, o): return self._in_place("//", o)
    def __imod__(self, o): return self._in_place("%", o)
    def __ipow__(self, o): return self._in_place("**", o)

    def _stale_views(self, line: str) -> None:
        """The views taken from this value see an assignment into it: reading them is
        refused from now on (`name`)."""
        for view in self.views:
            view.stale_by = line
            view._stale_views(line)
        self.views = []

    def reshape(self, *shape: Any, order: str = "C") -> Traced:
        if order != "C":
            raise TraceError(f"reshape(order={order!r}) cannot be traced ({user_line()}): "
                             f"the language reshapes in C order; transpose first")
        target = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape
        if not target:  # to a scalar: the one element
            return self if not self.ndim else self[(0,) * self.ndim]
        return self._view(reshape_to(self, tuple(target)))

    def ravel(self, order: str = "C") -> Traced:
        return self if self.ndim == 1 else self.reshape(-1, order=order)

    flatten = ravel  # a copy in NumPy; every traced value is immutable

    def squeeze(self, axis: Any = None) -> Traced:
        """The axes of size 1 dropped (those of `axis` only, each of which must be 1)."""
        ones = [i for i, a in enumerate(self.axes) if a.size == 1]
        dropped = ones if axis is None else normal_axes(axis, self.ndim)
        if any(self.axes[i].size != 1 for i in dropped):
            raise TraceError(f"squeeze of axis {axis} of shape {self.shape}: only axes of "
                             f"size 1 can be squeezed ({user_line()})")
        return self.reshape([n for i, n in enumerate(self.shape) if i not in dropped])

    def transpose(self, *axes: Any) -> Traced:
        order = axes[0] if len(axes) == 1 and isinstance(axes[0], tuple | list) else axes
        order = tuple(order) if order else tuple(reversed(range(self.ndim)))
        text = ", ".join(str(a % self.ndim) for a in order)
        return self._view(self.recording.let(f"transpose({self.name}, ({text},))",
                                             tuple(self.axes[a] for a in order), self.element))

    def along(self, builtin: str, axis: int) -> Traced:
        """A built-in that keeps the shape, applied along one axis: `softmax(t, axis=1)`."""
        return self.recording.let(f"{builtin}({self.name}, axis={axis % self.ndim})",
                                  self.axes, self.element)

    def astype(self, dtype: Any, order: str = "K", casting: str = "unsafe", subok: bool = True,
               copy: bool = True) -> Traced:
        target = dtype if isinstance(dtype, str) and dtype in NUMPY_DTYPES else \
            element_of("astype", dtype)
        if target == self.element:
            return self.copy()
        return self.recording.let(f"{target}({self.name})", self.axes, target)

    # ------------------------------------------------------------ reductions
    def _reduce(self, kind: str, axis: Any = None, keepdims: bool = False) -> Traced:
        if self.element == "bool":  # NumPy counts: True is 1
            counted = self.astype("f64" if kind in ("mean", "logsumexp") else "i64")._reduce(
                kind, axis, keepdims)
            return counted != 0 if kind in ("max", "min") else counted
        reduced = normal_axes(axis, self.ndim)
        kept = tuple(Axis(1, "1") if i in reduced else a for i, a in enumerate(self.axes)
                     if keepdims or i not in reduced)
        keywords = ""
        if axis is not None:  # argmax/argmin take one axis, written as an int
            one = len(reduced) == 1 and kind in ("argmax", "argmin")
            keywords += f", axis={reduced[0]}" if one else \
                f", axis=({', '.join(map(str, reduced))},)"
        if keepdims:
            keywords += ", keepdims=true"
        element = "i64" if kind in ("argmax", "argmin") else self.element
        return self.recording.let(f"{kind}({self.name}{keywords})", kept, element)

    def argmax(self, axis=None):
        return self._reduce("argmax", axis)

    def argmin(self, axis=None):
        return self._reduce("argmin", axis)

    # ------------------------------------------------------------ NumPy protocols
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """NumPy wants an array of numbers: a function without a recorder reached this
        value (`reverie.tracing_numpy` names those that have one)."""
        raise TraceError(
            f"a NumPy or SciPy function without a Reverie counterpart converted the traced "
            f"value {self.name} to an array ({user_line(libraries=True)}); the functions "
            f"rv.trace takes are listed in docs/api.md §8 (np.stack([...]) builds an array "
            f"from traced values)")

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any):
        """`np.exp(t)`, `np.add(a, t)`, `scipy.special.gammaln(t)`: recorded as the
        built-in of the same meaning (`UFUNCS`); the methods `np.add.reduce`,
        `np.multiply.outer`, ... by `UFUNC_METHODS`; `out=` and `where=` are refused."""
        name = ufunc.__name__
        if method != "__call__":
            method_recorder = UFUNC_METHODS.get(f"{name}.{method}") or (
                UFUNC_METHODS.get(method) if name in UFUNCS else None)
            if method_recorder is None:
                raise TraceError(f"np.{name}.{method} cannot be traced ({user_line()}): "
                                 f"call np.{name}(...) and reduce with np.sum/np.max/...")
            return recorded(f"np.{name}.{method}", method_recorder, ufunc, *inputs, **kwargs)
        if {k for k, v in kwargs.items() if v is not None} - {"dtype"}:
            raise TraceError(f"np.{name}.{method} with {sorted(kwargs)} cannot be traced "
                             f"({user_line()}): call np.{name}(...) and reduce with "
                             f"np.sum/np.max/...")
        recorder = UFUNCS.get(name)
        if recorder is None:
            raise TraceError(f"np.{name} has no Reverie counterpart ({user_line()})")
        result = recorded(f"np.{name}", recorder, *inputs)
        dtype = kwargs.get("dtype")
        return result if dtype is None else result.astype(dtype)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any):
        """`np.sum(t, axis=1)`, `np.einsum`, `np.linalg.norm`: the NumPy functions with a
        recorder in `ARRAY_FUNCTIONS` (keyed by the name in `numpy`)."""
        module = func.__module__.removeprefix("numpy").strip(".")
        name = f"{module}.{func.__name__}" if module else func.__name__
        recorder = ARRAY_FUNCTIONS.get(name)
        if recorder is None:
            inner, outer = user_line(), user_line(libraries=True)
            within = "" if inner == outer else (
                f", inside a library function called at {outer}: that function has no "
                f"recorder, or was bound before rv.trace ran (call it through its module)")
            raise TraceError(f"np.{name} cannot be traced ({inner}{within}); "
                             f"{nearest_spelling(name, ARRAY_FUNCTIONS)}")
        return recorded(f"np.{name}", recorder, *args, **kwargs)


class UntracedAttribute(TraceError, AttributeError):
    """A NumPy array attribute without a recorder: a TraceError, and an AttributeError so
    that `hasattr` and `getattr(x, name, default)` see no such attribute."""


def recorded(name: str, recorder: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`recorder(*args, **kwargs)`, whose Python errors (arguments NumPy would refuse, or
    that the recorder does not take) become a `TraceError` naming the function."""
    try:
        return recorder(*args, **kwargs)
    except TraceError:
        raise
    except (TypeError, ValueError, IndexError, KeyError, AttributeError) as error:
        raise TraceError(f"{name} with these arguments cannot be traced ({user_line()}): "
                         f"{error}") from error


def nearest_spelling(name: str, names: Iterable[str], prefix: str = "np.") -> str:
    """A hint for an untraceable NumPy name: the closest traceable names."""
    public = [n for n in names if not n.startswith("_")]
    close = difflib.get_close_matches(name, public, n=3, cutoff=0.5)
    return (f"the nearest traceable: {', '.join(prefix + c for c in close)}" if close
            else "docs/api.md §8 lists what rv.trace takes")


for _name in UNARY_BUILTINS:  # `t.exp()`, `t.tanh()`, ... one method per built-in
    setattr(Traced, _name, lambda self, _builtin=_name: self._call(_builtin))


def operand(recording: Recording, value: Any, dtype: str) -> Traced:
    """A traced value, or a Python number or a size as a weakly typed operand (docs/language.md §8):
    it takes the element type `dtype` of the value it meets."""
    if isinstance(value, Traced):
        return value
    if isinstance(value, Size):
        return Traced(recording, atom(value.expr), (), dtype)
    if isinstance(value, bool | np.bool_):
        return Traced(recording, "true" if value else "false", (), "bool")
    if isinstance(value, int | float | np.integer | np.floating):
        number = float(value) if dtype in FLOAT_NAMES else value
        if isinstance(number, float) and not math.isfinite(number) and \
                dtype not in FLOAT_NAMES:
            raise TraceError(f"the constant {number} meets a {dtype} value ({user_line()}): "
                             f"only floats hold it")
        return Traced(recording, float_source(number) if isinstance(number, float) else
                      str(int(number)), (), dtype)
    if isinstance(value, list | tuple) or (isinstance(value, np.ndarray)
                                           and value.dtype == object):
        return stack([operand(recording, v, dtype) for v in value], 0)
    if isinstance(value, np.ndarray) and value.dtype in DTYPE_NAMES:
        return constant_array(recording, value) if value.ndim else \
            operand(recording, value.item(), dtype)
    raise TraceError(f"a {type(value).__name__} constant cannot be traced "
                     f"({user_line()}): pass it as an argument of the traced function")


def float_source(number: float) -> str:
    """A float literal of the language; inf and NaN as the divisions that make them."""
    if math.isnan(number):
        return "(0.0 / 0.0)"
    if math.isinf(number):
        return "(1.0 / 0.0)" if number > 0 else "(-1.0 / 0.0)"
    return repr(number)


def strong(x: Traced) -> Traced:
    """`x` as a value of its own: a literal operand (`2.0`) becomes `let t = f64(2.0)`."""
    return x if x.name.isidentifier() and x.name not in ("true", "false") else \
        x.recording.let(f"{x.element}({x.name})", x.axes, x.element)


def constant_array(recording: Recording, array: np.ndarray) -> Traced:
    """A small NumPy constant written out in index notation, its elements chosen by
    position through a balanced tree of `where`s (so its nesting grows as log₂ of its
    size): `let c[i in 0..3] = f64(where(i < 1, 1.0, where(i < 2, 2.0, 4.0)));`."""
    if array.size > CONSTANT_LIMIT or array.size == 0:
        raise TraceError(f"a constant array of shape {array.shape} cannot be written in "
                         f"Reverie source ({user_line()}): pass it as an argument of the "
                         f"traced function")
    element = DTYPE_NAMES[array.dtype]
    values = [float_source(float(v)) if element in FLOAT_NAMES else str(v).lower()
              for v in array.ravel().tolist()]

    def chosen(i: str, low: int, high: int) -> str:
        """The element at position `i`, known to lie in low..high (exclusive)."""
        if high - low == 1:
            return values[low]
        middle = (low + high) // 2
        return f"where({i} < {middle}, {chosen(i, low, middle)}, {chosen(i, middle, high)})"

    def element_at(i: str) -> str:
        text = chosen(i, 0, len(values))
        return f"{element}({text})" if element != "bool" else text

    flat = recording.index_let([("c", str(array.size))], element_at,
                               (Axis(array.size, str(array.size)),), element)
    return flat.reshape(array.shape) if array.ndim != 1 else flat


def stack(values: Sequence[Any], axis: int = 0) -> Traced:
    """`np.stack`: the values (traced, numbers, nested lists) along a new axis."""
    if not values:
        raise TraceError(f"np.stack of no values ({user_line()}): a traced array needs "
                         f"at least one element")
    traced = next((v for v in values if isinstance(v, Traced)), None)
    if traced is None:
        traced = next(v for v in map(_first_traced, values) if v is not None)
    recording = traced.recording
    parts = [strong(operand(recording, v, traced.element)) for v in values]
    target = functools.reduce(lambda a, b: _promoted(a, b)[0] if a.element != b.element
                              else a, parts).element
    parts = [p.astype(target) for p in parts]
    rank = parts[0].ndim
    if any(p.ndim != rank for p in parts):
        raise TraceError(f"np.stack of shapes {[p.shape for p in parts]}: all must have "
                         f"the same shape ({user_line()})")
    axis = axis % (rank + 1)
    expanded = [p.reshape(p.shape[:axis] + (1,) + p.shape[axis:]) for p in parts]
    return concatenate(expanded, axis) if len(expanded) > 1 else expanded[0]


def _first_traced(value: Any) -> Traced | None:
    """The first traced value inside nested lists, tuples or object arrays, or None."""
    if isinstance(value, Traced):
        return value
    if isinstance(value, list | tuple) or (isinstance(value, np.ndarray)
                                           and value.dtype == object):
        return next((t for t in map(_first_traced, value) if t is not None), None)
    return None


PROMOTION_ORDER = ("bool", "i32", "i64", "f32", "f64")  # torch's: a float beats an int


def _promoted(left: Traced, right: Traced) -> tuple[Traced, Traced]:
    """Two operands of different element types, both converted to the type their
    recording's library gives the result: NumPy's (`f32 + i64` is f64) for rv.trace,
    torch's (`f32 + i64` is f32: a float operand's type wins over an integer's) for rv.fx."""
    if left.recording.promotion == "torch":
        rank = {element: i for i, element in enumerate(PROMOTION_ORDER)}
        target = max(left.element, right.element, key=lambda e: rank.get(e, -1))
    else:
        target = DTYPE_NAMES[np.result_type(*(NUMPY_DTYPES[t.element] for t in (left, right)))]
    return tuple(t if t.element == target else t.recording.let(
        f"{target}({t.name})", t.axes, target) for t in (left, right))  # type: ignore[return-value]


def _matmul(a: Traced, b: Traced) -> Traced:
    """NumPy `matmul` shapes (docs/language.md §8): a 1-D operand's axis is contracted and dropped,
    the axes before the last two are batch axes, broadcast against each other."""
    if not a.ndim or not b.ndim:
        raise TraceError(f"@ takes operands of at least one dimension, got {a.shape} and "
                         f"{b.shape} ({user_line()}): use * for a scalar")
    a.recording.same(a.axes[-1], b.axes[0 if b.ndim == 1 else -2], f"@ of shapes {a.shape} "
                     f"and {b.shape}: inner sizes differ")
    batch = broadcast(a.axes[:-2], b.axes[:-2], a.recording)
    axes = batch + a.axes[-2:-1] + (b.axes[-1:] if b.ndim > 1 else ())
    return a.recording.let(f"{a.name} @ {b.name}", axes, a.element)


def where(cond: Any, a: Any, b: Any) -> Traced:
    traced = next(v for v in (cond, a, b) if isinstance(v, Traced))
    recording = traced.recording
    element = next((v.element for v in (a, b) if isinstance(v, Traced)), "f64")
    c, x, y = (operand(recording, cond, "bool"), operand(recording, a, element),
               operand(recording, b, element))
    axes = broadcast(broadcast(c.axes, x.axes, recording), y.axes, recording)
    return recording.let(f"where({c.name}, {x.name}, {y.name})", axes, element)


def concatenate(values: Sequence[Any], axis: int | None = 0, out: Any = None,
                dtype: Any = None, casting: Any = None) -> Traced:
    """`np.concatenate`: the values joined along `axis` (None: each flattened); their
    other axes shared (`Recording.same`) and their types promoted."""
    ignored("np.concatenate", {"out": out, "dtype": dtype})
    traced = next(t for t in map(_first_traced, values) if t is not None)
    values = [strong(operand(traced.recording, v, traced.element)) for v in values]
    if axis is None:
        return concatenate([v.ravel() for v in values], 0)
    target = functools.reduce(lambda a, b: _promoted(a, b)[0] if a.element != b.element
                              else a, values).element
    values = [v.astype(target) for v in values]
    first = values[0]
    if not first.ndim or any(v.ndim != first.ndim for v in values):
        raise TraceError(f"np.concatenate of shapes {[v.shape for v in values]}: all need "
                         f"the same number of axes, at least one ({user_line()})")
    axis %= first.ndim
    shared = tuple(functools.reduce(lambda a, b, i=i: first.recording.same(
        a, b, "np.concatenate"), (v.axes[i] for v in values)) if i != axis else None
        for i in range(first.ndim))
    size = sum(v.axes[axis].size for v in values)
    dims = [v.axes[axis].dim for v in values]
    dim = str(size) if all(d.isdigit() for d in dims) else functools.reduce(
        lambda a, b: combine(a, "+", b), dims)
    axes = shared[:axis] + (Axis(size, dim),) + shared[axis + 1:]
    if len(values) == 1:
        return first
    names = ", ".join(v.name for v in values)
    return first.recording.let(f"concat(({names},), axis={axis})", axes, first.element)



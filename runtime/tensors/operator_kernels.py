"""Compiled kernels behind the Tensor operators: arithmetic and comparisons, `@`, the
elementwise built-ins (`exp`, `tanh`, ...), reductions (sum, mean, max, min) and casts.

Consumes operands (anything with `.dtype` and `.shape`, such as `rv.Tensor` or a NumPy
array, or a Python scalar) and produces a kernel: a one-function Reverie module generated
for the operands' dtypes and broadcast pattern, compiled once and cached. Calling the kernel
on Tensors that require grad records the call, so operators differentiate like any other
compiled function (their VJPs are compiled from the generated source's adjoint IR). The
compiler is the public layer's, which the run time never imports: `reverie/__init__.py`
hands it in, and this module reaches it as `kernel_protocol.compile_function`.

The language broadcasts symbolically: two different dimension names never broadcast. So
dimensions that must match share a name and size-1 dimensions that broadcast are the
literal 1. For `a: (3, 4) + b: (4,)` and `a: (3, 1) * b: (4,)` this generates

    fn add_op(a: f64[D0, D1], b: f64[D1]) -> f64[D0, D1] { return a + b; }
    fn mul_op(a: f64[D0, 1], b: f64[D1]) -> f64[D0, D1] { return a * b; }

Dtypes follow NumPy 2 promotion: Python scalars are weak (`f32 tensor * 2.0` stays f32),
true division of integers gives f64, `sum` of small integers gives i64, float-only
built-ins (`exp`) of integers give f64. Comparisons give bool. Which ops exist, which dtype
classes each takes and which are built-ins comes from the op table
(`compiler/ir/elementwise.py`), never from a list kept here. Python scalars are
parameters, not literals, so `x * 2.0` and `x * 3.0` share one kernel. Kernels are compiled
with backend `BACKEND` and cached by (op, operand dtypes, dimension tokens), in bounded
least-recently-used caches (`KERNEL_CACHE_SIZE` kernels; `KERNEL_CACHE_SIZE` operand
descriptions per operator, which include shapes and so could otherwise grow without bound).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from reverie.compiler.ir.elementwise import ELEMENTWISE
from reverie.compiler.ir.op_defs import dtype_class
from reverie.runtime.native.kernel_protocol import CompiledKernel, compile_function
from reverie.runtime.native.lru import LruCache

BACKEND = "native"

REVERIE_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
                  np.dtype(np.float16): "f16", np.dtype(np.int32): "i32",
                  np.dtype(np.int64): "i64", np.dtype(np.bool_): "bool"}
# The float dtypes, whose tensors can require grad (float64 first: `dtype in FLOAT_KINDS` is
# then one identity check in the common case). ml_dtypes' bfloat16 joins both on first
# sight (`reverie_dtype`): importing ml_dtypes for the tables would cost every start ~1 s.
FLOAT_KINDS = [np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16)]
FLOATS = ("f32", "f64", "bf16", "f16")
NUMERIC = (*FLOATS, "i32", "i64")
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "matmul": "@",
           "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
CALLED = {"maximum": "max", "minimum": "min"}  # binary ops the language spells as calls
BINARY_OPS = (*(op for op in SYMBOLS if op != "matmul"), *CALLED)
# the elementwise built-ins of docs/language.md §8 that take one tensor: `exp(x)`, `tanh(x)`, ...
UNARY_BUILTINS = tuple(name for name, row in ELEMENTWISE.items()
                       if row.builtin and row.arity == 1)
REDUCTIONS = ("sum", "mean", "max", "min")

# torch.maximum/minimum: where an operand is NaN the result is NaN and the gradient reaches
# both operands (torch's rule), as `a + b` there gives; `max(a, b)` alone, which
# Tensor.clamp is built from, sends it to neither (torch.clamp's rule)
NAN_TO_BOTH = "where({a} != {a} or {b} != {b}, {a} + {b}, {body})"
INDEX_REDUCTIONS = ("argmax", "argmin")

KERNEL_CACHE_SIZE = 512
_KERNELS: LruCache[tuple, CompiledKernel] = LruCache(KERNEL_CACHE_SIZE)

Signature = tuple[str, tuple[str, ...]]  # (Reverie dtype, dimension tokens)


def reverie_dtype(dtype: np.dtype) -> str:
    """The Reverie element type of a NumPy dtype (TypeError for dtypes the language lacks);
    ml_dtypes' bfloat16 is entered in REVERIE_DTYPES and FLOAT_KINDS the first time."""
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16" and dtype not in REVERIE_DTYPES:
        REVERIE_DTYPES[dtype] = "bf16"
        FLOAT_KINDS.append(dtype)
    try:
        return REVERIE_DTYPES[dtype]
    except KeyError:
        raise TypeError(f"Reverie tensors hold float32, float64, bfloat16, float16, int32, "
                        f"int64 or bool data, not {dtype}; convert with "
                        f".astype(np.float64)") from None


def _is_scalar(value: object) -> bool:
    """A Python number (weakly typed), as opposed to a NumPy scalar or array."""
    return isinstance(value, int | float) and not isinstance(value, np.generic)


def _type_text(signature: Signature) -> str:
    """A signature as Reverie source: `f64[D0, 1]`."""
    dtype, tokens = signature
    return f"{dtype}[{', '.join(tokens)}]" if tokens else dtype


def cached_kernel(key: tuple, params: list[tuple[str, Signature]], result: Signature,
                  body: str, statements: str = "") -> CompiledKernel:
    """The kernel for `key`, generating and compiling its source on first use: `fn
    <key[0]>_op(params) -> result { statements return body; }`."""
    kernel = _KERNELS.get(key)
    if kernel is None:
        name = f"{key[0]}_op"
        args = ", ".join(f"{p}: {_type_text(s)}" for p, s in params)
        source = (f"fn {name}({args}) -> {_type_text(result)} "
                  f"{{ {statements}return {body}; }}\n")
        kernel = compile_function(source, name, f"<tensor op {name}>", BACKEND)
        kernel = _KERNELS.setdefault(key, kernel)
    return kernel


def _converted(name: str, dtype: str, target: str) -> str:
    """Source for operand `name` cast to `target` when its dtype differs."""
    return name if dtype == target else f"{target}({name})"


def _broadcast_tokens(shapes: list[tuple[int, ...]]) -> tuple[list[tuple[str, ...]],
                                                               tuple[str, ...]]:
    """Dimension tokens for each operand and for the result of NumPy broadcasting."""
    rank = max(len(s) for s in shapes)
    operand_tokens: list[list[str]] = [[] for _ in shapes]
    for axis in range(rank):
        sizes = [s[axis - rank + len(s)] if axis >= rank - len(s) else None for s in shapes]
        wide = {size for size in sizes if size not in (None, 1)}
        if len(wide) > 1:
            shown = " ".join(str(s) for s in shapes)
            raise ValueError(f"operands could not be broadcast together with shapes {shown}")
        name = f"D{axis}"
        for tokens, size in zip(operand_tokens, sizes, strict=True):
            if size is not None:
                tokens.append("1" if size == 1 and wide else name)
    return [tuple(t) for t in operand_tokens], tuple(f"D{axis}" for axis in range(rank))


def _memoised(describe: Callable[..., tuple]
              ) -> Callable[[Callable[..., CompiledKernel]], Callable[..., CompiledKernel]]:
    """Memoise a kernel generator by `describe(*args)`, a key that is cheap to compute (the
    generator's own signature building is not: it runs once per key)."""
    def decorate(generate: Callable[..., CompiledKernel]) -> Callable[..., CompiledKernel]:
        memo: LruCache[tuple, CompiledKernel] = LruCache(KERNEL_CACHE_SIZE)

        @functools.wraps(generate)
        def factory(*args: object) -> CompiledKernel:
            key = describe(*args)
            kernel = memo.get(key)
            if kernel is None:
                kernel = memo.setdefault(key, generate(*args))
            return kernel
        return factory
    return decorate


def _describe(value: object) -> tuple:
    """A Python scalar by its type (weak dtype), an array-like by dtype and shape."""
    return (type(value),) if _is_scalar(value) else (value.dtype, value.shape)


def _binary_compute_dtype(op: str, operands: list[object]) -> str:
    """The dtype `a <op> b` computes in (NumPy promotion; `/` of integers in f64), or the
    TypeError saying that the op is not defined for it (the op table's dtype classes)."""
    promoted = reverie_dtype(np.result_type(*[x if _is_scalar(x) else x.dtype
                                              for x in operands]))
    allowed = ELEMENTWISE[op].operands
    if op == "div" and dtype_class(promoted) == "int":
        return "f64"
    if op == "pow" and dtype_class(promoted) == "int":
        raise TypeError("'**' on integer tensors is not supported; convert the base to a "
                        "float tensor first (.astype(np.float64))")
    if dtype_class(promoted) not in allowed:
        spelled = SYMBOLS.get(op) or CALLED[op]
        raise TypeError(f"'{spelled}' is not defined for {promoted} tensors; it takes "
                        f"{' or '.join(allowed)} tensors")
    return promoted


@_memoised(lambda op, a, b, nan_to_both=False: (op, _describe(a), _describe(b), nan_to_both))
def binary_kernel(op: str, a: object, b: object, nan_to_both: bool = False) -> CompiledKernel:
    """The kernel computing `a <op> b` with broadcasting, for an op of BINARY_OPS
    (arithmetic, comparisons giving bool, elementwise `maximum`/`minimum`); with
    `nan_to_both`, a NaN operand sends the gradient to both operands (`NAN_TO_BOTH`)."""
    operands = [a, b]
    compute = _binary_compute_dtype(op, operands)
    dtypes = [compute if _is_scalar(x) else reverie_dtype(x.dtype) for x in operands]
    shapes = [() if _is_scalar(x) else tuple(x.shape) for x in operands]
    (tokens_a, tokens_b), result_tokens = _broadcast_tokens(shapes)
    params = [("a", (dtypes[0], tokens_a)), ("b", (dtypes[1], tokens_b))]
    left, right = _converted("a", dtypes[0], compute), _converted("b", dtypes[1], compute)
    body = f"{CALLED[op]}({left}, {right})" if op in CALLED else f"{left} {SYMBOLS[op]} {right}"
    if nan_to_both and dtype_class(compute) == "float":
        body = NAN_TO_BOTH.format(a=left, b=right, body=body)
    result = ELEMENTWISE[op].result or compute
    return cached_kernel((op, *params, nan_to_both), params, (result, result_tokens), body)


def _unary_source(op: str, a: object, spelled: str) -> CompiledKernel:
    """The kernel applying unary op `op` (written `spelled`, with `{}` for the operand) to
    `a`: in `a`'s dtype where the op table allows it, else integers in f64."""
    dtype = reverie_dtype(a.dtype)
    allowed = ELEMENTWISE[op].operands
    if dtype_class(dtype) in allowed:
        compute = dtype
    elif dtype_class(dtype) == "int" and "float" in allowed:
        compute = "f64"
    else:
        raise TypeError(f"'{op}' is not defined for {dtype} tensors; it takes "
                        f"{' or '.join(allowed)} tensors")
    tokens = tuple(f"D{i}" for i in range(len(a.shape)))
    return cached_kernel((op, dtype, tokens), [("a", (dtype, tokens))], (compute, tokens),
                   spelled.format(_converted("a", dtype, compute)))


@_memoised(lambda c, a, b: (_describe(c), _describe(a), _describe(b)))
def where_kernel(condition: object, a: object, b: object) -> CompiledKernel:
    """The kernel computing `where(condition, a, b)` with broadcasting: `a` where the bool
    `condition` holds, else `b`, in their promoted dtype."""
    if np.dtype(condition.dtype) != np.bool_:
        raise TypeError(f"where() takes a bool condition, not {condition.dtype}")
    compute = reverie_dtype(np.result_type(*[x if _is_scalar(x) else x.dtype for x in (a, b)]))
    dtypes = ["bool"] + [compute if _is_scalar(x) else reverie_dtype(x.dtype) for x in (a, b)]
    shapes = [() if _is_scalar(x) else tuple(x.shape) for x in (condition, a, b)]
    tokens, result_tokens = _broadcast_tokens(shapes)
    params = [(name, (dtype, t)) for name, dtype, t in zip("cab", dtypes, tokens, strict=True)]
    body = f"where(c, {_converted('a', dtypes[1], compute)}, {_converted('b', dtypes[2], compute)})"
    return cached_kernel(("where", *params), params, (compute, result_tokens), body)


@_memoised(lambda a, low, high: (_describe(a), low is None or _describe(low),
                                 high is None or _describe(high)))
def clamp_kernel(a: object, low: object, high: object) -> CompiledKernel:
    """The kernel computing torch's `clamp(a, low, high)` (either bound may be None; they
    broadcast): `a` where it lies within the bounds, the bounds included, so the gradient
    reaches `a` there whole (a tie with a bound included, where `max(a, low)` would halve
    it), else `min(max(a, low), high)`, whose rules give a bound its gradient where it wins
    and nothing at a NaN entry or bound (torch.clamp's)."""
    bounds = [(name, b) for name, b in (("lo", low), ("hi", high)) if b is not None]
    operands = [a, *(b for _, b in bounds)]
    compute = _binary_compute_dtype("maximum", operands)
    dtypes = [compute if _is_scalar(x) else reverie_dtype(x.dtype) for x in operands]
    tokens, result = _broadcast_tokens([() if _is_scalar(x) else tuple(x.shape)
                                        for x in operands])
    names = ["a", *(name for name, _ in bounds)]
    params = [(n, (d, t)) for n, d, t in zip(names, dtypes, tokens, strict=True)]
    value = _converted("a", dtypes[0], compute)
    clamped, tests = value, []
    for (name, _), dtype in zip(bounds, dtypes[1:], strict=True):
        bound = _converted(name, dtype, compute)
        clamped = f"{'max' if name == 'lo' else 'min'}({clamped}, {bound})"
        tests.append(f"{value} {'>=' if name == 'lo' else '<='} {bound}")
    body = clamped
    if dtype_class(compute) == "float":
        body = f"where({' and '.join(tests)}, {value}, {clamped})"
    return cached_kernel(("clamp", *params), params, (compute, result), body)


@_memoised(lambda op, a: (op, a.dtype, len(a.shape)))
def unary_kernel(op: str, a: object) -> CompiledKernel:
    """The kernel computing built-in `op(a)` (one of UNARY_BUILTINS) elementwise."""
    if op not in UNARY_BUILTINS:
        raise ValueError(f"'{op}' is not an elementwise built-in; they are "
                         f"{', '.join(UNARY_BUILTINS)}")
    return _unary_source(op, a, f"{op}({{}})")


@_memoised(lambda a: (a.dtype, len(a.shape)))
def neg_kernel(a: object) -> CompiledKernel:
    """The kernel computing `-a`."""
    return _unary_source("neg", a, "-{}")


@_memoised(lambda a, dtype: (a.dtype, len(a.shape), dtype))
def cast_kernel(a: object, dtype: np.dtype) -> CompiledKernel:
    """The kernel converting `a` to `dtype`."""
    source, target = reverie_dtype(a.dtype), reverie_dtype(dtype)
    tokens = tuple(f"D{i}" for i in range(len(a.shape)))
    return cached_kernel(("cast", source, target, tokens), [("a", (source, tokens))],
                   (target, tokens), f"{target}(a)")


def normalise_axes(axis: int | tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    """`axis` as sorted non-negative axes (all axes for None); ValueError when out of range."""
    if axis is None:
        return tuple(range(rank))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for ax in axes:
        if not -rank <= ax < rank:
            raise ValueError(f"axis {ax} is out of bounds for a tensor of rank {rank}")
    normalised = sorted(ax % rank for ax in axes) if rank else []
    if len(set(normalised)) != len(normalised):
        raise ValueError(f"repeated axis in {axis}")
    return tuple(normalised)


@_memoised(lambda op, a, axis, keepdims: (op, a.dtype, len(a.shape),
                                          tuple(axis) if isinstance(axis, list) else axis,
                                          keepdims))
def reduce_kernel(op: str, a: object, axis: int | tuple[int, ...] | None,
                  keepdims: bool) -> CompiledKernel:
    """The kernel computing reduction `op` (REDUCTIONS) of `a` over `axis` (NumPy result
    dtypes: `mean` of integers is f64, `sum` of small integers i64, `max`/`min` keep it)."""
    dtype = reverie_dtype(a.dtype)
    axes = normalise_axes(axis, len(a.shape))
    if op not in REDUCTIONS:
        raise ValueError(f"'{op}' is not a Tensor reduction; they are {', '.join(REDUCTIONS)}")
    if op in ("max", "min") and dtype not in NUMERIC:
        raise TypeError(f"'{op}' is not defined for {dtype} tensors; convert with .astype")
    if op == "mean":
        compute = dtype if dtype in FLOATS else "f64"
    elif op == "sum":
        compute = dtype if dtype in (*FLOATS, "i64") else "i64"
    else:
        compute = dtype
    tokens = tuple(f"D{i}" for i in range(len(a.shape)))
    result = tuple("1" if i in axes else t for i, t in enumerate(tokens) if keepdims
                   or i not in axes)
    options = ""
    if axis is not None:
        options += f", axis=({', '.join(map(str, axes))}{',' if len(axes) == 1 else ''})"
    if keepdims:
        options += ", keepdims=true"
    body = f"{op}({_converted('a', dtype, compute)}{options})"
    return cached_kernel((op, dtype, tokens, axes if axis is not None else None, keepdims),
                   [("a", (dtype, tokens))], (compute, result), body)


@_memoised(lambda op, a, axis: (op, a.dtype, len(a.shape), axis))
def index_reduce_kernel(op: str, a: object, axis: int) -> CompiledKernel:
    """The kernel computing `argmax`/`argmin` (INDEX_REDUCTIONS) of `a` along non-negative
    `axis`, as i64: the first of equal entries, the first NaN where there is one (the
    indices of torch's `max(dim)`)."""
    dtype = reverie_dtype(a.dtype)
    if dtype not in NUMERIC:
        raise TypeError(f"'{op}' is not defined for {dtype} tensors; convert with .astype")
    tokens = tuple(f"D{i}" for i in range(len(a.shape)))
    result = tokens[:axis] + tokens[axis + 1:]
    return cached_kernel((op, dtype, tokens, axis), [("a", (dtype, tokens))], ("i64", result),
                         f"{op}(a, axis={axis})")


@_memoised(lambda a, b: (_describe(a), _describe(b)))
def matmul_kernel(a: object, b: object) -> CompiledKernel:
    """The kernel computing `a @ b` by NumPy `matmul` rules: a 1-D operand is a row (left)
    or a column (right) whose axis the result drops, and the axes before the last two are
    batch axes that broadcast (`[B, 1, M, K] @ [H, K, N]` is `[B, H, M, N]`)."""
    shapes = (tuple(a.shape), tuple(b.shape))
    if not all(shapes):
        raise ValueError(f"'@' does not take 0-d tensors, got shapes {shapes[0]} and "
                         f"{shapes[1]}; use '*'")
    compute = reverie_dtype(np.result_type(a.dtype, b.dtype))
    if compute not in NUMERIC:
        raise TypeError(f"'@' is not defined for {compute} tensors")
    if shapes[0][-1] != shapes[1][-2 if len(shapes[1]) > 1 else 0]:
        raise ValueError(f"'@' of shapes {shapes[0]} and {shapes[1]}: the inner sizes differ")
    try:
        (batch_a, batch_b), batch = _broadcast_tokens([shapes[0][:-2], shapes[1][:-2]])
    except ValueError:
        raise ValueError(f"'@' of shapes {shapes[0]} and {shapes[1]}: the batch axes do not "
                         f"broadcast") from None
    tokens_a = (*batch_a, "M", "K") if len(shapes[0]) > 1 else ("K",)
    tokens_b = (*batch_b, "K", "N") if len(shapes[1]) > 1 else ("K",)
    result = (*batch, *tokens_a[-2:-1], *(tokens_b[-1:] if len(shapes[1]) > 1 else ()))
    dtypes = (reverie_dtype(a.dtype), reverie_dtype(b.dtype))
    params = [("a", (dtypes[0], tokens_a)), ("b", (dtypes[1], tokens_b))]
    body = f"{_converted('a', dtypes[0], compute)} @ {_converted('b', dtypes[1], compute)}"
    return cached_kernel(("matmul", *params), params, (compute, result), body)

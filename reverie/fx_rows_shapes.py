"""Rows of the `rv.fx` target table (`fx_targets.py`): the shapes family.

Each table has the form of `fx_targets`' own: `FUNCTIONS` (call_function target ->
(recording, arguments accepted at one value)), `METHODS` (Tensor method name -> the same),
`MODULES` (nn.Module class -> (module, recorded weights, *inputs) -> value). `fx_targets`
merges them into the one table.

    squeeze/unsqueeze, unflatten, view_as   reshapes (negative dims count from the end)
    split/chunk/unbind     a tuple of slices, which the graph's `getitem` nodes read
    stack                  each tensor given a new axis, concatenated
    expand/broadcast_to    index notation reading index 0 of each size-1 axis
    broadcast_tensors      each expanded to the shape they broadcast to (broadcast_shapes)
    repeat/tile            new size-1 axes beside the repeated ones, expanded, reshaped
    narrow/select          slices and integer subscripts
    float/double/half/bfloat16/long/int/bool, to(dtype), type(dtype), type_as
                           conversions (a cast; `to` on the CPU only)
    factories              `arange`, `zeros`, `ones`, `full`, `empty`, `randn`, `rand`, their
                           `*_like` and `Tensor.new_*` forms: made by torch at every call
                           (`made`), so values and random draws are eager's exactly
    fills                  `normal_`, `uniform_`, `exponential_`, ..., `fill_`, `zero_` of a
                           value the graph computed (`torch.empty(n).normal_()`, as
                           torch.distributions' `rsample` draws): a new tensor laid out as
                           it, made by the same call at every call

A factory's tensor is a kernel input made by torch when its segment runs, in graph order,
by the very call eager makes (`torch.randn_like(x)` on a tensor laid out as eager's `x`), so
under one `torch.manual_seed` the compiled model draws what eager draws; it carries no
gradient, as in eager.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from reverie.fx_functional import cast, refuse
from reverie.fx_rows_rule import rule_in
from reverie.torch_op import TORCH_DTYPES
from reverie.tracing import RECORDER_FILES, Axis, Traced, concatenate, host_input

RECORDER_FILES.add(__file__)

Emit = Callable[..., Any]

# The Reverie element type of each torch dtype a kernel holds (torch_op.TORCH_DTYPES inverted)
ELEMENTS = {dtype: name for name, dtype in TORCH_DTYPES.items()}
# in-place methods whose result does not depend on the values written over (`fill`), and
# the names of their positional parameters
FILLS = {"normal_": ("mean", "std"), "uniform_": ("from", "to"), "exponential_": ("lambd",),
         "log_normal_": ("mean", "std"), "cauchy_": ("median", "sigma"), "geometric_": ("p",),
         "bernoulli_": ("p",), "random_": ("from", "to"), "fill_": ("value",), "zero_": ()}


# ---------------------------------------------------------------- dimensions

def axis(target: str, dim: int, rank: int, name: str = "dim") -> int:
    """`dim` of a tensor of `rank` axes (a negative one counts from the end; a 0-d tensor
    takes 0 and -1, as torch's), or a refusal naming it where torch raises."""
    wrap = max(rank, 1)
    if not -wrap <= dim < wrap:
        raise refuse(target, name, dim, f"out of range for {rank} dimensions")
    return dim % wrap


def _sizes(size: Sequence[Any]) -> tuple[Any, ...]:
    """torch's `*size`: sizes as separate arguments, or one sequence of them."""
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], Sequence) else tuple(size)


# ---------------------------------------------------------------- reshapes

def squeeze(input: Traced, dim: Any = None) -> Traced:
    """torch.squeeze: the size-1 axes among `dim` (an int, a sequence, or every axis) gone."""
    dims = range(input.ndim) if dim is None else \
        {axis("squeeze", d, input.ndim) for d in (dim if isinstance(dim, Sequence) else [dim])}
    sizes = [n for i, n in enumerate(input.shape) if i not in dims or n != 1]
    return input if len(sizes) == input.ndim else input.reshape(sizes)


def unsqueeze(input: Traced, dim: int) -> Traced:
    """torch.unsqueeze: a new axis of size 1 at `dim` of the result."""
    sizes = list(input.shape)
    sizes.insert(axis("unsqueeze", dim, input.ndim + 1), 1)
    return input.reshape(sizes)


def unflatten(input: Traced, dim: int, sizes: Sequence[int]) -> Traced:
    """torch.unflatten: axis `dim` split into `sizes` (one of them may be -1)."""
    d = axis("unflatten", dim, input.ndim)
    return input.reshape(list(input.shape[:d]) + list(sizes) + list(input.shape[d + 1:]))


def view_as(input: Traced, other: Traced) -> Traced:
    return input.reshape(other.shape)


# ---------------------------------------------------------------- pieces

def _along(x: Traced, dim: int, key: Any) -> Traced:
    """x subscripted by `key` (a slice or an index) along axis `dim`."""
    return x[(slice(None),) * dim + (key,)]


def split_with_sizes(input: Traced, split_sizes: Sequence[int], dim: int = 0
                     ) -> tuple[Traced, ...]:
    """The pieces of `split_sizes` along `dim`, which must add up to its size."""
    d = axis("split", dim, input.ndim)
    if sum(split_sizes) != input.shape[d] or any(n < 0 for n in split_sizes):
        raise refuse("split", "split_size_or_sections", list(split_sizes),
                     f"sizes adding up to {input.shape[d]}")
    ends = [sum(split_sizes[:i + 1]) for i in range(len(split_sizes))]
    return tuple(_along(input, d, slice(end - n, end)) for n, end in zip(split_sizes, ends,
                                                                          strict=True))


def split(tensor: Traced, split_size_or_sections: Any, dim: int = 0) -> tuple[Traced, ...]:
    """torch.split: pieces of one size (the last one shorter), or of the sizes listed."""
    if isinstance(split_size_or_sections, Sequence):
        return split_with_sizes(tensor, split_size_or_sections, dim)
    size, n = tensor.shape[axis("split", dim, tensor.ndim)], split_size_or_sections
    if n <= 0:
        raise refuse("split", "split_size_or_sections", n, "a positive size")
    return split_with_sizes(tensor, [min(n, size - start) for start in range(0, size, n)], dim)


def split_method(input: Traced, split_size: Any, dim: int = 0) -> tuple[Traced, ...]:
    """Tensor.split, whose parameter is `split_size`."""
    return split(input, split_size, dim)


def chunk(input: Traced, chunks: int, dim: int = 0) -> tuple[Traced, ...]:
    """torch.chunk: pieces of ⌈size / chunks⌉ (so there may be fewer than `chunks`)."""
    if chunks <= 0:
        raise refuse("chunk", "chunks", chunks, "a positive count")
    size = input.shape[axis("chunk", dim, input.ndim)]
    return split(input, max(-(-size // chunks), 1), dim)


def unbind(input: Traced, dim: int = 0) -> tuple[Traced, ...]:
    d = axis("unbind", dim, input.ndim)
    return tuple(_along(input, d, i) for i in range(input.shape[d]))


def narrow(input: Traced, dim: int, start: int, length: int) -> Traced:
    """torch.narrow: `length` entries from `start` (negative: from the end) along `dim`."""
    d = axis("narrow", dim, input.ndim)
    if not -input.shape[d] <= start <= input.shape[d]:
        raise refuse("narrow", "start", start, f"out of range for size {input.shape[d]}")
    first = start % input.shape[d] if start < 0 else start
    if not 0 <= length <= input.shape[d] - first:
        raise refuse("narrow", "length", length, f"past the end of size {input.shape[d]}")
    return _along(input, d, slice(first, first + length))


def select(input: Traced, dim: int, index: int) -> Traced:
    d = axis("select", dim, input.ndim)
    return _along(input, d, axis("select", index, input.shape[d], "index"))


def stack(tensors: Sequence[Traced], dim: int = 0) -> Traced:
    """torch.stack: each tensor given an axis of size 1 at `dim`, concatenated along it."""
    d = axis("stack", dim, tensors[0].ndim + 1)
    return concatenate([unsqueeze(t, d) for t in tensors], axis=d)


# ---------------------------------------------------------------- broadcasts

def broadcast_to(input: Traced, size: Sequence[int]) -> Traced:
    """`input` read at index 0 of each axis of size 1 that grows, and of each new leading
    axis: `let t[e0 in 0..3, e1] = x[e1];` (its gradient sums over the copies)."""
    sizes = _sizes(size)
    lead = len(sizes) - input.ndim
    if lead < 0 or any(n == -1 for n in sizes[:lead]):
        raise refuse("expand", "size", list(sizes), f"for a tensor of shape {input.shape}")
    old = [1] * lead + list(input.shape)
    new = [o if n == -1 else n for n, o in zip(sizes, old, strict=True)]
    if any(o not in (1, n) for o, n in zip(old, new, strict=True)):
        raise refuse("expand", "size", list(sizes), f"for a tensor of shape {input.shape}")
    if not lead and new == old:
        return input
    rec = input.recording
    names = [rec.claim(f"e{i}") for i in range(len(new))]
    ranges = [f"{e} in 0..{n}" if o != n or i < lead else e
              for i, (e, o, n) in enumerate(zip(names, old, new, strict=True))]
    reads = ["0" if o != n else e for e, o, n in zip(names[lead:], old[lead:], new[lead:],
                                                     strict=True)]
    expr = f"{input.name}[{', '.join(reads)}]" if reads else input.name
    return rec.let(expr, tuple(Axis(n, str(n)) for n in new), input.element,
                   index=f"[{', '.join(ranges)}]")


def broadcast_shapes(*shapes: Sequence[Any]) -> tuple[Any, ...]:
    """torch.broadcast_shapes: the sizes aligned from the right, each axis the one size
    other than 1 (if any)."""
    rank = max(len(shape) for shape in shapes)
    result = []
    for sizes in zip(*([1] * (rank - len(shape)) + list(shape) for shape in shapes),
                     strict=True):
        grown = {n for n in sizes if n != 1}
        if len(grown) > 1:
            raise refuse("broadcast_shapes", "shapes", [tuple(s) for s in shapes],
                         "shapes that broadcast")
        result.append(grown.pop() if grown else 1)
    return tuple(result)


def broadcast_tensors(*tensors: Traced) -> tuple[Traced, ...]:
    """torch.broadcast_tensors: each tensor expanded to the shape they broadcast to."""
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(broadcast_to(t, shape) for t in tensors)


def expand(input: Traced, *size: Any, implicit: bool = False) -> Traced:
    """Tensor.expand (`implicit` only marks the call for TorchScript's tracer)."""
    return broadcast_to(input, _sizes(size))


def expand_as(input: Traced, other: Traced) -> Traced:
    return broadcast_to(input, other.shape)


# ---------------------------------------------------------------- conversions

def element(target: str, dtype: Any) -> str:
    """The Reverie name of torch dtype `dtype`, or a refusal naming the argument."""
    if dtype not in ELEMENTS:
        raise refuse(target, "dtype", dtype, "Reverie holds " + ", ".join(map(str, ELEMENTS)))
    return ELEMENTS[dtype]


def converted(dtype: torch.dtype) -> Emit:
    """Tensor.float / double / half / bfloat16 / long / int / bool: `input` cast to
    `dtype`."""
    def emit(input: Traced, memory_format: Any = torch.preserve_format) -> Traced:
        return cast(input, ELEMENTS[dtype])

    return emit


def to(input: Traced, *args: Any, dtype: Any = None, device: Any = None,
       non_blocking: bool = False, copy: bool = False,
       memory_format: Any = torch.preserve_format) -> Traced:
    """Tensor.to(dtype), to(device, dtype), to(other): a cast (a value, so `copy` changes
    nothing); a device other than the CPU is refused (Reverie's kernels run there)."""
    for arg in (*args, *([] if device is None else [device])):
        if isinstance(arg, torch.dtype):
            dtype = arg
        elif isinstance(arg, Traced):
            dtype = TORCH_DTYPES[arg.element]
        elif not isinstance(arg, str | torch.device) or torch.device(arg).type != "cpu":
            raise refuse("Tensor.to", "argument", arg, "a dtype, a tensor or the CPU")
    return input if dtype is None else cast(input, element("Tensor.to", dtype))


def type_(input: Traced, dtype: Any = None, non_blocking: bool = False) -> Traced:
    """Tensor.type(dtype): a cast (the type's name, `type()` without one, is a string that
    Dynamo folds before a graph holds it; a tensor-type name is refused)."""
    if not isinstance(dtype, torch.dtype):
        raise refuse("Tensor.type", "dtype", dtype, "a torch dtype")
    return cast(input, element("Tensor.type", dtype))


def type_as(input: Traced, other: Traced) -> Traced:
    return cast(input, other.element)


def repeat(input: Traced, *repeats: Any) -> Traced:
    """Tensor.repeat: with x's shape padded by leading 1s to len(repeats), axis i becomes
    r_i copies of itself: x reshaped to (1, s0, 1, s1, …), expanded to (r0, s0, r1, s1,
    …) and reshaped to (r0·s0, r1·s1, …)."""
    counts = _sizes(repeats)
    if len(counts) < input.ndim or any(r < 1 for r in counts):
        raise refuse("repeat", "repeats", list(counts), f"at least {input.ndim} counts, each "
                     f"at least 1")
    shape = [1] * (len(counts) - input.ndim) + list(input.shape)
    pairs = [(r, s) for r, s in zip(counts, shape, strict=True)]
    spread = input.reshape([n for _, s in pairs for n in (1, s)])
    grown = broadcast_to(spread, [n for pair in pairs for n in pair])
    return grown.reshape([r * s for r, s in pairs])


def tile(input: Traced, dims: Sequence[int]) -> Traced:
    """torch.tile: `repeat`, with `dims` padded by leading 1s to the input's rank."""
    return repeat(input, *([1] * (input.ndim - len(dims)) + list(dims)))


# ---------------------------------------------------------------- factories

def made(make: Callable[[torch.Tensor | None], torch.Tensor],
         like: Traced | None = None) -> Traced:
    """A kernel input that `make(template)` makes at every call (`template` empty and laid
    out as eager's `like`, or None); rv.fx finds its shape and dtype by running `make` on a
    fake template (symbolic where `like`'s sizes are), which makes no data and draws
    nothing, and refuses a dtype Reverie does not hold by name."""
    return host_input(make, like)


def check_factory(target: str, layout: Any, device: Any, pin_memory: Any, requires_grad: bool,
                  **numbers: Any) -> None:
    """Refuse what a made tensor cannot be: sparse, off the CPU, pinned, or a leaf that
    requires grad (torch's defaults, None and False, are accepted); and `numbers` (sizes,
    bounds, a fill value) that are tensors of the graph rather than Python numbers."""
    if layout not in (None, torch.strided):
        raise refuse(target, "layout", layout, "Reverie's tensors are strided")
    if device is not None and torch.device(device).type != "cpu":
        raise refuse(target, "device", device, "Reverie's kernels run on the CPU")
    if pin_memory:
        raise refuse(target, "pin_memory", pin_memory)
    if requires_grad:
        raise refuse(target, "requires_grad", requires_grad, "a tensor made in the graph is "
                     "no leaf of the caller's")
    for name, value in numbers.items():
        if any(isinstance(v, Traced) for v in (value if isinstance(value, tuple) else
                                               (value,))):
            raise refuse(target, name, value, "Reverie takes a number known when compiling")


def sized(name: str) -> Emit:
    """torch.zeros / ones (`*size`)."""
    def emit(*size: Any, dtype: Any = None, layout: Any = None, device: Any = None,
             pin_memory: bool | None = False, requires_grad: bool = False) -> Traced:
        check_factory(name, layout, device, pin_memory, requires_grad, size=_sizes(size))
        return made(lambda _: getattr(torch, name)(_sizes(size), dtype=dtype))

    return emit


def empty(*size: Any, out: Any = None, dtype: Any = None, layout: Any = None,
          device: Any = None, requires_grad: bool = False, pin_memory: bool = False,
          memory_format: Any = torch.contiguous_format) -> Traced:
    """torch.empty: made by torch.empty at every call, so its values are eager's kind of
    value (whatever the memory held), read from a buffer torch owns."""
    check_factory("empty", layout, device, pin_memory, requires_grad, size=_sizes(size))
    if out is not None:
        raise refuse("empty", "out", out, "rv.fx makes no writes into a graph's tensors")
    return made(lambda _: torch.empty(_sizes(size), dtype=dtype, memory_format=memory_format))


def fill(name: str) -> Emit:
    """Tensor.<name> (normal_, uniform_, fill_, zero_, ...) of a value the segment
    computed (rv.fx records an in-place call on one out of place, `fx.Builder.rebinds`):
    its values ignored, a new tensor laid out as it made by the same call at every call."""
    def emit(input: Traced, *args: Any, **kwargs: Any) -> Traced:
        check_factory(f"Tensor.{name}", None, None, False, False,
                      **dict(zip(FILLS[name], args, strict=False)), **kwargs)
        return made(lambda t: getattr(torch.empty_like(t), name)(*args, **kwargs), input)

    return emit


def random_sized(name: str) -> Emit:
    """torch.randn / rand (`*size`), drawn from `generator` or torch's default stream."""
    def emit(*size: Any, generator: Any = None, dtype: Any = None, layout: Any = None,
             device: Any = None, pin_memory: bool | None = False,
             requires_grad: bool = False) -> Traced:
        check_factory(name, layout, device, pin_memory, requires_grad, size=_sizes(size))
        return made(lambda _: getattr(torch, name)(_sizes(size), generator=generator,
                                                   dtype=dtype))

    return emit


def full(size: Sequence[int], fill_value: Any, *, dtype: Any = None, layout: Any = None,
         device: Any = None, pin_memory: bool | None = False,
         requires_grad: bool = False) -> Traced:
    check_factory("full", layout, device, pin_memory, requires_grad, size=tuple(size),
                  fill_value=fill_value)
    return made(lambda _: torch.full(tuple(size), fill_value, dtype=dtype))


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Any = None,
           layout: Any = None, device: Any = None, pin_memory: bool | None = False,
           requires_grad: bool = False) -> Traced:
    """torch.arange(end), (start, end) or (start, end, step), as torch computes it."""
    bounds = (start,) if end is None else (start, end, step)
    check_factory("arange", layout, device, pin_memory, requires_grad, start=start, end=end,
                  step=step)
    return made(lambda _: torch.arange(*bounds, dtype=dtype))


def like(name: str) -> Emit:
    """torch.zeros_like / ones_like, of a tensor laid out as eager's input."""
    def emit(input: Traced, *, dtype: Any = None, layout: Any = None, device: Any = None,
             pin_memory: bool | None = False, requires_grad: bool = False,
             memory_format: Any = torch.preserve_format) -> Traced:
        check_factory(name, layout, device, pin_memory, requires_grad)
        return made(lambda t: getattr(torch, name)(t, dtype=dtype,
                                                   memory_format=memory_format), input)

    return emit


def random_like(name: str) -> Emit:
    """torch.randn_like / rand_like: drawn into a tensor laid out as eager's input (where
    the draws land depends on it), from `generator` or torch's default stream."""
    def emit(input: Traced, *, generator: Any = None, dtype: Any = None, layout: Any = None,
             device: Any = None, pin_memory: bool | None = False,
             requires_grad: bool = False, memory_format: Any = torch.preserve_format
             ) -> Traced:
        check_factory(name, layout, device, pin_memory, requires_grad)
        chosen = {} if generator is None else {"generator": generator}
        return made(lambda t: getattr(torch, name)(t, dtype=dtype, memory_format=memory_format,
                                                   **chosen), input)

    return emit


def full_like(input: Traced, fill_value: Any, *, dtype: Any = None, layout: Any = None,
              device: Any = None, pin_memory: bool | None = False,
              requires_grad: bool = False, memory_format: Any = torch.preserve_format
              ) -> Traced:
    check_factory("full_like", layout, device, pin_memory, requires_grad, fill_value=fill_value)
    return made(lambda t: torch.full_like(t, fill_value, dtype=dtype,
                                          memory_format=memory_format), input)


def new(name: str) -> Emit:
    """Tensor.new_zeros / new_ones: the input's dtype unless `dtype` is given."""
    def emit(input: Traced, *size: Any, dtype: Any = None, layout: Any = None,
             device: Any = None, pin_memory: bool | None = False,
             requires_grad: bool = False) -> Traced:
        check_factory(name, layout, device, pin_memory, requires_grad, size=_sizes(size))
        return made(lambda t: getattr(t, name)(_sizes(size), dtype=dtype), input)

    return emit


def new_full(input: Traced, size: Sequence[int], fill_value: Any, *, dtype: Any = None,
             layout: Any = None, device: Any = None, pin_memory: bool | None = False,
             requires_grad: bool = False) -> Traced:
    check_factory("new_full", layout, device, pin_memory, requires_grad, size=tuple(size),
                  fill_value=fill_value)
    return made(lambda t: t.new_full(tuple(size), fill_value, dtype=dtype), input)


# ---------------------------------------------------------------- the tables

FUNCTIONS: dict[Any, tuple[Emit, Mapping[str, Any]]] = {
    torch.squeeze: (squeeze, {}), torch.unsqueeze: (unsqueeze, {}),
    torch.unflatten: (unflatten, {}), torch.split: (split, {}),
    torch.split_with_sizes: (split_with_sizes, {}), torch.chunk: (chunk, {}),
    torch.unbind: (unbind, {}), torch.narrow: (narrow, {}), torch.select: (select, {}),
    torch.stack: (stack, {}), torch.broadcast_to: (broadcast_to, {}), torch.tile: (tile, {}),
    torch.broadcast_tensors: (broadcast_tensors, {}),
    torch.broadcast_shapes: (broadcast_shapes, {}),
    torch.arange: (arange, {}), torch.full: (full, {}), torch.full_like: (full_like, {}),
    **{getattr(torch, name): (sized(name), {}) for name in ("zeros", "ones")},
    torch.empty: (empty, {}), torch.empty_like: (like("empty_like"), {}),
    **{getattr(torch, name): (random_sized(name), {}) for name in ("randn", "rand")},
    **{getattr(torch, f"{name}_like"): (like(f"{name}_like"), {})
       for name in ("zeros", "ones")},
    **{getattr(torch, f"{name}_like"): (random_like(f"{name}_like"), {})
       for name in ("randn", "rand")},
}

METHODS: dict[str, tuple[Emit, Mapping[str, Any]]] = {
    "squeeze": (squeeze, {}), "unsqueeze": (unsqueeze, {}), "unflatten": (unflatten, {}),
    "view_as": (view_as, {}), "reshape_as": (view_as, {}), "split": (split_method, {}),
    "split_with_sizes": (split_with_sizes, {}), "chunk": (chunk, {}), "unbind": (unbind, {}),
    "narrow": (narrow, {}), "select": (select, {}), "expand": (expand, {}),
    "expand_as": (expand_as, {}), "broadcast_to": (broadcast_to, {}), "repeat": (repeat, {}),
    "tile": (tile, {}), "new_full": (new_full, {}), "to": (to, {}), "type_as": (type_as, {}),
    **{name: (converted(dtype), {}) for name, dtype in [
        ("float", torch.float32), ("double", torch.float64), ("half", torch.float16),
        ("bfloat16", torch.bfloat16), ("long", torch.int64), ("int", torch.int32),
        ("bool", torch.bool)]},
    "type": (type_, {}),
    **{f"new_{name}": (new(f"new_{name}"), {}) for name in ("zeros", "ones")},
    **{name: (fill(name), {}) for name in FILLS},
}

MODULES: dict[type, Callable[..., Any]] = {
    nn.Unflatten: lambda m, w, x: rule_in(FUNCTIONS, torch.unflatten)(x, m.dim, m.unflattened_size),
}

__all__ = ["ELEMENTS", "FUNCTIONS", "METHODS", "MODULES", "axis", "made"]

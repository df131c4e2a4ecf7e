"""Compiled kernels behind the Tensor shape operations: indexing, `.T`/`.transpose`, `.reshape`.

Consumes an operand (anything with `.dtype` and `.shape`) and what the operation needs
(an `indexing.IndexPlan`, a permutation, a target shape) and produces a one-function
Reverie kernel, generated and cached like the operator kernels (`operator_kernels.py`), so
the operations record and differentiate like any compiled call. Indexing is one gather in
index notation whose positions are run-time arguments, so one kernel serves every `t`
of `x[t]` and every slice start; for `x[1::2, idx]` with `x: f64[5, 4]`, `idx: (3,)`:

    fn index_op(a: f64[D0, D1], s0: i64, i1: i64[M0]) -> f64[2, M0] {
        let y[j0 in 0..2, m0] = a[s0 + 2 * j0, i1[m0]]; return y; }

`transpose` keeps symbolic sizes (`transpose(a, (1, 0))`); `reshape` is generated per pair
of shapes, since the language checks that element counts agree as expressions.
"""

from __future__ import annotations

from reverie.runtime.native.kernel_protocol import CompiledKernel
from reverie.runtime.native.lru import LruCache
from reverie.runtime.tensors.indexing import IndexPlan
from reverie.runtime.tensors.operator_kernels import cached_kernel, reverie_dtype

KERNEL_CACHE_SIZE = 512
_INDEX: LruCache[tuple, CompiledKernel] = LruCache(KERNEL_CACHE_SIZE)


def _subscript(axis: int, entry: tuple, param: str, index_rank: int) -> str:
    """The subscript of tensor axis `axis` for one entry of an IndexPlan."""
    kind = entry[0]
    if kind == "full":
        return f"j{axis}"
    if kind == "int":
        return param
    if kind == "array":
        return f"{param}[{', '.join(f'm{d}' for d in range(index_rank))}]"
    step = entry[1]
    if step == 1:
        return f"{param} + j{axis}"
    return f"{param} {'+' if step > 0 else '-'} {abs(step)} * j{axis}"


def index_kernel(dtype: object, rank: int, plan: IndexPlan) -> CompiledKernel:
    """The kernel reading `a[plan]` from a tensor of `dtype` and `rank`; its arguments are
    the tensor, then `plan.values` (the result has no None axes: see `plan.final_shape`)."""
    element = reverie_dtype(dtype)
    index_rank = len(plan.index_shape)
    key = ("index", element, rank, plan.axes, index_rank, plan.advanced_first)
    kernel = _INDEX.get(key)
    if kernel is not None:
        return kernel
    index_tokens = tuple(f"M{d}" for d in range(index_rank))
    params: list[tuple[str, tuple[str, tuple[str, ...]]]] = [
        ("a", (element, tuple(f"D{i}" for i in range(rank))))]
    subscripts, outputs, tokens = [], [], []
    array_at = None  # where the index axes go among the outputs
    for axis, entry in enumerate(plan.axes):
        param = f"{'i' if entry[0] == 'array' else 's'}{axis}"
        if entry[0] != "full":
            params.append((param, ("i64", index_tokens if entry[0] == "array" else ())))
        subscripts.append(_subscript(axis, entry, param, index_rank))
        if entry[0] == "full":
            outputs.append(f"j{axis}")
            tokens.append(f"D{axis}")
        elif entry[0] == "slice":
            outputs.append(f"j{axis} in 0..{entry[2]}")
            tokens.append(str(entry[2]))
        elif entry[0] == "array" and array_at is None:
            array_at = 0 if plan.advanced_first else len(outputs)
    if array_at is not None:
        outputs[array_at:array_at] = [f"m{d}" for d in range(index_rank)]
        tokens[array_at:array_at] = index_tokens
    read = f"a[{', '.join(subscripts)}]"
    statements = f"let y[{', '.join(outputs)}] = {read}; " if outputs else ""
    kernel = cached_kernel(key, params, (element, tuple(tokens)), "y" if outputs else read,
                           statements)
    return _INDEX.setdefault(key, kernel)


def take_along_kernel(dtype: object, rank: int, axis: int) -> CompiledKernel:
    """The kernel reading, from a tensor of `dtype` and `rank`, the entry at an i64 index
    along `axis` for each position of the other axes (`np.take_along_axis` with `axis`
    dropped): the values of torch's `max(dim)`, whose gradient (a scatter-add) goes to the
    indices alone. For rank 3 and axis 1:

        fn take_op(a: f64[D0, D1, D2], i: i64[D0, D2]) -> f64[D0, D2] {
            let y[j0, j2] = a[j0, i[j0, j2], j2]; return y; }
    """
    element = reverie_dtype(dtype)
    tokens = tuple(f"D{d}" for d in range(rank))
    kept = [d for d in range(rank) if d != axis]
    index = f"i[{', '.join(f'j{d}' for d in kept)}]" if kept else "i"
    read = f"a[{', '.join(index if d == axis else f'j{d}' for d in range(rank))}]"
    statements = f"let y[{', '.join(f'j{d}' for d in kept)}] = {read}; " if kept else ""
    result = tuple(tokens[d] for d in kept)
    return cached_kernel(("take", element, rank, axis),
                         [("a", (element, tokens)), ("i", ("i64", result))], (element, result),
                         "y" if kept else read, statements)


def transpose_kernel(dtype: object, permutation: tuple[int, ...]) -> CompiledKernel:
    """The kernel computing `np.transpose(a, permutation)`."""
    element = reverie_dtype(dtype)
    tokens = tuple(f"D{i}" for i in range(len(permutation)))
    result = tuple(tokens[p] for p in permutation)
    shown = ", ".join(map(str, permutation)) + ("," if len(permutation) == 1 else "")
    return cached_kernel(("transpose", element, permutation), [("a", (element, tokens))],
                         (element, result), f"transpose(a, ({shown}))")


def reshape_kernel(dtype: object, source: tuple[int, ...],
                   target: tuple[int, ...]) -> CompiledKernel:
    """The kernel computing `np.reshape(a, target)` for `a` of shape `source`."""
    element = reverie_dtype(dtype)
    shown = ", ".join(map(str, target)) + ("," if len(target) == 1 else "")
    return cached_kernel(("reshape", element, source, target),
                         [("a", (element, tuple(map(str, source))))],
                         (element, tuple(map(str, target))), f"reshape(a, ({shown}))")


def normalise_permutation(axes: tuple[object, ...], rank: int) -> tuple[int, ...]:
    """`Tensor.transpose(*axes)` as a permutation: none reverses the axes (NumPy), a full
    permutation is taken as it is (NumPy), two axes of a tensor of another rank than 2 are
    swapped (torch's `transpose(dim0, dim1)`); ValueError for anything else."""
    if len(axes) == 1 and isinstance(axes[0], tuple | list):
        axes = tuple(axes[0])
    if not axes:
        return tuple(reversed(range(rank)))
    for ax in axes:
        if not isinstance(ax, int) or not -rank <= ax < rank:
            raise ValueError(f"axis {ax!r} is out of bounds for a tensor of rank {rank}")
    chosen = [ax % rank for ax in axes]
    if len(chosen) == 2 and rank != 2:
        swapped = list(range(rank))
        swapped[chosen[0]], swapped[chosen[1]] = chosen[1], chosen[0]
        return tuple(swapped)
    if sorted(chosen) != list(range(rank)):
        raise ValueError(f"axes {tuple(axes)} are not a permutation of the {rank} axes of "
                         "the tensor (or two axes to swap)")
    return tuple(chosen)

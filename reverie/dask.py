"""`rv.dask`: data-parallel gradients, and kernels mapped over chunks, on Dask (SPEC §3.6).

Consumes a `Kernel` and, per call, its arguments: the *batch* parameters take
`dask.array`s whose rows (axis 0) are cut into chunks, the others ordinary values. Produces
NumPy results equal to the single-process call on the concatenated rows (to float
reassociation):

    vg = rv.dask.value_and_grad(m.loss, wrt="w", batch=("x", "y"), reduce="mean")
    value, dw = vg(x, w, y)          # x, y: dask arrays chunked along axis 0; w: NumPy
    preds = rv.dask.map_blocks(m.predict, x, w)   # a lazy dask array, one block per chunk

How a call runs, on the current Dask scheduler (a `distributed.Client` if one exists):

1. On the client, before any task: the arity, dtypes and shapes are checked by the kernel's
   own call boundary, on stand-ins of the batch arrays (arrays of their shape and dtype that
   own no memory), once for all the rows and once per distinct chunk length, so errors are
   those of SPEC §3.1 (`TypeError`/`ValueError` subclasses naming arguments and sizes).
2. The kernel (it pickles as source, name and transform: `reverie/kernel.py`) and the
   non-batch values are scattered to every worker once per call, not embedded in each task.
3. One task per chunk runs the compiled `value_and_grad` on the chunk's rows and weights it:
   for `reduce="sum"` the loss is L = Σ_c L_c, so dL/dw = Σ_c dL_c/dw; for `"mean"`,
   L = Σ_c (n_c/N) L_c with n_c the chunk's rows and N all rows, so
   dL/dw = Σ_c (n_c/N) dL_c/dw.
4. The weighted partials are summed by a tree of tasks, `split_every` at a time (depth
   ceil(log_k(chunks))), on the workers; only the root's result reaches the client.

A worker that dies mid-call loses its partials; Dask recomputes them from the chunks' tasks
(the scattered values live on every worker), so the result does not change. An error raised
by the kernel on a worker (an out-of-range label: `IndexError`) is raised on the client as
the same exception. See docs/scaling.md for how this scales.
"""

from __future__ import annotations

import functools
import mmap
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
from dask.core import flatten
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.task_spec import List, Task, TaskRef
from dask.typing import Key

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.dims import evaluate_shape
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.runtime.call import (
    ArgumentTypeError,
    ShapeMismatchError,
    bind_arguments,
    check_arity,
)

from .kernel import Kernel, Wrt

REDUCTIONS = ("sum", "mean")
SPLIT_EVERY = 4  # partials summed per task of the reduction tree
Batch = str | int | Sequence[str | int]


# ---------------------------------------------------------------- gradients


def value_and_grad(kernel: Kernel, wrt: Wrt = None, batch: Batch = (), reduce: str = "sum",
                   *, split_every: int = SPLIT_EVERY) -> DataParallelGradient:
    """A callable with `kernel`'s signature giving `(value, grads)` of the loss summed
    (`reduce="sum"`) or averaged (`"mean"`) over the rows of the `batch` parameters, as
    `kernel.value_and_grad(wrt)` gives them on the concatenated rows. `wrt` defaults to
    every float parameter that is not a batch one (a tuple of gradients)."""
    return DataParallelGradient(kernel, wrt, batch, reduce, split_every, with_value=True)


def grad(kernel: Kernel, wrt: Wrt = None, batch: Batch = (), reduce: str = "sum",
         *, split_every: int = SPLIT_EVERY) -> DataParallelGradient:
    """`value_and_grad` without the value: the gradients as `kernel.grad(wrt)` gives them."""
    return DataParallelGradient(kernel, wrt, batch, reduce, split_every, with_value=False)


class DataParallelGradient:
    """The gradient of a kernel's loss over chunked rows (see the module docstring)."""

    def __init__(self, kernel: Kernel, wrt: Wrt, batch: Batch, reduce: str, split_every: int,
                 with_value: bool) -> None:
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
        if isinstance(split_every, bool) or not isinstance(split_every, int) \
                or split_every < 2:
            raise ValueError(f"split_every must be an integer of at least 2, got {split_every!r}")
        self.kernel = kernel
        self.batch = batch_positions(kernel, batch)
        if not self.batch:
            raise ValueError(f"{kernel.name}: name the batch parameters (batch=...), those "
                             "that take dask arrays chunked along axis 0")
        if wrt is None:  # every float parameter but the batch ones
            wrt = [i for i in kernel.wrt_indices(None)[0] if i not in self.batch]
        chosen, self.single = kernel.wrt_indices(wrt)
        differentiated = [kernel.param_names[i] for i in chosen if i in self.batch]
        if differentiated:
            raise ValueError(f"{kernel.name}: cannot differentiate with respect to batch "
                             f"parameter '{differentiated[0]}' (its gradient has a row per "
                             "row); use rv.dask.map_blocks with the kernel's grad instead")
        self.value_and_grad = kernel.value_and_grad(wrt)  # raises for a non-scalar kernel
        self.reduce = reduce
        self.split_every = split_every
        self.with_value = with_value

    def __call__(self, *args: object) -> object:
        call = split_call(self.kernel, self.batch, args)
        if call.rows == 0 and self.reduce == "mean":
            raise ValueError(f"{self.kernel.name}: the batch parameters have no rows to "
                             "average over")
        program, values = call.shared_with_workers(self.value_and_grad)
        arguments = call.chunk_arguments(values)
        graph = TaskLayer()
        parts = [graph.add("weighted_value_and_grad", weighted_value_and_grad, program,
                           self.single,
                           tuple(self.weight(call.chunks[c], call.rows) for c in group),
                           List(*(List(*arguments[c]) for c in group)))
                 for group in call.colocated_groups(self.split_every)]
        root = tree_sum(graph, parts, self.split_every)
        (value, grads), = dask.compute(graph.delayed(root, call.arrays()))
        grads = grads[0] if self.single else grads
        return (value, grads) if self.with_value else grads

    def weight(self, rows: int, total: int) -> float:
        """The factor of a chunk of `rows` of the `total` rows: 1 for a sum, n_c/N for a
        mean."""
        return 1.0 if self.reduce == "sum" else rows / total

    def __repr__(self) -> str:
        what = "value_and_grad" if self.with_value else "grad"
        return f"<rv.dask.{what} of {self.kernel.name}, reduce={self.reduce!r}>"


Partial = tuple[np.ndarray, tuple[np.ndarray, ...]]


def weighted_value_and_grad(program: Kernel, single: bool, weights: Sequence[float],
                            chunks: Sequence[Sequence[object]]) -> Partial:
    """Run on a worker: `Σ_c (weight_c * value_c, weight_c * grads_c)` over a group of
    chunks' arguments (rows that sit on this worker together)."""
    return add_partials(*(weighted(program(*args), single, weight)
                          for weight, args in zip(weights, chunks, strict=True)))


def weighted(result: tuple[object, object], single: bool, weight: float) -> Partial:
    """One chunk's `(weight * value, weight * grads)`, in the loss's dtype (f32 stays f32)."""
    value, grads = result
    grads = (grads,) if single else grads
    factor = np.asarray(value).dtype.type(weight)
    return factor * value, tuple(factor * g for g in grads)


def add_partials(*partials: Partial) -> Partial:
    """Run on a worker: the sum of several partial values and gradients."""
    values, grads = zip(*partials, strict=True)
    return (functools.reduce(np.add, values),
            tuple(functools.reduce(np.add, terms) for terms in zip(*grads, strict=True)))


def tree_sum(graph: TaskLayer, parts: list[TaskRef], split_every: int) -> TaskRef:
    """The sum of the partials `parts` by a tree of `add_partials` tasks in `graph`,
    `split_every` partials each."""
    while len(parts) > 1:
        parts = [graph.add("add_partials", add_partials, *parts[i:i + split_every])
                 for i in range(0, len(parts), split_every)]
    return parts[0]


class TaskLayer:
    """The tasks of one call, built directly as Dask task specs (`dask.task_spec`): one
    `Task` per chunk group and per add, whose arguments name the batch arrays' blocks and
    the scattered values by key. Building `dask.delayed` calls instead costs a graph merge
    and optimisation per call of each (milliseconds each, on the client, every step)."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.tasks: dict[tuple[str, int], Task] = {}

    def add(self, name: str, function: Callable[..., object], *args: object) -> TaskRef:
        """A task running `function(*args)`, named `name` (unique to this call)."""
        key = (f"{name}-{self.token}", len(self.tasks))
        self.tasks[key] = Task(key, function, *args)
        return TaskRef(key)

    def delayed(self, result: TaskRef, arrays: Sequence[da.Array]) -> Delayed:
        """The task `result` with the whole graph it needs: these tasks and the `arrays`'
        (merged into one, so a task that several arrays share runs once)."""
        name = f"rv-dask-{self.token}"
        graph = HighLevelGraph.from_collections(name, self.tasks, dependencies=arrays)
        return Delayed(result.key, graph, layer=name)


# ---------------------------------------------------------------- mapping over chunks


def map_blocks(kernel: Kernel, *args: object,
               batch: Batch | None = None) -> da.Array | tuple[da.Array, ...]:
    """`kernel` run on every chunk of the `batch` parameters (default: those given dask
    arrays), lazily: a dask array per result (a tuple for a tuple return). A result whose
    axis 0 is the batch's row dimension is the chunks' results concatenated along it; any
    other result gets one entry per chunk (stacked along a new axis 0). The kernel's
    results must be arrays or a flat tuple of them (a module's function, `grad`, `vjp`;
    not `value_and_grad`'s nested pair). Non-batch values are scattered to the workers
    now, when a distributed client exists."""
    if batch is None:
        positions = [i for i, arg in enumerate(args) if isinstance(arg, da.Array)]
    else:
        positions = batch_positions(kernel, batch)
    if not positions:
        raise ValueError(f"{kernel.name}: map_blocks needs a batch parameter given a dask "
                         "array chunked along axis 0")
    call = split_call(kernel, positions, args)
    program, values = call.shared_with_workers(kernel)
    graph = TaskLayer()
    keys = [graph.add("run_kernel", run_kernel, program, *chunk_args)
            for chunk_args in call.chunk_arguments(values)]
    calls = [graph.delayed(key, call.arrays()) for key in keys]
    types = call.fn.result_types
    row_dims = {str(call.fn.params[p].type.shape[0]) for p in positions}
    results = []
    for j, result in enumerate(types):
        pieces = [da.from_delayed(task if len(types) == 1 else task[j],
                                  shape=evaluate_shape(result.shape, call.dims[rows]),
                                  dtype=NUMPY_DTYPES[result.dtype])
                  for task, rows in zip(calls, call.chunks, strict=True)]
        along_rows = result.rank > 0 and str(result.shape[0]) in row_dims
        results.append(da.concatenate(pieces, axis=0) if along_rows else da.stack(pieces))
    return results[0] if len(results) == 1 else tuple(results)


def run_kernel(kernel: Kernel, *args: object) -> object:
    """Run on a worker: the kernel on one chunk's arguments."""
    return kernel(*args)


# ---------------------------------------------------------------- one call's arguments


@dataclass
class SplitCall:
    """One call's arguments, checked: the batch arrays (at `positions`) with their rows
    aligned in `chunks` and every other axis whole (`rows` in all), the specialisation `fn`
    the call runs, and its dimensions for each distinct chunk length."""

    args: list[object]
    positions: list[int]
    chunks: tuple[int, ...]
    rows: int
    fn: Function
    dims: dict[int, dict[str, int]]

    def shared_with_workers(self, program: Kernel) -> tuple[object, list[object]]:
        """`program` and the call's non-batch arguments sent to the workers once (`share`),
        and the arguments with those replaced by what tasks take instead of them."""
        others = [p for p in range(len(self.args)) if p not in self.positions]
        shared = share([program, *(self.args[p] for p in others)])
        values = list(self.args)
        for p, value in zip(others, shared[1:], strict=True):
            values[p] = value
        return shared[0], values

    def arrays(self) -> list[da.Array]:
        """The batch arrays, with their rows aligned."""
        return [self.args[p] for p in self.positions]

    @functools.cached_property
    def blocks(self) -> dict[int, list[Key]]:
        """Per batch position, the keys of its array's blocks, one per chunk."""
        return {p: list(flatten(self.args[p].__dask_keys__())) for p in self.positions}

    def chunk_arguments(self, values: Sequence[object]) -> list[list[object]]:
        """Per chunk, the kernel's arguments: a reference to the chunk's block of each batch
        array, and `values` (the call's arguments, or their scattered futures) elsewhere."""
        return [[TaskRef(self.blocks[p][c]) if p in self.blocks else value
                 for p, value in enumerate(values)] for c in range(len(self.chunks))]

    def colocated_groups(self, size: int) -> list[list[int]]:
        """The chunks in groups that one task can take without moving rows. Chunks whose
        blocks are all in worker memory (persisted) are grouped by the workers that hold
        them: `n` of them on a worker of `t` threads make max(ceil(n / size), min(t, n))
        groups of near-equal length, so that every thread has a task and no task takes
        more than `size` chunks. Every other chunk is a group alone: its blocks are still
        to be made, and a task then holds one chunk's rows at a time (as when streaming
        data larger than memory)."""
        client = current_client()
        holders = self.holders(client)
        threads = client.nthreads() if any(holders) else {}
        on_workers: dict[tuple[str, ...], list[int]] = {}
        for c, where in enumerate(holders):
            if where is not None:
                on_workers.setdefault(where, []).append(c)
        groups = []
        for where, chunks in sorted(on_workers.items()):
            count = max(-(-len(chunks) // size), min(threads.get(where[0], 1), len(chunks)))
            groups += [chunks[len(chunks) * i // count:len(chunks) * (i + 1) // count]
                       for i in range(count)]
        return groups + [[c] for c, where in enumerate(holders) if where is None]

    def holders(self, client: object | None) -> list[tuple[str, ...] | None]:
        """Per chunk, a worker of `client`'s cluster holding each of its blocks (one per
        batch array) when every block is in the memory of one, else None."""
        futures = {}
        for p in self.positions if client is not None else ():
            graph = self.args[p].__dask_graph__()
            futures.update((key, graph[key]) for key in self.blocks[p]
                           if is_future(graph.get(key)))
        where = client.who_has(list(futures.values())) if futures else {}
        found = [[where.get(self.blocks[p][c]) for p in self.positions]
                 for c in range(len(self.chunks))]
        return [tuple(min(workers) for workers in blocks) if all(blocks) else None
                for blocks in found]


def split_call(kernel: Kernel, positions: Sequence[int], args: Sequence[object]) -> SplitCall:
    """Check a call of `kernel` whose `positions` take dask arrays chunked along axis 0 (on
    stand-ins: nothing is computed) and align the chunks of its batch arrays."""
    names = kernel.param_names
    check_arity(kernel.name, names, args)
    arrays = {p: batch_array(kernel, p, args[p]) for p in positions}
    fn = kernel.specialisation_for(with_stand_ins(args, arrays, None, None))
    bind_arguments(fn, with_stand_ins(args, arrays, None, fn))  # the call on all rows
    rows = {p: array.shape[0] for p, array in arrays.items()}
    if len(set(rows.values())) > 1:
        shown = ", ".join(f"'{names[p]}' has {n}" for p, n in rows.items())
        raise ShapeMismatchError(f"{kernel.name}(): batch parameters must have the same "
                                 f"number of rows (axis 0): {shown}")
    first = arrays[positions[0]]
    aligned = {p: array.rechunk({0: first.chunks[0],
                                 **{axis: -1 for axis in range(1, array.ndim)}})
               for p, array in arrays.items()}
    total, chunks = first.shape[0], first.chunks[0]
    dims = {n: bind_arguments(fn, with_stand_ins(args, arrays, n, fn)).dims
            for n in sorted(set(chunks))}  # the call on each chunk
    merged = [aligned.get(p, arg) for p, arg in enumerate(args)]
    return SplitCall(merged, list(positions), chunks, total, fn, dims)


def batch_array(kernel: Kernel, position: int, value: object) -> da.Array:
    """`value`, checked to be a dask array that a batch parameter can take."""
    name = kernel.param_names[position]
    if not isinstance(value, da.Array):
        raise ArgumentTypeError(
            f"{kernel.name}(): batch parameter '{name}' takes a dask array chunked along "
            f"axis 0, got {type(value).__name__}; wrap it: dask.array.from_array(value, "
            "chunks=(rows, ...))")
    if value.ndim == 0:
        raise ShapeMismatchError(f"{kernel.name}(): batch parameter '{name}' is a 0-d array; "
                                 "it needs an axis 0 of rows to split")
    if any(np.isnan(size) for size in value.shape):
        raise ShapeMismatchError(f"{kernel.name}(): batch parameter '{name}' has unknown "
                                 "chunk sizes; call its compute_chunk_sizes() first")
    return value


def with_stand_ins(args: Sequence[object], arrays: dict[int, da.Array], rows: int | None,
                   fn: Function | None) -> list[object]:
    """`args` with each batch array replaced by a stand-in with `rows` rows (None: its own
    number of rows): of the array's
    dtype, or of the declared dtype of `fn`'s parameter where the call would convert to it
    (so binding it copies nothing; integer ranges are then checked on the workers)."""
    standing = list(args)
    for p, array in arrays.items():
        dtype = array.dtype
        if fn is not None:
            declared = NUMPY_DTYPES[fn.params[p].type.dtype]
            dtype = declared if np.can_cast(dtype, declared, casting="same_kind") else dtype
        shape = array.shape if rows is None else (rows, *array.shape[1:])
        standing[p] = stand_in(shape, dtype)
    return standing


def stand_in(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A read-only C-contiguous array of `shape` and `dtype` that owns no memory: it lies
    on a private read-only mapping, whose pages the kernel is never charged for and which
    nothing here reads (only shapes and dtypes are checked)."""
    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    pages = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                      prot=mmap.PROT_READ)
    return np.frombuffer(pages, dtype=dtype, count=size // np.dtype(dtype).itemsize) \
        .reshape(shape)


def batch_positions(kernel: Kernel, batch: Batch) -> list[int]:
    """Parameter positions of `batch` (a name, an index, or a sequence of them), in order."""
    entries = [batch] if isinstance(batch, str | int) else list(batch)
    positions = set()
    for entry in entries:
        if isinstance(entry, bool) or not isinstance(entry, str | int):
            raise TypeError(f"batch entries are parameter names or indices, got {entry!r}")
        if isinstance(entry, str) and entry not in kernel.param_names:
            raise ValueError(f"{kernel.name} has no parameter '{entry}' (parameters: "
                             f"{', '.join(kernel.param_names)})")
        if isinstance(entry, int) and not -len(kernel.param_names) <= entry \
                < len(kernel.param_names):
            raise ValueError(f"{kernel.name} has {len(kernel.param_names)} parameters; batch "
                             f"index {entry} is out of range")
        positions.add(kernel.param_names.index(entry) if isinstance(entry, str)
                      else entry % len(kernel.param_names))
    return sorted(positions)


# ---------------------------------------------------------------- the scheduler


def share(values: list[object]) -> list[object]:
    """`values` sent once to every worker of the current distributed client (as futures
    that tasks take as arguments), or `values` themselves on a local scheduler."""
    client = current_client()
    if client is None:
        return values
    return client.scatter(values, broadcast=True, hash=False)


def is_future(value: object) -> bool:
    """Whether `value` is a `distributed.Future` (a block already in worker memory)."""
    try:
        from distributed import Future
    except ImportError:
        return False
    return isinstance(value, Future)


def current_client() -> object | None:
    """The default `distributed.Client` when it is Dask's current scheduler, else None (no
    client, distributed not installed, or another scheduler chosen with dask.config)."""
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        client = default_client()
    except ValueError:
        return None
    return client if dask.base.get_scheduler() == client.get else None

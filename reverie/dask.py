"""`rv.dask`: data-parallel gradients, and kernels mapped over chunks, on Dask (docs/api.md §10).

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
   those of docs/api.md §1–2 (`TypeError`/`ValueError` subclasses naming arguments and sizes).
2. The kernel (it pickles as source, name and transform: `reverie/kernel.py`) and the
   non-batch values are sent to every worker once per call (`dask_call.share`): up to
   `dask_call.INLINE_BYTES` (1 MiB: the benchmark's 75 KB MLP) together as one value of
   the call's graph, a key that the tasks name, and larger ones scattered first.
3. Tasks run the compiled `value_and_grad` on chunks' rows and weight each chunk: for
   `reduce="sum"` the loss is L = Σ_c L_c, so dL/dw = Σ_c dL_c/dw; for `"mean"`,
   L = Σ_c (n_c/N) L_c with n_c the chunk's rows and N all rows, so
   dL/dw = Σ_c (n_c/N) dL_c/dw. A chunk of no rows (boolean filtering makes them) is
   left out, in both: its terms are 0, but the kernel's mean of no rows is NaN, and
   0 * NaN is NaN; a call with no rows at all runs the kernel on them, as a single
   process does (a mean of no rows is NaN, its gradients 0). Chunks already in worker
   memory (persisted) are placed on workers (where they lie, but for a few moved to
   balance the workers' rows) and taken a group at a time, up to `split_every` chunks of
   one worker, by one task that adds their weighted partials (the first level of the
   sum, fused with the gradients; `dask_call.SplitCall.colocated_groups`); every other
   chunk is a task alone, so that rows still to be made are held one chunk at a time.
4. The weighted partials are summed by a tree of tasks, `split_every` at a time, on the
   workers, up to the root's inputs (at most `split_every` partials), which reach the
   client and are added there (`tree_below_root`). The tasks are built as Dask task specs
   (`TaskLayer`), not `dask.delayed` calls, whose graph merging costs milliseconds a call
   each on the client.

A worker that dies mid-call loses its partials; Dask recomputes them from the chunks' tasks
(and the graph's shared value; scattered ones live on every worker), so the result
does not change. An error raised by the kernel on a worker (an out-of-range label:
`IndexError`) is raised on the client as the same exception. See docs/scaling.md for how
this scales.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from dask.task_spec import DataNode, List, Task, TaskRef

from reverie.compiler.ir.dims import evaluate_shape
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.dask_call import Batch, ChunkGroup, batch_positions, split_call
from reverie.kernel import Kernel, Wrt

REDUCTIONS = ("sum", "mean")
SPLIT_EVERY = 4  # partials summed per task of the tree, persisted chunks per task


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
        groups = with_rows(call.colocated_groups(self.split_every), call.chunks)
        graph = TaskLayer()
        program, values = call.shared_with_workers(self.value_and_grad, graph.keep)
        arguments = call.chunk_arguments(values)
        parts = [graph.add("weighted_value_and_grad", weighted_value_and_grad, program,
                           self.single,
                           tuple(self.weight(call.chunks[c], call.rows) for c in group.chunks),
                           List(*(List(*arguments[c]) for c in group.chunks)),
                           worker=group.worker)
                 for group in groups]
        last = tree_below_root(graph, parts, self.split_every)
        value, grads = add_partials(*dask.compute(*graph.delayed(last, call.arrays())))
        grads = grads[0] if self.single else grads
        return (value, grads) if self.with_value else grads

    def weight(self, rows: int, total: int) -> float:
        """The factor of a chunk of `rows` of the `total` rows: 1 for a sum, n_c/N for a
        mean, and 1 for the one chunk of a call with no rows (`with_rows`)."""
        return 1.0 if self.reduce == "sum" or total == 0 else rows / total

    def __repr__(self) -> str:
        what = "value_and_grad" if self.with_value else "grad"
        return f"<rv.dask.{what} of {self.kernel.name}, reduce={self.reduce!r}>"


def with_rows(groups: list[ChunkGroup], chunks: Sequence[int]) -> list[ChunkGroup]:
    """`groups` without their chunks of no rows (`chunks`: the rows of each), which add
    nothing to the loss: a sum over no rows is 0 and a mean's weight is 0, while the
    kernel's own mean of no rows is NaN (0 * NaN is NaN). When no chunk has rows, the
    first chunk alone: the kernel on no rows is then the single-process call itself."""
    kept = [ChunkGroup([c for c in group.chunks if chunks[c] > 0], group.worker)
            for group in groups]
    kept = [group for group in kept if group.chunks]
    return kept or [ChunkGroup([0], None)]


Partial = tuple[np.ndarray, tuple[np.ndarray, ...]]


def weighted_value_and_grad(program: Kernel, single: bool, weights: Sequence[float],
                            chunks: Sequence[Sequence[object]]) -> Partial:
    """Run on a worker: `Σ_c (weight_c * value_c, weight_c * grads_c)` over a group of
    chunks' arguments (rows that sit on this worker together)."""
    return add_partials(*(weighted_partial(program(*args), single, weight)
                          for weight, args in zip(weights, chunks, strict=True)))


def weighted_partial(result: tuple[object, object], single: bool, weight: float) -> Partial:
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


def tree_below_root(graph: TaskLayer, parts: list[TaskRef],
                    split_every: int) -> list[TaskRef]:
    """The partials `parts` added by a tree of `add_partials` tasks in `graph`,
    `split_every` partials each, down to the root's (at most `split_every`), which the
    client adds: that saves a level of tasks (its messages through the scheduler, and the
    transfer of partials between workers that its add needs) for at most `split_every`
    partials, not one, reaching the client."""
    while len(parts) > split_every:
        parts = [graph.add("add_partials", add_partials, *parts[i:i + split_every])
                 for i in range(0, len(parts), split_every)]
    return parts


class TaskLayer:
    """The tasks of one call, built directly as Dask task specs (`dask.task_spec`): one
    `Task` per chunk group and per add, whose arguments name by key the batch arrays'
    blocks and the shared values (the graph's own `DataNode`, or scattered futures).
    Building `dask.delayed` calls instead costs a graph merge and optimisation per call of
    each (milliseconds each, on the client, every step).

    A task given a `worker` runs there while that worker lives: the scheduler's own choice
    weighs each worker's queue against the bytes to fetch, and for chunks of kilobytes
    sends a group to whichever worker is idler, undoing the balanced placement (most rows
    on one worker). The restriction is loose
    (`allow_other_workers`), so the task moves if that worker dies."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.tasks: dict[tuple[str, int], Task] = {}
        self.workers: dict[tuple[str, int], str] = {}
        self.values: dict[tuple[str, int], DataNode] = {}

    def keep(self, value: object) -> TaskRef:
        """`value` as a key of the graph (a `DataNode`): the scheduler holds it once, and a
        worker fetches it once for all its tasks that name it."""
        key = (f"value-{self.token}", len(self.values))
        self.values[key] = DataNode(key, value)
        return TaskRef(key)

    def add(self, name: str, function: Callable[..., object], *args: object,
            worker: str | None = None) -> TaskRef:
        """A task running `function(*args)`, named `name` (unique to this call), on
        `worker` if given."""
        key = (f"{name}-{self.token}", len(self.tasks))
        self.tasks[key] = Task(key, function, *args)
        if worker is not None:
            self.workers[key] = worker
        return TaskRef(key)

    def delayed(self, results: Sequence[TaskRef], arrays: Sequence[da.Array]) -> list[Delayed]:
        """The tasks `results`, each with the whole graph it needs: these tasks, the kept
        values and the `arrays`' (merged into one graph, built once for all of them, so a
        task that several arrays or results share runs once). The tasks with a worker form
        a layer of their own, annotated with it; the values another."""
        name, placed, kept = (f"rv-dask{part}-{self.token}" for part in ("", "-placed", "-values"))
        free = {key: task for key, task in self.tasks.items() if key not in self.workers}
        graph = HighLevelGraph.from_collections(name, free, dependencies=arrays)
        layers, below = dict(graph.layers), dict(graph.dependencies)
        inputs = set(below[name])
        if self.values:
            layers[kept], below[kept] = MaterializedLayer(dict(self.values)), set()
            inputs.add(kept)
        if self.workers:
            layers[placed] = MaterializedLayer(
                {key: self.tasks[key] for key in self.workers},
                annotations={"workers": self.workers.__getitem__, "allow_other_workers": True})
            below[placed] = set(inputs)
            inputs.add(placed)
        below[name] = inputs
        graph = HighLevelGraph(layers, below)
        return [Delayed(result.key, graph, layer=placed if result.key in self.workers else name)
                for result in results]


# ---------------------------------------------------------------- mapping over chunks


def map_blocks(kernel: Kernel, *args: object,
               batch: Batch | None = None) -> da.Array | tuple[da.Array, ...]:
    """`kernel` run on every chunk of the `batch` parameters (default: those given dask
    arrays), lazily: a dask array per result (a tuple for a tuple return). A result whose
    axis 0 is the batch's row dimension is the chunks' results concatenated along it; any
    other result gets one entry per chunk (stacked along a new axis 0). The kernel's
    results must be arrays or a flat tuple of them (a module's function, `grad`, `vjp`;
    not `value_and_grad`'s nested pair). Non-batch values too large for the graph are
    scattered to the workers now, when a distributed client exists."""
    if batch is None:
        positions = [i for i, arg in enumerate(args) if isinstance(arg, da.Array)]
    else:
        positions = batch_positions(kernel, batch)
    if not positions:
        raise ValueError(f"{kernel.name}: map_blocks needs a batch parameter given a dask "
                         "array chunked along axis 0")
    call = split_call(kernel, positions, args)
    graph = TaskLayer()
    program, values = call.shared_with_workers(kernel, graph.keep)
    keys = [graph.add("run_kernel", run_kernel, program, *chunk_args)
            for chunk_args in call.chunk_arguments(values)]
    calls = graph.delayed(keys, call.arrays())
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

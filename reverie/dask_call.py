"""One call of an `rv.dask` function: its arguments checked, its chunks aligned, and where
its rows are (docs/api.md §10; used by `reverie/dask.py`).

Consumes a kernel, the positions of its *batch* parameters and a call's arguments (dask
arrays chunked along axis 0 at those positions). Produces a `SplitCall`: the batch arrays
rechunked so that their rows are cut alike, the specialisation the call runs and its
dimensions per chunk length, checked on the client before any task runs (on stand-ins of
the batch arrays, which own no memory), so that errors are the kernel's own (docs/api.md §1–2).
It also says what the tasks take: references to the chunks' blocks, the non-batch values
(together one value of the call's graph when small, else scattered to the workers:
`share`), and on which worker each chunk in worker memory (persisted rows) is taken: where
it lies, unless that leaves the workers unbalanced (`balanced_placement`), so that one task
can take several chunks of one worker.
"""

from __future__ import annotations

import functools
import mmap
import operator
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import NamedTuple

import dask
import dask.array as da
import numpy as np
from dask.core import flatten
from dask.sizeof import sizeof
from dask.task_spec import Task, TaskRef
from dask.typing import Key

from reverie.compiler.ir.core import Function
from reverie.compiler.ir.types import NUMPY_DTYPES
from reverie.kernel import Kernel
from reverie.runtime.native.call import (
    ArgumentTypeError,
    ShapeMismatchError,
    bind_arguments,
    check_arity,
)

Batch = str | int | Sequence[str | int]
INLINE_BYTES = 1 << 20  # the most bytes of shared values sent in the call's graph


class ChunkGroup(NamedTuple):
    """Chunks that one task takes, and the worker it runs on (None: the scheduler's
    choice)."""

    chunks: list[int]
    worker: str | None


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

    def shared_with_workers(self, program: Kernel, keep: Callable[[object], TaskRef]
                            ) -> tuple[object, list[object]]:
        """`program` and the call's non-batch arguments as the call's tasks take them
        (`share`, which gives the small ones to `keep`, a value of the call's graph), and
        the arguments with those replaced by what tasks take instead of them."""
        others = [p for p in range(len(self.args)) if p not in self.positions]
        shared = share([program, *(self.args[p] for p in others)], keep)
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

    def colocated_groups(self, size: int) -> list[ChunkGroup]:
        """The chunks in groups that one task can take, each with its worker. Chunks
        whose blocks are all in worker memory (persisted) are placed on workers
        (`balanced_placement`: where they are, unless that leaves a worker over a chunk's
        rows per thread above another), and each worker's `n` chunks, on `t` threads, make
        max(ceil(n / size), min(t, n)) groups of near-equal length, so that every thread
        has a task and no task takes more than `size` chunks (a chunk moved to the worker
        comes last, in a group of chunks it holds). Every other chunk is a group alone, on
        no worker in particular: its blocks are still to be made, and a task then holds
        one chunk's rows at a time (as when streaming data larger than memory)."""
        client = current_client()
        holders = self.holders(client)
        threads = client.nthreads() if any(holders) else {}
        placed = balanced_placement(holders, self.chunks, threads)
        on_workers: dict[str, list[int]] = {}
        for c, worker in enumerate(placed):
            if worker is not None:
                on_workers.setdefault(worker, []).append(c)
        groups = [ChunkGroup(group, worker) for worker, chunks in sorted(on_workers.items())
                  for group in split_among_threads(
                      sorted(chunks, key=lambda c, w=worker: (w not in holders[c], c)),
                      threads.get(worker, 1), size)]
        return groups + [ChunkGroup([c], None) for c, worker in enumerate(placed)
                         if worker is None]

    def holders(self, client: object | None) -> list[set[str] | None]:
        """Per chunk whose blocks (one per batch array) are all in the memory of
        `client`'s workers, the workers holding every one of them (those holding any,
        when none holds all); None for the other chunks."""
        futures = {}
        for p in self.positions if client is not None else ():
            graph = self.args[p].__dask_graph__()
            futures.update((key, graph[key]) for key in self.blocks[p]
                           if is_future(graph.get(key)))
        where = client.who_has(list(futures.values())) if futures else {}
        found = [[set(where.get(self.blocks[p][c], ())) for p in self.positions]
                 for c in range(len(self.chunks))]
        return [set.intersection(*blocks) or set.union(*blocks) if all(blocks) else None
                for blocks in found]


def balanced_placement(holders: Sequence[set[str] | None], rows: Sequence[int],
                       threads: dict[str, int]) -> list[str | None]:
    """A worker for each chunk that `holders` places (None for the others), balancing the
    rows per thread (`threads`: per worker): each chunk, largest first, goes to the least
    loaded worker holding it; then, while the most loaded worker has a chunk that would
    leave the least loaded one still below it, that chunk moves there. Persisted chunks
    are spread as placement left them, often unevenly, and the busiest worker bounds the
    call, so one chunk's rows fetched by another worker (a transfer, small next to a
    compute-bound gradient of the rows) buys the idle thread's time."""
    def per_row(worker: str) -> float:
        return 1 / threads.get(worker, 1)

    load = dict.fromkeys(sorted(threads), 0.0)
    placed: list[str | None] = [None] * len(holders)
    for c in sorted((c for c, where in enumerate(holders) if where), key=lambda c: -rows[c]):
        worker = min(sorted(holders[c]), key=lambda w: load.get(w, 0.0))
        placed[c] = worker
        load[worker] = load.get(worker, 0.0) + rows[c] * per_row(worker)
    for _ in range(len(holders) if load else 0):  # at most a move per chunk
        busiest, idlest = max(load, key=load.get), min(load, key=load.get)
        mine = [c for c, worker in enumerate(placed) if worker == busiest]
        smallest = min(mine, key=lambda c: rows[c], default=None)
        if smallest is None or \
                load[idlest] + rows[smallest] * per_row(idlest) >= load[busiest]:
            break
        placed[smallest] = idlest
        load[busiest] -= rows[smallest] * per_row(busiest)
        load[idlest] += rows[smallest] * per_row(idlest)
    return placed


def split_among_threads(chunks: list[int], threads: int, size: int) -> list[list[int]]:
    """One worker's `chunks` cut into max(ceil(n / size), min(threads, n)) runs of
    near-equal length (n chunks): a task for every thread, at most `size` chunks a task."""
    count = max(-(-len(chunks) // size), min(threads, len(chunks)))
    return [chunks[len(chunks) * i // count:len(chunks) * (i + 1) // count]
            for i in range(count)]


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


def share(values: list[object], keep: Callable[[object], TaskRef]) -> list[object]:
    """`values` as the tasks of one call on the current distributed client take them, sent
    to every worker once: up to `INLINE_BYTES` in all, together one value of the call's own
    graph (`keep`: one key, which the tasks name, each taking its item inline; it travels
    with the graph, with no round trip before it is sent, and a worker fetches it once for
    all its tasks); more, scattered to every worker first (futures of one
    `scatter(..., broadcast=True)`: the client sends them straight to the workers, not
    through the scheduler's graph). On a local scheduler (one process) the tasks take
    `values` themselves."""
    client = current_client()
    if client is None:
        return values
    if sum(map(sizeof, values)) <= INLINE_BYTES:
        kept = keep(tuple(values))
        return [Task(None, operator.getitem, kept, i) for i in range(len(values))]
    return client.scatter(values, broadcast=True, hash=False)


def loaded_distributed() -> ModuleType | None:
    """The `distributed` package if this process has imported it, else None: without it no
    `Future` or `Client` can exist, so nothing here imports it (it is optional, and slow
    to import)."""
    return sys.modules.get("distributed")


def is_future(value: object) -> bool:
    """Whether `value` is a `distributed.Future` (a block already in worker memory)."""
    distributed = loaded_distributed()
    return distributed is not None and isinstance(value, distributed.Future)


def current_client() -> object | None:
    """The default `distributed.Client` when it is Dask's current scheduler, else None (no
    client, distributed not installed, or another scheduler chosen with dask.config)."""
    distributed = loaded_distributed()
    if distributed is None:
        return None
    try:
        client = distributed.default_client()
    except ValueError:
        return None
    return client if dask.base.get_scheduler() == client.get else None

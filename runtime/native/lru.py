"""A small thread-safe least-recently-used map, for the in-memory caches of compiled code.

Consumes keys and values; keeps at most `maxsize` entries, dropping the least recently
used one when a new key would exceed it. The caches that hold compiled kernels use it so a
long-running program keeps a bounded number of them (what an evicted entry held, such as
JIT code, is released once nothing else refers to it):

    kernels = LruCache(64)
    kernel = kernels.get(key) or kernels.setdefault(key, build())
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from reverie.runtime.native.locks import runtime_lock

K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A mapping of at most `maxsize` entries that forgets the least recently used one."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = runtime_lock()  # new in a fork's child (`runtime/native/locks.py`)

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value for `key` (now the most recently used), or `default`."""
        with self._lock:
            try:
                self._entries.move_to_end(key)
            except KeyError:
                return default
            return self._entries[key]

    def setdefault(self, key: K, value: V) -> V:
        """The value already stored for `key`, else `value`, stored (evicting if full)."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
            evicted = self._store(key, value)
        del evicted  # released outside the lock: it may hold native code to unload
        return value

    def __setitem__(self, key: K, value: V) -> None:
        with self._lock:
            evicted = self._store(key, value)
        del evicted

    def _store(self, key: K, value: V) -> list[V]:
        """Store `value` as the most recent entry; return what was evicted to make room."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        evicted = []
        while len(self._entries) > self.maxsize:
            evicted.append(self._entries.popitem(last=False)[1])
        return evicted

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()

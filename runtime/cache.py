"""On-disk byte cache for compiled artefacts (object code of JIT-compiled modules).

Consumes a key (any string; callers pass a hash of everything that determines the
artefact) and bytes; produces the same bytes on a later `load` of that key, possibly in
another process.

- Location: `$REVERIE_CACHE_DIR`, else `$XDG_CACHE_HOME/reverie`, else `~/.cache/reverie`.
- `REVERIE_CACHE=0` disables the cache: `load` finds nothing and `store` writes nothing.
- Writes are atomic (temporary file in the same directory, then `os.replace`), so a reader
  never sees half a file. Every entry carries a checksum; an entry that is unreadable or
  fails its checksum counts as missing, and the next `store` replaces it.
- Storing is best effort: a read-only or full disk never makes compilation fail.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

_MAGIC = b"RVC1"
_CHECKSUM_BYTES = 32


def cache_enabled() -> bool:
    """Whether the disk cache is in use (`REVERIE_CACHE=0` turns it off)."""
    return os.environ.get("REVERIE_CACHE", "1").strip() != "0"


def cache_dir() -> Path:
    """The directory holding the cache entries (it may not exist yet)."""
    explicit = os.environ.get("REVERIE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "reverie"


def entry_path(key: str) -> Path:
    """The file that stores the entry for `key`."""
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return cache_dir() / digest[:2] / f"{digest[2:]}.bin"


def load(key: str) -> bytes | None:
    """The bytes stored under `key`, or None when absent, disabled or damaged."""
    if not cache_enabled():
        return None
    try:
        blob = entry_path(key).read_bytes()
    except OSError:
        return None
    header = len(_MAGIC) + _CHECKSUM_BYTES
    if len(blob) < header or not blob.startswith(_MAGIC):
        return None
    checksum, data = blob[len(_MAGIC) : header], blob[header:]
    if hashlib.sha256(data).digest() != checksum:
        return None
    return data


def store(key: str, data: bytes) -> bool:
    """Store `data` under `key` atomically; return whether it was written."""
    if not cache_enabled():
        return False
    path = entry_path(key)
    blob = _MAGIC + hashlib.sha256(data).digest() + data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".bin")
        try:
            with os.fdopen(fd, "wb") as tmp_file:
                tmp_file.write(blob)
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True

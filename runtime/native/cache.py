"""On-disk byte cache for compiled artefacts (object code of JIT-compiled modules).

Consumes a key (any string; callers pass a hash of everything that determines the
artefact) and bytes; produces the same bytes on a later `load` of that key, possibly in
another process of the same user. It trusts nothing it did not write for that key.

- Location: `$REVERIE_CACHE_DIR`, else `$XDG_CACHE_HOME/reverie`, else `~/.cache/reverie`.
- `REVERIE_CACHE=0` disables the cache: `load` finds nothing and `store` writes nothing.
- Trust: the cache root and its shard directories must be directories owned by the
  effective user and not writable by group or others. Otherwise the cache is bypassed
  (compilation still works) and one `CacheBypassWarning` per root and process says why.
  The same holds for `secret`, a random per-user key in the root (mode 0600, no group or
  other access), created atomically on first store. A process reads it once per root and
  uses it again while the file's identity (device, inode, size, times, owner, mode: one
  `lstat`) is unchanged.
- Entries: `RVC3`, key length, data length, the full key, a 32-byte tag over all of these
  and the data, then the data. The tag is BLAKE2b keyed with the secret (a MAC by design,
  as strong as HMAC-SHA256, and built into CPython without OpenSSL: `import hashlib` or
  `hmac` loads libcrypto, which a warm start should not pay for, so `_blake2` and the
  constant-time comparison are imported directly). An entry is used only when its file is a regular
  file (never a link, FIFO or device: opened with O_NOFOLLOW | O_NONBLOCK) owned by the
  user and not writable by group or others, its size is exactly the recorded one (at most
  `MAX_ENTRY_BYTES`, nothing more is read), its key is the requested key and its tag
  verifies; anything else counts as missing and the next `store` replaces it. So an entry
  copied onto another key's path, planted by someone else, truncated, or in an old format
  (`RVC2`'s HMAC-SHA256 among them) is never returned.
- Directories are created 0700 and files 0600, whatever the umask. Writes are atomic
  (temporary file in the same directory, then `os.replace`), so a reader never sees half
  a file.
- Storing is best effort: a read-only or full disk never makes compilation fail.
- Orphans: a temporary file is named `.tmp-<pid>-<random>`; one that a killed writer left
  is removed by the first `store` of a later process in that root (`_remove_orphans`,
  with `runtime/native/orphans.py`'s rule: its writer gone, or untouched for an hour).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import struct
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

try:  # CPython's own BLAKE2 and constant-time comparison (what hashlib and hmac re-export)
    from _blake2 import blake2b
    from _operator import _compare_digest as compare_digest
except ImportError:  # another interpreter: the public modules
    from hashlib import blake2b
    from hmac import compare_digest

from reverie.runtime.native.locks import runtime_lock
from reverie.runtime.native.orphans import is_orphan, owner_pid

MAX_ENTRY_BYTES = 1 << 28
_MAGIC = b"RVC3"
_HEADER = struct.Struct("<4sIQ")
_TAG_BYTES = 32
_SECRET_NAME = "secret"
_SECRET_BYTES = 32
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_warned_roots: set[str] = set()
# by cache root: the identity of the secret file last read there, and its secret
_secrets_read: dict[str, tuple[tuple[int, ...], bytes]] = {}
_warned_lock = runtime_lock()
_TEMPORARY_PREFIX = ".tmp-"
_swept_roots: set[str] = set()  # roots whose orphans this process removed
_Result = TypeVar("_Result")


class CacheBypassWarning(RuntimeWarning):
    """The disk cache was not used because its directory or secret is not private."""


class _Untrusted(Exception):
    """A cache directory or secret that this user cannot trust (the message says why)."""


def cache_enabled() -> bool:
    """Whether the disk cache is in use (`REVERIE_CACHE=0` turns it off)."""
    return os.environ.get("REVERIE_CACHE", "1").strip() != "0"


def cache_dir() -> Path:
    """The directory holding the cache entries (it may not exist yet)."""
    environ = os.environ
    return _cache_dir_for(environ.get("REVERIE_CACHE_DIR"), environ.get("XDG_CACHE_HOME"),
                          environ.get("HOME"))


@functools.lru_cache(maxsize=16)
def _cache_dir_for(explicit: str | None, xdg: str | None, home: str | None) -> Path:
    """`cache_dir()` under these environment variables (`home`: what `Path.home()` reads),
    made once per process and setting: pathlib's parsing was a fifth of a cache read."""
    if explicit:
        return Path(explicit).expanduser()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "reverie"


def digest(text: str) -> str:
    """A 256-bit BLAKE2b hash of `text` in hex (no secret): what callers make keys of,
    without importing hashlib (see the module docstring)."""
    return digest_bytes(text.encode("utf-8"))


def digest_bytes(data: bytes) -> str:
    """`digest` of bytes."""
    return blake2b(data, digest_size=32).hexdigest()


def _entry_location(key: str) -> tuple[str, str]:
    """The shard directory and file name (inside the cache root) of the entry for `key`."""
    hashed = digest(key)
    return hashed[:2], f"{hashed[2:]}.bin"


def entry_path(key: str) -> Path:
    """The file that stores the entry for `key`."""
    shard, name = _entry_location(key)
    return cache_dir() / shard / name


def _why_not_private(info: os.stat_result, *, secret: bool = False) -> str | None:
    """Why `info` is not owned by this user and writable (for a secret: usable) only by it."""
    if info.st_uid != os.geteuid():
        return f"is owned by uid {info.st_uid}, not {os.geteuid()}"
    if info.st_mode & (0o077 if secret else 0o022):
        return f"has mode {stat.S_IMODE(info.st_mode):04o}"
    return None


def _make_private_dirs(path: Path) -> None:
    """Create `path` and its missing parents with mode 0700."""
    if path.exists():
        return
    _make_private_dirs(path.parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    os.chmod(path, 0o700)


def _open_dir(root: Path, shard: str | None = None, *, root_fd: int | None = None) -> int:
    """Open the cache root, or a shard in it (not through a link); both must be private."""
    flags = _DIR_FLAGS if shard is None else _DIR_FLAGS | os.O_NOFOLLOW
    try:
        fd = os.open(root if shard is None else shard, flags, dir_fd=root_fd)
    except FileNotFoundError:
        raise
    except OSError as error:
        reason = f"is not a usable directory ({error.strerror})"
    else:
        reason = _why_not_private(os.fstat(fd))
        if reason is None:
            return fd
        os.close(fd)
    raise _Untrusted(f"cache directory {root if shard is None else root / shard} {reason}")


def _open_shard(root_fd: int, shard: str, root: Path, *, create: bool) -> int:
    """Open (creating it with mode 0700 if asked) the shard directory `shard` of the root."""
    if create:
        try:
            os.mkdir(shard, 0o700, dir_fd=root_fd)
        except FileExistsError:
            pass
        else:
            fd = os.open(shard, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=root_fd)
            os.fchmod(fd, 0o700)
            os.close(fd)
    return _open_dir(root, shard, root_fd=root_fd)


def _open_regular(dir_fd: int, name: str) -> tuple[int, os.stat_result]:
    """Open `name` for reading without following links or blocking; OSError unless regular."""
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", name)
    return fd, info


def _read_exactly(fd: int, size: int) -> bytes | None:
    """`size` bytes from `fd`, or None if the file ends first."""
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _file_identity(info: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is replaced, written, or has its owner or mode changed
    (the inode's change time moves with each of these)."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
            info.st_uid, info.st_mode)


def _read_secret(root_fd: int, root: Path) -> bytes | None:
    """The root's secret, None if it does not exist (_Untrusted if it is not private).

    A secret read before is used again while its file's identity (`_file_identity`, one
    `lstat`) is unchanged, so it was checked private and read as it still is; anything
    else (another file, a link, a chmod) reads and checks it afresh."""
    try:
        seen = _file_identity(os.stat(_SECRET_NAME, dir_fd=root_fd, follow_symlinks=False))
    except FileNotFoundError:
        return None
    except OSError:
        seen = None
    known = _secrets_read.get(str(root))
    if known is not None and known[0] == seen:
        return known[1]
    try:
        fd, info = _open_regular(root_fd, _SECRET_NAME)
    except FileNotFoundError:
        return None
    except OSError as error:
        reason = f"is not a regular file ({error.strerror})"
        raise _Untrusted(f"{root / _SECRET_NAME} {reason}") from error
    try:
        reason = _why_not_private(info, secret=True)
        if reason is None and info.st_size != _SECRET_BYTES:
            reason = f"is not {_SECRET_BYTES} bytes long"
        secret = _read_exactly(fd, _SECRET_BYTES) if reason is None else None
    finally:
        os.close(fd)
    if secret is None:
        raise _Untrusted(f"{root / _SECRET_NAME} {reason or 'is truncated'}")
    _secrets_read[str(root)] = (_file_identity(info), secret)
    return secret


def _write_new_file(dir_fd: int, data: bytes) -> str:
    """Write `data` to a fresh temporary file (mode 0600) in the directory; its name."""
    name = f"{_TEMPORARY_PREFIX}{os.getpid()}-{os.urandom(8).hex()}"
    fd = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(data)
    except BaseException:
        os.unlink(name, dir_fd=dir_fd)
        raise
    return name


def _remove_orphans(root_fd: int, root: Path) -> None:
    """Remove the temporary files that killed writers left in the root and its shards
    (`runtime/native/orphans.py` says which); once per process and root."""
    if str(root) in _swept_roots:
        return
    _swept_roots.add(str(root))
    _remove_orphans_in(root_fd)
    for entry in os.scandir(root_fd):
        if len(entry.name) == 2 and entry.is_dir(follow_symlinks=False):
            try:
                shard_fd = _open_shard(root_fd, entry.name, root, create=False)
            except (_Untrusted, OSError):  # not ours to clean (`load` says why, if used)
                continue
            try:
                _remove_orphans_in(shard_fd)
            finally:
                os.close(shard_fd)


def _remove_orphans_in(dir_fd: int) -> None:
    """Remove the orphaned temporary files directly in the directory `dir_fd`."""
    for entry in os.scandir(dir_fd):
        if not entry.name.startswith(_TEMPORARY_PREFIX):
            continue
        info = entry.stat(follow_symlinks=False)
        if is_orphan(owner_pid(_TEMPORARY_PREFIX, entry.name), info, by_age=True):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=dir_fd)


def _create_secret(root_fd: int, root: Path) -> bytes:
    """The root's secret, created atomically (hard link, never replaced) if missing."""
    secret = _read_secret(root_fd, root)
    if secret is not None:
        return secret
    temporary = _write_new_file(root_fd, os.urandom(_SECRET_BYTES))
    try:
        os.link(temporary, _SECRET_NAME, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    except FileExistsError:
        pass
    finally:
        os.unlink(temporary, dir_fd=root_fd)
    secret = _read_secret(root_fd, root)
    if secret is None:
        raise _Untrusted(f"{root / _SECRET_NAME} vanished while being created")
    return secret


def _tag(secret: bytes, header: bytes, key: bytes, data: bytes | memoryview) -> bytes:
    """The MAC (BLAKE2b keyed with the secret) that authenticates an entry's header, key
    and data."""
    mac = blake2b(header, digest_size=_TAG_BYTES, key=secret)
    mac.update(key)
    mac.update(data)
    return mac.digest()


def _warn_bypass(root: Path, reason: str) -> None:
    """Warn, once per cache root and process, that the cache is not used."""
    with _warned_lock:
        if str(root) in _warned_roots:
            return
        _warned_roots.add(str(root))
    warnings.warn(
        f"Reverie's disk cache is not used: {reason}. Compiling without it; make the cache "
        "private to you (owned by you, chmod 700, secret chmod 600) or set REVERIE_CACHE_DIR.",
        CacheBypassWarning,
        stacklevel=4,
    )


def _in_cache(
    key: str, action: Callable[[int, str, bytes], _Result], *, create: bool,
    root: Path | None = None,
) -> _Result | None:
    """`action(shard_fd, entry_name, secret)` for `key`'s entry in `root` (default: the
    `cache_dir()` of now); None if untrusted or unusable.

    `create` makes missing directories and the secret (for storing); without it a missing
    one means there is nothing to load."""
    root = cache_dir() if root is None else root
    shard, name = _entry_location(key)
    root_fd = None
    try:
        if create:
            _make_private_dirs(root)
        root_fd = _open_dir(root)
        secret = _create_secret(root_fd, root) if create else _read_secret(root_fd, root)
        if secret is None:
            return None
        if create:
            with contextlib.suppress(OSError):  # best effort, as storing is
                _remove_orphans(root_fd, root)
        shard_fd = _open_shard(root_fd, shard, root, create=create)
        try:
            return action(shard_fd, name, secret)
        finally:
            os.close(shard_fd)
    except _Untrusted as error:
        _warn_bypass(root, str(error))
    except OSError:
        pass
    finally:
        if root_fd is not None:
            os.close(root_fd)
    return None


def _read_entry(shard_fd: int, name: str, key: bytes, secret: bytes) -> bytes | None:
    """The data of entry file `name` if it is private, well formed, for `key` and authentic."""
    fd, info = _open_regular(shard_fd, name)
    try:
        if _why_not_private(info) or not _HEADER.size <= info.st_size <= MAX_ENTRY_BYTES:
            return None
        header = _read_exactly(fd, _HEADER.size)
        if header is None:
            return None
        magic, key_length, data_length = _HEADER.unpack(header)
        body_size = key_length + _TAG_BYTES + data_length
        if magic != _MAGIC or key_length != len(key) or _HEADER.size + body_size != info.st_size:
            return None
        body = _read_exactly(fd, body_size)
    finally:
        os.close(fd)
    if body is None:
        return None
    stored_key, tag = body[:key_length], body[key_length : key_length + _TAG_BYTES]
    data = memoryview(body)[key_length + _TAG_BYTES :]
    authentic = compare_digest(tag, _tag(secret, header, key, data))
    return bytes(data) if authentic and compare_digest(stored_key, key) else None


def _write_entry(shard_fd: int, name: str, key: bytes, secret: bytes, data: bytes) -> bool:
    """Atomically replace entry file `name` with an authenticated entry for `key`."""
    header = _HEADER.pack(_MAGIC, len(key), len(data))
    temporary = _write_new_file(shard_fd, header + key + _tag(secret, header, key, data) + data)
    try:
        os.replace(temporary, name, src_dir_fd=shard_fd, dst_dir_fd=shard_fd)
    except OSError:
        os.unlink(temporary, dir_fd=shard_fd)
        raise
    return True


def load(key: str, *, root: Path | None = None) -> bytes | None:
    """The bytes this user stored under `key` (in `root`, default `cache_dir()`), or None
    when absent, disabled or untrusted."""
    if not cache_enabled():
        return None
    key_bytes = key.encode("utf-8")
    return _in_cache(
        key, lambda shard_fd, name, secret: _read_entry(shard_fd, name, key_bytes, secret),
        create=False, root=root,
    )


def store(key: str, data: bytes, *, root: Path | None = None) -> bool:
    """Store `data` under `key` atomically (in `root`, default `cache_dir()`); return
    whether it was written."""
    key_bytes = key.encode("utf-8")
    entry_size = _HEADER.size + len(key_bytes) + _TAG_BYTES + len(data)
    if not cache_enabled() or entry_size > MAX_ENTRY_BYTES:
        return False
    written = _in_cache(
        key,
        lambda shard_fd, name, secret: _write_entry(shard_fd, name, key_bytes, secret, data),
        create=True, root=root,
    )
    return bool(written)


def discard(key: str) -> None:
    """Remove the entry for `key`, if any (best effort: it is replaced on the next store)."""
    if cache_enabled():
        try:
            entry_path(key).unlink(missing_ok=True)
        except OSError:
            pass

"""The disk cache trusts nothing it did not write for the key (runtime/native/cache.py,
runtime/native/jit.py).

Each scenario tampers with a cache built by one process, then compiles in a fresh process
(own `REVERIE_CACHE_DIR`, a timeout against hangs, an address-space limit against runaway
reads) and checks that the answer is right and the tampered entry was not used.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.metadata
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from test_jit import affine_ir

from reverie.runtime.native import cache, jit

FOREIGN_UID = 65534
CHILD_TIMEOUT_S = 120
CHILD_ADDRESS_SPACE = 4 << 30
CHILD = f"""
import json, sys, warnings
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_jit import affine_ir, call_affine
from reverie.runtime.native import jit
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    modules = [jit.compile_module(affine_ir(float(s)), name="affine") for s in sys.argv[1:]]
print(json.dumps({{
    "from_cache": [module.from_cache for module in modules],
    "values": [call_affine(module, 2.0, 1.0) for module in modules],
    "warnings": [f"{{w.category.__name__}}: {{w.message}}" for w in caught],
}}))
"""


def compile_in_fresh_process(
    root: Path, *scales: float, umask: int | None = None
) -> dict[str, list]:
    """Compile and call `affine_ir(scale)` at (2, 1) for each scale in a new Python process
    whose disk cache is `root`."""

    def limit_child() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))
        if umask is not None:
            os.umask(umask)

    environment = {**os.environ, "REVERIE_CACHE_DIR": str(root)}
    environment.pop("REVERIE_CACHE", None)
    result = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, scales)], env=environment,
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, preexec_fn=limit_child,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def key_of(scale: float) -> str:
    """The object-cache key of `affine_ir(scale)`."""
    return jit.object_cache_key(affine_ir(scale))


def assert_rebuilt_correctly(outcome: dict[str, list]) -> None:
    """The fresh process compiled scale 2 itself and got 2 * 2 + 1."""
    assert outcome["from_cache"] == [False]
    assert outcome["values"] == [5.0]


@pytest.fixture(scope="module")
def pristine_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache written by a fresh process, holding scales 2 and 3."""
    root = tmp_path_factory.mktemp("pristine") / "cache"
    assert compile_in_fresh_process(root, 2.0, 3.0)["from_cache"] == [False, False]
    return root


@pytest.fixture
def cache_root(pristine_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the pristine cache, which this process uses too; its entries load."""
    root = tmp_path / "cache"
    shutil.copytree(pristine_cache, root)
    monkeypatch.setenv("REVERIE_CACHE_DIR", str(root))
    monkeypatch.delenv("REVERIE_CACHE", raising=False)
    assert cache.load(key_of(2.0)) is not None
    return root


def test_entry_copied_onto_another_keys_path_is_not_used(cache_root: Path) -> None:
    shutil.copyfile(cache.entry_path(key_of(3.0)), cache.entry_path(key_of(2.0)))
    assert_rebuilt_correctly(compile_in_fresh_process(cache_root, 2.0))
    assert compile_in_fresh_process(cache_root, 2.0, 3.0)["values"] == [5.0, 7.0]


def old_format_entry(data: bytes) -> bytes:
    """An entry in the checksum-only format of earlier releases."""
    return b"RVC1" + hashlib.sha256(data).digest() + data


def hmac_format_entry(root: Path, key: str, data: bytes) -> bytes:
    """An entry for `key` in the previous format (`RVC2`, an HMAC-SHA256 tag), under this
    cache's own secret: authentic once, but not in the format a reader now verifies."""
    header = struct.pack("<4sIQ", b"RVC2", len(key.encode()), len(data))
    tag = hmac.new((root / "secret").read_bytes(), header + key.encode() + data,
                   hashlib.sha256).digest()
    return header + key.encode() + tag + data


def entry_under_another_secret(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: str, data: bytes
) -> bytes:
    """The entry that a cache with a different secret writes for `key`."""
    with monkeypatch.context() as scoped:
        scoped.setenv("REVERIE_CACHE_DIR", str(tmp_path / "other cache"))
        assert cache.store(key, data)
        return cache.entry_path(key).read_bytes()


@pytest.mark.parametrize("forge", ["old checksum format", "another cache's secret",
                                   "previous HMAC format"])
def test_planted_object_is_not_executed(
    cache_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forge: str
) -> None:
    planted = cache.load(key_of(3.0))
    target = cache.entry_path(key_of(2.0))
    if forge == "old checksum format":
        entry = old_format_entry(planted)
    elif forge == "previous HMAC format":
        entry = hmac_format_entry(cache_root, key_of(2.0), planted)
    else:
        entry = entry_under_another_secret(monkeypatch, tmp_path, key_of(2.0), planted)
    target.write_bytes(entry)
    assert_rebuilt_correctly(compile_in_fresh_process(cache_root, 2.0))


def patched(object_code: bytes, offset: int, value: bytes) -> bytes:
    """`object_code` with the bytes at `offset` replaced by `value`."""
    return object_code[:offset] + value + object_code[offset + len(value) :]


def host_machine(object_code: bytes) -> int:
    """The ELF e_machine of a little-endian object."""
    return struct.unpack_from("<H", object_code, 18)[0]


ELF_PATCHES: dict[str, Callable[[bytes], bytes]] = {
    "machine": lambda code: patched(
        code, 18, struct.pack("<H", 183 if host_machine(code) != 183 else 62)
    ),
    "file type ET_DYN": lambda code: patched(code, 16, struct.pack("<H", 3)),
}


@pytest.mark.parametrize("field", sorted(ELF_PATCHES))
def test_foreign_architecture_object_is_rebuilt_not_executed(
    cache_root: Path, field: str
) -> None:
    key = key_of(2.0)
    genuine = cache.load(key)
    assert cache.store(key, ELF_PATCHES[field](genuine))
    assert_rebuilt_correctly(compile_in_fresh_process(cache_root, 2.0))
    assert cache.load(key) == genuine


def test_entry_owned_by_another_user_is_not_used(cache_root: Path) -> None:
    entry = cache.entry_path(key_of(2.0))
    os.chown(entry, FOREIGN_UID, FOREIGN_UID)
    assert_rebuilt_correctly(compile_in_fresh_process(cache_root, 2.0))
    assert entry.stat().st_uid == os.geteuid()


def tampered_path(cache_root: Path, target: str) -> Path:
    """The cache root, the shard directory of scale 2's entry, or the secret."""
    return {
        "root": cache_root,
        "shard": cache.entry_path(key_of(2.0)).parent,
        "secret": cache_root / "secret",
    }[target]


TAMPERINGS: dict[str, Callable[[Path], None]] = {
    "foreign owner": lambda path: os.chown(path, FOREIGN_UID, FOREIGN_UID),
    "world-writable": lambda path: path.chmod(path.stat().st_mode | 0o002),
    "group-writable": lambda path: path.chmod(path.stat().st_mode | 0o020),
    "readable by others": lambda path: path.chmod(path.stat().st_mode | 0o004),
}
UNTRUSTED_PLACES = [
    *((target, tampering) for target in ("root", "shard", "secret") for tampering in
      ("foreign owner", "world-writable", "group-writable")),
    ("secret", "readable by others"),
]


@pytest.mark.parametrize(("target", "tampering"), UNTRUSTED_PLACES)
def test_untrusted_directory_or_secret_bypasses_the_cache_with_one_warning(
    cache_root: Path, target: str, tampering: str
) -> None:
    entry = cache.entry_path(key_of(2.0))
    before = entry.read_bytes()
    place = tampered_path(cache_root, target)
    TAMPERINGS[tampering](place)
    outcome = compile_in_fresh_process(cache_root, 2.0, 2.0)
    assert outcome["from_cache"] == [False, False]
    assert outcome["values"] == [5.0, 5.0]
    (warning,) = outcome["warnings"]
    assert warning.startswith("CacheBypassWarning") and str(place) in warning
    assert entry.read_bytes() == before


def replace_secret(path: Path) -> None:
    """Put another private secret in the place of `path` (as a new cache would have)."""
    replacement = path.with_name("replacement")
    replacement.write_bytes(os.urandom(path.stat().st_size))
    replacement.chmod(0o600)
    os.replace(replacement, path)


SECRET_TAMPERINGS = {**{name: TAMPERINGS[name] for target, name in UNTRUSTED_PLACES
                        if target == "secret"},
                     "replaced": replace_secret, "a link": lambda path: (
                         os.replace(path, path.with_name("moved")),
                         path.symlink_to(path.with_name("moved")))}


@pytest.mark.parametrize("tampering", SECRET_TAMPERINGS)
def test_a_secret_tampered_with_after_use_is_not_trusted_in_the_same_process(
    cache_root: Path, tampering: str
) -> None:
    """The process remembers the secret it read (runtime/native/cache.py `_read_secret`) only
    while the file is the one it checked: the fixture's load read it, this one may not."""
    assert cache.load(key_of(2.0)) is not None
    SECRET_TAMPERINGS[tampering](cache_root / "secret")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.load(key_of(2.0)) is None
    bypassed = [w for w in caught if issubclass(w.category, cache.CacheBypassWarning)]
    assert len(bypassed) == (0 if tampering == "replaced" else 1)


@pytest.mark.parametrize("link_to", ["/dev/zero", "an entry outside the cache"])
def test_symlinked_entry_is_not_followed(cache_root: Path, tmp_path: Path, link_to: str) -> None:
    entry = cache.entry_path(key_of(2.0))
    target = Path(link_to)
    if link_to != "/dev/zero":
        target = tmp_path / "outside.bin"
        entry.replace(target)
    entry.unlink(missing_ok=True)
    entry.symlink_to(target)
    assert_rebuilt_correctly(compile_in_fresh_process(cache_root, 2.0))
    assert not entry.is_symlink()


def test_fifo_entry_does_not_block(cache_root: Path) -> None:
    entry = cache.entry_path(key_of(2.0))
    entry.unlink()
    os.mkfifo(entry, 0o600)
    assert_rebuilt_correctly(compile_in_fresh_process(cache_root, 2.0))
    assert entry.is_file()


def test_directories_are_private_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "made" / "by reverie" / "cache"
    monkeypatch.setenv("REVERIE_CACHE_DIR", str(root))
    assert compile_in_fresh_process(root, 2.0, umask=0)["from_cache"] == [False]
    entry = cache.entry_path(key_of(2.0))
    for directory in (tmp_path / "made", root.parent, root, entry.parent):
        assert oct(directory.stat().st_mode & 0o777) == oct(0o700), directory
    for file in (entry, root / "secret"):
        assert oct(file.stat().st_mode & 0o777) == oct(0o600), file
    assert compile_in_fresh_process(root, 2.0, umask=0)["from_cache"] == [True]


def test_reverie_version_is_in_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    assert jit.reverie_version() == importlib.metadata.version("reverie")
    current = key_of(2.0)
    monkeypatch.setattr(jit, "reverie_version", lambda: importlib.metadata.version("reverie")
                        + ".post1")
    assert key_of(2.0) != current

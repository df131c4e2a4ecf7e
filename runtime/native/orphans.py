"""What a crashed process left behind, and when it is safe to remove it.

A process killed while writing a disk-cache entry leaves its temporary file (`.tmp-<pid>-…`
in the cache, `runtime/native/cache.py`); one killed while shared objects were open leaves its
private library directory (`reverie-so-<pid>-…` in the temporary folder,
`runtime/native/shared_objects.py`). Those modules remove such orphans once per process, where
they first write there (not at import). Something is an orphan only when it is this user's
and nobody can still be using it:

- its owner's process (the pid in its name) is gone and it has not changed for
  DEAD_OWNER_QUIET_S (a pid of another PID namespace sharing the folder looks gone here,
  but a file being written changes with every write);
- or, for a temporary file only, it has not changed for ORPHAN_AGE_S (no write lasts that
  long; a temporary file named without a pid, or whose pid was reused).

A private library directory of a live process is never removed, however old.

    if is_orphan(owner_pid("reverie-so-", name), info, by_age=False): ...
"""

from __future__ import annotations

import os
import time

DEAD_OWNER_QUIET_S = 10
ORPHAN_AGE_S = 3600


def owner_pid(prefix: str, name: str) -> int | None:
    """The pid in `name` (`<prefix><pid>-<anything>`), or None if it holds none."""
    digits = name.removeprefix(prefix).partition("-")[0]
    return int(digits) if name.startswith(prefix) and digits.isdigit() else None


def process_alive(pid: int) -> bool:
    """Whether a process `pid` exists (one of another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_orphan(pid: int | None, info: os.stat_result, *, by_age: bool) -> bool:
    """Whether the file or directory described by `info`, made by process `pid` (None:
    unknown), is this user's and nobody's any more (see the module docstring); `by_age`:
    whether being unchanged for ORPHAN_AGE_S is enough."""
    if info.st_uid != os.geteuid():
        return False
    quiet = time.time() - info.st_mtime
    if pid is not None and pid > 0 and quiet > DEAD_OWNER_QUIET_S and not process_alive(pid):
        return True
    return by_age and quiet > ORPHAN_AGE_S

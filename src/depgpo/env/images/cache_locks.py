"""Locks and atomic writes for the caches that processes share: the wheel cache, bootstrapped bases in the
runtime's store, unpacked images. Several harnesses, builds, prefetches and rollout workers use them at once
(a trainer's workers, two users' CI jobs), so a writer stages its work and renames it into place, and holds an
exclusive lock while it does; a reader that must see one consistent state (a build reading the wheel cache, a
build on a base) holds the shared lock for as long as it reads. Locks are flock(2) on a file beside the cache:
released when the process dies, so a killed writer never wedges the others.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(lock_file: Path, shared: bool = False):
    """Hold `lock_file`'s flock (shared for readers, exclusive for writers) for the duration of the block."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def replace_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all: a concurrent reader (a build's bind mount of it) sees the old file or the
    new one, never a truncated one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and path.read_text() == text:
        return
    fd, staged = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(staged, 0o644)
        os.replace(staged, path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise


def wheels_lock(wheels: Path) -> Path:
    """The lock of a wheel cache: exclusive while a prefetch renames wheels in, shared while a build reads it."""
    return wheels.parent / f".{wheels.name}.lock"


def base_lock(reference: str) -> Path:
    """The lock of a base image in the runtime's store (per user, as the store is): exclusive while it is checked
    and bootstrapped, shared while a build runs on it, so that no build sees its base re-tagged halfway."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "depgpo" / "bases"
    return root / (re.sub(r"[^A-Za-z0-9._-]+", "_", reference)[:120] + ".lock")

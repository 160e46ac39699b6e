"""Which paths are records, and which files are tracked line by line (docs/credit.md#records).

One definition for every producer and consumer of trajectories: the sandbox's trace filter, the verifier's
inspection set, offline inference and the credit's tracked scope. Each group says why its paths are not the
agent's work, so a module that needs a different set composes it from these groups instead of copying a tuple.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

# Installed software: never the agent's work, unless the task's workdir or a verifier record lies below.
SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/opt")
# Kernel and runtime pseudo-files.
PSEUDO_DIRS = ("/proc", "/sys", "/dev", "/run")
# Package managers' state, caches and logs.
PACKAGE_STATE_DIRS = ("/var/cache", "/var/lib", "/var/log")
# The harness's own: the verifier's logs, tests and offline tools (mounted for the verifier only), the markers.
HARNESS_DIRS = ("/logs", "/tests", "/.depgpo", "/.depgpo_mark", "/.depgpo_tools")
# Files below these are never records.
UNTRACKED_PREFIXES = SYSTEM_DIRS + PSEUDO_DIRS + PACKAGE_STATE_DIRS + HARNESS_DIRS
# Interpreter and package caches, wherever they lie (a venv under /app included); and compiled Python files.
CACHE_DIR_NAMES = ("__pycache__", ".cache", "site-packages", "dist-packages", "node_modules", ".npm", ".pytest_cache")
CACHE_SUFFIXES = (".pyc",)

# A file is tracked line by line up to these sizes; a larger one by its content hash only (docs/credit.md#records).
TEXT_MAX_BYTES = 1 << 20
TEXT_MAX_LINES = 20_000

GLOB_CHARS = re.compile(r"[*?\[]")


def is_under(path: str, prefixes: Iterable[str]) -> bool:
    """Is `path` one of `prefixes` or below one of them (`/usr` covers `/usr/bin`, not `/usrx`)?"""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def is_cache(path: str) -> bool:
    """Inside a cache directory, or a compiled file."""
    return not _CACHE_NAMES.isdisjoint(path.split("/")) or path.endswith(CACHE_SUFFIXES)


_CACHE_NAMES = frozenset(CACHE_DIR_NAMES)


def is_record_path(path: str, workdir: str | None = None) -> bool:
    """Can a file at `path` be a record? Not in untracked locations (but the workdir is tracked even where it lies
    in one, as an image's WORKDIR /usr/src/app), and not a cache, wherever it lies. The sandbox's trace filter."""
    if is_under(path, UNTRACKED_PREFIXES) and not (workdir and is_under(path, (workdir,))):
        return False
    return not is_cache(path)


def text_fits(size_bytes: int, newlines: int) -> bool:
    """Within the line-tracking limits."""
    return size_bytes <= TEXT_MAX_BYTES and newlines <= TEXT_MAX_LINES


def record_directory(record: str) -> str:
    """The directory that holds a file record; for a glob, the directory above its first wildcard."""
    wildcard = GLOB_CHARS.search(record)
    return posixpath.dirname(record[:wildcard.start()] if wildcard else record)


def record_root(record: str) -> str | None:
    """What a file record of E adds to the tracked scope: the directory holding it (record_directory). A record
    right under `/` (`/answer.txt`) adds itself, not `/`: tracking all of `/` would track every file (a `/*` glob
    adds nothing)."""
    directory = record_directory(record)
    if directory != "/":
        return directory
    return None if GLOB_CHARS.search(record) or record == "/" else record


def tracked_roots(workdir: str, verifier_records: Iterable[str]) -> list[str]:
    """A trajectory's `tracked_roots`: the workdir, and each record_root of a file record of E outside it."""
    workdir = posixpath.normpath(workdir)
    roots = {record_root(record) for record in verifier_records if record.startswith("/")} - {None}
    return [workdir] + sorted(d for d in roots if not is_under(d, (workdir,)))


def handoff_paths(commands: list, in_order: bool = True) -> frozenset[str]:
    """Paths that one command wrote and a later command read (a script in /tmp that the next command runs):
    a dependency between two of the agent's commands wherever the file lies. With `in_order`, a read of what the
    reader itself had rewritten first (its `reads_after_write`) is none. Malformed entries are skipped here;
    _parse_command reports them."""
    written: set[str] = set()
    handoffs: set[str] = set()
    for raw in commands:
        if not isinstance(raw, dict):
            continue
        after_write = raw.get("reads_after_write") if in_order else None
        own = {path for path in after_write if isinstance(path, str)} if isinstance(after_write, list) else set()
        for key in ("reads", "stats"):
            items = raw.get(key)
            if isinstance(items, list):
                handoffs.update(path for path in items if isinstance(path, str) and path in written
                                and path not in own)
        writes = raw.get("writes")
        if isinstance(writes, list):
            written.update(w["path"] for w in writes if isinstance(w, dict) and isinstance(w.get("path"), str))
    return frozenset(handoffs)

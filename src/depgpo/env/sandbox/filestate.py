"""What each command wrote, with line detail, read safely from the host side of the sandbox.

The trace says which paths a command opened for writing; this module reads their content before and after and
works out the lines the command wrote (docs/credit.md#line-level: a full rewrite writes every line of the new content, an edit
writes the inserted/changed lines of a line diff). A stat walk of the writable directories after each command is
the safety net for writes the trace cannot see (an fd opened by an earlier command, mmap).

Sandbox files are read with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) below the directory that backs the
mount, so a symlink a command planted can never make the root harness read a host file.
"""

from __future__ import annotations

import ctypes
import difflib
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from depgpo.env.sandbox.file_hash import content_hash
from depgpo.env.sandbox.layout import SandboxLayout
from depgpo.env.sandbox.tree_walk import TreeWalk
from depgpo.trajectory.schema import MISSING, FileVersion
from depgpo.trajectory.scope import TEXT_MAX_BYTES, TEXT_MAX_LINES

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_OPENAT2 = 437
_RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x04, 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _open_beneath(base: Path, relative: str) -> int:
    dir_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        how = _OpenHow(os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
        # os.fsencode: a name may hold any bytes (the trace parser decodes them with surrogateescape)
        fd = _libc.syscall(_SYS_OPENAT2, dir_fd, os.fsencode(relative), ctypes.byref(how), ctypes.sizeof(how))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), relative)
        return fd
    finally:
        os.close(dir_fd)


def lstat_beneath(base: Path, relative: str) -> tuple[os.stat_result, str | None]:
    """(lstat, symlink target or None) of base/relative without following any symlink on the way (the agent owns every directory below
    `base`: a planted /app/link -> /root must not make the root harness look at the host's /root). Raises
    FileNotFoundError when absent and OSError(ELOOP) when a directory on the way is a symlink."""
    parent, name = os.path.split(os.path.normpath(relative))
    if not name or name == ".":
        return os.lstat(base), None
    how = _OpenHow(os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
    dir_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _libc.syscall(_SYS_OPENAT2, dir_fd, os.fsencode(parent or "."), ctypes.byref(how), ctypes.sizeof(how))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), relative)
    finally:
        os.close(dir_fd)
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        return st, (os.readlink(name, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else None)
    finally:
        os.close(fd)


def is_whiteout(st: os.stat_result) -> bool:
    """An overlay upper layer's mark of a file deleted in the sandbox (a 0:0 character device)."""
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def read_text(layout: SandboxLayout, sandbox_path: str, limit: int = TEXT_MAX_BYTES) -> str | None:
    """A small sandbox file's text, or None if absent, a symlink anywhere on its path, or unreadable."""
    backing = layout.backing(sandbox_path)
    if backing is None:
        return None
    try:
        fd = _open_beneath(*backing)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit).decode("utf-8", "replace")


def file_size(layout: SandboxLayout, sandbox_path: str) -> int | None:
    """A sandbox file's size, as read_text would find it (no symlink on its path); None if absent or not regular."""
    backing = layout.backing(sandbox_path)
    try:
        st, _ = lstat_beneath(*backing) if backing is not None else (None, None)
    except OSError:
        return None
    return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None


def read_version(layout: SandboxLayout, sandbox_path: str) -> FileVersion | None:
    """The current version of a sandbox file; None when it lives where the harness does not look (tmpfs, lower)."""
    backing = layout.backing(sandbox_path)
    if backing is None:
        return None
    base, rel = backing
    try:
        st, target = lstat_beneath(base, rel)
    except FileNotFoundError:
        if base.name == "upper":
            return None  # not copied up: unchanged host file, or never existed; not the agent's write
        return MISSING
    except OSError:
        return None  # behind a symlink the agent planted (or unreadable): not looked at from the host
    if stat.S_ISDIR(st.st_mode):
        return FileVersion(True, "dir")
    if stat.S_ISLNK(st.st_mode):
        return FileVersion(True, "symlink:" + target)
    if is_whiteout(st) and base.name == "upper":
        return MISSING  # deleted inside the sandbox
    if not stat.S_ISREG(st.st_mode):
        return FileVersion(True, "special")
    try:
        fd = _open_beneath(base, rel)
    except OSError:
        return FileVersion(True, "unreadable")
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_size <= TEXT_MAX_BYTES:  # most files: read whole, for their lines
            data = fh.read(TEXT_MAX_BYTES + 1)
            if len(data) <= TEXT_MAX_BYTES:
                return FileVersion(True, "sha256:" + hashlib.sha256(data).hexdigest(), _as_lines(data))
        # larger (or grown since): hashed within the episode's bounds (file_hash), never line-tracked
        return FileVersion(True, content_hash(fh.fileno(), sandbox_path, layout.hashing))


def _as_lines(data: bytes) -> list[str] | None:
    if len(data) > TEXT_MAX_BYTES or b"\0" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.splitlines()
    return lines if len(lines) <= TEXT_MAX_LINES else None


def lines_written(before: FileVersion, after: FileVersion, full_rewrite: bool) -> list[str]:
    """The content of the lines a command wrote (multiset), given the versions around it."""
    if after.lines is None:
        return []
    if full_rewrite or not before.exists or before.lines is None:
        return list(after.lines)
    matcher = difflib.SequenceMatcher(None, before.lines, after.lines, autojunk=False)
    written: list[str] = []
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("insert", "replace"):
            written.extend(after.lines[j1:j2])
    return written


def walk_files(walk: TreeWalk):
    """(path, lstat) of every non-directory of `walk` (tree_walk: any depth, never following symlinks; what it
    could not list is in walk.skipped), skipping what vanishes meanwhile."""
    for entry in walk:
        try:
            if not entry.is_dir(follow_symlinks=False):
                yield entry.path, entry.stat(follow_symlinks=False)
        except OSError:
            continue


@dataclass
class StatWalk:
    """(mtime, size, inode) of every entry under the writable directories: catches untraced writes."""

    layout: SandboxLayout
    seen: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # sandbox directories it could not list last time, why

    def changes(self) -> set[str]:
        """Sandbox paths created, modified or removed since the previous call."""
        now: dict[str, tuple[int, int, int]] = {}
        self.skipped = {}
        for mount, host in [*self.layout.writable.items(), ("/", self.layout.rootfs)]:
            walk = TreeWalk(str(host))
            for full, st in walk_files(walk):
                sandbox = os.path.normpath(os.path.join(mount, os.path.relpath(full, host)))
                now[sandbox] = (st.st_mtime_ns, st.st_size, st.st_ino)
            self.skipped.update((os.path.normpath(os.path.join(mount, os.path.relpath(d, host))), why)
                                for d, why in walk.skipped.items())
        changed = {p for p, sig in now.items() if self.seen.get(p) != sig}
        changed |= set(self.seen) - set(now)
        self.seen = now
        return changed

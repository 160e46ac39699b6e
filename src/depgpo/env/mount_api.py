"""Mounts util-linux 2.38 (Debian 12) cannot make, through the kernel's mount API (Linux >= 5.12).

Idmapped bind mounts (root): each episode runs as its own unprivileged host uid U (mapped to root inside the
sandbox), yet commands must be able to `pip install` / `apt-get install` into a copy-on-write /usr. Overlayfs checks
write permission against the lower layer's owner, so the lower layer is bind-mounted with an idmap (host 0 -> U);
the overlay's upper layer is owned by U and the host's files stay untouched (>= 5.19 for idmapped overlay lowers).

Recursive read-only binds (rootless, the host's root): the host's system directories can be neither idmapped nor
used as overlay lowers where other mounts lie below them (the kernel locks those in a user namespace), and a bind
that stayed writable would let the agent write the host's world-writable /var/tmp. So the whole tree is bound
read-only, every mount below included (mount_setattr with AT_RECURSIVE; `mount -o ro,rbind` is not recursive in
util-linux 2.38).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import time

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442  # x86-64 and aarch64 share these numbers
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_MOUNT_ATTR_IDMAP = 0x00100000
_MOUNT_ATTR_RDONLY = 0x00000001
_AT_RECURSIVE = 0x8000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _userns_fd(host_uid: int) -> int:
    """A user namespace mapping id 0 to host_uid (uid and gid), held open by fd."""
    holder = subprocess.Popen(["unshare", "--user", "sleep", "60"])
    try:
        own_ns, deadline = os.readlink("/proc/self/ns/user"), time.monotonic() + 10
        while os.readlink(f"/proc/{holder.pid}/ns/user") == own_ns:  # not yet in its new user namespace
            if time.monotonic() > deadline or holder.poll() is not None:
                raise OSError(f"`unshare --user` did not enter a new user namespace (exit {holder.poll()})")
            time.sleep(0.001)
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{holder.pid}/{name}", "w") as fh:
                fh.write(f"0 {host_uid} 1\n")
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.kill()
        holder.wait()


def idmapped_bind(source: str, target: str, host_uid: int) -> None:
    """Bind `source` at `target` so that files owned by host uid/gid 0 appear owned by host_uid."""
    ns_fd = _userns_fd(host_uid)
    tree_fd = _check(_libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, source.encode(), _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC),
                     f"open_tree({source})")
    try:
        attr = _MountAttr(_MOUNT_ATTR_IDMAP, 0, 0, ns_fd)
        _check(_libc.syscall(_SYS_MOUNT_SETATTR, tree_fd, b"", _AT_EMPTY_PATH, ctypes.byref(attr),
                             ctypes.sizeof(attr)), f"mount_setattr(idmap {source})")
        _check(_libc.syscall(_SYS_MOVE_MOUNT, tree_fd, b"", _AT_FDCWD, target.encode(), _MOVE_MOUNT_F_EMPTY_PATH),
               f"move_mount({target})")
    finally:
        os.close(tree_fd)
        os.close(ns_fd)


def readonly_rbind(source: str, target: str) -> None:
    """Bind `source` and every mount below it at `target`, all read-only."""
    tree_fd = _check(_libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, source.encode(),
                                   _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE), f"open_tree({source})")
    try:
        attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
        _check(_libc.syscall(_SYS_MOUNT_SETATTR, tree_fd, b"", _AT_EMPTY_PATH | _AT_RECURSIVE, ctypes.byref(attr),
                             ctypes.sizeof(attr)), f"mount_setattr(read-only {source})")
        _check(_libc.syscall(_SYS_MOVE_MOUNT, tree_fd, b"", _AT_FDCWD, target.encode(), _MOVE_MOUNT_F_EMPTY_PATH),
               f"move_mount({target})")
    finally:
        os.close(tree_fd)

"""Mounts by system call: those util-linux 2.38 (Debian 12) cannot make (the mount API, Linux >= 5.12), and the rest.

Idmapped bind mounts (root): each episode runs as its own unprivileged host uid U (mapped to root inside the
sandbox), yet commands must be able to `pip install` / `apt-get install` into a copy-on-write /usr. Overlayfs checks
write permission against the lower layer's owner, so the lower layer is bind-mounted with an idmap (host 0 -> U);
the overlay's upper layer is owned by U and the host's files stay untouched (>= 5.19 for idmapped overlay lowers).

Plain mounts (overlay, tmpfs) and lazy unmounts go through mount(2) and umount2(2) here as well: the episode
makes several per start, and starting `mount` for each costs more than the mount.

Recursive read-only binds (rootless, the host's root): the host's system directories can be neither idmapped nor
used as overlay lowers where other mounts lie below them (the kernel locks those in a user namespace), and a bind
that stayed writable would let the agent write the host's world-writable /var/tmp. So the whole tree is bound
read-only, every mount below included (mount_setattr with AT_RECURSIVE; `mount -o ro,rbind` is not recursive in
util-linux 2.38).
"""

from __future__ import annotations

import ctypes
import os

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
_CLONE_NEWUSER = 0x10000000
_MNT_DETACH = 2


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def mount(source: str, target: str, fstype: str, options: str) -> None:
    """mount(2), as `mount -t FSTYPE -o OPTIONS SOURCE TARGET` makes it, without starting a program."""
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(0), options.encode()),
           f"mount -t {fstype} at {target}")


def detach(target: str) -> None:
    """umount2(MNT_DETACH): `umount --lazy TARGET`, without starting a program."""
    _check(_libc.umount2(target.encode(), _MNT_DETACH), f"umount --lazy {target}")


def userns_fd(host_uid: int) -> int:
    """A user namespace mapping id 0 to host_uid (uid and gid), held open by fd: a forked child enters it, we map
    it and open it, and the child exits (the fd keeps the namespace). One serves every idmapped bind of an episode."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only raw syscalls and _exit, whatever happens
        try:
            os.close(ready_r)
            os.close(done_w)  # else our own copy keeps the read below from ever seeing EOF
            os.write(ready_w, b"1" if _libc.unshare(_CLONE_NEWUSER) == 0 else b"0")
            os.read(done_r, 1)  # stay in the namespace until the parent holds it
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise OSError("unshare(CLONE_NEWUSER) failed: no user namespace for the idmap")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as fh:
                fh.write(f"0 {host_uid} 1\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(done_w)  # the child's read returns: it exits
        os.waitpid(pid, 0)


def idmapped_bind(source: str, target: str, ns_fd: int) -> None:
    """Bind `source` at `target` so that files owned by host uid/gid 0 appear owned by the host uid that user
    namespace `ns_fd` (userns_fd) maps 0 to."""
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

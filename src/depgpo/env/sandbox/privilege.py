"""Root or rootless: the one place where the sandbox's two privilege levels differ (docs/sandbox.md#privilege).

The process chain, the tracer, the observation protocol and `trajectory.json` are the same at both levels; what
root buys and an ordinary user (a Slurm job) cannot have is replaced here, or stated:

                          root (the harness is host root)          rootless (an ordinary user, no sudo)
    outermost layer       mount + pid namespace, as host root       a user namespace of the episode's own (0 -> the
                                                                    user), held by `sandbox_hold` with its mount ns
    episode's host uid    one leased per episode (UidLease)         the user's own
    system directories    copy-on-write over lowers idmapped        copy-on-write over an image the user unpacked
                          (host 0 -> episode uid)                   (its files are root's inside); the host's own
                                                                    root is bound read-only (its files are host
                                                                    root's, and no idmap is allowed rootless)
    disk and trace limit  tmpfs in the host's mount namespace       tmpfs in the holder's; the harness reads the
                                                                    episode's files through /proc/HOLDER/root
    memory, processes     cgroup v1 dirs the harness creates,       rlimits: RLIMIT_DATA and a higher RLIMIT_AS;
                          else rlimits                              RLIMIT_NPROC, counted per user namespace (the
                                                                    job's cgroup bounds the rest)
    leftovers             processes of the episode uid are killed   the holder is killed; what runs in the episode's
                                                                    user namespace after its close is killed

`auto` (the default) is root when the harness is root, else rootless.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from depgpo.env.sandbox.chain import host_program
from depgpo.env.sandbox.mount_api import mount

PRIVILEGES = ("auto", "root", "rootless")
ROOTLESS_HOST_NOTE = ("rootless on the host's root: its system files are host root's, so the agent cannot change "
                      "them (copy-on-write needs root or an image: docs/sandbox.md#privilege)")
UID_BASE = 200_000  # root: per-episode host uids are UID_BASE + slot; a lock file per slot keeps episodes apart
UID_SLOTS = 4096


class PrivilegeError(RuntimeError):
    """The requested privilege level cannot work here; the message says why and what to change."""


@dataclass(frozen=True)
class Privilege:
    rootless: bool

    @property
    def name(self) -> str:
        return "rootless" if self.rootless else "root"

    # ------------------------------------------------------------------ where episodes live
    def default_work_root(self) -> Path:
        """Root: one directory for all. Rootless: one per user (another user's, or root's, is not ours to use)."""
        suffix = f"-{os.getuid()}" if self.rootless else ""
        return Path(tempfile.gettempdir()) / f"depgpo-episodes{suffix}"

    def check_work_root(self, work_root: Path) -> None:
        """Root: the episode's leased uid must pass through every parent to reach its bind sources."""
        if self.rootless:
            return  # the episode runs as the user who owns the work root
        for parent in work_root.parents:
            if not os.stat(parent).st_mode & 0o001:
                raise RuntimeError(f"work root {work_root}: {parent} is not searchable by other users, and the "
                                   f"episode's unprivileged uid must pass through it; chmod o+x {parent} or choose "
                                   "another work root (EpisodeConfig.work_root)")

    def lease_uid(self) -> "UidHold":
        """The host uid the episode runs as: a leased one (root), or the user's own (rootless)."""
        if self.rootless:
            return UidHold(os.getuid())
        lease = UidLease()
        return UidHold(lease.uid, lease.release)

    # ------------------------------------------------------------------ namespaces and limits
    def open_namespaces(self, root: Path, disk: tuple[int, int] | None, trace_bytes: int | None) -> "Namespaces":
        """Create the episode's disk (`disk` = (bytes, inodes)) and trace limits at root/fs and root/trace; rootless,
        in the user and mount namespaces of a new holder process."""
        fs, traces = root / "fs", root / "trace"
        fs.mkdir(parents=True, exist_ok=True)
        traces.mkdir(exist_ok=True)
        mounts = []
        if disk is not None:
            mounts.append((str(fs), f"size={disk[0]},nr_inodes={disk[1]},mode=0711", "the episode's disk limit"))
        if trace_bytes is not None:
            mounts.append((str(traces), f"size={trace_bytes},nr_inodes=1000,mode=0700", "the episode's trace limit"))
        if not self.rootless:
            for target, options, what in mounts:
                mount_tmpfs(Path(target), options, what)
            return Namespaces()
        return _start_holder(root, mounts)

    def outer_argv(self, ns: "Namespaces") -> list[str]:
        """Before sandbox_init: the episode's mount namespace M1 and pid namespace P1 (rootless: inside the holder's
        user and mount namespaces, as root there)."""
        enter = [] if not self.rootless else \
            [host_program("nsenter"), "--preserve-credentials", "--user", "--mount", f"--target={ns.holder_pid}", "--"]
        return [*enter, host_program("unshare"), "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
                "--propagation", "private", "--"]

    def system_dirs(self, system_is_host: bool) -> str:
        """How sandbox_init mounts /usr /etc /opt /var. Root: copy-on-write overlays over lowers bound idmapped (host
        0 -> episode uid), so the episode's root may copy them up. Rootless in an image the user unpacked: overlays
        over the lowers as they are (their files are the user's, root inside). Rootless on the host's root: the
        kernel allows no idmapped mount of the host's file systems and no overlay over a lower with mounts below
        it, and the files are host root's anyway: read-only binds."""
        if not self.rootless:
            return "idmapped"
        return "read-only" if system_is_host else "overlay"

    @property
    def root_bind(self) -> str:
        """How the sandbox's `/` (sandbox.SandboxLayout.rootfs) is bound. Root: writable; its mount points and
        symlinks are host root's in a sticky directory, so the agent (another uid) may add /data or /conftest.py
        but replace none of them. Rootless the agent is their owner (the user), and an owner may replace /bin in a
        sticky directory; so `/` is read-only, its mount points cannot be removed, and the task's own top-level
        entries are bound writable one by one. New top-level entries then fail with EROFS."""
        return "--ro-bind" if self.rootless else "--bind"

    def notes(self, system_is_host: bool) -> list[str]:
        """How this level changes the episode's world, for the trajectory's environment.notes."""
        if not self.rootless:
            return []
        notes = ["rootless: `/` is read-only (no new top-level entries); the task's own top-level entries and "
                 "every writable mount are as at root"]
        if system_is_host:
            notes.append(ROOTLESS_HOST_NOTE)
        return notes

    def drop_argv(self, uid: int) -> list[str]:
        """Between strace and prlimit: root drops to the episode uid; rootless already is the user (bwrap's
        --cap-drop ALL leaves the agent no capability in either case)."""
        if self.rootless:
            return []
        return [host_program("setpriv"), f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]

    def verifier_enter_argv(self, p1_init: int, net_fd: int) -> list[str]:
        """nsenter for the judge: into M1, P1 and the agent's network namespace (rootless: the episode's user
        namespace first, whose root may enter the others)."""
        user = ["--preserve-credentials", f"--user=/proc/{p1_init}/ns/user"] if self.rootless else []
        return [host_program("nsenter"), *user, f"--mount=/proc/{p1_init}/ns/mnt", f"--pid=/proc/{p1_init}/ns/pid",
                f"--net=/proc/self/fd/{net_fd}", "--"]

    def memory_by_cgroup(self) -> bool:
        """Whether the episode's memory is limited by a cgroup the harness creates (else rlimits per process)."""
        return not self.rootless and os.access("/sys/fs/cgroup/memory", os.W_OK)

    def cgroups(self, episode_dir: Path, limits, suffix: str = "") -> "EpisodeCgroups":
        """Root: cgroup v1 memory and pids limits the harness creates, where the host lets it, named after the
        episode's directory within its work root's group (cgroup_group). Rootless: none (a Slurm job's cgroup is the
        job's; the episode has its rlimits, see docs/sandbox.md#privilege)."""
        name = f"{cgroup_group(episode_dir.parent)}/{episode_dir.name}{suffix}"
        return EpisodeCgroups(name, limits, enabled=not self.rootless)

    # ------------------------------------------------------------------ the end of an episode
    def reap(self, uid: int, ns: "Namespaces") -> int:
        """Kill what of the episode outlived its close; returns how many. Root: every process of its leased uid.
        Rootless (the episode's processes run as the user, like the harness): those in its user namespace."""
        if not self.rootless:
            return reap_uid(uid)
        return ns.close()


@dataclass
class UidHold:
    uid: int
    release: object = lambda: None  # UidLease.release for a leased uid


@dataclass
class Namespaces:
    """The holder of a rootless episode (pid, its user namespace) or nothing (root)."""

    holder: subprocess.Popen | None = None

    @property
    def holder_pid(self) -> int:
        return self.holder.pid

    def check(self) -> None:
        """Rootless: the holder must live, or every file of the episode would read as deleted (its tmpfs is gone)."""
        if self.holder is not None and self.holder.poll() is not None:
            raise RuntimeError(f"the holder of the episode's user namespace died (exit {self.holder.poll()}); the "
                               "episode's files went with it")

    @property
    def view(self) -> str:
        """The prefix under which the harness reaches the episode's tmpfs: its holder's root (rootless), or ''."""
        return f"/proc/{self.holder.pid}/root" if self.holder is not None else ""

    def close(self) -> int:
        """End the holder (its tmpfs go with it) and the episode's processes; returns how many agent or verifier
        processes outlived their pid namespaces and had to be killed here (as reap_uid does at root)."""
        if self.holder is None:
            return 0
        inode = os.stat(f"/proc/{self.holder.pid}/ns/user").st_ino
        deadline, pause = time.monotonic() + 5, 0.001  # the kernel ends a killed pid namespace's processes
        while processes_in_userns(inode, children=True) and time.monotonic() < deadline:  # asynchronously
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        survivors = processes_in_userns(inode, children=True)
        for pid in [*survivors, *processes_in_userns(inode)]:  # then the chain around them (strace, sandbox_init)
            if pid != self.holder.pid:
                _kill_if_in(pid, inode)
        if self.holder.stdin is not None:
            self.holder.stdin.close()  # the holder's signal to end
        try:
            self.holder.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.holder.kill()
            self.holder.wait()
        self.holder = None
        return len(survivors)


def resolve(requested: str = "auto") -> Privilege:
    """The privilege level for `agent.environment.privilege`; refuses one that cannot work here, saying why."""
    is_root = os.geteuid() == 0
    if requested not in PRIVILEGES:
        raise PrivilegeError(f"agent.environment.privilege={requested!r}: choose one of {', '.join(PRIVILEGES)}")
    if requested == "root" and not is_root:
        raise PrivilegeError(f"agent.environment.privilege=root: the harness runs as uid {os.getuid()}, not root; "
                             "use privilege=auto (rootless for an ordinary user)")
    if requested == "rootless" and is_root:
        raise PrivilegeError("agent.environment.privilege=rootless: the harness runs as root, and a user namespace "
                             "made by root maps to host root; run it as an ordinary user, or use privilege=auto")
    return Privilege(rootless=not is_root)


def _start_holder(root: Path, mounts: list[tuple[str, str, str]]) -> Namespaces:
    argv = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--",
            sys.executable, "-m", "depgpo.env.sandbox.sandbox_hold", json.dumps({"mounts": mounts})]
    try:
        holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  cwd="/", start_new_session=True)
    except FileNotFoundError as e:
        raise PrivilegeError(f"rootless episode: {e.filename} is not installed (Debian: util-linux)") from e
    ready = holder.stdout.readline().decode(errors="replace").strip()
    if ready != "ready":
        holder.kill()
        err = holder.stderr.read().decode(errors="replace").strip()
        holder.wait()
        raise PrivilegeError(
            f"rootless episode at {root}: the user namespace that holds it could not be set up ({err or ready!r}). "
            "It needs unprivileged user namespaces (sysctl user.max_user_namespaces > 0; on Ubuntu 24.04 also "
            "kernel.apparmor_restrict_unprivileged_userns=0) and tmpfs and overlay mounts inside them (Linux >= "
            "5.11); docs/sandbox.md#privilege")
    return Namespaces(holder)


_NS_GET_PARENT = 0xB702  # ioctl on a namespace fd: an fd of its parent user namespace (linux/nsfs.h)


def _is_zombie(pid: str) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")


def _user_namespaces(pid: int) -> tuple[int, int | None]:
    """Inodes of `pid`'s user namespace and of its parent (None for the initial one); OSError once it is gone."""
    fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            parent = fcntl.ioctl(fd, _NS_GET_PARENT)
        except OSError:
            return os.fstat(fd).st_ino, None
        try:
            return os.fstat(fd).st_ino, os.fstat(parent).st_ino
        finally:
            os.close(parent)
    finally:
        os.close(fd)


def _kill_if_in(pid: int, inode: int) -> None:
    """SIGKILL `pid` if it is still the process found in user namespace `inode` (or one below it): held by a
    pidfd, so that a pid freed and reused since the listing is never hit."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return  # gone
    try:
        if inode in _user_namespaces(pid):  # checked after the pidfd was taken: the pidfd is this process
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass  # exited meanwhile
    finally:
        os.close(pidfd)


def processes_in_userns(inode: int, children: bool = False) -> list[int]:
    """Pids of this user's processes in the user namespace of inode `inode` or, with `children`, in the user
    namespaces directly below it: the agent's and the verifier's bwrap (not the chain that runs them)."""
    pids, uid = [], os.getuid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid or _is_zombie(entry):
                continue  # another user's, or one that runs nothing (an init outside may reap it late)
            own, parent = _user_namespaces(int(entry))
        except OSError:
            continue  # gone meanwhile
        if (parent if children else own) == inode:
            pids.append(int(entry))
    return pids


# ---------------------------------------------------------------------- root: what only host root can do
def mount_tmpfs(directory: Path, options: str, what: str) -> None:
    """A tmpfs at `directory` in the host's mount namespace (the harness reads the episode's files from there);
    unmounted by sandbox.remove_layout, or by sandbox.sweep_leftovers after a crash."""
    try:
        mount("depgpo-episode", str(directory), "tmpfs", options)
    except OSError as e:
        raise RuntimeError(f"cannot mount {what} (tmpfs {options}) at {directory}: {e}") from e


def owned_private_dir(path: Path, mode: int = 0o700) -> Path:
    """Create `path` (ours, `mode`) or accept it only if it already is exactly that: a directory planted by
    another user in /tmp (or a symlink there) is refused, never followed."""
    try:
        path.mkdir(mode=mode, parents=True)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o022:
        raise RuntimeError(f"{path} is not a directory owned by uid {os.getuid()} and writable only by it (it may "
                           f"have been planted by another user); remove it or choose another directory")
    return path


class UidLease:
    """Root: an exclusive per-episode host uid, held with a lock file until released."""

    def __init__(self, lock_dir: Path = Path(tempfile.gettempdir()) / "depgpo-uids"):
        owned_private_dir(lock_dir)
        start = os.getpid() % UID_SLOTS
        for i in range(UID_SLOTS):
            slot = (start + i) % UID_SLOTS
            try:  # a planted symlink or other odd file in a slot makes that slot unusable, nothing more
                fd = os.open(lock_dir / f"{slot}.lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError:
                continue
            fh = os.fdopen(fd, "w")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                continue
            self.uid, self._fh = UID_BASE + slot, fh
            return
        raise RuntimeError(f"no free sandbox uid in {lock_dir} ({UID_SLOTS} slots are locked)")

    def release(self) -> None:
        self._fh.close()


CGROUP_V1 = Path("/sys/fs/cgroup")
VERIFIER_CGROUPS = ".verifier"  # EPISODE.verifier: the verifier's own memory and pids limits, beside the agent's


class EpisodeCgroups:
    """Root: cgroup v1 memory and pids limits for one episode, where the host allows them (else rlimits only)."""

    def __init__(self, name: str, limits, enabled: bool = True):
        self.dirs: list[Path] = []
        for controller, settings in (("memory", {"memory.limit_in_bytes": limits.memory_bytes}),
                                     ("pids", {"pids.max": limits.max_processes})):
            base = CGROUP_V1 / controller
            if not enabled or not os.access(base, os.W_OK):
                continue
            d = base / "depgpo" / name
            try:
                d.mkdir(parents=True, exist_ok=True)
                for key, value in settings.items():
                    (d / key).write_text(str(value))
            except OSError:
                continue
            self.dirs.append(d)

    def remove(self) -> None:
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass  # still has processes for a moment after the kill; the next episode of this name reuses it


def cgroup_group(work_root: Path) -> str:
    """The cgroups of one work root's episodes live together: a sweep (below) may only judge its own. Harnesses with
    other work roots run beside it (a test's temporary one beside a benchmark's): before 2026-12-07 each swept the
    others' empty cgroups, the verifier's among them until it starts, which then failed to enter its own."""
    return "w-" + hashlib.sha256(str(work_root.resolve()).encode()).hexdigest()[:12]


def sweep_cgroups(work_root: Path) -> None:
    """Root: remove the cgroups of this work root's episodes whose directory is gone (their harness was killed)."""
    for controller in ("memory", "pids"):
        base = CGROUP_V1 / controller / "depgpo" / cgroup_group(work_root)
        if base.is_dir() and os.access(base, os.W_OK):
            for d in base.iterdir():
                if d.is_dir() and not (work_root / d.name.removesuffix(VERIFIER_CGROUPS)).exists():
                    try:
                        d.rmdir()
                    except OSError:
                        pass  # still has processes


def processes_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except FileNotFoundError:
                pass
    return pids


def reap_uid(uid: int, wait_s: float = 5.0) -> int:
    """Root: make sure nothing of an episode runs on after its pid namespace was killed; returns how many had to
    be killed here. The kernel kills the namespace's processes asynchronously, so first give it a moment."""
    deadline, pause = time.monotonic() + wait_s, 0.001
    while processes_of_uid(uid) and time.monotonic() < deadline:
        time.sleep(pause)  # short at first: the namespace is usually gone within milliseconds of its init
        pause = min(pause * 2, 0.05)
    survivors = processes_of_uid(uid)
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(survivors)

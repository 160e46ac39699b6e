"""One sandbox per episode: bubblewrap over copy-on-write system directories, traced by strace as pid 1.

Process chain (shared/notes/sandbox-and-tracing.md section 0):

    unshare --mount --pid --fork --mount-proc      new mount + pid namespace, as host root
      python -m depgpo.env.sandbox_init            idmapped overlays for /usr /etc /opt /var, then exec:
        strace -f --seccomp-bpf ...                pid 1 of the pid namespace: unkillable from inside, owns all pids
          setpriv --reuid=U  prlimit ...           an unprivileged host uid per episode, resource limits
            bwrap --unshare-user --uid 0 ...       root inside, own net (loopback only), ipc, uts namespaces
              bash -i                              the persistent interactive shell on a PTY

The host sees every write the episode makes to system directories only in the episode's own upper layers.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from depgpo.env.images import TOP_LEVEL_SYSTEM_DIRS, top_level_links
from depgpo.env.strace_flags import MARK_DIR, strace_argv

# System directories that are copy-on-write inside the episode (apt-get / pip install land in the upper layer).
COW_DIRS = ("usr", "etc", "opt", "var")
# The sandbox's own mount points: a task's workdir can neither be one nor lie inside one. (It may be /root, /home or
# /tmp or lie inside them: it is then part of that writable mount, not a mount of its own.)
RESERVED_DIRS = ("/logs", "/tests", "/.depgpo", "/.depgpo_mark", "/proc", "/sys", "/dev", "/run")
HOME_MOUNTS = ("/tmp", "/root", "/home")
# Host files the sandbox's root must not read even though the idmapped /etc shows them as its own.
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
MASKED_DIRS = ("/etc/ssh", "/etc/munge", "/etc/slurm", "/var/log", "/var/lib/mysql", "/var/lib/munge")
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
UID_BASE = 200_000  # per-episode host uids are UID_BASE + slot; a lock file per slot keeps concurrent episodes apart
UID_SLOTS = 4096


@dataclass
class SandboxLimits:
    """Per-episode resource limits (defaults suit tiny tasks on a 2-core machine)."""

    max_processes: int = 512          # RLIMIT_NPROC for the episode's own uid, and pids.max where cgroups allow
    max_file_bytes: int = 1 << 30     # RLIMIT_FSIZE
    max_open_files: int = 4096        # RLIMIT_NOFILE
    memory_bytes: int = 4 << 30       # memory cgroup limit, else RLIMIT_AS
    cpu: int | None = None            # pin the episode (strace costs ~3.5x less when pinned); None = not pinned


def under(path: str, dirs: tuple[str, ...]) -> bool:
    """`path` is one of `dirs` or lies inside one."""
    return any(path == d or path.startswith(d + "/") for d in dirs)


def checked_workdir(workdir: str) -> str:
    """The task's WORKDIR, normalised; it becomes a writable mount, so it cannot be / or one of the sandbox's own."""
    normal = os.path.normpath(workdir)
    system = tuple(f"/{name}" for name in COW_DIRS + TOP_LEVEL_SYSTEM_DIRS)  # a mount there would hide them
    if not workdir.startswith("/") or normal == "/" or normal in system or under(normal, RESERVED_DIRS):
        raise ValueError(f"workdir {workdir!r} (the task's WORKDIR) cannot be the sandbox's working directory: it "
                         f"must be absolute, not / or a system directory itself, and outside "
                         f"{', '.join(RESERVED_DIRS)}")
    return normal


@dataclass
class SandboxLayout:
    """Host-side directories of one episode; everything the episode can write lives under `root`."""

    root: Path
    workdir: str = "/app"             # the task's working directory inside the sandbox
    uid: int = 0                      # the unprivileged host uid mapped to root inside
    masked_files: tuple[str, ...] = MASKED_FILES
    masked_dirs: tuple[str, ...] = MASKED_DIRS
    extra_binds: list[tuple[str, str]] = field(default_factory=list)  # (host dir, sandbox dir), read-only
    trace_name: str = "trace.log"     # one log per shell: a restarted shell writes a new one
    system_root: Path = Path("/")     # lower layers of the system directories: the host's, or an unpacked image's
    env: dict[str, str] = field(default_factory=dict)  # the task's ENV (Dockerfile, image), for shell and verifier

    def __post_init__(self) -> None:
        self.workdir = checked_workdir(self.workdir)

    @cached_property
    def top_level(self) -> list[tuple[str, str, str]]:
        """The system root's /bin, /lib, ... (images.top_level_links): symlinks, or directories of their own."""
        return top_level_links(self.system_root)

    @cached_property
    def cow_dirs(self) -> tuple[str, ...]:
        """Copy-on-write system directories: /usr /etc /opt /var, and /bin, /lib, ... where they are not symlinks."""
        return COW_DIRS + tuple(name for name, kind, _ in self.top_level if kind == "dir")

    # Writable sandbox locations backed by host directories, so the harness can read what commands wrote.
    @property
    def writable(self) -> dict[str, Path]:
        mounts = {"/tmp": self.root / "tmp", "/root": self.root / "home_root", "/home": self.root / "home",
                  "/logs": self.root / "logs"}
        if under(self.workdir, HOME_MOUNTS):  # e.g. WORKDIR /home/builder: inside the /home mount
            return mounts
        return {self.workdir: self.root / "app", **mounts}

    @property
    def tests_dir(self) -> Path:      # mounted read-only at /tests; empty until the verifier runs
        return self.root / "tests"

    @property
    def trace_log(self) -> Path:
        return self.root / self.trace_name

    def backing(self, sandbox_path: str) -> tuple[Path, str] | None:
        """(host directory, path relative to it) that holds what the episode wrote at `sandbox_path`: a writable
        mount's directory, or the overlay's upper layer for the copy-on-write system directories (never the host's
        own files); None for tmpfs locations."""
        for mount, host in self.writable.items():
            if sandbox_path == mount or sandbox_path.startswith(mount.rstrip("/") + "/"):
                return host, os.path.relpath(sandbox_path, mount)
        if sandbox_path.strip("/").split("/", 1)[0] in self.cow_dirs:
            return self.root / "upper", sandbox_path.lstrip("/")
        return None

    def host_path(self, sandbox_path: str) -> Path | None:
        backing = self.backing(sandbox_path)
        return None if backing is None else backing[0] / backing[1]

    def prepare(self) -> None:
        """Create the directories with the episode uid as owner (inside they appear owned by root)."""
        for d in [*self.writable.values(), self.host_path(self.workdir), self.tests_dir, self.root / "rc"]:
            d.mkdir(parents=True, exist_ok=True)
        for name in self.cow_dirs:
            for part in ("lower", "upper", "work", "merged"):
                (self.root / part / name).mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)  # the episode uid must traverse it to reach its bind sources
        (self.root / "tmp").chmod(0o1777)
        (self.root / "logs" / "verifier").mkdir(parents=True, exist_ok=True)
        for path in [*self.writable.values(), self.root / "upper", self.root / "work",
                     *(self.root / p / n for p in ("upper", "work") for n in self.cow_dirs)]:
            for dirpath, dirnames, filenames in os.walk(path):
                for name in [dirpath, *(os.path.join(dirpath, f) for f in dirnames + filenames)]:
                    os.lchown(name, self.uid, self.uid)
        (self.root / "rc" / "bashrc").write_text(BASHRC)


# The interactive shell's start-up file. The marker runs `test -e MARK_DIR/K/RC`, which puts a failed newfstatat in
# the trace (the command boundary) and prints an unambiguous record separator line to the PTY (completion + exit
# code). readonly -f: a model command cannot redefine the marker.
BASHRC = r"""
PS1='' PS2='' PROMPT_COMMAND=''
stty -echo 2>/dev/null
set +o history
__depgpo_mark() { local rc=$?; test -e "%(mark_dir)s/$1/$rc"; printf '\036DEPGPO %%s %%s\036\n' "$1" "$rc"; }
readonly -f __depgpo_mark
export -f __depgpo_mark
""" % {"mark_dir": MARK_DIR}


class UidLease:
    """An exclusive per-episode host uid, held with a lock file until released."""

    def __init__(self, lock_dir: Path = Path("/tmp/depgpo-uids")):
        lock_dir.mkdir(parents=True, exist_ok=True)
        start = os.getpid() % UID_SLOTS
        for i in range(UID_SLOTS):
            slot = (start + i) % UID_SLOTS
            fh = open(lock_dir / f"{slot}.lock", "w")
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


def bwrap_argv(layout: SandboxLayout) -> list[str]:
    argv = ["bwrap", "--unshare-user", "--uid", "0", "--gid", "0", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--unshare-net", "--hostname", "sandbox"]
    for name in layout.cow_dirs:
        argv += ["--bind", str(layout.root / "merged" / name), f"/{name}"]
    for name, kind, target in layout.top_level:  # /bin -> usr/bin where /usr is merged (else /bin is copy-on-write)
        if kind == "symlink":
            argv += ["--symlink", target, f"/{name}"]
    argv += ["--bind", "/proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev", "--tmpfs", "/run"]
    for sandbox_dir, host_dir in layout.writable.items():
        argv += ["--bind", str(host_dir), sandbox_dir]
    argv += ["--ro-bind", str(layout.tests_dir), "/tests", "--ro-bind", str(layout.root / "rc"), "/.depgpo"]
    for host_dir, sandbox_dir in layout.extra_binds:
        argv += ["--ro-bind", host_dir, sandbox_dir]
    for path in layout.masked_files:
        if os.path.exists(path):
            argv += ["--ro-bind", "/dev/null", path]
    for path in layout.masked_dirs:
        if os.path.isdir(path):
            argv += ["--tmpfs", path]
    argv += ["--chdir", layout.workdir, "--clearenv", "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/root",
             "--setenv", "LANG", "C.UTF-8"]
    for key, value in layout.env.items():  # the task's ENV may set PATH, HOME, LANG, ... as in its container
        argv += ["--setenv", key, value]
    # but not these: observations must stay free of terminal escapes, and traces of bytecode writes.
    argv += ["--setenv", "TERM", "dumb", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
             "--cap-drop", "ALL",
             "bash", "--rcfile", "/.depgpo/bashrc", "--noprofile", "-i"]
    return argv


def inner_argv(layout: SandboxLayout, limits: SandboxLimits, traced: bool = True) -> list[str]:
    """What sandbox_init execs once the overlays are mounted: strace -> setpriv -> prlimit -> bwrap -> bash.
    `traced=False` drops strace (the benchmark's baseline); nothing else changes."""
    drop = ["setpriv", f"--reuid={layout.uid}", f"--regid={layout.uid}", "--clear-groups", "--"]
    rlimits = ["prlimit", f"--nproc={limits.max_processes}", f"--fsize={limits.max_file_bytes}",
               f"--nofile={limits.max_open_files}", "--core=0"]
    if not _memory_cgroup_root():
        rlimits.append(f"--as={limits.memory_bytes}")
    # strace's own warnings go to the file sandbox_init puts on fd 2; the traced chain gets the PTY back as stderr.
    restore_stderr = ["sh", "-c", 'exec "$@" 2>&1', "sh"]
    tracer = [*strace_argv(str(layout.trace_log)), "--"] if traced else []
    return [*tracer, *restore_stderr, *drop, *rlimits, "--", *bwrap_argv(layout)]


def launcher_argv(layout: SandboxLayout, limits: SandboxLimits, traced: bool = True) -> list[str]:
    spec = json.dumps({"layout": {"root": str(layout.root), "uid": layout.uid, "system_root": str(layout.system_root),
                                  "cow_dirs": list(layout.cow_dirs), "stderr": str(layout.root / "strace.err")},
                       "argv": inner_argv(layout, limits, traced)})
    return ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
            "--", sys.executable, "-m", "depgpo.env.sandbox_init", spec]


def _memory_cgroup_root() -> Path | None:
    root = Path("/sys/fs/cgroup/memory")
    return root if os.access(root, os.W_OK) else None


class EpisodeCgroups:
    """cgroup v1 memory and pids limits for one episode, where the host allows them (else rlimits only)."""

    def __init__(self, name: str, limits: SandboxLimits):
        self.dirs: list[Path] = []
        for controller, settings in (("memory", {"memory.limit_in_bytes": limits.memory_bytes}),
                                     ("pids", {"pids.max": limits.max_processes})):
            base = Path("/sys/fs/cgroup") / controller
            if not os.access(base, os.W_OK):
                continue
            d = base / "depgpo" / name
            try:
                d.mkdir(parents=True, exist_ok=True)
                for key, value in settings.items():
                    (d / key).write_text(str(value))
            except OSError:
                continue
            self.dirs.append(d)

    def enter(self) -> None:
        """Called in the child before exec: move this process (and so all its descendants) into the cgroups."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass  # still has processes for a moment after the kill; the next episode of this name reuses it


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
    """Make sure nothing of an episode runs on after its pid namespace was killed; returns how many had to be
    killed here. The kernel kills the namespace's processes asynchronously, so first give it a moment."""
    deadline = time.monotonic() + wait_s
    while processes_of_uid(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = processes_of_uid(uid)
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(survivors)


def remove_layout(layout: SandboxLayout) -> None:
    """Delete an episode's host directories (the overlays are gone with its mount namespace)."""
    shutil.rmtree(layout.root, ignore_errors=True)

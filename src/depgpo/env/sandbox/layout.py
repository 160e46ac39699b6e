"""One sandbox per episode: bubblewrap over copy-on-write system directories, traced by strace as pid 1.

Process chain of the agent at root (docs/sandbox.md#layout). Rootless (an ordinary user, docs/sandbox.md#privilege)
the same chain runs inside a user namespace of the episode's own, entered with nsenter, without setpriv; every
difference between the two is in privilege.py.

    unshare --mount --pid --fork --mount-proc      mount namespace M1 + pid namespace P1, as host root
      python -m depgpo.env.sandbox.sandbox_init            pid 1 of P1: idmapped overlays for /usr /etc /opt /var, then forks
        unshare --pid --fork --mount-proc          the agent's pid namespace P2, a child of P1
          strace -f --seccomp-bpf ...              pid 1 of P2: unkillable from inside, owns all the agent's pids
            setpriv --reuid=U  prlimit ...         an unprivileged host uid per episode, resource limits
              bwrap --unshare-user --uid 0 ...     root inside, own net (loopback only), ipc, uts namespaces
                bash -i                            the persistent interactive shell on a PTY

The judge stands apart (`verifier_argv`): `nsenter` into M1 and P1 (and the agent's network namespace, so it can
reach the servers the agent left running), its own strace, then a second bwrap over the same files with /tests and
/logs mounted in its mount namespace alone. P2 cannot see P1's processes, so no agent process can signal, trace or
read (/proc/PID/root) the verifier, and /tests and /logs exist nowhere the agent can reach.

The agent's `/` is a host directory (`rootfs`, sticky and root-owned like /tmp): a command may create /data or
/conftest.py, and the verifier sees them, but cannot replace the mount points and symlinks the harness put there.
The host sees every write the episode makes to system directories only in the episode's own upper layers; all of
the episode's files live on one tmpfs whose size and inode count are the episode's disk limit.
"""

from __future__ import annotations

import fcntl
import os
import resource
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from depgpo.env.images.backend import TOP_LEVEL_SYSTEM_DIRS, top_level_links
from depgpo.env.sandbox.chain import host_program
from depgpo.env.sandbox.file_hash import EPISODE_HASH_BYTES, FILE_DATA_MAX_BYTES, HashBudget
from depgpo.env.sandbox.mount_api import detach
from depgpo.env.sandbox.privilege import Namespaces, Privilege, resolve, sweep_cgroups
from depgpo.env.sandbox.tree_walk import TreeWalk
from depgpo.env.tracing.strace_flags import MARK_DIR, strace_argv
from depgpo.trajectory.scope import HARNESS_DIRS, PSEUDO_DIRS, is_under

# System directories that are copy-on-write inside the episode (apt-get / pip install land in the upper layer).
COW_DIRS = ("usr", "etc", "opt", "var")
# The sandbox's own mount points: a task's workdir can neither be one nor lie inside one. (It may be /root, /home or
# /tmp or lie inside them: it is then part of that writable mount, not a mount of its own.)
RESERVED_DIRS = HARNESS_DIRS + PSEUDO_DIRS
HOME_MOUNTS = ("/tmp", "/root", "/home", "/run")
# Host files the sandbox's root must not read even though the idmapped /etc shows them as its own.
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
# (Slurm's spool holds slurmstepd's sockets, which trust the job owner's uid: the rootless agent's.)
MASKED_DIRS = ("/etc/ssh", "/etc/munge", "/etc/slurm", "/var/log", "/var/lib/mysql", "/var/lib/munge",
               "/var/spool/slurmd", "/var/spool/slurm", "/var/lib/slurm")
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class SandboxLimits:
    """Per-episode resource limits (defaults suit tiny tasks on a 2-core machine)."""

    max_processes: int = 512          # RLIMIT_NPROC for the episode's own uid, and pids.max where cgroups allow
    max_file_bytes: int = 1 << 30     # RLIMIT_FSIZE
    max_open_files: int = 4096        # RLIMIT_NOFILE
    memory_bytes: int = 4 << 30       # memory cgroup limit, else RLIMIT_DATA (the size of a process's private
    #                                   writable mappings: heap, malloc, thread stacks) and the stack's hard limit
    address_space_bytes: int = 64 << 30  # without a memory cgroup, RLIMIT_AS: a ceiling on what a process reserves
    #                                   (OCaml 5 reserves every domain's minor heap: coqc 32 GiB) and maps shared
    cpu: int | None = None            # pin the episode to this CPU; None: one of cpu_slots' (or none, pin=False)
    pin: bool = True                  # without `cpu`: pin each episode to a CPU of the process's that no other
    #                                   episode holds, if any (cpu_slots.py)
    disk_bytes: int = 2 << 30         # all files the episode writes (workdir, /tmp, homes, upper layers): tmpfs size;
    #                                   at root its pages count against the memory cgroup, so it stays below
    #                                   memory_bytes (ENOSPC, not OOM); rootless only against the job's cgroup
    disk_inodes: int = 1_000_000      # and its inode count; a breach is ENOSPC inside, recorded by the episode
    shm_bytes: int = 64 << 20         # /dev/shm, a tmpfs of its own: Docker's default size (bwrap's --dev would
    #                                   leave it the size of /dev's tmpfs, half the host's RAM)
    trace_bytes: int = 1 << 30        # the strace logs (agent's and verifier's) live on a tmpfs of this size: a
    #                                   command that floods the tracer ends the episode, the host disk never fills
    hash_file_bytes: int = FILE_DATA_MAX_BYTES  # the data of one file the harness reads to hash it (file_hash.py);
    hash_episode_bytes: int = EPISODE_HASH_BYTES  # and of all an episode's files above the line-tracked size


def checked_workdir(workdir: str) -> str:
    """The task's WORKDIR, normalised; it becomes a writable mount, so it cannot be / or one of the sandbox's own."""
    normal = os.path.normpath(workdir)
    system = tuple(f"/{name}" for name in COW_DIRS + TOP_LEVEL_SYSTEM_DIRS)  # a mount there would hide them
    if not workdir.startswith("/") or normal == "/" or normal in system or is_under(normal, RESERVED_DIRS):
        raise ValueError(f"workdir {workdir!r} (the task's WORKDIR) cannot be the sandbox's working directory: it "
                         f"must be absolute, not / or a system directory itself, and outside "
                         f"{', '.join(RESERVED_DIRS)}")
    return normal


# Memoised: the tampering checks and the stat walk ask for these paths thousands of times per episode, and pathlib
# builds each anew. Both depend only on their arguments; the mapping is read-only since it is shared.
@lru_cache(maxsize=1024)
def _seen_from(view: str, root: Path, name: str) -> Path:
    """root/name as the harness reaches it: through the holder's /proc/PID/root (rootless, `view`), else as is."""
    return Path(view + str(root / name))


@lru_cache(maxsize=1024)
def _writable_mounts(fs: Path, workdir: str, view: str = "") -> Mapping[str, Path]:
    base = fs / view if view else fs  # the verifier's own homes in its image view (judge_view.py)
    mounts = {"/tmp": base / "tmp", "/root": base / "home_root", "/home": base / "home", "/run": base / "run"}
    if not is_under(workdir, HOME_MOUNTS):  # e.g. WORKDIR /home/builder: inside the /home mount
        mounts = {workdir: fs / "app", **mounts}
    elif view:  # the agent's workdir, inside the verifier's own home: always the agent's directory
        home = next(m for m in HOME_MOUNTS if is_under(workdir, (m,)))
        mounts = {workdir: _writable_mounts(fs, workdir)[home] / os.path.relpath(workdir, home), **mounts}
    return MappingProxyType(mounts)


@dataclass
class SandboxLayout:
    """Host-side directories of one episode; everything the episode can write lives under `root`."""

    root: Path                        # the episode's directory, as the host names it
    workdir: str = "/app"             # the task's working directory inside the sandbox
    uid: int = 0                      # the unprivileged host uid mapped to root inside (rootless: the user's own)
    privilege: Privilege = field(default_factory=resolve)  # root or rootless (privilege.py)
    namespaces: Namespaces = field(default_factory=Namespaces)  # rootless: the holder of the episode's tmpfs
    masked_files: tuple[str, ...] = MASKED_FILES
    masked_dirs: tuple[str, ...] = MASKED_DIRS
    extra_binds: list[tuple[str, str]] = field(default_factory=list)  # (host dir, sandbox dir), read-only
    trace_name: str = "trace.log"     # one log per shell: a restarted shell writes a new one
    system_root: Path = Path("/")     # lower layers of the system directories: the host's, or an unpacked image's
    env: dict[str, str] = field(default_factory=dict)  # the task's ENV (Dockerfile, image), for shell and verifier
    verifier_binds: list[tuple[str, str]] = field(default_factory=list)  # (host dir, sandbox dir), read-only, for
    #                                                                      the verifier alone (verifier_tools)
    agent_upper: frozenset[str] | None = None  # upper-layer entries when the verifier started: the agent's writes to
    #                                            system directories (what the verifier writes there is its own)
    agent_upper_unwalked: tuple[str, ...] = ()  # upper-layer directories that walk could not list: all below them
    #                                             counts as the agent's ("" for all of it)
    hashing: HashBudget = field(default_factory=HashBudget)  # what reading its files may still cost (file_hash)
    view: str = ""                    # "": the agent's file system; "judge": the verifier's image view of it
    #                                   (judge_view.py: the image's system and homes, the agent's workdir)

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

    @cached_property
    def workdir_top(self) -> str | None:
        """The top-level directory above the workdir's mount (`app` of /app/project, `srv` of /srv/app/bin): it
        lives in `rootfs` and holds the task's files beside the workdir (COPY data /app/data), so it is the task's
        entry, not the harness's. None when the workdir is top-level itself or lies in a system or home mount."""
        parts = self.workdir.strip("/").split("/")
        if len(parts) < 2 or is_under(self.workdir, HOME_MOUNTS) or parts[0] in self.cow_dirs \
                or parts[0] in TOP_LEVEL_SYSTEM_DIRS:
            return None
        return parts[0]

    @property
    def fs(self) -> Path:
        """Everything the episode can write lives here: one tmpfs (the disk limit), or a plain directory. The
        harness's path to it: rootless, through the holder's /proc/PID/root (the tmpfs is mounted only there)."""
        return _seen_from(self.namespaces.view, self.root, "fs")

    def inside(self, path: Path) -> str:
        """`path` (the harness's, as `fs` and `traces` give it) as the episode's namespaces name it."""
        return str(path).removeprefix(self.namespaces.view) if self.namespaces.view else str(path)

    def _fs_part(self, name: str) -> Path:
        return _seen_from(self.namespaces.view, self.root, f"fs/{self.view}/{name}" if self.view else f"fs/{name}")

    @property
    def rootfs(self) -> Path:
        """The sandbox's `/`: mount points and system symlinks owned by host root, new top-level entries the agent's."""
        return self._fs_part("rootfs")

    @property
    def agent_rootfs(self) -> Path:
        return _seen_from(self.namespaces.view, self.root, "fs/rootfs")

    @property
    def agent_area(self) -> str:
        """Where the agent's work is: its workdir, or the top-level directory around a deeper one (the /app of
        WORKDIR /app/project holds the task's files beside it). All the verifier's image view shows of the agent."""
        return f"/{self.workdir_top}" if self.workdir_top else self.workdir

    @property
    def merged(self) -> Path:
        """Where sandbox_init mounts the copy-on-write system directories (the verifier's view: a set of its own)."""
        return self.root / (f"{self.view}-merged" if self.view else "merged")

    # Writable sandbox locations backed by host directories, so the harness can read what commands wrote.
    @property
    def writable(self) -> Mapping[str, Path]:
        return _writable_mounts(self.fs, self.workdir, self.view)

    @property
    def tests_dir(self) -> Path:      # mounted read-only at /tests in the verifier's mount namespace only
        return self.root / "tests"

    @property
    def verifier_logs(self) -> Path:  # mounted at /logs in the verifier's mount namespace only, created just before
        return self.root / "verifier-logs"

    @property
    def upper(self) -> Path:
        return self._fs_part("upper")

    @property
    def traces(self) -> Path:
        """The strace logs: a tmpfs of limits.trace_bytes (or a plain directory); the harness's path, as `fs`."""
        return _seen_from(self.namespaces.view, self.root, "trace")

    @property
    def trace_log(self) -> Path:
        return self.traces / self.trace_name

    def upper_entries(self) -> tuple[frozenset[str], dict[str, str]]:
        """Paths (relative to the upper layer) of everything the episode has written to system directories, and
        the directories there the walk could not list (tree_walk), with why."""
        walk = TreeWalk(str(self.upper))
        return frozenset(os.path.relpath(entry.path, self.upper) for entry in walk), walk.skipped

    def record_agent_upper(self) -> dict[str, str]:
        """Before the verifier starts: `agent_upper`, and `agent_upper_unwalked` for what the walk could not list
        (anything found there later counts as the agent's); returns those directories, with why."""
        self.agent_upper, skipped = self.upper_entries()
        self.agent_upper_unwalked = tuple(sorted("" if p == str(self.upper) else os.path.relpath(p, self.upper)
                                                 for p in skipped))
        return skipped

    def backing(self, sandbox_path: str) -> tuple[Path, str] | None:
        """(host directory, path relative to it) that holds what the episode wrote at `sandbox_path`: a writable
        mount's directory, or the overlay's upper layer for the copy-on-write system directories (never the host's
        own files); None for tmpfs locations."""
        for mount, host in self.writable.items():
            if sandbox_path == mount or sandbox_path.startswith(mount.rstrip("/") + "/"):
                return host, os.path.relpath(sandbox_path, mount)
        top = sandbox_path.strip("/").split("/", 1)[0]
        if self.view and top == self.workdir_top:  # the verifier's view: the agent's /app around /app/project
            return self.agent_rootfs, sandbox_path.lstrip("/")
        if top in self.cow_dirs:
            return self.upper, sandbox_path.lstrip("/")
        if not top or f"/{top}" in RESERVED_DIRS or top in TOP_LEVEL_SYSTEM_DIRS:
            return None
        return self.rootfs, sandbox_path.lstrip("/")  # a top-level entry the agent made: /data, /conftest.py

    def host_path(self, sandbox_path: str) -> Path | None:
        backing = self.backing(sandbox_path)
        return None if backing is None else backing[0] / backing[1]

    def prepare(self) -> None:
        """Create the directories with the episode uid as owner (inside they appear owned by root). The disk and
        trace limits (tmpfs at fs and traces) are the privilege level's: privilege.open_namespaces, before this."""
        self.fs.mkdir(parents=True, exist_ok=True)
        self.traces.mkdir(exist_ok=True)
        self.root.chmod(0o711)  # the episode uid must traverse it to reach its bind sources
        self.fs.chmod(0o711)
        for d in [*self.writable.values(), self.host_path(self.workdir), self.tests_dir, self.root / "rc"]:
            d.mkdir(parents=True, exist_ok=True)
        for name in self.cow_dirs:
            for part in ("lower", "merged"):
                (self.root / part / name).mkdir(parents=True, exist_ok=True)
            for part in ("upper", "work"):
                (self.fs / part / name).mkdir(parents=True, exist_ok=True)
        (self.fs / "tmp").chmod(0o1777)
        self.give_to_episode([*self.writable.values(), self.upper, self.fs / "work"])
        self.prepare_rootfs()
        (self.root / "rc" / "bashrc").write_text(BASHRC)

    def give_to_episode(self, paths: list[Path]) -> None:
        """Make `paths` and everything below them the episode uid's (root; rootless they already are the user's)."""
        if self.uid == os.getuid():
            return
        for path in paths:
            os.lchown(path, self.uid, self.uid)
            for entry in TreeWalk(str(path)):  # the harness's and the task's trees; any depth
                os.lchown(entry.path, self.uid, self.uid)

    def prepare_rootfs(self) -> None:
        """`/` of the sandbox: root-owned mount points and symlinks in a sticky, world-writable directory, so that
        the agent can add top-level entries but can neither remove nor replace these (nor see /tests, /logs)."""
        self.rootfs.mkdir(exist_ok=True)
        self.rootfs.chmod(0o1777)
        mount_points = {*self.cow_dirs, "proc", "dev", "sys", *(m.strip("/") for m in self.writable),
                        *(d.strip("/") for d in RESERVED_DIRS)}  # harness_entries: their top-level names
        for name in sorted(mount_points):
            (self.rootfs / name).mkdir(parents=True, exist_ok=True)
        for name, kind, target in self.top_level:
            if kind == "symlink" and not os.path.lexists(self.rootfs / name):
                os.symlink(target, self.rootfs / name)


# The interactive shell's start-up file (no `stty -echo`: ShellSession opens the PTY with echo off). The marker
# runs `test -e MARK_DIR/K/RC/NONCE`, which puts a failed newfstatat in the trace (the command boundary) and prints
# a record separator line with the nonce to the PTY (completion + exit code; shell.py). readonly -f: a model command
# cannot redefine the marker. disable-completion: a TAB in a command (a Makefile, Rust source in a heredoc) is a TAB,
# not a request to complete a file name. PROMPT_COMMAND prints the prompt hint (`\x1eDEPGPO-PROMPT $!\x1e`) before
# each prompt: the harness types the marker only then, so no program the command left reading the terminal eats it,
# and `$!` tells it the command started a background job to settle (shell.py). Readonly and exported: a nested bash
# prints it too; bash keeps `$?` and `$_` across it.
BASHRC = r"""
PS1='' PS2=''
set +o history
bind 'set disable-completion on' 2>/dev/null
__depgpo_mark() { local rc=$?; test -e "%(mark_dir)s/$1/$rc/$2"; printf '\036DEPGPO %%s %%s %%s\036\n' "$1" "$2" "$rc"; }
__depgpo_prompt() { printf '\036DEPGPO-PROMPT %%s\036' "$!"; }
readonly -f __depgpo_mark __depgpo_prompt
export -f __depgpo_mark __depgpo_prompt
PROMPT_COMMAND=__depgpo_prompt
readonly PROMPT_COMMAND
export PROMPT_COMMAND
""" % {"mark_dir": MARK_DIR}


# Both bwraps: root inside its own user namespace, own ipc and uts; the agent's adds a network namespace of its own.
BWRAP_NAMESPACES = ("--unshare-user", "--uid", "0", "--gid", "0", "--unshare-ipc", "--unshare-uts",
                    "--unshare-cgroup-try", "--hostname", "sandbox")
BASE_ENV = {"PATH": SANDBOX_PATH, "HOME": "/root", "LANG": "C.UTF-8"}  # the agent's shell and the verifier start here


def _setenv(env: dict[str, str]) -> list[str]:
    return [arg for key, value in env.items() for arg in ("--setenv", key, value)]


def harness_entries(layout: SandboxLayout) -> set[str]:
    """Top-level names of `/` that the harness made (mount points, /bin-style symlinks), not the task or agent."""
    mounts = {*layout.cow_dirs, "proc", "dev", "sys", *(m.strip("/") for m in layout.writable),
              *(d.strip("/") for d in RESERVED_DIRS)}
    names = {name.split("/")[0] for name in mounts} | {name for name, kind, _ in layout.top_level if kind == "symlink"}
    return names - {layout.workdir_top}  # /app of WORKDIR /app/project holds the task's files: the task's entry


def _bwrap_mounts(layout: SandboxLayout, limits: SandboxLimits) -> list[str]:
    """The file system both the agent and the verifier see: the same `/`, system directories and writable mounts."""
    argv = [layout.privilege.root_bind, layout.inside(layout.rootfs), "/"]  # its /bin -> usr/bin made by prepare()
    if layout.privilege.root_bind == "--ro-bind":  # the task's own top-level entries (an image's /data) stay writable
        for name in sorted(set(os.listdir(layout.rootfs)) - harness_entries(layout)):
            argv += ["--bind", layout.inside(layout.rootfs / name), f"/{name}"]
    if layout.view and layout.workdir_top:  # the verifier's view: the agent's own /app around /app/project
        argv += ["--bind", layout.inside(layout.agent_rootfs / layout.workdir_top), f"/{layout.workdir_top}"]
    for name in layout.cow_dirs:
        argv += ["--bind", str(layout.merged / name), f"/{name}"]
    argv += ["--bind", "/proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev",
             "--perms", "1777", "--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm"]
    for sandbox_dir, host_dir in sorted(layout.writable.items(), key=lambda mount: mount[0].count("/")):
        argv += ["--bind", layout.inside(host_dir), sandbox_dir]  # a workdir inside a home after that home
    argv += ["--ro-bind", str(layout.root / "rc"), "/.depgpo"]
    for host_dir, sandbox_dir in layout.extra_binds:
        argv += ["--ro-bind", host_dir, sandbox_dir]
    for path in layout.masked_files:
        if os.path.exists(path):
            argv += ["--ro-bind", "/dev/null", path]
    for path in layout.masked_dirs:
        if os.path.isdir(path):
            argv += ["--tmpfs", path]
    return argv


def bwrap_argv(layout: SandboxLayout, limits: SandboxLimits) -> list[str]:
    """The agent's bwrap: the persistent interactive shell, with a network namespace of its own."""
    argv = [host_program("bwrap"), *BWRAP_NAMESPACES, "--unshare-net", *_bwrap_mounts(layout, limits),
            "--chdir", layout.workdir, "--clearenv", *_setenv({**BASE_ENV, **layout.env})]
    # The task's ENV may set PATH, HOME, LANG, ... as in its container, but not these: observations must stay free
    # of terminal escapes, and traces of bytecode writes.
    argv += ["--setenv", "TERM", "dumb", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
             "--cap-drop", "ALL",
             "bash", "--rcfile", "/.depgpo/bashrc", "--noprofile", "-i"]
    return argv


def verifier_bwrap_argv(layout: SandboxLayout, limits: SandboxLimits, env: dict[str, str], script: str) -> list[str]:
    """The verifier's bwrap: the agent's files and network (joined by nsenter), plus /tests and /logs; a clean
    environment and a non-interactive bash that runs `script`."""
    argv = [host_program("bwrap"), *BWRAP_NAMESPACES, *_bwrap_mounts(layout, limits),
            "--ro-bind", str(layout.tests_dir), "/tests", "--bind", str(layout.verifier_logs), "/logs",
            *(arg for host, inside in layout.verifier_binds for arg in ("--ro-bind", host, inside)),
            "--chdir", layout.workdir, "--clearenv", *_setenv(env)]
    return [*argv, "--cap-drop", "ALL", "/bin/bash", "--norc", "--noprofile", "-c", script]


def _dropped(layout: SandboxLayout, limits: SandboxLimits, bwrap: list[str], nproc: int | None = None) -> list[str]:
    """setpriv (root only) -> prlimit -> bwrap: the episode's unprivileged uid and its resource limits."""
    drop = layout.privilege.drop_argv(layout.uid)
    rlimits = [host_program("prlimit"), f"--nproc={nproc or limits.max_processes}", f"--fsize={limits.max_file_bytes}",
               f"--nofile={limits.max_open_files}", "--core=0"]
    if not layout.privilege.memory_by_cgroup():
        stack, _ = resource.getrlimit(resource.RLIMIT_STACK)  # keep the soft limit (8 MiB as in Docker), cap the hard
        stack = stack if stack != resource.RLIM_INFINITY and stack <= limits.memory_bytes else limits.memory_bytes
        rlimits += [f"--data={limits.memory_bytes}", f"--stack={stack}:{limits.memory_bytes}",
                    f"--as={max(limits.address_space_bytes, limits.memory_bytes)}"]
    # strace's own warnings go to the file on fd 2; the traced chain gets its stdout back as stderr.
    restore_stderr = [host_program("sh"), "-c", 'exec "$@" 2>&1', "sh"]
    return [*restore_stderr, *drop, *rlimits, "--", *bwrap]


def inner_argv(layout: SandboxLayout, limits: SandboxLimits, traced: bool = True) -> list[str]:
    """What sandbox_init runs in P1 once the overlays are mounted: unshare (P2) -> strace -> setpriv -> prlimit ->
    bwrap -> bash. `traced=False` drops strace (the benchmark's baseline); nothing else changes."""
    tracer = [*strace_argv(layout.inside(layout.trace_log), host_program("strace")), "--"] if traced else []
    agent_pid_namespace = [host_program("unshare"), "--pid", "--fork", "--kill-child", "--mount-proc", "--"]
    return [*agent_pid_namespace, *tracer, *_dropped(layout, limits, bwrap_argv(layout, limits))]


def verifier_argv(layout: SandboxLayout, limits: SandboxLimits, p1_init: int, net_fd: int, trace_log: Path,
                  env: dict[str, str], script: str) -> list[str]:
    """The judge's own process tree: into the episode's M1 and P1 (from the host pid of P1's init) and the agent's
    network namespace (an fd the harness holds open: /proc/self/fd/N of nsenter), traced into its own log."""
    enter = layout.privilege.verifier_enter_argv(p1_init, net_fd)
    # RLIMIT_NPROC counts every process of the episode's uid (rootless: of its user namespace), the agent's that
    # still run included, and the agent's own limit keeps those at max_processes: so the verifier gets as many again
    # (with a pids cgroup of its own at root: Episode), and the agent's survivors cannot starve it (a fork bomb's 504).
    return [*enter, *strace_argv(layout.inside(trace_log), host_program("strace")), "--",
            *_dropped(layout, limits, verifier_bwrap_argv(layout, limits, env, script), 2 * limits.max_processes)]


def launcher_argv(layout: SandboxLayout, limits: SandboxLimits, traced: bool = True) -> list[str]:
    """The shell's whole chain: [nsenter into the holder ->] unshare (M1, P1) -> sandbox_init -> inner_argv."""
    layout_args = [str(layout.root), layout.inside(layout.fs), str(layout.uid), str(layout.system_root),
                   layout.privilege.system_dirs(layout.system_root == Path("/")), str(layout.root / "strace.err"),
                   *layout.cow_dirs]  # sandbox_init.main reads them in this order
    init = [sys.executable, "-S", "-m", "depgpo.env.sandbox.sandbox_init"]  # -S: chain.chain_env's PYTHONPATH
    return [*layout.privilege.outer_argv(layout.namespaces), *init, *layout_args, "--",
            *inner_argv(layout, limits, traced)]


def remove_layout(layout: SandboxLayout) -> None:
    """Delete an episode's host directories (the overlays are gone with its mount namespace)."""
    remove_episode_dir(layout.root)


def remove_episode_dir(root: Path) -> None:
    """Unmount the episode's disk-limit tmpfs (root; rootless they went with the holder), then delete its
    directory tree, however deep."""
    for mounted in (root / "fs", root / "trace"):
        if os.path.ismount(mounted):
            try:
                detach(str(mounted))
            except OSError:
                pass  # as `umount --lazy` failing was: rm below stays on this file system (--one-file-system)
    if os.getuid() != 0:  # an owner without CAP_DAC_OVERRIDE cannot delete below a directory it made mode 000
        subprocess.run(["chmod", "-R", "u+rwx", "--", str(root)], capture_output=True)
    # rm copes with any depth and any bytes in names (shutil.rmtree recurses, and a 1,200-deep chain overflows it)
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(root)], capture_output=True)


LIVE_LOCK = ".harness.lock"  # held (flock) by the harness process that owns an episode directory


def sweep_leftovers(work_root: Path) -> int:
    """Remove episode directories and cgroups left by harnesses that were killed (kill -9, OOM, node loss): those
    whose lock no live process holds. Returns how many directories were removed."""
    removed = 0
    for entry in os.scandir(work_root):
        if not entry.is_dir(follow_symlinks=False):
            continue
        lock = Path(entry.path) / LIVE_LOCK
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # not an episode directory of this version, or still being created
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # its harness is alive
        finally:
            os.close(fd)
        remove_episode_dir(Path(entry.path))
        removed += 1
    sweep_cgroups(work_root)
    return removed

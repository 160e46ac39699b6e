"""Starting an episode's process chains (the agent's shell, the verifier) without fork().

The harness process holds the policy, gigabytes of it in RL, and fork() copies its page tables: 65 ms a spawn at
1 GB resident against 0.9 ms for vfork (docs/benchmarks.md#where-an-episodes-start-goes). subprocess uses vfork
only when there is no preexec_fn, so what the child once did before exec is done another way:

    session keyring    the spawning thread joins a new, empty one; a child inherits its thread's credentials
    CPU                the spawning thread's affinity (per thread in Linux), which a child inherits
    cgroups            the chain's first program is `sh -c 'echo 0 > DIR/cgroup.procs …; exec …'` (root only)
    session, terminal  `setsid --ctty` (the shell: its PTY becomes the controlling terminal, job control works)

The spawning thread is one of its own, started for the spawn and gone after it, so the harness's threads keep their
session keyring (a Slurm job's Kerberos or AFS tickets) and their CPUs.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import threading
from pathlib import Path

from depgpo.env.sandbox.chain import host_program

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
_KEYCTL_JOIN_SESSION_KEYRING = 1
# Moves the shell itself (pid 0: the writer) into each cgroup before it becomes the chain: every process of the chain
# is then born inside them. Exit 125 with the kernel's words when one refuses.
_JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo 0 > "$1/cgroup.procs" || exit 125; shift; done; shift; exec "$@"'


def leave_session_keyring() -> None:
    """Join a new, empty session keyring (the calling thread's), so that neither the agent nor the verifier possesses
    the harness's (a Slurm job's Kerberos or AFS tickets live there; possession, not uid, grants it)."""
    if _SYS_KEYCTL is not None and _libc.syscall(_SYS_KEYCTL, _KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        raise OSError(ctypes.get_errno(), "keyctl(JOIN_SESSION_KEYRING) failed: the episode would share the "
                                          "harness's session keyring")


def joined(cgroups: list[Path], argv: list[str]) -> list[str]:
    """`argv`, started inside `cgroups` (none: as it is)."""
    if not cgroups:
        return argv
    return [host_program("sh"), "-c", _JOIN_CGROUPS, "sh", *map(str, cgroups), "--", *argv]


def with_terminal(argv: list[str]) -> list[str]:
    """`argv` in a session of its own whose controlling terminal is its stdin."""
    return [host_program("setsid"), "--ctty", *argv]


def spawn(argv: list[str], cpu: int | None = None, **popen_kwargs) -> subprocess.Popen:
    """subprocess.Popen(argv, **popen_kwargs) from a thread of its own: a new session keyring, pinned to `cpu`."""
    assert "preexec_fn" not in popen_kwargs, "a preexec_fn makes subprocess fork (module docstring)"
    result: dict = {}

    def start() -> None:
        try:
            leave_session_keyring()
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})
            result["proc"] = subprocess.Popen(argv, **popen_kwargs)
        except BaseException as e:  # raised again in the caller's thread
            result["error"] = e

    thread = threading.Thread(target=start, name="depgpo-spawn")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["proc"]

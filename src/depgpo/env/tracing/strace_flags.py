"""The exact strace invocation the sandbox uses and the trace parser understands.

Only metadata syscalls are traced (never read/write: that costs ~37x on I/O-heavy commands, measured before this
code existed; docs/benchmarks.md has what the tracer costs now). --seccomp-bpf stops only on these syscalls.
"""

TRACED_SYSCALLS = (
    # files: open/exec/existence checks/listing
    "open", "openat", "openat2", "creat", "execve", "execveat",
    "stat", "lstat", "newfstatat", "statx", "access", "faccessat", "faccessat2", "readlink", "readlinkat",
    "getdents64",
    # files: mutations
    "unlink", "unlinkat", "rmdir", "rename", "renameat", "renameat2", "mkdir", "mkdirat",
    "link", "linkat", "symlink", "symlinkat", "truncate", "ftruncate",
    "chmod", "fchmodat", "utimensat",
    # cwd
    "chdir", "fchdir",
    # processes
    "clone", "clone3", "fork", "vfork", "kill", "tkill", "tgkill",
    # network
    "bind", "listen", "connect", "accept", "accept4",
)

# Marker protocol: after each command the shell runs `test -e /.depgpo_mark/K/$?`, which appears in the trace as
#   newfstatat(AT_FDCWD</app>, "/.depgpo_mark/K/RC", ...) = -1 ENOENT (No such file or directory)
# and separates command K's syscalls from command K+1's. K = -1 marks the end of the shell's set-up; the verifier
# runs as segment "verifier".
MARK_DIR = "/.depgpo_mark"


def strace_argv(log_path: str, program: str = "strace") -> list[str]:
    """strace prefix: follow forks, microsecond timestamps, fd paths (-y) and socket details (-yy)."""
    return [
        program, "-f", "--seccomp-bpf", "-q", "-ttt", "-y", "-yy", "-s", "256",
        # Signals stay in the signal set: strace prints "+++ killed by SIG +++" only for signals in it.
        "-e", "signal=!SIGCHLD,SIGWINCH,SIGALRM",
        # A process in a PID namespace of its own (`unshare -p`, bwrap, Chrome's sandbox) sees other pids than the
        # tracer: its clones return them. This adds strace's own in a comment, so children stay tied to parents.
        "--decode-pids=pidns",
        "-e", "trace=" + ",".join(TRACED_SYSCALLS),
        "-o", log_path,
    ]

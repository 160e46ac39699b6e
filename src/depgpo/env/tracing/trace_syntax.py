"""strace's output syntax, as the trace parser reads it: the syscalls that matter and how their lines are built.

Lines come from `strace -f -tt -yy -s ...` (strace_flags.strace_argv): `PID TIME call(args) = result`, with fds
decorated by their paths (`3</app/x>`) and strings C-escaped.
"""

from __future__ import annotations

import posixpath
import re

from depgpo.env.tracing.strace_flags import MARK_DIR
from depgpo.trajectory.scope import SYSTEM_DIRS

# Installed software, read-only to the agent, and most of every log (interpreter start-up): skipped unparsed.
# Not /etc: a program reads it on every start, but a file the agent wrote there can carry a dependency.
FAST_SKIP_PREFIXES = tuple(d + "/" for d in SYSTEM_DIRS) + ("/proc/sys/", "/sys/")


def skippable_lines(untracked_prefixes: tuple[str, ...]) -> re.Pattern:
    """Lines that cannot matter, recognised before any other work: lookups and opens of an untracked path, and
    fstat (a stat of an open fd with an empty path; the open was recorded). Skipping the first half of an
    `<unfinished ...>` call is safe: its `resumed` half then has no start and is dropped too."""
    lookups = "|".join(name for name, (_, effect) in FILE_CALLS.items() if effect == STAT)
    opens = "|".join(name for name, (_, effect) in FILE_CALLS.items() if effect == OPEN)
    prefixes = "|".join(re.escape(prefix) for prefix in untracked_prefixes) or "(?!)"
    return re.compile(rf'\d+ +[\d.]+ (?:(?:{lookups})\([^"]*"(?:", |{prefixes})|(?:{opens})\([^"]*"(?:{prefixes}))')


PIDNS_PID = re.compile(r"(-?\d+) /\* (-?\d+) in strace's PID NS \*/")


def strace_pid(text: str) -> int | None:
    """The pid at the start of a call's result or argument, in the tracer's PID namespace: with
    --decode-pids=pidns strace adds that one in a comment where the tracee sees another (`2 /* 7900 in strace's PID
    NS */`; for a process group, `-2 /* 7900 ... */`, which stays a group: -7900). None when `text` does not start
    with a pid."""
    translated = PIDNS_PID.match(text)
    if translated:
        return -abs(int(translated[2])) if translated[1].startswith("-") else int(translated[2])
    head = text.split(None, 1)[0] if text.strip() else ""
    return int(head) if head.lstrip("-").isdigit() else None


# strace pads a short call with spaces so that its ` = ` starts in the line's 40th column: `unlink("a")      = 0`.
PADDED_RESULT = re.compile(r"\) {2,}= ")


def call_result(rest: str) -> tuple[int, str]:
    """(index of the `)` that ends the call's arguments, its result): 'openat(...) = 3</x>' -> (k, '3</x>');
    (-1, '?') when strace printed no result."""
    end = rest.rfind(") = ")
    if end >= 0:
        return end, rest[end + 4:]
    padded = None
    for padded in PADDED_RESULT.finditer(rest):
        pass
    return (padded.start(), rest[padded.end():]) if padded is not None else (-1, "?")


def split_result(rest: str) -> tuple[str, str]:
    """'openat(...) = 3</x>' -> ('openat(...', '3</x>'); the result is '?' when strace printed none."""
    end, result = call_result(rest)
    return (rest, "?") if end < 0 else (rest[:end], result)


def resolve_path(base: str | None, path: str) -> str | None:
    if not path.startswith("/"):
        if base is None:
            return None
        path = ("/" if base == "/" else base + "/") + path
    if "/." in path or "//" in path or (path.endswith("/") and path != "/"):
        path = posixpath.normpath(path)
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
    return path


def decoration(text: str) -> str:
    """Path inside a -y decoration `3</tmp/x>`; strace escapes '<' '>' and non-printables in it."""
    path = unescape(text)
    return path[:-len(" (deleted)")] if path.endswith(" (deleted)") else path


def unescape(text: str) -> str:
    if "\\" not in text:
        return text
    raw = bytearray()
    pos = 0
    for match in ESCAPE.finditer(text):
        raw += text[pos:match.start()].encode("utf-8", "surrogateescape")
        octal, hexa, char = match[1], match[2], match[3]
        if octal:
            raw.append(int(octal, 8))
        elif hexa:
            raw.append(int(hexa, 16))
        else:
            raw += C_ESCAPES.get(char, char).encode("utf-8", "surrogateescape")
        pos = match.end()
    raw += text[pos:].encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "surrogateescape")


UNFINISHED = " <unfinished ...>"
CONNECT_ATTEMPTS = ("-1 EINPROGRESS", "-1 ECONNREFUSED")  # failed connects that still probed the port
MARK_NEEDLE = '"' + MARK_DIR + "/"
MARK_RE = re.compile(re.escape(MARK_NEEDLE) + r"(-?\d+)/\d+(?:/([0-9a-f]{16}))?")
LOOKUP_ERRORS = ("-1 ENOENT", "-1 ENOTDIR")
ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{2})|(.))")
C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "v": "\v", "f": "\f"}
# Quoted text in the "unrolled loop" form (runs of plain characters between escapes): ~10x faster than (?:a|b)*.
DECORATED = r"<([^<>\\]*(?:\\.[^<>\\]*)*)(?:<[^<>]*>)?>"  # -yy adds <char 1:3> etc. inside for devices
QUOTED = r'"([^"\\]*(?:\\.[^"\\]*)*)"'
AT_ARGS = re.compile(r"(AT_FDCWD|-?\d+)(?:" + DECORATED + r")?, (?:" + QUOTED + "|NULL)")
FD_ARG = re.compile(r"-?\d+" + DECORATED)
FD_RESULT = re.compile(r"\d+" + DECORATED)
STRING = re.compile(QUOTED)
PROC_PID = re.compile(r"/proc/(\d+)(?:/|$)")
INET_PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
LISTEN_PORT = re.compile(r":(\d+)\]$")
UNIX_PATH = re.compile(r"sun_path=(@?)" + QUOTED)

# How a file syscall writes its (first) path argument ...
AT = "dirfd, path"
PATH = "path"
FD = "fd"
# ... and what it means when it succeeds; the other effects are SegmentEffects fields, recorded as they are.
OPEN, CREAT, TRUNCATE, EXEC, DELETE, RENAME, LINK, SYMLINK, MKDIR, CHDIR = (
    "open", "creat", "truncate", "executed", "delete", "rename", "link", "symlink", "mkdir", "chdir")
STAT = "stats"
FILE_CALLS = {
    "openat": (AT, OPEN), "openat2": (AT, OPEN), "open": (PATH, OPEN), "creat": (PATH, CREAT),
    "newfstatat": (AT, STAT), "statx": (AT, STAT), "faccessat": (AT, STAT), "faccessat2": (AT, STAT),
    "readlinkat": (AT, STAT), "stat": (PATH, STAT), "lstat": (PATH, STAT), "access": (PATH, STAT),
    "readlink": (PATH, STAT),
    "execve": (PATH, EXEC), "execveat": (AT, EXEC),
    "getdents64": (FD, "listed"),
    "unlink": (PATH, DELETE), "rmdir": (PATH, DELETE), "unlinkat": (AT, DELETE),
    "rename": (PATH, RENAME), "renameat": (AT, RENAME), "renameat2": (AT, RENAME),
    "link": (PATH, LINK), "linkat": (AT, LINK),
    "symlink": (PATH, SYMLINK), "symlinkat": (AT, SYMLINK),
    "mkdir": (PATH, MKDIR), "mkdirat": (AT, MKDIR),
    "truncate": (PATH, TRUNCATE), "ftruncate": (FD, TRUNCATE),
    "chmod": (PATH, "meta"), "fchmodat": (AT, "meta"), "utimensat": (AT, "meta"),
    "chdir": (PATH, CHDIR), "fchdir": (FD, CHDIR),
}


def socket_address(call: str, rest: str, args: str, pos: int, cwd: str | None) -> str | None:
    """What a successful bind/listen/connect names: `tcp:PORT`, `udp:PORT`, `unix:@NAME` (abstract) or `unix:PATH`
    (resolved against `cwd`), or None (port 0, another family, an unresolvable path)."""
    socket = FD_ARG.match(rest, pos)
    protocol = socket[1] if socket else ""
    if call == "listen":  # port from the -yy decoration, e.g. 3<TCP:[127.0.0.1:8080]>
        port = LISTEN_PORT.search(protocol)
        return f"tcp:{port[1]}" if port and port[1] != "0" else None
    if "sa_family=AF_INET" in args:
        port = INET_PORT.search(args, pos)
        transport = "udp" if protocol.startswith("UDP") else "tcp"
        return f"{transport}:{port[1]}" if port and port[1] != "0" else None
    address = UNIX_PATH.search(args, pos) if "sa_family=AF_UNIX" in args else None
    if address is None:
        return None
    if address[1]:  # abstract namespace, no file
        return "unix:@" + unescape(address[2])
    path = resolve_path(cwd, unescape(address[2]))
    return "unix:" + path if path is not None else None

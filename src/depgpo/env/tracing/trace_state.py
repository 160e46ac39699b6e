"""The trace parser's state: the processes it follows, and what each segment of the log did.

A segment is one agent command (its index), the setup before the first, or the verifier run after the last
(docs/trajectory-schema.md). `SegmentEffects` is the parser's answer for one segment; the episode turns it into the
command's record fields (`depgpo.trajectory.schema.CommandEffects`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from depgpo.env.tracing.trace_order import ORDER_READ_KINDS, LogClock, SegmentOrder

SETUP = "setup"
VERIFIER = "verifier"
Segment = int | str  # command index K >= 0, SETUP or VERIFIER

# SegmentEffects fields that hold path records; the temp-file rule removes a path from all of them.
PATH_KINDS = ("reads", "stats", "missing", "listed", "executed", "opened_for_write", "truncated", "created",
              "deleted", "dirs_created", "meta")
# Kept in the order events came, not folded with the temp-file rule: what a later event of the segment saw.
ORDER_KINDS = ("replaced_before_read",)
CONTENT_READ_KINDS = ("reads", "executed", "listed")  # a file's content or a directory's entries seen
# The name a file was opened by where it resolved to another (a symlink on the way): what the judge's rules read.
NAME_KINDS = ("opened_as",)
RECORD_KINDS = PATH_KINDS + ("ports_bound", "ports_connected") + ORDER_KINDS + NAME_KINDS


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    name: str  # basename of the process's last execve (the parent's name until it execs)
    owner: Segment  # segment whose command started it


@dataclass
class SegmentEffects:
    """What one segment did. Paths pass the parser's keep_path; ports are `tcp:P`, `udp:P`, `unix:/path`."""

    reads: set[str] = field(default_factory=set)  # opened for reading (O_RDONLY or O_RDWR)
    stats: set[str] = field(default_factory=set)  # stat/access/readlink that found the path; directories opened
    missing: set[str] = field(default_factory=set)  # lookups that failed with ENOENT/ENOTDIR
    listed: set[str] = field(default_factory=set)  # directories read with getdents64
    executed: set[str] = field(default_factory=set)
    opened_for_write: set[str] = field(default_factory=set)  # O_WRONLY/O_RDWR/O_CREAT/O_TRUNC, creat, truncate,
    # link targets, renames of a temp file onto the path (content may or may not have changed)
    truncated: set[str] = field(default_factory=set)  # O_TRUNC, creat, truncate to 0: the whole content rewritten
    created: set[str] = field(default_factory=set)  # O_CREAT (the file may have existed), creat, link, symlink,
    # a temp file renamed onto a path last seen absent
    deleted: set[str] = field(default_factory=set)  # unlink, rmdir
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (source, destination), in order
    dirs_created: set[str] = field(default_factory=set)
    meta: set[str] = field(default_factory=set)  # chmod, utimensat
    # Paths the segment's own processes created, truncated, removed or renamed a temp file onto before they had
    # read them (open, exec, getdents): whatever they read there later was their own (the verifier's E drops these)
    replaced_before_read: set[str] = field(default_factory=set)
    # Records (paths, ports) that the segment's own processes read only after they had replaced them whole (a
    # heredoc written, then printed or run): what they read was the segment's own (trace_order)
    reads_after_write: set[str] = field(default_factory=set)
    opened_as: set[str] = field(default_factory=set)  # NAME_KINDS: /app/conftest.py of an open that found /tmp/x
    ports_bound: set[str] = field(default_factory=set)  # by this segment's processes, whenever the bind happened
    ports_connected: set[str] = field(default_factory=set)
    spawned: list[ProcInfo] = field(default_factory=list)  # started here, alive when the segment ended
    killed: list[ProcInfo] = field(default_factory=list)  # agent-owned processes sent a signal other than 0
    probed: list[ProcInfo] = field(default_factory=list)  # agent-owned processes sent signal 0 or read in /proc/PID
    # Effects of this segment's background processes during later segments, keyed by the field name above
    # (a rename counts as "deleted" source + "opened_for_write" destination; killed/probed hold "proc:NAME").
    late: dict[str, set[str]] = field(default_factory=dict)
    cwd_end: str | None = None  # the shell's cwd when the segment ended (or now, if it has not)


class TracedProcess:
    __slots__ = ("pid", "owner", "name", "cwd", "parent", "is_shell", "ports", "alive")

    def __init__(self, pid: int, owner: Segment, name: str, cwd: str | None, parent: TracedProcess | None,
                 is_shell: bool, ports: set[str] | None = None):
        self.pid = pid  # thread-group id
        self.owner = owner
        self.name = name
        self.cwd = cwd
        self.parent = parent
        self.is_shell = is_shell  # has emitted a mark: its own syscalls belong to the current segment
        self.ports = ports if ports is not None else set()  # sockets it bound or inherited (until it execs)
        self.alive = True


class SegmentRecord:
    """One segment's effects, updated in log order so that temporary files can be folded away."""

    def __init__(self, clock: LogClock | None = None) -> None:
        self.sets: dict[str, set[str]] = {kind: set() for kind in RECORD_KINDS}
        self.order = SegmentOrder(clock or LogClock())  # positions of own reads and replacements
        self.born: set[str] = set()  # certainly created in this segment and not removed since
        self.content_read: set[str] = set()  # CONTENT_READ_KINDS by the segment's own processes
        self.renamed: list[tuple[str, str]] = []
        self.killed: dict[TracedProcess, None] = {}  # ordered sets
        self.probed: dict[TracedProcess, None] = {}
        self.late: dict[str, set[str | TracedProcess]] = {}
        self.alive_at_end: list[TracedProcess] | None = None  # set when the segment's mark arrives
        self.cwd_end: str | None = None

    def add_late(self, kind: str, record: str | TracedProcess) -> None:
        self.late.setdefault(kind, set()).add(record)

    def add(self, kind: str, record: str, own: bool = False) -> None:
        """A main effect; `own`: by one of the segment's own processes (is_own), whose reads and replacements are
        kept in order (`replaced_before_read`)."""
        self.sets[kind].add(record)
        if own and kind in ORDER_READ_KINDS:
            self.order.read(record)
        if own and kind in CONTENT_READ_KINDS:
            self.content_read.add(record)
        elif own and kind == "truncated":
            self.order.replaced(record)
            self._replaced(record)

    def bind(self, port: str) -> None:
        """A port bound by a process of the segment (whenever: a server often binds after its command returned)."""
        self.sets["ports_bound"].add(port)
        self.order.replaced(port)

    def reads_after_write(self) -> set[str]:
        return self.order.read_after_write(set().union(*(self.sets[kind] for kind in ORDER_READ_KINDS)))

    def create(self, path: str, certain: bool, kind: str, own: bool = False, replaces: bool = False) -> None:
        """`replaces`: the new content replaces what was there, if anything (a rename from outside the roots)."""
        self.sets[kind].add(path)
        if own and replaces:
            self.order.replaced(path)
        if certain:
            self.born.add(path)
            if own:  # new content (a file, a directory, a link): the verifier's own when it is the creator
                self.order.replaced(path)
                self._replaced(path)

    def remove(self, path: str, own: bool = False) -> None:
        if own:
            self.order.replaced(path)
            self._replaced(path)
        if path in self.born:
            self._forget(path)
        else:
            self.sets["deleted"].add(path)

    def rename(self, source: str, target: str, target_was_absent: bool, own: bool = False) -> None:
        if own:  # moving content of its own onto target replaces it; the source is gone either way
            self.order.replaced(source)
            self.order.replaced(target)  # whoever wrote the source: what target held before is gone
            if source in self.sets["replaced_before_read"]:
                self._replaced(target)
            self._replaced(source)
        if source in self.born:  # write-temp-then-rename: a write of target
            self._forget(source)
            self.sets["opened_for_write"].add(target)
            if target_was_absent:
                self.create(target, True, "created")
        else:
            self.renamed.append((source, target))

    def _replaced(self, path: str) -> None:
        """An own process replaced or removed `path`: unless it read it before, what it reads there now is its own."""
        if path not in self.content_read:
            self.sets["replaced_before_read"].add(path)

    def _forget(self, path: str) -> None:
        self.born.discard(path)
        for kind in PATH_KINDS:
            self.sets[kind].discard(path)


def proc_info(proc: TracedProcess) -> ProcInfo:
    return ProcInfo(proc.pid, proc.name, proc.owner)


def is_own(proc: TracedProcess, seg: Segment) -> bool:
    """Is `proc`, acting while segment `seg` is current, one of that segment's own processes (not a background job
    of an earlier command, nor the setup)? Only these make `replaced_before_read`."""
    return seg != SETUP and (seg if proc.is_shell else proc.owner) == seg


def agent_owned(proc: TracedProcess) -> bool:
    return isinstance(proc.owner, int) and not proc.is_shell


def descends_from(proc: TracedProcess, ancestor: TracedProcess) -> bool:
    while proc is not None:
        if proc is ancestor:
            return True
        proc = proc.parent
    return False

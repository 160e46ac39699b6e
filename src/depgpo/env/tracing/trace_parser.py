"""Streaming parser for the sandbox's strace log: what each agent command read, wrote, bound, started and killed.

The traced process is one persistent bash run under `strace_flags.strace_argv()`. After agent command K the shell
runs `test -e /.depgpo_mark/K/$?`; that syscall cuts the log into segments: "setup" before mark -1, segment K between
mark K-1 and mark K, and "verifier" once `begin_verifier()` is called. Feed the log in chunks of any size, from its
first line, as it grows; ask for `summary(K)` once mark K has been seen.

Attribution (docs/sandbox.md#layout):
- A process forked by the shell while segment K is current is owned by K for its whole life, with its descendants
  and threads. The shell itself (every process that has emitted a mark, so a nested `bash` too) belongs to whichever
  segment is current, so builtins and redirections (`echo > f`, `cd`) count for the running command.
- Every event also carries the segment in which it happened. An event by a process during its own segment is a main
  effect of that segment. An event by a background process during a later segment goes to its owner's `late`, and,
  when it happened while the verifier ran, also to the verifier's summary: that is how files an agent-started server
  read while answering the verifier end up in E.
- Paths are absolute and normalised. Relative paths are resolved against the calling process's cwd, which every
  `AT_FDCWD</cwd>` decoration restates and chdir/fchdir/fork keep up to date; `*at` dirfds are resolved from their
  `-y` decoration. Opened files are named by the decoration of the returned fd (symlinks resolved; the name as
  opened goes to `opened_as`); paths taken only as arguments (stat, unlink, rename, mkdir) are not canonicalised.
- A failed syscall is no effect, except failed lookups (ENOENT, ENOTDIR: `missing`) and EINPROGRESS or refused
  connects (a probe of a closed port looked at it). Calls on an open fd (fstat) are not recorded: the open was.
- Files a segment certainly created (O_EXCL, mkdir, or a path last seen absent) and removed again in the same segment
  are temporary: they vanish from that segment's summary, and renaming one onto X counts as a write of X (sed -i).
  Their order is kept too, by log position (trace_state `replaced_before_read`, trace_order `reads_after_write`).

Processes, ports and marks:
- A process is named after its last execve. Summaries are computed when asked for, so a background job that exec'd
  after its mark shows its program's name the next time. It is alive until its `+++ exited` / `+++ killed by` line
  (strace prints the latter only for signals in its `-e signal=` set).
- A port (`tcp:P`, `udp:P`, `unix:/path`) is listening while a live process holds it: the one that bound it, or a
  child forked from it that has not exec'd since (exec closes CLOEXEC sockets). Port 0 (ephemeral) is ignored.
- `kill(-PGID, sig)` is approximated by the group's leader and its descendants; `kill(0, sig)` is not resolved.
- Marks only move forward (an old one re-sent by the harness's recovery is ignored), until begin_verifier().
"""

from __future__ import annotations

import posixpath
import re
from typing import Callable

from depgpo.env.tracing.strace_flags import MARK_DIR
from depgpo.env.tracing.trace_order import LogClock
from depgpo.env.tracing.trace_state import (SETUP, VERIFIER, ProcInfo, Segment, SegmentEffects, SegmentRecord,
    TracedProcess, agent_owned, descends_from, is_own, proc_info)
from depgpo.env.tracing.trace_syntax import (AT, AT_ARGS, CHDIR, CONNECT_ATTEMPTS, CREAT, DELETE, EXEC,
    FAST_SKIP_PREFIXES, FD, FD_ARG, FD_RESULT, FILE_CALLS, LINK, LOOKUP_ERRORS, MARK_NEEDLE, MARK_RE, MKDIR, OPEN,
    PROC_PID, RENAME, STRING, SYMLINK, TRUNCATE, UNFINISHED, call_result, decoration, resolve_path, skippable_lines,
    socket_address, split_result, strace_pid, unescape)


# Lines held back for processes no clone has named yet; beyond this many, the oldest such process is read as is.
MAX_ORPHAN_LINES = 200_000


class TraceParser:
    """Incremental parser of one episode's strace log. See the module docstring for the rules.

    keep_path: which paths are tracked records (the episode's tracked roots); results are cached per path.
    shell_pid: pid of the interactive shell, if known; otherwise the shell is found by the marks it emits.
    untracked_prefixes: open/stat lines whose path string starts with one of these are skipped before parsing,
        without asking keep_path (about half of all lines). Pass () when the episode can write there (an overlay
        root) or the verifier's records may lie there. They must not cover the marks or /proc/PID.
    """

    def __init__(self, keep_path: Callable[[str], bool] = lambda p: True, shell_pid: int | None = None,
                 untracked_prefixes: tuple[str, ...] = FAST_SKIP_PREFIXES, valid_marks: set[str] | None = None):
        self._keep_path = keep_path
        # "K/NONCE" of the markers the harness typed (ShellSession.valid_marks, shared, growing): a mark whose path
        # lacks a valid nonce is a plain file call, so a command cannot cut the trace. None: any mark counts.
        self._valid_marks = valid_marks
        for prefix in untracked_prefixes:
            for needed in (MARK_DIR + "/0/0", "/proc/1/cmdline"):
                if needed.startswith(prefix):
                    raise ValueError(f"untracked_prefixes: {prefix!r} would hide {needed!r}; use narrower prefixes")
        self._skippable = skippable_lines(untracked_prefixes)
        self._kept: dict[str, bool] = {}
        self._shell_pid = shell_pid
        self._tail = ""  # an incomplete last line, completed by the next feed()
        self._line_no = 0
        self._unfinished: dict[int, tuple[int, str]] = {}  # tid -> (line, start) of a call left `<unfinished ...>`
        self._clock = LogClock()  # the lines the call being dispatched started and finished on (trace_order)
        self._procs: dict[int, TracedProcess] = {}  # live tid -> its process (the threads of a process share one)
        self._root_seen = False
        # Lines of a child printed before its parent's clone returned: replayed once the clone tells who it is.
        self._orphan_lines: dict[int, list[tuple[Segment, str, int, int]]] = {}  # (seg, call, start, end line)
        self._orphan_count = 0
        self._segments: dict[Segment, SegmentRecord] = {}
        self._current: Segment = SETUP
        self._in_verifier = False
        self._last_mark: int | None = None
        self._shell: TracedProcess | None = None  # the shell that emitted the latest mark
        self._absent: set[str] = set()  # kept paths whose latest observation was "does not exist"

    # ----- public API -----

    def feed(self, text: str) -> None:
        lines = (self._tail + text).split("\n")
        self._tail = lines.pop()
        skippable = self._skippable.match
        for line in lines:
            self._line_no += 1
            if line and not skippable(line):
                self._feed_line(line)

    def begin_verifier(self) -> None:
        """Everything fed from now on happened while the verifier ran; later marks no longer change the segment."""
        self._current = VERIFIER
        self._in_verifier = True

    def adopt_process(self, pid: int, name: str, owner: Segment) -> None:
        """A live process of another trace (an agent's, for the verifier's own trace, under the pid this trace's
        tracer sees): this trace's probes and kills of `pid` are recorded against it."""
        self._procs[pid] = TracedProcess(pid, owner, name, None, None, False)

    def last_mark(self) -> int | None:
        return self._last_mark

    def summary(self, segment: Segment) -> SegmentEffects:
        if segment != VERIFIER and not (isinstance(segment, int) and segment >= 0):
            raise ValueError(f"summary(): segment must be a command index >= 0 or {VERIFIER!r}, got {segment!r}")
        record = self._segments.get(segment) or SegmentRecord()
        if record.alive_at_end is None:  # still running (or the verifier): what is alive now
            alive = [p for p in self._live_processes() if not p.is_shell and p.owner == segment]
        else:
            alive = record.alive_at_end
        effects = SegmentEffects(**{kind: set(paths) for kind, paths in record.sets.items()})
        effects.renamed = list(record.renamed)
        effects.reads_after_write = record.reads_after_write()
        effects.spawned = [proc_info(p) for p in alive]
        effects.killed = [proc_info(p) for p in record.killed]
        effects.probed = [proc_info(p) for p in record.probed]
        effects.late = {kind: {r if isinstance(r, str) else "proc:" + r.name for r in records}
                        for kind, records in record.late.items()}
        if record.cwd_end is not None:
            effects.cwd_end = record.cwd_end
        elif self._shell is not None:
            effects.cwd_end = self._shell.cwd
        return effects

    def alive_processes(self) -> list[ProcInfo]:
        return [proc_info(p) for p in self._live_processes() if agent_owned(p)]

    def listening_ports(self) -> list[tuple[str, int]]:
        held = {(port, p.owner) for p in self._live_processes() if agent_owned(p) for port in p.ports}
        return sorted(held)

    # ----- lines -----

    def _feed_line(self, line: str) -> None:
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[0].isdigit() or not parts[1][0].isdigit():
            raise ValueError(
                f"strace log line {self._line_no} is not 'PID TIMESTAMP CALL' output of strace -f -ttt: {line[:120]!r}."
                " Run strace with depgpo.env.tracing.strace_flags.strace_argv() and feed the log from its first line.")
        tid, rest, started = int(parts[0]), parts[2], self._line_no
        if rest[0] == "<":  # "<... NAME resumed>REST": completes the call this tid left unfinished
            unfinished = self._unfinished.pop(tid, None)
            if unfinished is None:
                return
            started, rest = unfinished[0], unfinished[1] + rest[rest.index(">") + 1:]
        elif rest.endswith(UNFINISHED):
            self._unfinished[tid] = (self._line_no, rest[:-len(UNFINISHED)])
            return
        elif rest[0] == "-":  # "--- SIGTERM {...} ---": a signal delivery, not an effect
            return
        proc = self._procs.get(tid)
        if proc is None:
            if self._root_seen:
                self._orphan_lines.setdefault(tid, []).append((self._current, rest, started, self._line_no))
                self._orphan_count += 1
                if self._orphan_count > MAX_ORPHAN_LINES:
                    self._adopt(next(iter(self._orphan_lines)))
                return
            self._root_seen = True
            proc = self._procs[tid] = TracedProcess(tid, self._current, "", None, None, tid == self._shell_pid)
        self._clock.start, self._clock.end = started, self._line_no
        self._dispatch(proc, tid, self._current, rest)

    def _dispatch(self, proc: TracedProcess, tid: int, seg: Segment, rest: str) -> None:
        if rest[0] == "+":
            if rest.startswith(("+++ exited", "+++ killed")):
                self._exit(proc, tid)
            return
        paren = rest.find("(")
        name = rest[:paren]
        if name in FILE_CALLS:
            mark = MARK_RE.search(rest) if MARK_NEEDLE in rest else None
            if mark is not None and self._valid_marks is not None and f"{mark[1]}/{mark[2]}" not in self._valid_marks:
                mark = None
            if mark is not None:  # a command may name the mark directory itself: then it is a plain file call
                self._mark(proc, int(mark[1]))
                return
            shape, effect = FILE_CALLS[name]
            self._file_call(proc, seg, rest, paren + 1, shape, effect)
        elif name in _PROCESS_CALLS:
            _PROCESS_CALLS[name](self, proc, seg, rest, paren + 1)

    # ----- marks and processes -----

    def _mark(self, proc: TracedProcess, mark: int) -> None:
        proc.is_shell = True
        self._shell = proc
        if self._last_mark is not None and mark <= self._last_mark:  # re-sent by the harness's recovery
            return
        self._last_mark = mark
        if self._in_verifier:
            return
        if mark >= 0:
            ended = self._segment(mark)
            ended.cwd_end = proc.cwd
            ended.alive_at_end = [p for p in self._live_processes() if not p.is_shell and p.owner == mark]
        self._current = mark + 1

    def _clone(self, parent: TracedProcess, seg: Segment, rest: str, pos: int) -> None:
        args, result = split_result(rest)
        if not result[:1].isdigit():
            return
        child_tid = strace_pid(result)
        if child_tid in self._procs:  # a live pid: a PID namespace's own, which strace could not translate (the
            return                    # child was reaped before it printed); the child stays unknown
        if "CLONE_THREAD" in args:
            self._procs[child_tid] = parent
        else:
            owner = seg if parent.is_shell else parent.owner
            self._procs[child_tid] = TracedProcess(child_tid, owner, parent.name, parent.cwd, parent,
                                              child_tid == self._shell_pid, set(parent.ports))
        self._replay(self._procs[child_tid], child_tid, self._orphan_lines.pop(child_tid, []))

    def _adopt(self, tid: int) -> None:
        """Read the held-back lines of a process no clone named as one of their first line's segment, parent unknown."""
        orphans = self._orphan_lines.pop(tid)
        self._replay(TracedProcess(tid, orphans[0][0], "", None, None, False), tid, orphans)

    def _replay(self, proc: TracedProcess, tid: int, orphans: list[tuple[Segment, str, int, int]]) -> None:
        """Dispatch held-back lines of `proc`, each at the segment and the log position it was printed in."""
        self._procs[tid] = proc
        self._orphan_count -= len(orphans)
        for orphan_seg, orphan_rest, self._clock.start, self._clock.end in orphans:  # the clock stays at the last
            self._dispatch(proc, tid, orphan_seg, orphan_rest)

    def _exit(self, proc: TracedProcess, tid: int) -> None:
        self._procs.pop(tid, None)
        self._unfinished.pop(tid, None)
        if tid == proc.pid:
            proc.alive = False

    def _kill(self, sender: TracedProcess, seg: Segment, rest: str, pos: int) -> None:
        args, result = split_result(rest)
        if result[:1] != "0":
            return
        fields = [arg.strip() for arg in args[pos:].split(",")]
        if rest.startswith("tgkill"):  # tgkill(tgid, tid, sig)
            fields = fields[1:]
        target, signal = strace_pid(fields[0]), fields[1]
        if target is None:
            return
        if rest.startswith("kill"):
            targets = self._signal_targets(sender, target)
        else:  # tkill/tgkill name a thread
            targets = [self._procs[target]] if target in self._procs else []
        kind = "probed" if signal == "0" else "killed"
        for victim in targets:
            if agent_owned(victim) and victim is not sender:
                self._record_process(sender, seg, kind, victim)

    def _signal_targets(self, sender: TracedProcess, target: int) -> list[TracedProcess]:
        if target > 0:
            return [self._procs[target]] if target in self._procs else []
        if target == -1:
            return self._live_processes()
        if target < -1:  # a process group: approximated by its leader and the leader's descendants
            leader = self._procs.get(-target)
            return [p for p in self._live_processes() if leader is not None and descends_from(p, leader)]
        return []  # kill(0, sig): the sender's own group, whose membership the trace does not show

    def _socket_call(self, proc: TracedProcess, seg: Segment, rest: str, pos: int) -> None:
        args, result = split_result(rest)
        call = rest[:pos - 1]
        if not (result[:1] == "0" or (call == "connect" and result.startswith(CONNECT_ATTEMPTS))):
            return
        record = socket_address(call, rest, args, pos, proc.cwd)
        if record is None or (record.startswith("unix:/") and not self._keep(record[len("unix:"):])):
            return
        if call == "connect":
            self._record(proc, seg, "ports_connected", record)
            return
        proc.ports.add(record)
        owner = seg if proc.is_shell else proc.owner
        if owner != SETUP:  # a server often binds after its command returned: still that command's port
            self._segment(owner).bind(record)

    # ----- files -----

    def _file_call(self, proc: TracedProcess, seg: Segment, rest: str, pos: int, shape: str, effect: str) -> None:
        if effect == SYMLINK:  # symlink("target", ...): what the link points to is text, not an access
            pos = STRING.match(rest, pos).end() + 2
        if shape == AT:
            match = AT_ARGS.match(rest, pos)
            if match is None:
                return
            path = self._resolve_at(proc, match)
        elif shape == FD:
            match = FD_ARG.match(rest, pos)
            if match is None:
                return
            path = decoration(match[1])
        else:
            match = STRING.match(rest, pos)
            if match is None:
                return
            path = resolve_path(proc.cwd, unescape(match[1]))
        args_end = match.end()
        if not path or path[0] != "/":  # unresolvable, or an fd that is no file (`1<pipe:[1234]>`)
            return
        result_at, result = call_result(rest)
        failed = result[0] in "-?"
        if effect == CHDIR:
            if not failed:
                proc.cwd = path
            return
        if effect == EXEC and not failed:
            proc.name = posixpath.basename(path)
            proc.ports = set()  # exec closes the sockets it inherited (CLOEXEC, the common case)
        if path.startswith("/proc/"):
            if not failed:
                self._probe_path(proc, seg, path)
            return
        if failed:
            if result.startswith(LOOKUP_ERRORS) and self._keep(path):
                self._absent.add(path)
                self._record(proc, seg, "missing", path)
            return
        if effect == OPEN:
            self._open(proc, seg, path, rest[args_end:result_at], result)
        elif effect == CREAT:
            self._open(proc, seg, path, "O_WRONLY|O_CREAT|O_TRUNC", result)
        elif effect == TRUNCATE:
            if self._keep(path):
                self._record(proc, seg, "opened_for_write", path)
                if rest[args_end:result_at] == ", 0":
                    self._record(proc, seg, "truncated", path)
        elif effect == RENAME or effect == LINK:
            second = AT_ARGS.match(rest, args_end + 2) if shape == AT else STRING.match(rest, args_end + 2)
            if second is None:
                return
            target = self._resolve_at(proc, second) if shape == AT else resolve_path(proc.cwd, unescape(second[1]))
            if target is not None:
                flags = rest[second.end():result_at]
                if effect == RENAME:
                    self._rename(proc, seg, path, target, exchange="RENAME_EXCHANGE" in flags)
                else:
                    self._link(proc, seg, path, target, from_fd="AT_EMPTY_PATH" in flags)
        elif self._keep(path):
            if effect == DELETE:
                self._absent.add(path)
                self._remove(proc, seg, path)
            else:
                self._absent.discard(path)
                if effect == MKDIR:
                    self._create(proc, seg, path, certain=True, kind="dirs_created")
                elif effect == SYMLINK:
                    self._create(proc, seg, path, certain=True, kind="created")
                else:
                    self._record(proc, seg, effect, path)

    def _open(self, proc: TracedProcess, seg: Segment, path: str, flags: str, result: str) -> None:
        returned, named = FD_RESULT.match(result), path
        if returned is not None and returned[1].startswith("/"):  # the opened file, symlinks resolved
            path = decoration(returned[1])
            if path != named and self._keep(named): self._record(proc, seg, "opened_as", named)  # noqa: E701
        if "O_TMPFILE" in flags or not self._keep(path):  # an O_TMPFILE file has no name until linkat
            return
        was_absent = path in self._absent
        self._absent.discard(path)
        if "O_DIRECTORY" in flags or "O_PATH" in flags:
            self._record(proc, seg, "stats", path)
            return
        if "O_CREAT" in flags:  # creation and truncation first: a read through this fd sees the new content
            self._create(proc, seg, path, certain="O_EXCL" in flags or was_absent, kind="created")
        if "O_TRUNC" in flags:
            self._record(proc, seg, "truncated", path)
        if "O_WRONLY" not in flags:
            self._record(proc, seg, "reads", path)
        if "O_WRONLY" in flags or "O_RDWR" in flags or "O_CREAT" in flags or "O_TRUNC" in flags:
            self._record(proc, seg, "opened_for_write", path)

    def _rename(self, proc: TracedProcess, seg: Segment, source: str, target: str, exchange: bool) -> None:
        keep_source, keep_target = self._keep(source), self._keep(target)
        if exchange:  # RENAME_EXCHANGE swaps two existing files: both change content
            for path in (source, target):
                if self._keep(path):
                    self._record(proc, seg, "opened_for_write", path)
            return
        target_was_absent = target in self._absent
        if keep_source:
            self._absent.add(source)
        self._absent.discard(target)
        if keep_source and not keep_target:  # moved out of the tracked roots
            self._remove(proc, seg, source)
        elif keep_target and not keep_source:  # moved in: new content at target
            self._create(proc, seg, target, certain=target_was_absent, kind="created", replaces=True)
            self._record(proc, seg, "opened_for_write", target)
        elif keep_source and keep_target:
            main, late = self._targets(proc, seg)
            if main is not None:
                main.rename(source, target, target_was_absent, is_own(proc, seg))
            if late is not None:
                late.add_late("deleted", source)
                late.add_late("opened_for_write", target)

    def _link(self, proc: TracedProcess, seg: Segment, source: str, target: str, from_fd: bool) -> None:
        if not from_fd and self._keep(source):  # the new name shows the source's content
            self._record(proc, seg, "reads", source)
        if self._keep(target):
            self._absent.discard(target)
            self._create(proc, seg, target, certain=True, kind="created")
            self._record(proc, seg, "opened_for_write", target)

    def _probe_path(self, proc: TracedProcess, seg: Segment, path: str) -> None:
        pid = PROC_PID.match(path)
        target = self._procs.get(int(pid[1])) if pid else None
        if target is not None and target is not proc and agent_owned(target):
            self._record_process(proc, seg, "probed", target)

    # ----- routing events to segment summaries -----

    def _targets(self, proc: TracedProcess, seg: Segment) -> tuple[SegmentRecord | None, SegmentRecord | None]:
        """(summary that gets the event as a main effect, summary that gets it as `late`), either may be None."""
        owner = seg if proc.is_shell else proc.owner
        if owner == seg:
            return (None if seg == SETUP else self._segment(seg)), None
        late = self._segment(owner) if isinstance(owner, int) else None
        main = self._segment(VERIFIER) if seg == VERIFIER else None
        return main, late

    def _record(self, proc: TracedProcess, seg: Segment, kind: str, record: str) -> None:
        main, late = self._targets(proc, seg)
        if main is not None:
            main.add(kind, record, is_own(proc, seg))
        if late is not None:
            late.add_late(kind, record)

    def _create(self, proc: TracedProcess, seg: Segment, path: str, certain: bool, kind: str,
                replaces: bool = False) -> None:
        main, late = self._targets(proc, seg)
        if main is not None:
            main.create(path, certain, kind, is_own(proc, seg), replaces)
        if late is not None:
            late.add_late(kind, path)

    def _remove(self, proc: TracedProcess, seg: Segment, path: str) -> None:
        main, late = self._targets(proc, seg)
        if main is not None:
            main.remove(path, is_own(proc, seg))
        if late is not None:
            late.add_late("deleted", path)

    def _record_process(self, proc: TracedProcess, seg: Segment, kind: str, target: TracedProcess) -> None:
        """Processes are kept, not their names: a job killed or probed before it exec'd gets its program's name."""
        main, late = self._targets(proc, seg)
        if main is not None:
            getattr(main, kind).setdefault(target)
        if late is not None:
            late.add_late(kind, target)

    # ----- helpers -----

    def _segment(self, label: Segment) -> SegmentRecord:
        record = self._segments.get(label)
        if record is None:
            record = self._segments[label] = SegmentRecord(self._clock)
        return record

    def _keep(self, path: str) -> bool:
        kept = self._kept.get(path)
        if kept is None:
            kept = self._kept[path] = bool(self._keep_path(path))
        return kept

    def _live_processes(self) -> list[TracedProcess]:
        unique = {p.pid: p for p in self._procs.values() if p.alive}
        return [unique[pid] for pid in sorted(unique)]

    def _resolve_at(self, proc: TracedProcess, match: re.Match) -> str | None:
        dirfd, directory, path = match[1], match[2], match[3]
        if directory is not None:
            directory = decoration(directory)
            if dirfd == "AT_FDCWD":
                proc.cwd = directory  # free cwd tracking
        elif dirfd == "AT_FDCWD":
            directory = proc.cwd
        if not path:  # NULL or "" with AT_EMPTY_PATH: the fd itself
            return directory
        return resolve_path(directory, unescape(path))


_PROCESS_CALLS = {**dict.fromkeys(("clone", "clone3", "fork", "vfork"), TraceParser._clone),
                  **dict.fromkeys(("kill", "tkill", "tgkill"), TraceParser._kill),
                  **dict.fromkeys(("bind", "listen", "connect"), TraceParser._socket_call)}

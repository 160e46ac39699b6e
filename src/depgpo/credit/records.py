"""From a trajectory dict (docs/trajectory-schema.md) to what each command read and wrote (docs/credit.md#resources).

`parse_episode` checks every field it uses and raises `TrajectoryError` naming the first bad one, so the credit
code after it works on typed, in-scope records only: per command its read set R(c) and write set W(c), the
verifier records E, and the state the verifier saw.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from depgpo.credit.config import CreditConfig
from depgpo.trajectory.load import TrajectoryError, check_header
from depgpo.trajectory.load import field as _get
from depgpo.trajectory.load import items as _items
from depgpo.trajectory.schema import MAX_TURNS
from depgpo.trajectory.scope import GLOB_CHARS, handoff_paths, record_root


@dataclass(frozen=True)
class FileWrite:
    path: str
    # The lines this command wrote (a multiset); None when the write is scored at record level (binary or large
    # file, or a line-tracked write that wrote no line, such as `touch` or a pure line deletion).
    lines: tuple[str, ...] | None
    content_after: tuple[str, ...] | None  # None when the file is not line-tracked after the write
    hash_after: str | None

    @property
    def weight(self) -> int:
        """n(c, x) of docs/credit.md#direct-contribution: the number of lines written, 1 for a record-level write."""
        return len(self.lines) if self.lines is not None else 1

    @cached_property
    def rewrites_whole(self) -> bool:
        """The write replaced the file's content: it wrote every line the file holds after it (a file scored at
        record level is followed as a whole, so any write to it does). A `touch` or a pure line deletion does not."""
        if self.content_after is None:
            return True
        return self.lines is not None and Counter(self.lines) == Counter(self.content_after)

    @cached_property
    def line_set(self) -> frozenset[str]:
        return frozenset(self.lines or ())

    @cached_property
    def content_set(self) -> frozenset[str]:
        return frozenset(self.content_after or ())


@dataclass(frozen=True)
class Process:
    pid: int | None
    name: str

    @property
    def record(self) -> str:
        return f"proc:{self.name}"


@dataclass(frozen=True)
class Command:
    index: int
    turn: int
    text: str
    observation: str
    # Tracked files opened for reading, executed or stat'ed (an existence check reads), and ports connected to; with
    # `order_within_command`, not those it read only after it had replaced them itself (reads_after_write)
    file_reads: frozenset[str]
    ports_connected: tuple[str, ...]
    probed_owners: tuple[int, ...]  # commands whose processes this one inspected through /proc
    writes: tuple[FileWrite, ...]  # tracked files only
    deletions: tuple[str, ...]  # tracked paths only
    ports_bound: tuple[str, ...]
    processes: tuple[Process, ...]  # started here and still alive when the command returned
    killed_pids: tuple[int, ...]

    @property
    def is_write(self) -> bool:
        """Member of C_w: a non-empty tracked write set, deletions and started processes included (docs/credit.md#effects)."""
        return bool(self.writes or self.deletions or self.ports_bound or self.processes)

    @property
    def written_text(self) -> str:
        """The content this command wrote to line-tracked files (a target of information edges, docs/credit.md#information-edges)."""
        return "\n".join(line for write in self.writes for line in write.lines or ())


@dataclass(frozen=True)
class FinalFile:
    exists: bool
    lines: tuple[str, ...] | None
    hash: str | None


@dataclass
class FinalState:
    """What the verifier found: file contents, and which command's processes and ports were still up."""

    files: dict[str, FinalFile] = field(default_factory=dict)
    alive: set[tuple[int, int | None, str]] = field(default_factory=set)  # (owner command, pid, name)
    listening: set[tuple[str, int]] = field(default_factory=set)  # (port record, owner command)

    def process_alive(self, owner: int, process: Process) -> bool:
        """Is a process that command `owner` started still up? Matched by pid when both sides know it."""
        for alive_owner, pid, name in self.alive:
            if alive_owner != owner:
                continue
            if pid is not None and process.pid is not None:
                if pid == process.pid:
                    return True
            elif name == process.name:
                return True
        return False


class VerifierRecords:
    """The set E: exact records, plus the globs that static extraction from the verifier's source may yield."""

    def __init__(self, records: list[str]):
        globs = [record for record in records if GLOB_CHARS.search(record)]
        self.records = frozenset(records)  # a glob is also kept verbatim: a file may be named `a[1].txt`
        self._glob = re.compile("|".join(fnmatch.translate(glob) for glob in globs)) if globs else None
        # Directories that hold a file record (for a glob, the directory above its first wildcard; never `/`).
        self.directories = sorted({record_root(record) for record in records if record.startswith("/")} - {None})

    def __contains__(self, record: str) -> bool:
        return record in self.records or (self._glob is not None and self._glob.match(record) is not None)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.records))


class TrackedScope:
    """docs/credit.md#tracked-scope: file records count under the tracked roots and the directories that hold a verifier record; the
    system and cache exclusions apply only beneath the deepest of these that holds the path, so a verifier record
    in /opt/svc makes /opt/svc tracked while /app/__pycache__ stays untracked."""

    def __init__(self, roots: list[str], verifier_dirs: list[str], config: CreditConfig,
                 handoffs: frozenset[str] = frozenset()):
        self.anchors = sorted({_as_prefix(directory) for directory in roots + verifier_dirs}, key=len, reverse=True)
        self.excluded = [_as_prefix(prefix) for prefix in config.untracked_prefixes]
        self.excluded_names = frozenset(config.untracked_dir_names)
        self.handoffs = handoffs  # files one agent command wrote and a later one read (config `track_handoffs`)
        self._cache: dict[str, bool] = {}

    def __contains__(self, path: str) -> bool:
        if path not in self._cache:
            self._cache[path] = self._tracked(path)
        return self._cache[path]

    def _tracked(self, path: str) -> bool:
        probe = _as_prefix(path)
        anchor = next((anchor for anchor in self.anchors if probe.startswith(anchor)), None)
        if anchor is None:
            return path in self.handoffs and not any(probe.startswith(prefix) for prefix in self.excluded) \
                and self.excluded_names.isdisjoint(path.split("/"))
        if any(probe.startswith(prefix) and len(prefix) > len(anchor) for prefix in self.excluded):
            return False
        return self.excluded_names.isdisjoint(path[len(anchor):].split("/"))


def _as_prefix(path: str) -> str:
    return path.rstrip("/") + "/"


@dataclass
class EpisodeRecords:
    """One trajectory as the credit reads it: typed, in-scope records only."""

    instruction: str
    commands: list[Command]
    num_turns: int
    verifier: VerifierRecords  # E
    verifier_source: str  # how E was obtained: "trace", "static" or "none"
    final: FinalState


# ---- parsing --------------------------------------------------------------------------------------------------

def parse_episode(trajectory: Any, config: CreditConfig, num_turns: int | None = None) -> EpisodeRecords:
    if not isinstance(trajectory, dict):
        raise TrajectoryError("trajectory", f"expected an object, got {type(trajectory).__name__}")
    check_header(trajectory)
    verifier = _get(trajectory, "verifier", dict, "")
    verifier_records = VerifierRecords(_items(verifier, "E", str, "verifier"))
    raw_commands = _get(trajectory, "commands", list, "")
    handoffs = handoff_paths(raw_commands, config.order_within_command) if config.track_handoffs else frozenset()
    scope = TrackedScope(_tracked_roots(trajectory, config), verifier_records.directories, config, handoffs)
    commands = [_parse_command(raw, index, scope, config) for index, raw in enumerate(raw_commands)]
    return EpisodeRecords(
        instruction=_get(trajectory, "instruction", str, "", ""),
        commands=commands,
        num_turns=_count_turns(commands, num_turns),
        verifier=verifier_records,
        verifier_source=_get(verifier, "E_source", str, "verifier", "unknown"),
        final=_final_state(trajectory, commands, scope),
    )


def _tracked_roots(trajectory: dict, config: CreditConfig) -> list[str]:
    if config.tracked_roots is not None:
        return list(config.tracked_roots)
    roots = _items(trajectory, "tracked_roots", str, "")
    if roots:
        return roots
    return [_get(trajectory, "workdir", str, "", "/")]


def _count_turns(commands: list[Command], num_turns: int | None) -> int:
    last_turn = max((command.turn for command in commands), default=-1)
    if num_turns is None:
        return last_turn + 1
    if isinstance(num_turns, bool) or not isinstance(num_turns, int) or not 0 <= num_turns <= MAX_TURNS:
        raise TrajectoryError("num_turns", f"expected an integer in [0, {MAX_TURNS}], got {num_turns!r}")
    if last_turn >= num_turns:
        raise TrajectoryError("num_turns", f"{num_turns} turns, but a command belongs to turn {last_turn}")
    return num_turns


def _parse_command(raw: Any, index: int, scope: TrackedScope, config: CreditConfig) -> Command:
    where = f"commands[{index}]"
    if not isinstance(raw, dict):
        raise TrajectoryError(where, f"expected an object, got {type(raw).__name__}")
    turn = _get(raw, "turn", int, where)
    if not 0 <= turn < MAX_TURNS:
        raise TrajectoryError(f"{where}.turn", f"must lie in [0, {MAX_TURNS}), got {turn}")
    reads = _items(raw, "reads", str, where) + _items(raw, "stats", str, where)
    # docs/credit-decisions.md#d-order: what the command read after replacing it itself was its own
    own = frozenset(_items(raw, "reads_after_write", str, where)) if config.order_within_command else frozenset()
    writes = [_parse_write(item, f"{where}.writes[{position}]", config)
              for position, item in enumerate(_items(raw, "writes", dict, where))]
    started = [Process(_get(item, "pid", int, f"{where}.processes_started[{position}]", None),
                       _get(item, "name", str, f"{where}.processes_started[{position}]"))
               for position, item in enumerate(_items(raw, "processes_started", dict, where))
               if _get(item, "alive_after", bool, f"{where}.processes_started[{position}]", True)]
    probed = [_get(item, "owner", int, f"{where}.processes_probed[{position}]", -1)
              for position, item in enumerate(_items(raw, "processes_probed", dict, where))]
    killed = [_get(item, "pid", int, f"{where}.processes_killed[{position}]", -1)
              for position, item in enumerate(_items(raw, "processes_killed", dict, where))]
    return Command(
        index=index,
        turn=turn,
        text=_get(raw, "text", str, where),
        observation=_get(raw, "observation", str, where, ""),
        file_reads=frozenset(path for path in reads if path in scope and path not in own),
        ports_connected=tuple(port for port in _items(raw, "ports_connected", str, where) if port not in own),
        probed_owners=tuple(owner for owner in probed if 0 <= owner < index),
        writes=tuple(write for write in writes if write.path in scope),
        deletions=tuple(path for path in _items(raw, "deletions", str, where) if path in scope),
        ports_bound=tuple(_items(raw, "ports_bound", str, where)),
        processes=tuple(started),
        killed_pids=tuple(pid for pid in killed if pid >= 0),
    )


def _parse_write(raw: dict, where: str, config: CreditConfig) -> FileWrite:
    path = _get(raw, "path", str, where)
    hash_after = _get(raw, "hash_after", str, where, None)
    content = _items(raw, "content_after", str, where) if raw.get("content_after") is not None else None
    written = _items(raw, "lines_written", str, where)
    if content is None or not _get(raw, "text", bool, where, False) or not _within_text_limits(content, config):
        return FileWrite(path, None, None, hash_after)
    return FileWrite(path, tuple(written) or None, tuple(content), hash_after)


def _within_text_limits(lines: list[str], config: CreditConfig) -> bool:
    if len(lines) > config.text_max_lines:
        return False
    return sum(len(line.encode("utf-8", "surrogatepass")) + 1 for line in lines) <= config.text_max_bytes


def _final_state(trajectory: dict, commands: list[Command], scope: TrackedScope) -> FinalState:
    """The recorded `final` state; what it lacks is replayed from the commands (last write or deletion wins)."""
    state = _replay(commands)
    recorded = _get(trajectory, "final", dict, "", {})
    for path, raw in _get(recorded, "files", dict, "final", {}).items():
        where = f"final.files[{path!r}]"
        if not isinstance(raw, dict):
            raise TrajectoryError(where, f"expected an object, got {type(raw).__name__}")
        if path in scope:
            lines = _items(raw, "lines", str, where) if raw.get("lines") is not None else None
            state.files[path] = FinalFile(_get(raw, "exists", bool, where),
                                          tuple(lines) if lines is not None else None,
                                          _get(raw, "hash", str, where, None))
    if recorded.get("alive_processes") is not None:
        state.alive = {(_get(item, "owner", int, f"final.alive_processes[{position}]", -1),
                        _get(item, "pid", int, f"final.alive_processes[{position}]", None),
                        _get(item, "name", str, f"final.alive_processes[{position}]", ""))
                       for position, item in enumerate(_items(recorded, "alive_processes", dict, "final"))}
    if recorded.get("listening_ports") is not None:
        state.listening = {(_get(item, "port", str, f"final.listening_ports[{position}]"),
                            _get(item, "owner", int, f"final.listening_ports[{position}]", -1))
                           for position, item in enumerate(_items(recorded, "listening_ports", dict, "final"))}
    return state


def _replay(commands: list[Command]) -> FinalState:
    state = FinalState()
    for command in commands:
        for write in command.writes:
            state.files[write.path] = FinalFile(True, write.content_after, write.hash_after)
        for path in command.deletions:
            state.files[path] = FinalFile(False, None, None)
        state.alive = {entry for entry in state.alive if entry[1] not in command.killed_pids}
        state.alive |= {(command.index, process.pid, process.name) for process in command.processes}
    owners_alive = {owner for owner, _, _ in state.alive}
    state.listening = {(port, command.index) for command in commands for port in command.ports_bound
                       if command.index in owners_alive}
    return state

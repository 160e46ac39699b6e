"""The simulated filesystem: what a shell session's command texts reveal about each path, and the file records
(reads, existence checks, writes, deletions) of the command running now.

A path the trajectory has not touched yet is assumed absent when a command writes it, and present with unknown
content once a command reads it. Content is known only where the text fixes it (echo, printf, heredocs, copies of
known files); any other write gets the hash `unknown:<command index>`, so the credit scores it at record level.
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
from dataclasses import dataclass, field

from depgpo.trajectory.schema import CommandEffects, WriteRecord
from depgpo.trajectory.scope import PSEUDO_DIRS, is_under, text_fits


@dataclass(frozen=True)
class SimulatedFile:
    """What the simulation knows of a path: existence, content when known, and a content hash."""

    exists: bool
    content: str | None = None  # None: a directory, or content the text does not reveal
    hash: str | None = None  # "sha256:…", "dir", or "unknown:…"; None when the path is absent
    is_dir: bool = False


ABSENT = SimulatedFile(exists=False)
DIRECTORY = SimulatedFile(exists=True, hash="dir", is_dir=True)


def content_hash(content: str) -> str:
    return "sha256:" + hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


def content_lines(content: str) -> list[str]:
    lines = content.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def is_line_tracked(content: str) -> bool:
    return text_fits(len(content.encode("utf-8", "surrogatepass")), content.count("\n"))


def _changed_lines(before: list[str], after: list[str]) -> list[str]:
    """The inserted or replaced lines of a line diff: what an edit (rather than a rewrite) wrote."""
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    return [line for tag, _, _, start, end in matcher.get_opcodes() if tag in ("insert", "replace")
            for line in after[start:end]]


@dataclass
class _FileRecords:
    """One command's file records, collected while it runs (dicts as ordered sets)."""

    index: int
    reads: dict[str, None] = field(default_factory=dict)
    stats: dict[str, None] = field(default_factory=dict)
    before: dict[str, SimulatedFile | None] = field(default_factory=dict)  # each path written or deleted
    written: dict[str, None] = field(default_factory=dict)
    rewritten: set[str] = field(default_factory=set)  # truncated at least once: lines_written is the whole content
    deleted: dict[str, None] = field(default_factory=dict)
    replaced: set[str] = field(default_factory=set)  # rewritten whole, made or deleted so far, in the text's order
    read_first: set[str] = field(default_factory=set)  # read or stat'ed before this command replaced it


class Filesystem:
    """The paths one shell session has touched. Operations take absolute paths; None (a path the text does not
    determine) and pseudo-files (`scope.PSEUDO_DIRS`) are ignored."""

    def __init__(self) -> None:
        self.files: dict[str, SimulatedFile] = {}
        self._command = _FileRecords(0)

    def start_command(self, index: int) -> None:
        self._command = _FileRecords(index)

    def state_of(self, path: str) -> SimulatedFile:
        return self.files.get(path, ABSENT)

    # ---- operations --------------------------------------------------------------------------------------------

    def read(self, path: str | None) -> str | None:
        """Record a read; returns the content when the simulation knows it."""
        if not _is_real_file(path):
            return None
        self._looked_at(path)
        self._command.reads[path] = None
        version = self.files.get(path)
        if version is None:  # never touched: it must exist already, with content we do not know
            self.files[path] = SimulatedFile(exists=True, hash=f"unknown:initial:{path}")
            return None
        return version.content

    def stat(self, path: str | None) -> None:
        if _is_real_file(path):
            self._looked_at(path)
            self._command.stats[path] = None

    def write(self, path: str | None, content: str | None, append: bool = False,
              known_hash: str | None = None) -> None:
        """Write `content` (None: unknown) to a file; cp and mv pass the source's hash, known even when its
        content is not."""
        if not _is_real_file(path):
            return
        self._remember_before(path)
        self._know_parents(path)
        current = self.state_of(path)
        if append and current.exists:
            content = current.content + content if current.content is not None and content is not None else None
        else:
            self._command.rewritten.add(path)
            self._command.replaced.add(path)
        if known_hash is None:
            known_hash = content_hash(content) if content is not None else f"unknown:{self._command.index}"
        self.files[path] = SimulatedFile(exists=True, content=content, hash=known_hash)
        self._command.written[path] = None

    def make_dir(self, path: str | None) -> None:
        if not _is_real_file(path) or self.state_of(path).exists:
            return
        self._remember_before(path)
        self._know_parents(path)
        self.files[path] = DIRECTORY
        self._command.written[path] = None
        self._command.replaced.add(path)

    def delete(self, path: str | None, recursive: bool) -> None:
        if not _is_real_file(path):
            return
        version = self.files.get(path)
        if version is not None and (not version.exists or (version.is_dir and not recursive)):
            return  # already gone, or a directory `rm` without -r refuses
        for doomed in [*self._inside(path), path]:
            self._remember_before(doomed)
            self.files[doomed] = ABSENT
            self._command.deleted[doomed] = None
            self._command.replaced.add(doomed)

    def transfer(self, source: str, target: str, move: bool) -> None:
        """cp / mv of a file, or of a directory with what the simulation knows it holds."""
        pairs = [(source, target)] + [(inner, target + inner[len(source):]) for inner in self._inside(source)]
        for origin, copy in pairs:
            if self.state_of(origin).is_dir:
                self.stat(origin)  # a directory is listed, not read
                self.make_dir(copy)
                continue
            content = self.read(origin)
            version = self.state_of(origin)
            if version.exists:  # not deleted earlier, nor a pseudo-file such as /dev/null
                self.write(copy, content, known_hash=version.hash)
        if move:
            self.delete(source, recursive=True)

    def _looked_at(self, path: str) -> None:
        """A read or an existence check: of the version the command found unless it replaced the path before."""
        if path not in self._command.replaced:
            self._command.read_first.add(path)

    def _remember_before(self, path: str) -> None:
        self._command.before.setdefault(path, self.files.get(path))

    def _know_parents(self, path: str) -> None:
        """A path that gets written lies in directories: remember them (not as writes: they may have existed)."""
        parent = posixpath.dirname(path)
        while parent != "/" and not self.state_of(parent).is_dir:
            self.files[parent] = DIRECTORY
            parent = posixpath.dirname(parent)

    def _inside(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return [p for p, v in self.files.items() if p.startswith(prefix) and v.exists]

    # ---- the command's records ---------------------------------------------------------------------------------

    def add_records(self, effects: CommandEffects) -> None:
        """The running command's reads, stats, writes and deletions, into `effects`."""
        command = self._command
        effects["reads"] = list(command.reads)
        effects["stats"] = list(command.stats)
        # docs/credit-decisions.md#d-order: read only after the command's own whole write, in the text's order
        effects["reads_after_write"] = [path for path in dict.fromkeys([*command.reads, *command.stats])
                                        if path not in command.read_first]
        for path, before in command.before.items():
            after = self.state_of(path)
            existed = before is not None and before.exists
            # An untouched path that the command itself created and removed was a temporary file, not a deletion.
            existed_or_unknown = existed or (before is None and path not in command.written)
            if path in command.deleted and existed_or_unknown:
                effects["deletions"].append(path)
            if path in command.written and after.exists:
                effects["writes"].append(_write_record(path, before, after, command))


def _is_real_file(path: str | None) -> bool:
    return path is not None and not is_under(path, PSEUDO_DIRS)


def _write_record(path: str, before: SimulatedFile | None, after: SimulatedFile,
                  command: _FileRecords) -> WriteRecord:
    created = before is None or not before.exists or path in command.deleted
    if after.content is None or not is_line_tracked(after.content):
        return WriteRecord(path=path, created=created, text=False, lines_written=[], content_after=None,
                           hash_after=after.hash)
    content_after = content_lines(after.content)
    if created or path in command.rewritten or before is None or before.content is None:
        lines_written = content_after  # a full rewrite writes every line
    else:
        lines_written = _changed_lines(content_lines(before.content), content_after)
    return WriteRecord(path=path, created=created, text=True, lines_written=lines_written,
                       content_after=content_after, hash_after=after.hash)

"""Write credit (docs/credit.md#write-credit): how much of what a write command produced reaches the verifier records E, directly or
through later write commands that used it.

Readings this module had to choose, beyond the definition's text:
- A deletion is no G_E source: a deleted record holds no content, so `rm x` before a write that stats `x` earns
  nothing from it (otherwise Table 14 t6 would inherit t7's credit).
- A connect to a port reads the version written by the latest earlier command that bound it; a /proc probe reads
  the process record of the command that started the probed process.
- Within one command, its deletions happen before its writes (`rm x && echo y > x`; a command's own temporary
  files never reach the trace).
- A line-tracked write that wrote no line (`touch`, a pure line deletion) is scored at record level with n = 1.
- A record a command read only after it had replaced it whole itself (`reads_after_write`) is no read: records.py
  leaves it out of the command's reads (`order_within_command`, docs/credit-decisions.md#d-order).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from depgpo.credit.config import CreditConfig
from depgpo.credit.records import Command, EpisodeRecords, FileWrite, VerifierRecords


@dataclass
class WriteCredit:
    direct: list[float]
    indirect: list[float]
    contrib: list[float]  # Contrib(c) = max(direct(c), indirect(c))
    deleted_later: list[bool]  # a later command deleted a file this command wrote
    # G: (c, r) when command r read a version of a record that still held content c wrote. The edges into write
    # commands form G_E.
    dependency_edges: list[tuple[int, int]]
    verifier_edges: list[tuple[int, str, float]]  # (c, record of W(c) ∩ E, surv(c, record))


def verifier_records(episode: EpisodeRecords, config: CreditConfig) -> VerifierRecords:
    """E; without verifier filtering (Table 2), every record an agent command wrote that the final state holds."""
    if config.variant != "no_verifier_filter":
        return episode.verifier
    final, present = episode.final, set()
    for command in episode.commands:
        present.update(write.path for write in command.writes
                       if write.path in final.files and final.files[write.path].exists)
        present.update(port for port in command.ports_bound if (port, command.index) in final.listening)
        present.update(process.record for process in command.processes
                       if final.process_alive(command.index, process))
    return VerifierRecords(sorted(present))


def write_credit(episode: EpisodeRecords, verifier: VerifierRecords, config: CreditConfig) -> WriteCredit:
    history = _FileHistory(episode.commands, reset_on_rewrite=config.survival_after_rewrite == "reset")
    direct, verifier_edges = [], []
    for command in episode.commands:
        records = list(_records_in_verifier(command, verifier, history, episode))
        verifier_edges += [(command.index, record, survival) for record, _, survival in records]
        direct.append(_direct(records, config))
    sources = _dependency_sources(episode.commands, history)
    # Every G_E edge points forward in time, so one pass in reverse order sees each Contrib(w) before its sources.
    gamma = 0.0 if config.variant == "direct_only" else config.indirect_decay
    best_successor = [0.0] * len(episode.commands)
    indirect, contrib = [0.0] * len(direct), [0.0] * len(direct)
    for w in reversed(range(len(direct))):
        indirect[w] = gamma * best_successor[w]
        contrib[w] = max(direct[w], indirect[w])
        if episode.commands[w].is_write:  # an edge of G_E
            for c in sources[w]:
                best_successor[c] = max(best_successor[c], contrib[w])
    return WriteCredit(
        direct=direct,
        indirect=indirect,
        contrib=contrib,
        deleted_later=[any(history.deleted_after(write.path, command.index) for write in command.writes)
                       for command in episode.commands],
        dependency_edges=[(c, r) for r in range(len(direct)) for c in sources[r]],
        verifier_edges=verifier_edges,
    )


def _direct(records: list[tuple[str, int, float]], config: CreditConfig) -> float:
    """direct(c) = Σ surv·n / Σ n over W(c) ∩ E, 0 when that is empty; binary: 1 when D_c is non-empty."""
    if config.variant == "binary_write":
        qualifying = [survival for _, _, survival in records if survival > 0 or not config.binary_requires_survival]
        return 1.0 if qualifying else 0.0
    total = sum(weight for _, weight, _ in records)
    return sum(weight * survival for _, weight, survival in records) / total if total else 0.0


class _FileHistory:
    """Per tracked path, the writes and deletions in command order (a deletion is stored as None)."""

    def __init__(self, commands: list[Command], reset_on_rewrite: bool = False):
        self.reset_on_rewrite = reset_on_rewrite
        self.events: dict[str, list[tuple[int, FileWrite | None]]] = defaultdict(list)
        for command in commands:
            for path in command.deletions:
                self.events[path].append((command.index, None))
            for write in command.writes:
                self.events[write.path].append((command.index, write))
        self._indices = {path: [index for index, _ in events] for path, events in self.events.items()}
        self._last_deletion = {path: max((index for index, event in events if event is None), default=-1)
                               for path, events in self.events.items()}
        self._last_writer = {path: max((index for index, event in events if event is not None), default=-1)
                             for path, events in self.events.items()}
        self._last_whole = {path: max((index for index, event in events if event is not None and event.rewrites_whole),
                                      default=-1) for path, events in self.events.items()}
        self._holders: dict[tuple[str, int], list[int]] = {}

    def deleted_after(self, path: str, index: int) -> bool:
        return self._last_deletion.get(path, -1) > index

    def replaced_after(self, path: str, index: int) -> bool:
        """With survival_after_rewrite = "reset": a later command deleted `path` or rewrote it whole."""
        return self.deleted_after(path, index) or (self.reset_on_rewrite and self._last_whole.get(path, -1) > index)

    def last_writer(self, path: str) -> int:
        return self._last_writer.get(path, -1)

    def holders_before(self, path: str, index: int) -> list[int]:
        """Commands whose content the version of `path` seen by command `index` still held: at line level those
        with at least one of their lines in it (by content), at record level its latest writer."""
        cut = bisect.bisect_left(self._indices.get(path, []), index)
        if (path, cut) not in self._holders:
            self._holders[path, cut] = self._holders_of_version(self.events.get(path, [])[:cut], self.reset_on_rewrite)
        return self._holders[path, cut]

    @staticmethod
    def _holders_of_version(events: list[tuple[int, FileWrite | None]], reset_on_rewrite: bool) -> list[int]:
        if not events or events[-1][1] is None:
            return []
        latest_index, latest = events[-1]
        if latest.content_after is None:
            return [latest_index]
        holders = {latest_index}
        for index, write in reversed(events):
            if write is None:  # nothing written before a deletion survives it
                break
            if write.lines is not None and not write.line_set.isdisjoint(latest.content_set):
                holders.add(index)
            if reset_on_rewrite and write.rewrites_whole:  # what came before it was replaced
                break
        return sorted(holders)


def _records_in_verifier(command: Command, verifier: VerifierRecords, history: _FileHistory,
                         episode: EpisodeRecords) -> Iterator[tuple[str, int, float]]:
    """(record, n(c, x), surv(c, x)) for each record x of W(c) ∩ E."""
    final = episode.final
    for write in command.writes:
        if write.path in verifier:
            yield write.path, write.weight, _file_survival(command.index, write, history, episode)
    for path in command.deletions:
        if path in verifier:
            yield path, 1, _deletion_survival(command.index, path, history, episode)
    for port in command.ports_bound:
        if port in verifier:
            yield port, 1, 1.0 if (port, command.index) in final.listening else 0.0
    for process in command.processes:
        if process.record in verifier:
            yield process.record, 1, 1.0 if final.process_alive(command.index, process) else 0.0


def _deletion_survival(index: int, path: str, history: _FileHistory, episode: EpisodeRecords) -> float:
    """A deletion counts when the verifier inspects the path and finds it absent (docs/credit.md#survival)."""
    final = episode.final.files.get(path)
    absent = final is not None and not final.exists
    return 1.0 if absent and history.last_writer(path) < index else 0.0


def _file_survival(index: int, write: FileWrite, history: _FileHistory, episode: EpisodeRecords) -> float:
    if history.replaced_after(write.path, index):  # even if the file was recreated later (Table 14 t4)
        return 0.0
    final = episode.final.files.get(write.path)
    if final is None or not final.exists:
        return 0.0
    if write.lines is not None and final.lines is not None:
        held = Counter(write.lines) & Counter(final.lines)
        return sum(held.values()) / len(write.lines)
    if history.last_writer(write.path) == index:
        return 1.0
    return 1.0 if final.hash is not None and final.hash == write.hash_after else 0.0


def _dependency_sources(commands: list[Command], history: _FileHistory) -> list[list[int]]:
    """For every command, the commands whose content it read: files (opened, executed or stat'ed), a port they
    bound (connect), a process they started (/proc probe)."""
    binders: dict[str, list[int]] = defaultdict(list)
    for command in commands:
        for port in command.ports_bound:
            binders[port].append(command.index)
    all_sources = []
    for reader in commands:
        sources = set()
        for path in reader.file_reads:
            sources.update(history.holders_before(path, reader.index))
        for port in reader.ports_connected:
            cut = bisect.bisect_left(binders.get(port, []), reader.index)
            if cut:
                sources.add(binders[port][cut - 1])
        sources.update(owner for owner in reader.probed_owners if commands[owner].processes)
        all_sources.append(sorted(sources))
    return all_sources

"""The order of one segment's own reads and whole replacements, by position in the strace log.

A segment's effects are sets (trace_state.SegmentRecord), so `cat > f <<EOF … EOF; cat f` would read as a read of
`f` as the command found it. This module keeps, per record, where in the log the segment's own processes first
read it and first replaced it whole, and says which records the segment read only after it had replaced them
itself (`SegmentEffects.reads_after_write`, docs/credit-decisions.md#d-order): what such a read saw was the
segment's own content, not an earlier command's.

- A read: open for reading, exec, getdents, stat/access, a failed lookup (file records); a connect (ports).
- A whole replacement: truncation (O_TRUNC, creat, truncate to 0), a creation of a path certainly absent before
  (O_EXCL, mkdir, link, symlink, or last seen absent), an unlink or rmdir, a rename onto the path or away from it
  (file records); a bind (ports). An append or an in-place write replaces nothing: a read after it still sees what
  earlier commands wrote.
- Positions are line numbers of the log, in every process of the segment alike (a child's read after its
  parent's write, or after a sibling's). strace -f prints a call on one line when no other process's event came
  between its entry and its exit, else as `<unfinished ...>` and `<... resumed>` lines, and the call's effect falls
  between the two. So a read counts as after a replacement only when it started (its first line) after the
  replacement had finished (its last line); calls that overlapped, in processes that ran side by side (`cat f |
  sort > f`), keep the read, as the sets did. Lines held back for a process no clone had named yet keep the
  positions they were printed at.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# SegmentEffects fields whose records a segment reads (a content read, an existence check, a connect).
ORDER_READ_KINDS = ("reads", "executed", "listed", "stats", "missing", "ports_connected")


@dataclass
class LogClock:
    """Where the call being dispatched lies in the log: the line it started on and the line it finished on."""

    start: int = 0
    end: int = 0


class SegmentOrder:
    """First own read and first own whole replacement of each record in one segment, as log positions."""

    def __init__(self, clock: LogClock):
        self._clock = clock
        self._first_read: dict[str, int] = {}
        self._first_replaced: dict[str, int] = {}

    def read(self, record: str) -> None:
        self._first_read[record] = min(self._first_read.get(record, self._clock.start), self._clock.start)

    def replaced(self, record: str) -> None:
        self._first_replaced[record] = min(self._first_replaced.get(record, self._clock.end), self._clock.end)

    def read_after_write(self, records: Iterable[str]) -> set[str]:
        """Those of `records` that every own read of came after the segment's own first whole replacement."""
        return {record for record in records if record in self._first_read and record in self._first_replaced
                and self._first_replaced[record] < self._first_read[record]}

"""Walks of trees the agent made (the episode's writable directories, its upper layers, the verifier's /logs).

Every such walk in the harness goes through `TreeWalk`: iterative (os.walk and pathlib's rglob recurse in Python
3.11, and a 1,100-deep directory chain under /usr/local/share ended the verify step in a RecursionError), bounded
(at most `max_entries` entries), never following a symlink, and never silent about what it could not see: a
directory it could not list (its path longer than PATH_MAX, unreadable to a rootless harness) or the part it left
unwalked past its bound is in `skipped`, for the caller to record and to treat as unknown.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from typing import Iterator

# Far above the default disk_inodes (1,000,000), which bounds every tree of an episode anyway: a walk that stops
# here has met a file system the episode's inode limit does not bound, and says so.
WALK_MAX_ENTRIES = 4_000_000
TRUNCATED = "not walked: the walk's bound of entries was reached"


@dataclass
class TreeWalk:
    """`for entry in TreeWalk(top)`: os.DirEntry of everything below `top` (directories included, `top` itself
    not), depth first. A `top` that does not exist is an empty tree."""

    top: str
    max_entries: int = WALK_MAX_ENTRIES
    skipped: dict[str, str] = field(default_factory=dict)  # directory -> why it was not listed (TRUNCATED: the
    #                                                         rest of the tree below it, from there on)

    def __iter__(self) -> Iterator[os.DirEntry]:
        stack, count = [self.top], 0
        while stack:
            directory = stack.pop()
            try:
                with os.scandir(directory) as it:
                    entries = list(it)
            except FileNotFoundError:
                continue  # vanished meanwhile (a process of the episode still runs), or no tree at all
            except OSError as e:
                if directory != self.top or e.errno != errno.ENOTDIR:
                    self.skipped[directory] = os.strerror(e.errno) if e.errno else str(e)
                continue
            for entry in entries:
                if count >= self.max_entries:
                    self.skipped[directory] = TRUNCATED
                    self.skipped.update((rest, TRUNCATED) for rest in stack)
                    return
                count += 1
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir:
                    stack.append(entry.path)
                yield entry



def skip_notes(skipped: dict[str, str], noted: set[str], what: str) -> list[str]:
    """A line for the trajectory's errors naming the directories `what` could not list that no line named yet."""
    new = [d for d in skipped if (what, d) not in noted]
    if not new:
        return []
    noted.update((what, d) for d in new)
    shown = ", ".join(f"{_short(d)} ({skipped[d]})" for d in new[:5])
    return [f"{what} could not list {len(new)} directories: {shown}" + (f" and {len(new) - 5} more" if new[5:] else "")]


def _short(path: str, keep: int = 120) -> str:
    return path if len(path) <= 2 * keep else f"{path[:keep]}…{path[-keep:]} ({len(path)} bytes)"
